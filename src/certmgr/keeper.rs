//! The admission leader's hold on the webhook's `failurePolicy`, with self-managed certificates
//! and with cert-manager's alike: it switches the install's `Ignore` to `--failure-policy` once
//! the configuration carries the CA of the served certificate (`ca.crt` in the certificate
//! directory: the self-managed bundle, or the one in cert-manager's Secret that cainjector
//! publishes) and the own listener answered through TLS with it ([`super::probe`]), and puts it
//! back within a moment when a re-applied manifest sets `Ignore` again.
//!
//! It watches the one MutatingWebhookConfiguration by name (a `metadata.name` field selector, so
//! RBAC limited to that name allows the list and the watch), and acts on each change, on
//! leadership, on the first answer of the probe and every `--cert-sync-interval`.
//! [`policy::step`] decides; this module reads, patches and logs. Never writes anything but
//! the failurePolicy of that one configuration, and only as leader.

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tracing::{info, warn};

use super::policy::{self, FailurePolicy};
use crate::cluster::call::{self, CALL_TIMEOUT, WATCH_TIMEOUT_SECS};
use crate::cluster::client::{self, ClientArgs};
use crate::report::error_chain;

/// Attempts at the patch when the configuration changes between read and write.
const MAX_ATTEMPTS: usize = 3;

/// The failurePolicy switch of one MutatingWebhookConfiguration: read it, ask
/// [`policy::step`], patch.
#[derive(Debug, Clone)]
pub struct PolicySwitch {
    webhooks: Api<MutatingWebhookConfiguration>,
    name: String,
    want: FailurePolicy,
    /// Whether this replica's listener answered its own probe.
    answered: watch::Receiver<bool>,
}

impl PolicySwitch {
    /// The switch of the configuration `name` to `want`, waiting for `answered` before `Fail`.
    pub fn new(
        webhooks: Api<MutatingWebhookConfiguration>,
        name: &str,
        want: FailurePolicy,
        answered: watch::Receiver<bool>,
    ) -> Self {
        Self {
            webhooks,
            name: name.to_owned(),
            want,
            answered,
        }
    }

    /// The same switch waiting for `answered`.
    pub fn with_answered(mut self, answered: watch::Receiver<bool>) -> Self {
        self.answered = answered;
        self
    }

    /// Give the webhook the configured failurePolicy when [`policy::step`] says so, for a
    /// configuration that should carry `bundle`; `true` when it was patched. A failure is said
    /// in the log and left to the next trigger.
    pub async fn enforce(&self, bundle: &[u8]) -> bool {
        let name = &self.name;
        for _ in 0..MAX_ATTEMPTS {
            let read = self.webhooks.get_opt(name);
            let config = match call::timed("get webhook configuration", CALL_TIMEOUT, read).await {
                Ok(Some(config)) => config,
                Ok(None) => return false,
                Err(error) => {
                    warn!(config = %name, error = %error_chain(&error), "failurePolicy not checked; retrying next round");
                    return false;
                }
            };
            let answered = *self.answered.borrow();
            let ops = match policy::step(&config, bundle, self.want, answered) {
                policy::Step::Current => return false,
                policy::Step::Wait(waiting) => {
                    info!(config = %name, want = self.want.as_str(), waiting = ?waiting, "failurePolicy not switched yet; kube-apiserver ignores the webhook's failures until then");
                    return false;
                }
                policy::Step::Patch(ops) => ops,
            };
            let Ok(patch) = serde_json::from_value::<json_patch::Patch>(ops) else {
                return false;
            };
            let (pp, patch) = (PatchParams::default(), Patch::Json::<()>(patch));
            let write = self.webhooks.patch(name, &pp, &patch);
            match call::timed("patch webhook configuration", CALL_TIMEOUT, write).await {
                Ok(_) => {
                    info!(config = %name, failure_policy = self.want.as_str(), "webhook failurePolicy set");
                    return true;
                }
                // The resourceVersion test failed or a write raced: re-read.
                Err(call::Error::Api {
                    source: kube::Error::Api(status),
                    ..
                }) if matches!(status.code, 409 | 422) => continue,
                Err(error) => {
                    warn!(config = %name, error = %error_chain(&error), "failurePolicy not set; retrying next round");
                    return false;
                }
            }
        }
        warn!(config = %name, "the webhook configuration kept changing; failurePolicy retried next round");
        false
    }
}

/// What woke the keeper up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    /// The periodic round.
    Round,
    /// Leadership changed.
    Leader,
    /// The own listener answered its probe.
    Answered,
    /// The configuration changed; `differs` when its failurePolicy is not the configured one.
    Changed { differs: bool },
}

/// The keeper's settings.
#[derive(Debug, Clone)]
pub struct Keeper {
    /// The configuration's name and the policy it should hold.
    pub config: String,
    pub want: FailurePolicy,
    /// The CA bundle file the configuration must carry before `Fail` (`ca.crt`).
    pub ca_file: PathBuf,
    /// The fallback round (`--cert-sync-interval`).
    pub period: Duration,
}

impl Keeper {
    /// The trigger a watch event of the configuration makes (`None`: the list's markers and a
    /// delete, which leave nothing to switch).
    fn changed(&self, event: watcher::Event<MutatingWebhookConfiguration>) -> Option<Trigger> {
        match event {
            watcher::Event::Apply(config) | watcher::Event::InitApply(config) => {
                let differs = config.webhooks.iter().flatten().any(|h| {
                    // An unset policy is kube-apiserver's default, Fail.
                    h.failure_policy.as_deref().unwrap_or("Fail") != self.want.as_str()
                });
                Some(Trigger::Changed { differs })
            }
            watcher::Event::Init | watcher::Event::InitDone | watcher::Event::Delete(_) => None,
        }
    }

    /// Connect (retrying in the background), then watch the configuration and keep its
    /// failurePolicy while `leader` says this replica leads. Runs until the task is aborted.
    pub async fn run(
        self,
        client_args: ClientArgs,
        mut leader: watch::Receiver<bool>,
        mut answered: watch::Receiver<bool>,
    ) {
        // A watch request ends on the server's side before the client's read timeout fires.
        let read_timeout = Duration::from_secs(u64::from(WATCH_TIMEOUT_SECS))
            + client_args.api_timeout.max(Duration::from_secs(30));
        let who = "the webhook configuration's failurePolicy watch";
        let client = client::connect_with_backoff(&client_args, read_timeout, who, || {}).await;
        let api: Api<MutatingWebhookConfiguration> = Api::all(client);
        let switch = PolicySwitch::new(api.clone(), &self.config, self.want, answered.clone());
        let cfg = watcher::Config::default()
            .fields(&format!("metadata.name={}", self.config))
            .timeout(WATCH_TIMEOUT_SECS);
        let mut events = std::pin::pin!(watcher(api, cfg).default_backoff());
        let (mut election_open, mut probe_open) = (true, true);
        loop {
            let trigger = tokio::select! {
                () = tokio::time::sleep(self.period) => Trigger::Round,
                changed = leader.changed(), if election_open => {
                    election_open = changed.is_ok();
                    Trigger::Leader
                }
                changed = answered.changed(), if probe_open => {
                    probe_open = changed.is_ok();
                    Trigger::Answered
                }
                event = events.next() => match event {
                    Some(Ok(event)) => match self.changed(event) {
                        Some(trigger) => trigger,
                        None => continue,
                    },
                    Some(Err(error)) => {
                        warn!(config = %self.config, error = %error_chain(&error), "webhook configuration watch failed; resuming with backoff, the periodic round still checks the failurePolicy");
                        continue;
                    }
                    None => return,
                },
            };
            // Read into a local: a `watch::Ref` must not live across the awaits below.
            let is_leader = *leader.borrow_and_update();
            if !is_leader || trigger == (Trigger::Changed { differs: false }) {
                continue;
            }
            let bundle = match tokio::fs::read(&self.ca_file).await {
                Ok(bundle) => bundle,
                Err(error) => {
                    warn!(file = %self.ca_file.display(), error = %error, "cannot read the CA bundle; failurePolicy not checked, retrying next round");
                    continue;
                }
            };
            if trigger == (Trigger::Changed { differs: true }) {
                info!(config = %self.config, want = self.want.as_str(), "the webhook configuration's failurePolicy is not the configured one (installed, or a manifest re-applied); setting it");
            }
            switch.enforce(&bundle).await;
        }
    }
}
