//! The loop harness: one replica of the watch loop against the fake API server, its leadership
//! driven by the test or by its election as `serve` runs it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use ksvc_webhook::admission::Policy;
use ksvc_webhook::cluster::call::Backoff;
use ksvc_webhook::watch::controller::{self, LoopOptions, Shared};
use ksvc_webhook::watch::hub::{AppKey, AppRecord, Hub};
use ksvc_webhook::watch::metrics::Metrics;
use tokio::sync::watch;

use crate::knative::ksvc;
use crate::{FakeApi, poll};

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
    pub(crate) runtime: Option<tokio::runtime::Runtime>,
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
