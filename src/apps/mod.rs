//! The status API: `/apps`, `/apps/{namespace}/{name}` and `/apps/watch` over the watch loop's
//! cache, for callers the API server vouches for.
//!
//! [`http`] serves the routes, writing each stream's events as [`frames`] says; [`names`] checks
//! the names a request carries before anything else; [`streams`] counts open streams against
//! their limits; [`auth`] asks the API server (TokenReview, SubjectAccessReview) within its
//! caches and budgets, and holds the pure parts of access control (`auth::access`: bearer
//! headers, attributes, the namespace filter); [`metrics`] counts reviews, refusals and streams;
//! [`announce`] logs how the API is guarded. [`local_router`] serves the same routes without a
//! token to the loopback status listener, which only a port-forward reaches. Reads the loop's hub; never writes to the cluster.

pub mod args;
pub mod auth;
pub mod frames;
pub mod http;
pub mod metrics;
pub mod names;
pub mod pages;
pub mod streams;

use std::sync::Arc;

use args::StatusApiArgs;
use metrics::StatusMetrics;

use crate::cluster::client::ClientArgs;
use crate::watch::WatchHandle;

/// The status routes over `handle`'s cache, guarded and limited as `status` says; reviews go to
/// the cluster `client` names, and are counted in `metrics`.
pub fn router(
    handle: &WatchHandle,
    metrics: &StatusMetrics,
    client: &ClientArgs,
    status: &StatusApiArgs,
) -> axum::Router {
    let reviewer = status.status_auth.then(|| {
        let source = auth::ClientSource::Connect(Box::new(client.clone()));
        let settings = auth::Settings::from_args(status);
        Arc::new(auth::Reviewer::new(source, settings, metrics.clone()))
    });
    http::router(
        handle.hub.clone(),
        handle.synced.clone(),
        options(handle, metrics, status, reviewer),
    )
}

/// The same routes for the loopback status listener (`--local-status-listen`): no token, as for
/// a caller allowed every namespace (whoever reaches the pod's loopback holds its ServiceAccount
/// already, docs/status-api.md), within the same limits, counted in the same `metrics`.
pub fn local_router(
    handle: &WatchHandle,
    metrics: &StatusMetrics,
    status: &StatusApiArgs,
) -> axum::Router {
    let options = options(handle, metrics, status, None);
    http::router(handle.hub.clone(), handle.synced.clone(), options)
}

fn options(
    handle: &WatchHandle,
    metrics: &StatusMetrics,
    status: &StatusApiArgs,
    reviewer: Option<Arc<auth::Reviewer>>,
) -> http::Options {
    http::Options {
        buffer: handle.watch_buffer,
        reviewer,
        streams: streams::Maximums {
            total: status.max_watch_streams,
            per_caller: status.max_watch_streams_per_caller,
            per_namespace: status.max_watch_streams_per_namespace,
        },
        metrics: metrics.clone(),
    }
}

/// The first log line of `serve` about the status API: how it is guarded and within which
/// limits (so an unauthenticated status API is never a surprise), and where the certificates
/// come from.
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
    if let Some(addr) = args.local_status_listen.0 {
        tracing::info!(
            at = %addr,
            "status API (/apps) also on loopback, plain HTTP without a token, for port-forwards (--local-status-listen)"
        );
    }
}
