//! The status API's flags, flattened into `serve`.

use std::time::Duration;

use clap::Args;

use crate::flags::parse_duration;

/// Who may read the status API (`/apps…`, src/apps/http.rs) and how much: flattened into `serve`.
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
