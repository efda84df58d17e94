//! The first log line of `serve` about the status API: how it is guarded and within which
//! limits, so an unauthenticated status API (`--status-auth=false`) is never a surprise.

use crate::apps::args::StatusApiArgs;

/// Say how the status API is guarded and where the certificates come from.
pub fn announce(args: &StatusApiArgs, certificates: &str) {
    match args.status_auth {
        true => tracing::info!(
            certificates,
            cache_ttl_ms = args.status_auth_cache_ttl.as_millis() as u64,
            cache_size = args.status_auth_cache_size,
            cache_bytes = args.status_auth_cache_bytes,
            audiences = ?args.status_auth_audiences,
            new_token_rate = args.status_auth_new_token_rate,
            caller_rate = args.status_auth_caller_rate,
            max_in_flight = args.status_auth_max_in_flight,
            watch_recheck_ms = args.status_watch_recheck.as_millis() as u64,
            max_watch_streams = args.max_watch_streams,
            max_watch_streams_per_caller = args.max_watch_streams_per_caller,
            max_watch_streams_per_namespace = args.max_watch_streams_per_namespace,
            metrics_auth = args.metrics_auth,
            "status API (/apps) needs a bearer token; access checked with TokenReview and SubjectAccessReview"
        ),
        false => tracing::warn!(
            certificates,
            "status API (/apps) is UNAUTHENTICATED (--status-auth=false): anyone who reaches the server reads every app"
        ),
    }
}
