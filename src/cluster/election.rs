//! This replica's election, as `serve` runs it: [`LeaseArgs`] (flattened into `serve`) and
//! [`Election`], which connects in the background (with backoff), runs
//! [`lease::run_elector`] and publishes leadership to every component that follows it: the watch
//! loop's writes and the certificate manager's rotation and `caBundle` publication. `serve`
//! starts it whenever one of them runs, so none of them holds an election of its own. A shell:
//! what to do each round is [`lease::decide`]'s.

use std::time::Duration;

use clap::Args;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::client::{self, ClientArgs};
use super::lease::{self, LeaseOptions};
use super::rbac::ApiCall;
use crate::flags::parse_nonzero_duration;

/// Every API call of the election (the RBAC test compares these with the manifests).
pub const API_CALLS: &[ApiCall] = &[
    ApiCall::new("coordination.k8s.io", "leases", "get"),
    ApiCall::new("coordination.k8s.io", "leases", "create"),
    ApiCall::new("coordination.k8s.io", "leases", "update"),
];

/// Where the Lease lives and who this replica is in it.
#[derive(Debug, Clone, Args)]
pub struct LeaseArgs {
    /// Namespace of the leader-election Lease; default: `--webhook-namespace` (the webhook's own,
    /// where its Role grants leases), never the kubeconfig context's.
    #[arg(long, env = "KSVC_WEBHOOK_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_LEASE_NAME",
        default_value = "ksvc-webhook-watch"
    )]
    pub lease_name: String,
    /// This replica's identity in the Lease (set from the downward API); default: a generated one.
    #[arg(long, env = "KSVC_WEBHOOK_POD_NAME")]
    pub pod_name: Option<String>,
    /// How long a Lease stays valid without renewal (the holder renews every third of it).
    #[arg(long, env = "KSVC_WEBHOOK_LEASE_DURATION", default_value = "15s", value_parser = parse_nonzero_duration)]
    pub lease_duration: Duration,
}

impl LeaseArgs {
    /// These flags with the Lease's namespace settled: `--lease-namespace`, else the webhook's
    /// own namespace.
    pub fn in_namespace(&self, webhook_namespace: &str) -> Self {
        Self {
            lease_namespace: Some(
                self.lease_namespace
                    .clone()
                    .unwrap_or_else(|| webhook_namespace.to_owned()),
            ),
            ..self.clone()
        }
    }

    /// This replica's identity: the pod's name, else one made up for this process.
    pub fn identity(&self) -> String {
        self.pod_name.clone().unwrap_or_else(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            format!("ksvc-webhook-{}-{nanos:x}", std::process::id())
        })
    }
}

/// The election: leadership to follow, and the task that holds (and at the end releases) the
/// Lease once [`Election::start`]ed.
pub struct Election {
    args: LeaseArgs,
    identity: String,
    tx: Option<watch::Sender<bool>>,
    leader: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    grace: Duration,
}

impl Election {
    /// An election not yet started: it leads nothing until [`Election::start`].
    pub fn new(args: &LeaseArgs) -> Self {
        let (tx, leader) = watch::channel(false);
        Self {
            args: args.clone(),
            identity: args.identity(),
            tx: Some(tx),
            leader,
            stop: watch::channel(false).0,
            task: None,
            grace: Duration::from_secs(1),
        }
    }

    /// True while this replica leads; follow it with `changed()`.
    pub fn leader(&self) -> watch::Receiver<bool> {
        self.leader.clone()
    }

    /// This replica's identity in the Lease.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Connect to the cluster `client` names (retrying in the background, never blocking the
    /// start) and stand for election; `failed_rounds` counts the rounds that could not tell.
    /// Starting twice is a no-op.
    pub fn start(&mut self, client_args: &ClientArgs, failed_rounds: Counter) {
        let Some(tx) = self.tx.take() else {
            return;
        };
        let timeout = client_args.api_timeout.max(Duration::from_secs(1));
        let duration = self.args.lease_duration.max(Duration::from_secs(2));
        let (client_args, args, identity) = (
            client_args.clone(),
            self.args.clone(),
            self.identity.clone(),
        );
        let stop = self.stop.subscribe();
        self.grace = timeout + Duration::from_secs(1);
        self.task = Some(tokio::spawn(async move {
            let mut stopping = stop.clone();
            let connect =
                client::connect_with_backoff(&client_args, timeout, "the election", || {
                    failed_rounds.inc();
                });
            let client = tokio::select! {
                client = connect => client,
                () = lease::stop_requested(&mut stopping) => return,
            };
            let options = LeaseOptions {
                namespace: args
                    .lease_namespace
                    .unwrap_or_else(|| client.default_namespace().to_owned()),
                name: args.lease_name,
                identity,
                lease_duration: duration,
                renew_every: (duration / 3).max(Duration::from_secs(1)),
                retry_every: (duration / 5).max(Duration::from_secs(1)),
                api_timeout: timeout,
            };
            lease::run_elector(client, options, tx, failed_rounds, stop).await;
        }));
    }

    /// Drop leadership and release the Lease (bounded by the API timeout and a second), so
    /// another replica leads at once. Call on graceful shutdown.
    pub async fn shutdown(&mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(self.grace, task).await;
        }
    }
}
