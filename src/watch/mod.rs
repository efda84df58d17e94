//! The watch loop: watches Knative Services and Revisions, serves every app's status and drift
//! report ([`drift`]) from a local cache, and — while the replica's election (run by `serve`,
//! `cluster::election`) says it leads — finishes stopping apps (the stop edits if the webhook was
//! bypassed, then teardown of the old revisions once traffic has left them).
//!
//! Shape: observed objects ([`store`]s) → pure [`status::status_for`] / [`plan::plan`] →
//! API writes ([`writes`], run off the loop by [`write_queue`]). [`spawn`] returns at once: admission
//! never waits on this module (its readiness does not depend on the loop's sync), and with no
//! cluster reachable the loop logs once and keeps retrying with backoff.
//!
//! [`projection`] is apart from the loop: the admission role's own small watch of the Services,
//! for the revision guard, which holds no cache.

pub mod args;
pub mod cache;
pub mod controller;
pub mod drift;
pub mod edit;
pub mod hub;
pub mod listing;
mod loop_state;
pub mod metrics;
pub mod names;
pub mod owners;
pub mod plan;
pub mod projection;
pub mod readmit;
pub mod status;
pub mod store;
pub mod trim;
pub mod view;
pub mod watched;
pub mod write_queue;
pub mod writes;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::admission::Policy;
use crate::admission::guard::OwnerView;
use crate::cluster::call::Backoff;
use crate::cluster::client::{self, ClientArgs};
use crate::cluster::election::Election;
use crate::cluster::lease;
use crate::cluster::rbac::ApiCall;
use args::WatchArgs;
use controller::{LoopOptions, Shared};
use hub::Hub;
use metrics::Metrics;

/// Every API call the loop makes (the RBAC test compares these with the manifests).
pub const API_CALLS: &[ApiCall] = &[
    ApiCall::new("serving.knative.dev", "services", "get"),
    ApiCall::new("serving.knative.dev", "services", "list"),
    ApiCall::new("serving.knative.dev", "services", "watch"),
    ApiCall::new("serving.knative.dev", "services", "update"),
    ApiCall::new("serving.knative.dev", "revisions", "list"),
    ApiCall::new("serving.knative.dev", "revisions", "watch"),
    ApiCall::new("serving.knative.dev", "revisions", "delete"),
    // The namespaces' opt-out label, for the drift report.
    ApiCall::new("", "namespaces", "list"),
    ApiCall::new("", "namespaces", "watch"),
    // Events through kube-runtime's Recorder: a repeat within six minutes patches the series.
    ApiCall::new("events.k8s.io", "events", "create"),
    ApiCall::new("events.k8s.io", "events", "patch"),
];

/// What [`spawn`] hands the server.
pub struct WatchHandle {
    /// Every app's status; feed of `/apps/watch`.
    pub hub: Arc<Hub>,
    /// True once both caches have listed everything and every app has a status. Gates `/apps`
    /// (503 until then), never admission's `/readyz`; exported as `ksvc_webhook_watch_synced`.
    pub synced: Arc<AtomicBool>,
    /// Leadership of this replica, as the election `serve` runs publishes it: the loop writes
    /// only while it leads.
    pub leader: watch::Receiver<bool>,
    /// The loop's metrics; register them with [`Metrics::register`].
    pub metrics: Metrics,
    /// Per-subscriber queue length of `/apps/watch`.
    pub watch_buffer: usize,
    /// The loop's task; `None` with `--no-watch`.
    pub task: Option<JoinHandle<()>>,
    /// The loop's Service store, once it exists.
    services: owners::ServiceStore,
    /// The namespace the loop watches (all when `None`).
    namespace: Option<String>,
    stop: watch::Sender<bool>,
    shutdown_grace: Duration,
}

impl WatchHandle {
    /// Stop the loop and end its tasks (bounded by the API timeout plus a second). Call on
    /// graceful shutdown; the Lease is the election's to release.
    pub async fn shutdown(&mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(self.shutdown_grace, task).await;
        }
    }

    /// The revision guard's view of the cached Services ([`owners::view`]): unknown until the
    /// cache has synced, and outside the watched namespace.
    pub fn revision_owners(&self) -> OwnerView {
        owners::view(
            self.services.clone(),
            self.synced.clone(),
            self.namespace.clone(),
        )
    }

    /// Register the loop's metrics.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.metrics.register(registry);
    }
}

/// Start the loop in the background and return at once; its drift report follows `policy`.
/// Must be called inside a Tokio runtime.
pub fn spawn(
    args: &WatchArgs,
    client: &ClientArgs,
    election: &Election,
    policy: Arc<ArcSwap<Policy>>,
) -> WatchHandle {
    let (stop, stopped) = watch::channel(false);
    let mut handle = WatchHandle {
        hub: Hub::new(),
        synced: Arc::new(AtomicBool::new(false)),
        leader: election.leader(),
        metrics: Metrics::default(),
        watch_buffer: args.watch_buffer,
        task: None,
        services: owners::ServiceStore::default(),
        namespace: args.watch_namespace.clone(),
        stop,
        shutdown_grace: client.api_timeout.max(Duration::from_secs(1)) + Duration::from_secs(1),
    };
    if args.no_watch {
        tracing::info!("watch loop disabled (--no-watch)");
        return handle;
    }
    let shared = Shared {
        hub: handle.hub.clone(),
        synced: handle.synced.clone(),
        leader: handle.leader.clone(),
        metrics: handle.metrics.clone(),
        services: handle.services.clone(),
        policy,
    };
    let identity = election.identity().to_owned();
    handle.task = Some(tokio::spawn(run(
        args.clone(),
        client.clone(),
        identity,
        shared,
        stopped,
    )));
    handle
}

async fn run(
    args: WatchArgs,
    client_args: ClientArgs,
    identity: String,
    shared: Shared,
    stop: watch::Receiver<bool>,
) {
    let timeout = client_args.api_timeout.max(Duration::from_secs(1));
    let mut stopping = stop;
    // Bounds every read, lists included; a watch is ended by the server before this fires.
    let read_timeout = Duration::from_secs(u64::from(crate::cluster::call::WATCH_TIMEOUT_SECS))
        + timeout.max(Duration::from_secs(30));
    let connect =
        client::connect_with_backoff(&client_args, read_timeout, "the watch loop", || {
            shared.metrics.error("connect")
        });
    let client = tokio::select! {
        client = connect => client,
        () = lease::stop_requested(&mut stopping) => return,
    };
    let opts = LoopOptions {
        namespace: args.watch_namespace.clone(),
        api_timeout: timeout,
        backoff: Backoff::default(),
        resync_every: args.resync_interval.max(Duration::from_secs(1)),
        write_concurrency: args.write_concurrency.get(),
        identity,
        readmit: args.readmit.settings(),
    };
    tokio::select! {
        () = controller::run(client, opts, shared) => {}
        () = lease::stop_requested(&mut stopping) => {}
    }
}
