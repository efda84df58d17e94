//! The HTTP routes: `POST /mutate` over the admission core, and the probes and metrics.
//!
//! Translates HTTP to and from [`crate::admission::review`], which stays a black box here: a body
//! that is not JSON-typed gets 415, one over [`BODY_LIMIT`] 413, one the byte budget cannot take
//! 503 with `Retry-After`, one that has not arrived by the request deadline 408 (all read by
//! [`super::body`]), one the core cannot decode 400 with a JSON error, and a decoded review 200
//! with the decision inside. Never answers 500 and never logs the object.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::future::BoxFuture;
use tokio::sync::Semaphore;

use super::activity::{Clock, Peer};
use super::body::{self, Error as BodyError};
pub use super::body::{BODY_LIMIT, FIRST_BYTE, STALL};
use super::budget::{BodyBudget, Reservation};
use super::metrics::{Exposition, Metrics, Outcome};
use super::readiness::{Readiness, Status};
use super::shutdown::Stopping;
use super::trace::{self, TraceContext};
use crate::admission::guard::{self, Owner, OwnerView};
use crate::admission::{self, Policy};

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Bodies up to this size are decided on the request's own task (they take well under a
/// millisecond); larger ones on the blocking pool.
pub const INLINE_BODY: usize = 64 * 1024;
/// Large bodies decided at once; the others wait for a permit. One: each may take the working
/// memory of a tree at the value cap (the memory arithmetic's decision term), and the pod's one
/// CPU would not decide two faster.
pub const DECIDERS: usize = 1;

/// What a client over the byte budget is told to wait before retrying, in seconds.
const RETRY_AFTER_SECS: &str = "1";

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    pub policy: Arc<ArcSwap<Policy>>,
    pub metrics: Metrics,
    pub readiness: Readiness,
    pub exposition: Exposition,
    /// Checks `/metrics` requests first when set (`--metrics-auth`).
    pub metrics_guard: Option<Arc<dyn Guard>>,
    /// What the watch cache knows of a revision's Service, for the revision guard (`None`: no
    /// cache, every owner unknown).
    pub revision_owners: Option<OwnerView>,
    /// The bytes every admission body being read or decided reserves first.
    pub budget: Arc<BodyBudget>,
    /// How long an admission request may take to arrive (`--request-timeout`).
    pub request_timeout: Duration,
    /// The budget's clock.
    pub clock: Clock,
    /// Permits to decide a large body ([`DECIDERS`]).
    pub deciders: Arc<Semaphore>,
    /// Resolves once the server stops accepting; handed to every request of the TLS router as
    /// an extension, so that long-lived answers (`/apps/watch`) end then.
    pub stopping: Stopping,
    /// Make one span per review for the OpenTelemetry layer (`--otlp-endpoint`); off, a review
    /// makes none.
    pub review_spans: bool,
}

/// An access check of a route; `Err` is the response to send instead of the route's.
pub trait Guard: Send + Sync + std::fmt::Debug {
    /// Check a request's headers, sent from `from` when its address is known.
    fn check(
        &self,
        headers: HeaderMap,
        from: Option<std::net::IpAddr>,
    ) -> BoxFuture<'static, Result<(), Response>>;
}

/// Shared by reference: axum clones the state for every request.
type Shared = Arc<AppState>;

/// The TLS router: admission (unless `admission` is false), probes, metrics and the `extra`
/// routes (the status API).
pub fn admission_router(state: AppState, extra: Router, admission: bool) -> Router {
    let stopping = state.stopping.clone();
    let state = Arc::new(state);
    let reviews = match admission {
        true => Router::new()
            .route("/mutate", post(mutate))
            .route(guard::PATH, post(validate_revision_delete)),
        false => Router::new(),
    };
    reviews
        .with_state(state.clone())
        .merge(probe_router(state))
        .merge(extra)
        .layer(Extension(stopping))
}

/// The plain-HTTP router: probes and metrics only.
pub fn probe_router(state: impl Into<Shared>) -> Router {
    let state: Shared = state.into();
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn mutate(State(state): State<Shared>, request: Request) -> Response {
    answer(&state, "/mutate", request, admission::review).await
}

/// The revision guard ([`crate::admission::guard`]), read and answered as `/mutate` is, with the
/// watch cache's view of the revision's Service when there is one.
async fn validate_revision_delete(State(state): State<Shared>, request: Request) -> Response {
    let owners = state.revision_owners.clone();
    answer(&state, guard::PATH, request, move |body, policy| {
        guard::review(body, &policy.revision_guard, |lookup| {
            owners
                .as_ref()
                .map_or(Owner::Unknown, |view| view.owner(lookup))
        })
    })
    .await
}

/// Check the type, read the body by the deadline and [`respond`] with `review`, in the review's
/// span when spans are made.
async fn answer(
    state: &AppState,
    route: &'static str,
    request: Request,
    review: impl FnOnce(&[u8], &Policy) -> Result<admission::Reviewed, admission::ReviewError>
    + Send
    + 'static,
) -> Response {
    let started = Instant::now();
    let traceparent = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let trace = traceparent.as_deref().and_then(TraceContext::parse);
    let span = match state.review_spans {
        true => trace::review_span(route, trace),
        false => tracing::Span::none(),
    };
    let response = read_and_respond(state, request, started, trace, &span, review).await;
    trace::record_status(&span, response.status());
    response
}

/// The answer to one admission request: 415, 413, 503, 408 or 400 before a decision, else
/// [`respond`]'s.
async fn read_and_respond(
    state: &AppState,
    request: Request,
    started: Instant,
    trace: Option<TraceContext<'_>>,
    span: &tracing::Span,
    review: impl FnOnce(&[u8], &Policy) -> Result<admission::Reviewed, admission::ReviewError>
    + Send
    + 'static,
) -> Response {
    let deadline = tokio::time::Instant::now() + state.request_timeout;
    if !is_json(request.headers().get(header::CONTENT_TYPE)) {
        state
            .metrics
            .observe("", Outcome::WrongType, seconds(started));
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        );
    }
    let peer = request.extensions().get::<Peer>().cloned();
    let read = body::read(
        request.into_body(),
        &state.budget,
        state.clock,
        deadline,
        peer.as_ref(),
    );
    match read.await {
        Ok(body) => respond(state, body, started, trace, span, review).await,
        Err(refused) => {
            let (status, outcome) = match refused {
                BodyError::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, Outcome::TooLarge),
                BodyError::OverBudget(_) | BodyError::Cut => {
                    (StatusCode::SERVICE_UNAVAILABLE, Outcome::OverBudget)
                }
                BodyError::TimedOut | BodyError::TooSlow => {
                    (StatusCode::REQUEST_TIMEOUT, Outcome::TimedOut)
                }
                BodyError::Unreadable => (StatusCode::BAD_REQUEST, Outcome::Invalid),
            };
            state.metrics.observe("", outcome, seconds(started));
            tracing::debug!(target: trace::REFUSED_TARGET, error = %refused, "admission request not read");
            let mut response = error(status, &refused.to_string());
            if status == StatusCode::SERVICE_UNAVAILABLE {
                let retry = HeaderValue::from_static(RETRY_AFTER_SECS);
                response.headers_mut().insert(header::RETRY_AFTER, retry);
            }
            response
        }
    }
}

/// An answer's bytes, holding the request body's place in the budget (grown to the answer's
/// size if larger) until they are written and dropped.
struct Answer {
    body: Vec<u8>,
    _held: Reservation,
}

impl AsRef<[u8]> for Answer {
    fn as_ref(&self) -> &[u8] {
        &self.body
    }
}

/// Run `review` on `body` and answer; a panic in the core is a bug, answered 400, not 500.
/// A body over [`INLINE_BODY`] is decided on the blocking pool, [`DECIDERS`] at a time, so that
/// probes, the status API and small reviews never wait behind a large one.
async fn respond(
    state: &AppState,
    body: body::Read,
    started: Instant,
    trace: Option<TraceContext<'_>>,
    span: &tracing::Span,
    review: impl FnOnce(&[u8], &Policy) -> Result<admission::Reviewed, admission::ReviewError>
    + Send
    + 'static,
) -> Response {
    let policy = state.policy.load_full();
    let body::Read {
        bytes,
        mut reservation,
    } = body;
    let decided = match bytes.len() <= INLINE_BODY {
        true => decide_now(review, &bytes, &policy),
        false => {
            let permit = state.deciders.clone().acquire_owned().await;
            let decided = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                decide_now(review, &bytes, &policy)
            });
            decided
                .await
                .unwrap_or_else(|_| Err(Box::new("the decision's task failed")))
        }
    };
    let elapsed = seconds(started);
    match decided {
        Ok(Ok(reviewed)) => {
            let s = &reviewed.summary;
            let outcome = match s.allowed {
                true => Outcome::Allowed,
                false => Outcome::Denied,
            };
            state.metrics.observe(&s.operation, outcome, elapsed);
            state.metrics.rejected(&s.rejected_rules);
            trace::record_decision(span, s);
            // The strings as `&str`: the JSON lines hold each as a JSON string of the value
            // itself, the plain lines quote and escape it (`Debug`) so no value forges a line.
            tracing::info!(
                // Every string cut, as spans are: a review's fields are whatever it sent.
                uid = trace::bounded(&s.uid), operation = trace::bounded(&s.operation),
                namespace = trace::bounded(&s.namespace), name = trace::bounded(&s.name),
                dry_run = s.dry_run, allowed = s.allowed, patch_ops = s.patch_ops,
                rejected_rules = ?s.rejected_rules, duration_us = (elapsed * 1e6) as u64,
                trace_id = trace.map(|t| t.trace_id), span_id = trace.map(|t| t.span_id),
                "admission decision"
            );
            if let Some(failure) = &s.failure {
                tracing::error!(
                    uid = s.uid.as_str(),
                    failure = failure.as_str(),
                    "admission refused: the webhook failed inside"
                );
            }
            let json = HeaderValue::from_static("application/json");
            // Best effort: the decision is made, the answer goes out either way.
            let now = state.clock.now_ms();
            let _ = reservation.grow_to(reviewed.body.len(), now);
            reservation.read_whole();
            let answer = Answer {
                body: reviewed.body,
                _held: reservation,
            };
            ([(header::CONTENT_TYPE, json)], Bytes::from_owner(answer)).into_response()
        }
        Ok(Err(err)) => {
            state.metrics.observe("", Outcome::Invalid, elapsed);
            tracing::warn!(target: trace::REFUSED_TARGET, error = %err, "undecodable admission request");
            error(StatusCode::BAD_REQUEST, &err.to_string())
        }
        Err(_) => {
            state.metrics.observe("", Outcome::Failed, elapsed);
            tracing::error!("admission decision panicked");
            error(
                StatusCode::BAD_REQUEST,
                "the webhook failed to decide on this review (a bug in ksvc-webhook)",
            )
        }
    }
}

/// The decision, or the panic a bug in the core raised.
fn decide_now(
    review: impl FnOnce(&[u8], &Policy) -> Result<admission::Reviewed, admission::ReviewError>
    + Send
    + 'static,
    bytes: &[u8],
    policy: &Policy,
) -> std::thread::Result<Result<admission::Reviewed, admission::ReviewError>> {
    std::panic::catch_unwind(AssertUnwindSafe(|| review(bytes, policy)))
}

/// Whether a Content-Type is `application/json`, parameters such as `charset` allowed.
fn is_json(content_type: Option<&HeaderValue>) -> bool {
    let Some(value) = content_type.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
}

fn seconds(started: Instant) -> f64 {
    started.elapsed().as_secs_f64()
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<Shared>) -> (StatusCode, String) {
    match state.readiness.status() {
        Status::Ready => (StatusCode::OK, "ok\n".into()),
        Status::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n".into()),
        Status::Waiting(gates) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("waiting for: {}\n", gates.join(", ")),
        ),
    }
}

async fn metrics(
    State(state): State<Shared>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
) -> Response {
    let from = peer.map(|Extension(p)| p.ip);
    if let Some(guard) = &state.metrics_guard
        && let Err(refused) = guard.check(headers, from).await
    {
        return refused;
    }
    match state.exposition.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, OPENMETRICS)], text).into_response(),
        Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types() {
        let cases = [
            (Some("application/json"), true),
            (Some("application/json; charset=utf-8"), true),
            (Some("Application/JSON ;charset=UTF-8"), true),
            (Some("text/plain"), false),
            (Some("application/json-patch+json"), false),
            (Some("application/jsonx"), false),
            (None, false),
        ];
        for (value, want) in cases {
            let header = value.map(HeaderValue::from_static);
            assert_eq!(is_json(header.as_ref()), want, "{value:?}");
        }
    }

    /// The revision guard's route: a refusal is answered 200 with the decision inside
    /// and counted under its rule.
    #[tokio::test]
    async fn the_revision_guard_refuses_and_counts() {
        use axum::body::Body;
        use http_body_util::BodyExt as _;
        use tower::ServiceExt as _;
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::register(&mut registry);
        let state = AppState {
            policy: Arc::new(ArcSwap::from_pointee(Policy::default())),
            metrics,
            readiness: Readiness::default(),
            exposition: Exposition::new(registry),
            metrics_guard: None,
            revision_owners: None,
            budget: BodyBudget::new(BODY_LIMIT, 0, Default::default()),
            request_timeout: Duration::from_secs(10),
            clock: Clock::start(),
            deciders: Arc::new(Semaphore::new(DECIDERS)),
            stopping: super::super::Shutdown::new(Readiness::default()).stopping(),
            review_spans: false,
        };
        let review = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "operation": "DELETE", "name": "app-00001", "namespace": "ns",
                "kind": {"group": "serving.knative.dev", "version": "v1", "kind": "Revision"},
                "userInfo": {"username": "system:serviceaccount:flyte:flyteadmin"},
                "oldObject": {"metadata": {"name": "app-00001", "labels": {
                    "serving.knative.dev/service": "app",
                    "serving.knative.dev/routingState": "active"}}}}
        });
        let request = axum::http::Request::post(guard::PATH)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(review.to_string()))
            .unwrap();
        let router = admission_router(state.clone(), Router::new(), true);
        let response = router.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["response"]["allowed"], false);
        let text = state.exposition.encode().unwrap();
        assert!(
            text.contains(
                "ksvc_webhook_admission_rejections_total{rule=\"revision-in-traffic\"} 1"
            ),
            "{text}"
        );
    }
}
