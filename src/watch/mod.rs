//! The watch loop: watches Knative Services and Revisions, serves every app's status and drift
//! report ([`drift`]) from a local cache, and — on the elected leader only — finishes stopping apps (the stop edits if the webhook
//! was bypassed, then teardown of the old revisions once traffic has left them).
//!
//! Shape: observed objects (reflector stores) → pure [`status::status_for`] / [`plan::plan`] →
//! API writes ([`writes`], run off the loop by [`inflight`]). [`spawn`] returns at once: admission
//! never waits on this module (its readiness does not depend on the loop's sync), and with no
//! cluster reachable the loop logs once and keeps retrying with backoff.

pub mod args;
pub mod cache;
pub mod controller;
pub mod drift;
pub mod edit;
pub mod hub;
pub mod inflight;
pub mod metrics;
pub mod owners;
pub mod plan;
pub mod status;
pub mod view;
pub mod writes;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use arc_swap::ArcSwap;
use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::admission::Policy;
use crate::admission::guard::OwnerView;
use crate::cluster::call::{self, Backoff};
use crate::cluster::lease::{self, LeaseOptions};
use crate::cluster::rbac::ApiCall;
use crate::report::error_chain;
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
    ApiCall::new("coordination.k8s.io", "leases", "get"),
    ApiCall::new("coordination.k8s.io", "leases", "create"),
    ApiCall::new("coordination.k8s.io", "leases", "update"),
    ApiCall::new("events.k8s.io", "events", "create"),
];

/// What [`spawn`] hands the server.
pub struct WatchHandle {
    /// Every app's status; feed of `/apps/watch`.
    pub hub: Arc<Hub>,
    /// True once both caches have listed everything and every app has a status. Gates `/apps`
    /// (503 until then), never admission's `/readyz`; exported as `ksvc_webhook_watch_synced`.
    pub synced: Arc<AtomicBool>,
    /// Leadership of this replica; other components (the certificate manager) may follow it.
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
    /// Stop the loop: drop leadership, release the Lease, end the tasks (bounded by the API timeout
    /// plus a second). Call on graceful shutdown so another replica takes over at once.
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
pub fn spawn(args: &WatchArgs, policy: Arc<ArcSwap<Policy>>) -> WatchHandle {
    let (tx, rx) = watch::channel(false);
    let (stop, stopped) = watch::channel(false);
    let mut handle = WatchHandle {
        hub: Hub::new(),
        synced: Arc::new(AtomicBool::new(false)),
        leader: rx,
        metrics: Metrics::default(),
        watch_buffer: args.watch_buffer,
        task: None,
        services: owners::ServiceStore::default(),
        namespace: args.watch_namespace.clone(),
        stop,
        shutdown_grace: args.api_timeout.max(Duration::from_secs(1)) + Duration::from_secs(1),
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
    handle.task = Some(tokio::spawn(run(args.clone(), shared, tx, stopped)));
    handle
}

async fn run(
    args: WatchArgs,
    shared: Shared,
    tx: watch::Sender<bool>,
    stop: watch::Receiver<bool>,
) {
    let timeout = args.api_timeout.max(Duration::from_secs(1));
    let mut stopping = stop.clone();
    let client = tokio::select! {
        client = connect_with_backoff(&args, timeout, &shared.metrics) => client,
        () = lease::stop_requested(&mut stopping) => return,
    };
    let identity = args.pod_name.clone().unwrap_or_else(generated_identity);
    let lease = LeaseOptions {
        namespace: args
            .lease_namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned()),
        name: args.lease_name.clone(),
        identity: identity.clone(),
        lease_duration: args.lease_duration.max(Duration::from_secs(2)),
        renew_every: (args.lease_duration / 3).max(Duration::from_secs(1)),
        retry_every: (args.lease_duration / 5).max(Duration::from_secs(1)),
        api_timeout: timeout,
    };
    let metrics = shared.metrics.clone();
    let elector = tokio::spawn(lease::run_elector(
        client.clone(),
        lease,
        tx,
        metrics.error_counter("lease"),
        stop,
    ));
    let opts = LoopOptions {
        namespace: args.watch_namespace.clone(),
        api_timeout: timeout,
        backoff: Backoff::default(),
        resync_every: args.resync_interval.max(Duration::from_secs(1)),
        write_concurrency: args.write_concurrency.get(),
        identity,
    };
    tokio::select! {
        () = controller::run(client, opts, shared) => {}
        () = lease::stop_requested(&mut stopping) => {}
    }
    // The elector saw the same stop: it drops leadership and releases the Lease.
    let _ = elector.await;
}

fn generated_identity() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("ksvc-webhook-{}-{nanos:x}", std::process::id())
}

/// Connect and probe the API server, retrying with backoff; every failed attempt logs one line
/// (a warning the first time, then at info) saying when the next attempt is.
async fn connect_with_backoff(args: &WatchArgs, timeout: Duration, metrics: &Metrics) -> Client {
    let backoff = Backoff {
        min: Duration::from_secs(1),
        max: Duration::from_secs(60),
        factor: 2,
        attempts: 0,
    };
    let mut attempt = 0u32;
    loop {
        match connect(args, timeout).await {
            Ok(client) => {
                tracing::info!(attempt, "watch loop connected to the API server");
                return client;
            }
            Err(error) => {
                metrics.error("connect");
                let retry_in = backoff.delay(attempt);
                if attempt == 0 {
                    tracing::warn!(error = %error, ?retry_in, "no cluster reachable; the watch loop keeps retrying, admission is unaffected");
                } else {
                    tracing::info!(error = %error, attempt, ?retry_in, "still no cluster; the watch loop waits for the API server");
                }
                tokio::time::sleep(retry_in).await;
                attempt = attempt.saturating_add(1);
            }
        }
    }
}

/// A client for the cluster `args` names (kubeconfig, else in-cluster or the usual lookup), checked
/// with one version probe; every connect and read is bounded by `timeout`.
pub async fn connect(args: &WatchArgs, timeout: Duration) -> Result<Client, String> {
    let mut config = crate::cluster::config_for(args.kubeconfig.as_deref()).await?;
    config.connect_timeout = Some(timeout);
    // Bounds every read, lists included; a watch is ended by the server before this fires.
    let watch = Duration::from_secs(u64::from(controller::WATCH_TIMEOUT_SECS));
    config.read_timeout = Some(watch + timeout.max(Duration::from_secs(30)));
    config.reset_reader_on_write = true;
    let client = Client::try_from(config).map_err(|e| error_chain(&e))?;
    let probe = call::timed("probe the API server", timeout, client.apiserver_version()).await;
    probe.map_err(|e| error_chain(&e))?;
    Ok(client)
}
