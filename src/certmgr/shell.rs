//! The I/O shell of certificate self-management: reads and writes the Secret and the webhook
//! configuration, writes the certificate files, switches the webhook's failurePolicy, and
//! repeats on a timer, on leadership change and when the own listener first answers.
//!
//! Every decision comes from [`plan::plan`] and [`policy::step`]; this module only carries it
//! out. Every API call has
//! a timeout; every write is conditional (create fails on AlreadyExists, replace carries the
//! resourceVersion, the bundle patch tests it), so replicas that race converge on one Secret.
//! Only the leader rotates and publishes; any replica may create the Secret when none exists.

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use time::OffsetDateTime;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::files::{self, File};
use super::keeper::PolicySwitch;
use super::metrics::{self, Config, Published};
use super::plan::{self, Plan, Policy};
use super::state::{self, SecretData};
use super::{CertArgs, Error, FILE_CA_CRT, FILE_TLS_CRT, FILE_TLS_KEY, Result, issue};
use crate::certmgr::pki;
use crate::cluster::call::{Backoff, CALL_TIMEOUT};
use crate::locks::lock;
use crate::report::error_chain;

/// Writes planned per round before giving up on a Secret that keeps changing under us.
const MAX_STEPS: usize = 6;
/// Attempts at the bundle patch when the configuration changes between read and write.
const MAX_PATCH_ATTEMPTS: usize = 3;
/// The first pause after a failed attempt at start; it doubles after each failure.
pub const FIRST_BACKOFF: StdDuration = StdDuration::from_secs(1);
/// The longest pause between two attempts at start.
pub const MAX_BACKOFF: StdDuration = StdDuration::from_secs(30);

/// What one [`Manager::sync`] round did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Synced {
    /// The plans written to the Secret, in order (empty: the Secret was kept as it was).
    pub steps: Vec<Plan>,
    /// Whether the certificate files changed.
    pub files_changed: bool,
    /// Whether the CA bundle was patched into the webhook configuration.
    pub bundle_published: bool,
    /// Whether the configured failurePolicy was patched into the webhook configuration.
    pub policy_set: bool,
}

/// One replica's certificate manager.
#[derive(Debug, Clone)]
pub struct Manager {
    secrets: Api<Secret>,
    webhooks: Api<MutatingWebhookConfiguration>,
    guards: Api<ValidatingWebhookConfiguration>,
    secret_name: String,
    namespace: String,
    webhook_config: String,
    guard_config: Option<String>,
    sans: Vec<String>,
    policy: Policy,
    cert_dir: PathBuf,
    call_timeout: StdDuration,
    /// The failurePolicy switch, run after each publication of the bundle (`None` where the
    /// [`super::keeper`] holds the policy, as in `serve`).
    switch: Option<PolicySwitch>,
    /// Whether this replica's listener answered its own probe ([`super::probe`]).
    answered: watch::Receiver<bool>,
    /// The API call started last, named in the error when the start-up budget cuts it short.
    last_call: Arc<Mutex<&'static str>>,
    metrics: metrics::Metrics,
}

impl Manager {
    /// A manager for the Secret, Service and webhook configuration named in `args`, writing
    /// into `cert_dir`, with the default [`Policy`].
    pub fn new(client: Client, args: &CertArgs, cert_dir: impl Into<PathBuf>) -> Self {
        let webhooks = Api::all(client.clone());
        // No listener to wait for unless `with_answered` gives one.
        let answered = watch::channel(true).1;
        let switch = PolicySwitch::new(
            webhooks.clone(),
            &args.webhook_config_name,
            args.failure_policy,
            answered.clone(),
        );
        Self {
            secrets: Api::namespaced(client.clone(), &args.namespace),
            webhooks,
            guards: Api::all(client),
            secret_name: args.cert_secret.clone(),
            namespace: args.namespace.clone(),
            webhook_config: args.webhook_config_name.clone(),
            guard_config: Some(args.guard_config_name.clone()).filter(|n| !n.is_empty()),
            sans: pki::service_sans(&args.service_name, &args.namespace),
            policy: Policy::default(),
            cert_dir: cert_dir.into(),
            call_timeout: CALL_TIMEOUT,
            switch: Some(switch),
            answered,
            last_call: Arc::new(Mutex::new("no call yet")),
            metrics: metrics::Metrics::default(),
        }
    }

    /// The same manager recording its bundle publications into `metrics`.
    pub fn with_metrics(mut self, metrics: metrics::Metrics) -> Self {
        metrics.publishes(Config::Webhook);
        if self.guard_config.is_some() {
            metrics.publishes(Config::RevisionGuard);
        }
        self.metrics = metrics;
        self
    }

    /// The same manager waiting for `answered` (this replica's own probe) before it writes
    /// `failurePolicy: Fail`.
    pub fn with_answered(mut self, answered: watch::Receiver<bool>) -> Self {
        self.switch = self.switch.map(|s| s.with_answered(answered.clone()));
        self.answered = answered;
        self
    }

    /// The same manager leaving the failurePolicy alone: [`super::keeper::Keeper`] holds it
    /// (`serve` runs one beside the manager), so one writer switches it.
    pub fn without_policy_switch(mut self) -> Self {
        self.switch = None;
        self
    }

    /// The same manager with other lifetimes and thresholds.
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// One round at time `now`: bring the Secret up to date (creating it if missing; rotating
    /// only as `leader`), write the certificate files, and as `leader` publish the CA bundle and
    /// then the configured failurePolicy.
    pub async fn sync(&self, now: OffsetDateTime, leader: bool) -> Result<Synced> {
        let mut steps = Vec::new();
        let data = self.converge_secret(now, leader, &mut steps).await?;
        let files_changed = self.write_files(&data).await?;
        let (bundle_published, policy_set) = match leader {
            true => {
                let bundle = data.bundle();
                let published = self
                    .publish(&self.webhooks, &self.webhook_config, &bundle)
                    .await;
                self.metrics.observe(
                    Config::Webhook,
                    published.as_ref().map_or(Published::Failed, |p| *p),
                );
                let published = published? == Published::Patched;
                let guard = self.publish_to_guard(&bundle).await;
                // Boxed: the round's future stays small enough for a test thread's stack.
                let policy_set = match &self.switch {
                    Some(switch) => Box::pin(switch.enforce(&bundle)).await,
                    None => false,
                };
                (published | guard, policy_set)
            }
            false => (false, false),
        };
        Ok(Synced {
            steps,
            files_changed,
            bundle_published,
            policy_set,
        })
    }

    async fn converge_secret(
        &self,
        now: OffsetDateTime,
        leader: bool,
        steps: &mut Vec<Plan>,
    ) -> Result<SecretData> {
        for _ in 0..MAX_STEPS {
            let object = self
                .timed("get secret", self.secrets.get_opt(&self.secret_name))
                .await?
                .map_err(|source| api("get secret", source))?;
            let (data, unreadable) = match object.as_ref().map(SecretData::from_secret) {
                None => (None, false),
                Some(Ok(data)) => (Some(data), false),
                Some(Err(why)) => {
                    warn!(secret = %self.secret_name, problem = %why, "certificate secret unusable");
                    (None, true)
                }
            };
            let published = match (leader, data.as_ref().and_then(|d| d.next_ca.as_ref())) {
                (true, Some(_)) => self.published_bundles().await?,
                _ => Vec::new(),
            };
            let plan = plan::plan(
                data.as_ref(),
                unreadable,
                &published,
                &self.sans,
                now,
                &self.policy,
            );
            // Nothing to do, or a rotation that waits for the leader: serve what is there.
            let settled = plan == Plan::Keep || (plan.leader_only() && !leader);
            if let (true, Some(data)) = (settled, &data) {
                return Ok(data.clone());
            }
            let new = issue::apply(plan, data.as_ref(), &self.sans, now, &self.policy)?
                .ok_or(Error::Unapplicable(plan))?;
            if self.write_secret(object.as_ref(), &new).await? {
                info!(secret = %self.secret_name, step = ?plan, "certificate secret written");
                steps.push(plan);
            }
        }
        Err(Error::Contention {
            what: "the certificate Secret",
        })
    }

    /// Create or conditionally replace the Secret; `false` when another writer got there first.
    /// A new Secret is owned by the webhook configuration, so uninstalling removes it.
    async fn write_secret(&self, current: Option<&Secret>, new: &SecretData) -> Result<bool> {
        let mut object = new.to_secret(&self.secret_name, &self.namespace, current);
        if current.is_none() {
            object.metadata.owner_references = Box::pin(self.secret_owner()).await.map(|o| vec![o]);
        }
        let pp = PostParams::default();
        let (call, result) = match current {
            None => (
                "create secret",
                self.timed("create secret", self.secrets.create(&pp, &object))
                    .await?,
            ),
            Some(_) => (
                "update secret",
                self.timed(
                    "update secret",
                    self.secrets.replace(&self.secret_name, &pp, &object),
                )
                .await?,
            ),
        };
        match result {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                info!(secret = %self.secret_name, "certificate secret changed concurrently; re-reading");
                Ok(false)
            }
            Err(source) => Err(api(call, source)),
        }
    }

    async fn published_bundles(&self) -> Result<Vec<Vec<u8>>> {
        let config = self
            .timed(
                "get webhook configuration",
                self.webhooks.get_opt(&self.webhook_config),
            )
            .await?
            .map_err(|source| api("get webhook configuration", source))?;
        Ok(config
            .as_ref()
            .map(state::published_bundles)
            .unwrap_or_default())
    }

    /// The revision guard's bundle. Its webhook fails open, so a guard configuration that is
    /// missing, forbidden or contended is said in the log and never fails the round.
    async fn publish_to_guard(&self, bundle: &[u8]) -> bool {
        let Some(name) = &self.guard_config else {
            return false;
        };
        let published = match self.publish(&self.guards, name, bundle).await {
            Ok(published) => published,
            Err(error) => {
                warn!(config = %name, error = %error_chain(&error), "revision guard's CA bundle not published; retrying next round");
                Published::Failed
            }
        };
        self.metrics.observe(Config::RevisionGuard, published);
        published == Published::Patched
    }

    /// Patch `bundle` into every webhook of the configuration `name` where it differs.
    async fn publish<K>(&self, configs: &Api<K>, name: &str, bundle: &[u8]) -> Result<Published>
    where
        K: kube::Resource + state::WebhookConfig + Clone + serde::de::DeserializeOwned,
        K: std::fmt::Debug,
    {
        const CALL: &str = "patch webhook configuration";
        for _ in 0..MAX_PATCH_ATTEMPTS {
            let config = self
                .timed("get webhook configuration", configs.get_opt(name))
                .await?
                .map_err(|source| api("get webhook configuration", source))?;
            let Some(config) = config else {
                warn!(config = %name, "webhook configuration not found; CA bundle not published");
                return Ok(Published::Missing);
            };
            let Some(ops) = state::bundle_patch(&config, bundle) else {
                return Ok(Published::Current);
            };
            let patch: json_patch::Patch =
                serde_json::from_value(ops).map_err(|e| api(CALL, kube::Error::SerdeError(e)))?;
            let pp = PatchParams::default();
            let patch = Patch::Json::<()>(patch);
            let call = configs.patch(name, &pp, &patch);
            match self.timed(CALL, call).await? {
                Ok(_) => {
                    info!(config = %name, "CA bundle published");
                    return Ok(Published::Patched);
                }
                // 422: the resourceVersion test failed; 409: a conflicting write. Re-read.
                Err(kube::Error::Api(status)) if matches!(status.code, 409 | 422) => continue,
                Err(source) => return Err(api(CALL, source)),
            }
        }
        Err(Error::Contention {
            what: "the webhook configuration",
        })
    }

    async fn write_files(&self, data: &SecretData) -> Result<bool> {
        let set = vec![
            File {
                name: FILE_TLS_CRT,
                content: data.serving.cert_pem.clone().into_bytes(),
                mode: 0o644,
            },
            File {
                name: FILE_TLS_KEY,
                content: data.serving.key_pem.clone().into_bytes(),
                mode: 0o600,
            },
            File {
                name: FILE_CA_CRT,
                content: data.bundle(),
                mode: 0o644,
            },
        ];
        let dir = self.cert_dir.clone();
        let result = tokio::task::spawn_blocking(move || files::write_set(&dir, &set)).await?;
        result.map_err(|source| Error::Files {
            path: self.cert_dir.clone(),
            source,
        })
    }

    async fn timed<T>(
        &self,
        call: &'static str,
        fut: impl Future<Output = kube::Result<T>>,
    ) -> Result<kube::Result<T>> {
        *lock(&self.last_call) = call;
        tokio::time::timeout(self.call_timeout, fut)
            .await
            .map_err(|_| Error::Timeout {
                call,
                secs: self.call_timeout.as_secs(),
            })
    }

    /// Retry [`Self::sync`] with backoff until it succeeds or `budget` runs out. The budget bounds
    /// the whole start, a slow attempt included: it never waits longer than `budget`.
    async fn bootstrap(&self, leader: &watch::Receiver<bool>, budget: StdDuration) -> Result<()> {
        let started = tokio::time::Instant::now();
        let deadline = started + budget;
        let steps = Backoff {
            min: FIRST_BACKOFF,
            max: MAX_BACKOFF,
            factor: 2,
            attempts: u32::MAX,
        };
        let mut failed = 0;
        loop {
            let backoff = steps.delay(failed);
            failed = failed.saturating_add(1);
            // Read into a local: a `watch::Ref` in the scrutinee would hold the channel's read
            // lock through the calls and the sleep below, and the elector's next send would block
            // its thread on the write lock for good.
            let is_leader = *leader.borrow();
            let attempt =
                tokio::time::timeout_at(deadline, self.sync(OffsetDateTime::now_utc(), is_leader));
            let error = match attempt.await {
                Ok(Ok(synced)) => {
                    info!(steps = ?synced.steps, dir = %self.cert_dir.display(), "certificates ready");
                    return Ok(());
                }
                Ok(Err(e)) => e,
                Err(_) => Error::Deadline {
                    call: *lock(&self.last_call),
                },
            };
            let now = tokio::time::Instant::now();
            // Give up when the next attempt would start past the budget.
            if now + backoff >= deadline {
                return Err(Error::Bootstrap {
                    secs: now.duration_since(started).as_secs(),
                    budget_secs: budget.as_secs(),
                    source: Box::new(error),
                });
            }
            // One line per attempt: what failed (the call is in the error), when the next try
            // is, and how long before the start gives up.
            warn!(error = %error_chain(&error), retry_in = ?backoff, gives_up_in = ?deadline.duration_since(now), leader = is_leader,
                "certificates not ready yet; retrying the certificate sync");
            tokio::time::sleep(backoff).await;
        }
    }

    /// Sync every `period`, and at once when leadership changes or the own listener first
    /// answers. Errors are logged and retried at the next round. Runs until the task is aborted.
    pub async fn run(self, mut leader: watch::Receiver<bool>, period: StdDuration) {
        let mut election_open = true;
        let mut answered = self.answered.clone();
        let mut probe_open = true;
        loop {
            tokio::select! {
                () = tokio::time::sleep(period) => {}
                changed = leader.changed(), if election_open => election_open = changed.is_ok(),
                changed = answered.changed(), if probe_open => probe_open = changed.is_ok(),
            }
            let is_leader = *leader.borrow_and_update();
            match self.sync(OffsetDateTime::now_utc(), is_leader).await {
                Ok(s)
                    if s.steps.is_empty()
                        && !s.files_changed
                        && !s.bundle_published
                        && !s.policy_set => {}
                Ok(s) => {
                    info!(steps = ?s.steps, files_changed = s.files_changed, bundle_published = s.bundle_published, policy_set = s.policy_set, leader = is_leader, "certificates synced")
                }
                Err(e) => {
                    warn!(error = %error_chain(&e), leader = is_leader, retry_in = ?period, "certificate sync failed; retrying next round")
                }
            }
        }
    }
}

/// Start self-managed certificates, the entry point for `serve`.
///
/// When `args.self_managed_certs` is off, does nothing and returns `Ok(None)`. Otherwise it
/// finds or creates the Secret `args.cert_secret` in `args.namespace`, writes `tls.crt`,
/// `tls.key` and `ca.crt` (the CA bundle) into `cert_dir` (atomically, through a `..data`
/// symlink swap), and as leader publishes the bundle, retrying with backoff for up to
/// `args.cert_bootstrap_timeout`; it returns once the files exist, so the TLS server can load
/// them. It then spawns the loop ([`Manager::run`]) that re-syncs every `args.cert_sync_interval`
/// and whenever `leader` changes; abort the returned handle at shutdown.
///
/// `leader` is the Lease election's view (true while this replica leads). A single replica
/// without election may pass a receiver that is always `true`. The webhook's failurePolicy is
/// left to [`super::keeper::Keeper`], which `serve` runs beside.
pub async fn start(
    client: Client,
    args: &CertArgs,
    leader: watch::Receiver<bool>,
    cert_dir: PathBuf,
    metrics: metrics::Metrics,
) -> Result<Option<JoinHandle<()>>> {
    if args.self_managed_certs != Some(true) {
        info!("self-managed certificates off; serving the mounted certificate files");
        return Ok(None);
    }
    let manager = Manager::new(client, args, cert_dir)
        .with_metrics(metrics)
        .without_policy_switch();
    // Boxed: a caller that spawns many starts (the fault tests) moves a small future.
    Box::pin(manager.bootstrap(&leader, args.cert_bootstrap_timeout)).await?;
    let period = args.cert_sync_interval;
    Ok(Some(tokio::spawn(manager.run(leader, period))))
}

#[path = "shell_policy.rs"]
mod policy_io;

fn api(call: &'static str, source: kube::Error) -> Error {
    Error::Api { call, source }
}
