//! The flags a test gives `watch::spawn`, as `serve` would parse them: the loop's own, the
//! client's (a kubeconfig at the fake), and an election (started or not by the test).

use std::path::PathBuf;
use std::time::Duration;

use ksvc_webhook::cluster::client::ClientArgs;
use ksvc_webhook::cluster::election::{Election, LeaseArgs};
use ksvc_webhook::watch::args::WatchArgs;

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
    Election::new(&LeaseArgs {
        lease_namespace: namespace.map(str::to_owned),
        lease_name: "ksvc-webhook-watch".into(),
        pod_name: Some(pod.into()),
        lease_duration: Duration::from_secs(15),
    })
}
