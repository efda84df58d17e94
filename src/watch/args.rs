//! The watch loop's flags, flattened into `serve`.

use std::time::Duration;

use clap::Args;

use crate::flags::parse_duration;

/// Flags of the watch loop (flattened into `serve`).
#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// Do not run the watch loop (no app status, no stop teardown); admission still works.
    #[arg(long, env = "KSVC_WEBHOOK_NO_WATCH")]
    pub no_watch: bool,
    /// Kubeconfig file of the server (the watch loop and the certificate manager); default: the
    /// in-cluster config, then `$KUBECONFIG` or `~/.kube/config`.
    #[arg(long, env = "KSVC_WEBHOOK_KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Watch KServices in this namespace only; default: all namespaces.
    #[arg(long, env = "KSVC_WEBHOOK_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// Namespace of the leader-election Lease; default: the pod's (the client's default) namespace.
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
    #[arg(long, env = "KSVC_WEBHOOK_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// Timeout of every Kubernetes API call of the loop.
    #[arg(long, env = "KSVC_WEBHOOK_API_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub api_timeout: Duration,
    /// Time between full re-reconciles of every app.
    #[arg(long, env = "KSVC_WEBHOOK_RESYNC_INTERVAL", default_value = "5m", value_parser = parse_duration)]
    pub resync_interval: Duration,
    /// Events a `/apps/watch` subscriber may lag behind before it is told to resync.
    #[arg(long, env = "KSVC_WEBHOOK_WATCH_BUFFER", default_value_t = 256)]
    pub watch_buffer: usize,
}

/// Who may read the status API (`/apps…`, src/watch/http.rs) and how much: flattened into `serve`.
///
/// Callers authenticate with a bearer token (checked by a TokenReview) and are authorized as if
/// they read the Knative Services themselves (a SubjectAccessReview); see docs/status-api.md.
#[derive(Debug, Clone, Args)]
pub struct StatusApiArgs {
    /// Require a bearer token on /apps… and check it with TokenReview and SubjectAccessReview
    /// (`false` for local runs without a cluster: anyone may then read every app).
    #[arg(
        long,
        env = "KSVC_WEBHOOK_STATUS_AUTH",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub status_auth: bool,
    /// How long a TokenReview or SubjectAccessReview answer (allowed or denied) is reused; an open
    /// /apps/watch stream re-checks its access this often too.
    #[arg(long, env = "KSVC_WEBHOOK_STATUS_AUTH_CACHE_TTL", default_value = "10s", value_parser = parse_duration)]
    pub status_auth_cache_ttl: Duration,
    /// Most cached answers, for tokens and for access decisions each (the soonest to expire
    /// are dropped first).
    #[arg(long, env = "KSVC_WEBHOOK_STATUS_AUTH_CACHE_SIZE", default_value_t = 4096,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub status_auth_cache_size: u64,
    /// Timeout of one TokenReview or SubjectAccessReview call.
    #[arg(long, env = "KSVC_WEBHOOK_STATUS_AUTH_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub status_auth_timeout: Duration,
    /// Most concurrent /apps/watch streams of all callers together (429 beyond).
    #[arg(long, env = "KSVC_WEBHOOK_MAX_WATCH_STREAMS", default_value_t = 512)]
    pub max_watch_streams: usize,
    /// Most concurrent /apps/watch streams of one caller (one authenticated user; 429 beyond).
    #[arg(
        long,
        env = "KSVC_WEBHOOK_MAX_WATCH_STREAMS_PER_CALLER",
        default_value_t = 16
    )]
    pub max_watch_streams_per_caller: usize,
    /// Require a bearer token on /metrics too, allowed `get` on the non-resource URL /metrics
    /// (Prometheus then scrapes with its ServiceAccount token).
    #[arg(long, env = "KSVC_WEBHOOK_METRICS_AUTH")]
    pub metrics_auth: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Debug, Parser)]
    struct WithWatch {
        #[command(flatten)]
        watch: WatchArgs,
    }

    #[test]
    fn watch_args_are_well_formed_and_default_sensibly() {
        WithWatch::command().debug_assert();
        let parsed = WithWatch::try_parse_from(["x", "--no-watch", "--lease-name", "l"]).unwrap();
        assert!(parsed.watch.no_watch);
        assert_eq!(parsed.watch.lease_name, "l");
        assert_eq!(parsed.watch.api_timeout, Duration::from_secs(10));
    }
}
