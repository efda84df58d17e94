//! The one test support library of the integration tests: the fake API server ([`fake_api`],
//! which serves everything the tests need), the server harness ([`harness`]), the status API
//! setup ([`status_api`]), the built binary run against the fake ([`cli`]), deciding and replaying patches ([`admit`]), Knative object builders,
//! the one poller ([`poll`]) and a loop harness; and, for the e2e suite only, the real control plane
//! ([`control_plane`]). Every test binary, flat or a folder, uses it as `support::…`.
// Test-only code: a failed setup step should panic loudly; fixtures are built with `new()`.
#![allow(clippy::unwrap_used, clippy::new_without_default)]

pub mod admit;
pub mod cli;
pub mod control_plane;
pub mod fake_api;
pub mod harness;
pub mod helm;
pub mod poll;
pub mod realistic;
pub mod status_api;
pub mod watched;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use ksvc_webhook::admission::Policy;
use ksvc_webhook::cluster::call::Backoff;
use ksvc_webhook::watch::controller::{self, LoopOptions, Shared};
use ksvc_webhook::watch::hub::{AppKey, AppRecord, Hub};
use ksvc_webhook::watch::metrics::Metrics;
use serde_json::{Value, json};
use tokio::sync::watch;

pub use fake_api::FakeApi;

/// The one kubeconfig writer: a file in `dir` naming the API server at `server` (no
/// credentials), current context `fake` in `namespace`, and a second context `other` in `apps`.
pub fn kubeconfig(server: &str, namespace: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let yaml = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\nclusters:\n- name: fake\n  cluster:\n    server: {server}\n\
         contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: {namespace}\n\
         - name: other\n  context:\n    cluster: fake\n    user: fake\n    namespace: apps\nusers:\n- name: fake\n  user: {{}}\n"
    );
    std::fs::write(&path, yaml).unwrap();
    path
}

/// A managed KService, as Knative reports it.
pub fn ksvc(
    name: &str,
    stopped: bool,
    stop_edits: bool,
    generation: i64,
    traffic: &[&str],
    latest: &str,
) -> Value {
    let mut labels =
        json!({"flyte.org/project": "proj", "flyte.org/domain": "dev", "flyte.org/app-name": name});
    let mut template_annotations = json!({});
    if stopped {
        labels["flyte.org/app-stopped"] = json!("true");
    }
    if stop_edits {
        labels["networking.knative.dev/visibility"] = json!("cluster-local");
        template_annotations["autoscaling.knative.dev/min-scale"] = json!("0");
    }
    let traffic: Vec<Value> = traffic
        .iter()
        .map(|r| json!({"revisionName": r, "percent": 100 / traffic.len(), "latestRevision": *r == latest}))
        .collect();
    json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "apps", "generation": generation, "labels": labels,
                     "annotations": {"flyte.org/app-managed": "true", "user/keep": "me"}},
        "spec": {"template": {"metadata": {"annotations": template_annotations},
                              "spec": {"containers": [{"image": "registry.example/app:1"}]}}},
        "status": {
            "observedGeneration": generation,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T00:00:00Z"}],
            "latestCreatedRevisionName": latest, "latestReadyRevisionName": latest,
            "url": format!("http://{name}.apps.svc.cluster.local"), "traffic": traffic
        }
    })
}

/// A revision of `service` with `replicas` pods.
pub fn revision(service: &str, name: &str, replicas: i32, no_gc: bool) -> Value {
    let annotations = if no_gc {
        json!({"serving.knative.dev/no-gc": "true"})
    } else {
        json!({})
    };
    json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Revision",
        "metadata": {"name": name, "namespace": "apps", "annotations": annotations,
                     "labels": {"serving.knative.dev/service": service}},
        "status": {"actualReplicas": replicas,
                   "conditions": [{"type": "Ready", "status": "True"},
                                  {"type": "Active", "status": if replicas > 0 { "True" } else { "False" },
                                   "reason": if replicas > 0 { "" } else { "NoTraffic" }}]}
    })
}

/// One replica of the loop against the fake, with leadership driven by the test, or by its
/// election as `serve` runs it ([`Replica::serve`]).
pub struct Replica {
    pub hub: Arc<Hub>,
    pub synced: Arc<AtomicBool>,
    pub leader_tx: Option<watch::Sender<bool>>,
    pub leader: watch::Receiver<bool>,
    pub metrics: Metrics,
    /// The admission policy its drift report follows; store another to reload it.
    pub policy: Arc<ArcSwap<Policy>>,
    pub task: tokio::task::JoinHandle<()>,
    /// The runtime of a replica served as `serve` wires it, election and all.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Replica {
    /// A replica whose leadership the test sets.
    pub fn start(fake: &FakeApi, identity: &str, leading: bool) -> Self {
        let (tx, rx) = watch::channel(leading);
        let mut r = Self::start_with(fake, identity, rx);
        r.leader_tx = Some(tx);
        r
    }

    /// A replica following the given leadership channel.
    pub fn start_with(fake: &FakeApi, identity: &str, leader: watch::Receiver<bool>) -> Self {
        Self::start_with_policy(fake, identity, leader, Policy::default())
    }

    /// A replica whose drift report starts with `policy`.
    pub fn start_with_policy(
        fake: &FakeApi,
        identity: &str,
        leader: watch::Receiver<bool>,
        policy: Policy,
    ) -> Self {
        Self::start_readmitting(fake, identity, leader, policy, Default::default())
    }

    /// A replica whose drift report starts with `policy` and that re-admits as `readmit` says.
    pub fn start_readmitting(
        fake: &FakeApi,
        identity: &str,
        leader: watch::Receiver<bool>,
        policy: Policy,
        readmit: ksvc_webhook::watch::readmit::wave::Settings,
    ) -> Self {
        let policy = Arc::new(ArcSwap::from_pointee(policy));
        let hub = Hub::new();
        let synced = Arc::new(AtomicBool::new(false));
        let metrics = Metrics::default();
        let shared = Shared {
            hub: hub.clone(),
            synced: synced.clone(),
            leader: leader.clone(),
            metrics: metrics.clone(),
            services: Default::default(),
            policy: policy.clone(),
        };
        let opts = LoopOptions {
            namespace: None,
            // Above the 5 s write delay some tests inject: a held write is slow, not failed.
            api_timeout: Duration::from_secs(10),
            backoff: Backoff {
                min: Duration::from_millis(5),
                max: Duration::from_millis(50),
                factor: 2,
                attempts: 6,
            },
            resync_every: Duration::from_secs(3600),
            write_concurrency: 4,
            identity: identity.to_owned(),
            readmit,
        };
        let task = tokio::spawn(controller::run(fake.client(), opts, shared));
        Self {
            hub,
            synced,
            leader_tx: None,
            leader,
            metrics,
            policy,
            task,
            runtime: None,
        }
    }

    /// SIGKILL: every task of the replica ends where it is, and nothing is released.
    pub fn kill(self) {
        drop(self);
    }

    pub async fn wait_synced(&self) {
        let synced = || self.synced.load(Ordering::Acquire);
        poll::until("the cache synced", poll::LIMIT, synced).await;
    }

    pub fn app(&self, name: &str) -> Option<AppRecord> {
        self.hub.get(&AppKey {
            namespace: "apps".into(),
            name: name.into(),
        })
    }

    /// Wait until every change made before this call has been reconciled: events are reconciled
    /// in order, so once a fresh marker app shows up every status before it is published and
    /// every write planned before it has started; then wait for the writes in flight to end.
    pub async fn settle(&self, fake: &FakeApi, marker: &str) {
        fake.put("services", ksvc(marker, false, false, 1, &[], ""));
        let reconciled = format!("marker {marker} is reconciled");
        poll::until(&reconciled, poll::LIMIT, || self.app(marker).is_some()).await;
        poll::until("no write is in flight", poll::LIMIT, || {
            self.metrics.writes_in_flight.get() == 0
        })
        .await;
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
