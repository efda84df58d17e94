//! The flags a test gives `watch::spawn`, as `serve` would parse them: the loop's own, the
//! client's (a kubeconfig at the fake), and an election (started or not by the test); and a
//! [`Replica`] wired with them as `serve` wires it, which a test can kill.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use ksvc_webhook::admission::Policy;
use ksvc_webhook::cluster::client::ClientArgs;
use ksvc_webhook::cluster::election::{Election, LeaseArgs};
use ksvc_webhook::watch::args::WatchArgs;
use ksvc_webhook::watch::readmit::args::ReadmitArgs;

use crate::{FakeApi, Replica};

/// The loop's flags as `serve`'s defaults, with a short subscriber queue.
pub fn watch_args() -> WatchArgs {
    WatchArgs {
        no_watch: false,
        watch_namespace: None,
        resync_interval: Duration::from_secs(300),
        watch_buffer: 16,
        write_concurrency: std::num::NonZeroUsize::MIN,
        readmit: Default::default(),
    }
}

/// A client of the cluster `kubeconfig` names, every call bounded by `api_timeout`.
pub fn client_args(kubeconfig: PathBuf, api_timeout: Duration) -> ClientArgs {
    ClientArgs {
        kubeconfig: Some(kubeconfig),
        context: None,
        api_timeout,
    }
}

/// An election for the Lease `ksvc-webhook-watch` in `namespace` (default: the client's), as
/// `pod`; it leads nothing until the test starts it.
pub fn election(pod: &str, namespace: Option<&str>) -> Election {
    lasting(pod, namespace, Duration::from_secs(15))
}

/// [`election`], with a Lease valid for `lease_duration` without renewal.
fn lasting(pod: &str, namespace: Option<&str>, lease_duration: Duration) -> Election {
    Election::new(&LeaseArgs {
        lease_namespace: namespace.map(str::to_owned),
        lease_name: "ksvc-webhook-watch".into(),
        pod_name: Some(pod.into()),
        lease_duration,
    })
}

impl Replica {
    /// A replica as `serve` wires it: its election for the Lease in `system` (valid for `lease`
    /// without renewal) started, and `watch::spawn`'s loop following it, re-admitting as
    /// `readmit` says, with a kubeconfig in `dir`. It runs on a runtime of its own, so
    /// [`Replica::kill`] ends every task of it where it is, its election's included: the Lease
    /// is not released.
    pub fn serve(
        fake: &FakeApi,
        dir: &Path,
        pod: &str,
        policy: Policy,
        readmit: ReadmitArgs,
        lease: Duration,
    ) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let client = client_args(fake.kubeconfig(dir), Duration::from_secs(5));
        let args = WatchArgs {
            readmit,
            ..watch_args()
        };
        let policy = Arc::new(ArcSwap::from_pointee(policy));
        let mut election = lasting(pod, Some("system"), lease);
        let mut watch = ksvc_webhook::watch::spawn(&args, &client, &election, policy.clone());
        election.start(&client, watch.metrics.error_counter("lease"));
        Self {
            hub: watch.hub.clone(),
            synced: watch.synced.clone(),
            leader_tx: None,
            leader: watch.leader.clone(),
            metrics: watch.metrics.clone(),
            policy,
            task: watch.task.take().unwrap(),
            runtime: Some(runtime),
        }
    }
}
