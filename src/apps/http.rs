//! The status API for people and programs: an axum [`Router`] the server merges into its own.
//!
//! - `GET /apps?namespace=&project=&domain=` — JSON list of apps; with `limit` (and `continue`)
//!   one page of it ([`super::pages`]), without it the whole list streamed in chunks.
//! - `GET /apps/{namespace}/{name}` — one app, or 404.
//! - `GET /apps/watch?namespace=&name=&project=&domain=` — a stream of `CREATED` / `UPDATED` /
//!   `DELETED` / `RESYNC` events: NDJSON, or Server-Sent Events when the client accepts
//!   `text/event-stream`. It opens with the current state as `CREATED` events; a subscriber that
//!   falls more than the buffer behind gets `RESYNC` and then the current state as `UPDATED`.
//!
//! Every route first checks the names it was given ([`super::names`]: 400 for a namespace,
//! name, project or domain no app can have), before any review. With a [`Reviewer`] every
//! route needs a bearer token and the rights to read the KServices (`get` one, `list` a
//! namespace or all, `watch` for streams; see [`super::auth`]). A cluster-wide `/apps` of a
//! caller who may list only some namespaces is filtered to those and says so in
//! [`FILTERED_HEADER`]. Open streams re-check access every re-check period and end with an
//! `ERROR` event once it is gone (a re-check that could not be made, over the review budgets or
//! with the API server unavailable, is tried again three times first). Streams are limited
//! overall, per caller and per ServiceAccount namespace (429 beyond, [`super::streams`]). When the server stops (the drain
//! after SIGTERM is over), every stream ends with an `ERROR` event of code 503: reconnect,
//! another replica answers.
//!
//! How an event or the last `ERROR` looks on the wire is [`super::frames`]'s. Served from this
//! replica's cache; answers 503 until the cache has synced. Never reads apps
//! from the API; only [`super::auth`] calls it, to review tokens and access.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::json;
use tokio::sync::Semaphore;

use super::auth::access::{self, Access, Attributes, Verb};
use super::auth::{Caller, RETRY_AFTER_SECS, Refusal, Reviewer};
use super::frames::{encode, encode_end, encode_going_away};
use super::metrics::StatusMetrics;
use super::names::{self, BadName};
use super::pages::{self, Asked, Paging};
use super::streams::{self, LimitHit, Maximums, StreamLimits};
use crate::locks::lock;
use crate::server::activity::Peer;
use crate::server::shutdown::Stopping;
use crate::watch::hub::{AppKey, AppRecord, Filter, Hub, Subscription};

/// Set (to `namespaces`) on a cluster-wide `/apps` answer that left out the namespaces the
/// caller may not list.
pub const FILTERED_HEADER: &str = "x-ksvc-webhook-filtered";

/// How the status routes are guarded and limited.
pub struct Options {
    /// Per-subscriber queue length of `/apps/watch`.
    pub buffer: usize,
    /// Who checks tokens and access; `None` serves everyone (`--status-auth=false`).
    pub reviewer: Option<Arc<Reviewer>>,
    /// Most concurrent `/apps/watch` streams: overall, per caller, per ServiceAccount
    /// namespace.
    pub streams: Maximums,
    /// Where reviews, streams and refusals are counted.
    pub metrics: StatusMetrics,
}

impl Options {
    /// Unauthenticated, with the default stream limits of `serve`.
    pub fn unauthenticated(buffer: usize) -> Self {
        Self {
            buffer,
            reviewer: None,
            streams: Maximums {
                total: 512,
                per_caller: 16,
                per_namespace: 64,
            },
            metrics: StatusMetrics::default(),
        }
    }
}

#[derive(Clone)]
struct ApiState {
    hub: Arc<Hub>,
    synced: Arc<AtomicBool>,
    buffer: usize,
    reviewer: Option<Arc<Reviewer>>,
    limits: Arc<Mutex<StreamLimits>>,
    /// Places for full (unpaged) listings being sent.
    full_listings: Arc<Semaphore>,
    metrics: StatusMetrics,
}

/// The status routes over a hub, guarded and limited as `options` say; `synced` gates them with
/// 503 until the cache is complete.
pub fn router(hub: Arc<Hub>, synced: Arc<AtomicBool>, options: Options) -> Router {
    let limits = StreamLimits::new(options.streams);
    Router::new()
        .route("/apps", get(list))
        .route("/apps/watch", get(watch))
        .route("/apps/{namespace}/{name}", get(one))
        .with_state(ApiState {
            hub,
            synced,
            buffer: options.buffer,
            reviewer: options.reviewer,
            limits: Arc::new(Mutex::new(limits)),
            full_listings: Arc::new(Semaphore::new(pages::MAX_FULL_LISTINGS)),
            metrics: options.metrics,
        })
}

/// [`router`] without authentication, with a chosen per-subscriber queue length.
pub fn router_with_buffer(hub: Arc<Hub>, synced: Arc<AtomicBool>, buffer: usize) -> Router {
    router(hub, synced, Options::unauthenticated(buffer))
}

/// 400 for a name no app can have.
fn bad_name(error: BadName) -> Response {
    let body = Json(json!({ "error": error.to_string() }));
    (StatusCode::BAD_REQUEST, body).into_response()
}

fn not_synced() -> Response {
    let body =
        Json(json!({"error": "the app cache has not synced with the cluster yet; retry shortly"}));
    (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
}

/// The authenticated caller with its reviewer, `None` when the API is unauthenticated.
async fn caller(
    s: &ApiState,
    headers: &HeaderMap,
    peer: Option<&Peer>,
) -> Result<Option<Checked>, Refusal> {
    let Some(reviewer) = s.reviewer.clone() else {
        return Ok(None);
    };
    let caller = reviewer.authenticate(headers, peer.map(|p| p.ip)).await?;
    Ok(Some(Checked { reviewer, caller }))
}

/// A caller and the reviewer that knows it.
struct Checked {
    reviewer: Arc<Reviewer>,
    caller: Caller,
}

impl Checked {
    fn forbidden(&self, needs: Attributes) -> Refusal {
        Refusal::Forbidden {
            user: self.caller.user.username.clone(),
            needs,
        }
    }

    /// The apps of `apps` the caller may list, and whether some namespaces were left out;
    /// `Forbidden` when it may list none of them and `none_is_forbidden` (a whole listing).
    async fn visible(
        &self,
        namespace: Option<&str>,
        apps: Vec<AppRecord>,
        none_is_forbidden: bool,
    ) -> Result<(Vec<AppRecord>, bool), Refusal> {
        let needs = Attributes::apps(Verb::List, namespace, None);
        match self.reviewer.check(&self.caller, &needs).await? {
            Access::Allowed => return Ok((apps, false)),
            Access::Denied(_) if namespace.is_some() => return Err(self.forbidden(needs)),
            Access::Denied(_) => {}
        }
        // Not cluster-wide: one (cached) review per namespace that has apps.
        let namespaces: Vec<String> = access::namespaces_of(&apps).into_iter().collect();
        let asks: Vec<Attributes> = namespaces
            .iter()
            .map(|ns| Attributes::apps(Verb::List, Some(ns), None))
            .collect();
        let answers = self.reviewer.check_all(&self.caller, &asks).await;
        let mut allowed = BTreeSet::new();
        for (ns, answer) in namespaces.into_iter().zip(answers) {
            if answer? == Access::Allowed {
                allowed.insert(ns);
            }
        }
        if allowed.is_empty() && none_is_forbidden {
            return Err(self.forbidden(needs));
        }
        Ok((access::keep_namespaces(apps, &allowed), true))
    }
}

/// What every route checks first: the names it was given, the cache has synced, then who the
/// caller is (`None` when status is unauthenticated), as sent from `peer`'s address.
async fn gate(
    s: &ApiState,
    headers: &HeaderMap,
    peer: Option<Extension<Peer>>,
    names: Result<(), BadName>,
) -> Result<Option<Checked>, Response> {
    names.map_err(bad_name)?;
    if !s.synced.load(Ordering::Acquire) {
        return Err(not_synced());
    }
    caller(s, headers, peer.as_ref().map(|Extension(p)| p))
        .await
        .map_err(IntoResponse::into_response)
}

async fn list(
    State(s): State<ApiState>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    Query(filter): Query<Filter>,
    Query(paging): Query<Paging>,
) -> Response {
    let checked = match gate(&s, &headers, peer, names::check_filter(&filter)).await {
        Ok(checked) => checked,
        Err(response) => return response,
    };
    let asked = match pages::asked(&paging, &filter) {
        Ok(asked) => asked,
        Err(error) => {
            return (StatusCode::BAD_REQUEST, Json(json!({ "error": error }))).into_response();
        }
    };
    let page = match asked {
        Asked::Page(page) => page,
        Asked::Full => return full_listing(s, checked, filter).await,
    };
    let (apps, next) = pages::page(&s.hub, &filter, &page);
    let (apps, filtered) = match checked {
        None => (apps, false),
        // A page may hold none of the caller's namespaces and the next one some: no 403 here.
        Some(c) => match c.visible(filter.namespace.as_deref(), apps, false).await {
            Ok(visible) => visible,
            Err(refusal) => return refusal.into_response(),
        },
    };
    let mut response = Json(apps).into_response();
    let headers = response.headers_mut();
    if filtered {
        headers.insert(FILTERED_HEADER, HeaderValue::from_static("namespaces"));
    }
    if let Some(next) = next.and_then(|t| HeaderValue::from_str(&t).ok()) {
        headers.insert(pages::CONTINUE_HEADER, next);
    }
    response
}

/// Every app the filter covers: streamed in chunks when the caller may see them all (or the API
/// is unauthenticated), at most [`pages::MAX_FULL_LISTINGS`] at once; a caller who may list
/// only some namespaces gets them filtered, as one answer.
async fn full_listing(s: ApiState, checked: Option<Checked>, filter: Filter) -> Response {
    if let Some(c) = &checked {
        let needs = Attributes::apps(Verb::List, filter.namespace.as_deref(), None);
        match c.reviewer.check(&c.caller, &needs).await {
            Ok(Access::Allowed) => {}
            Ok(Access::Denied(_)) => {
                return match c
                    .visible(filter.namespace.as_deref(), s.hub.list(&filter), true)
                    .await
                {
                    Ok((apps, false)) => Json(apps).into_response(),
                    Ok((apps, true)) => {
                        ([(FILTERED_HEADER, "namespaces")], Json(apps)).into_response()
                    }
                    Err(refusal) => refusal.into_response(),
                };
            }
            Err(refusal) => return refusal.into_response(),
        }
    }
    let Ok(permit) = s.full_listings.clone().try_acquire_owned() else {
        let error = format!(
            "{} full listings are being sent already; retry shortly, or page with `limit=500`",
            pages::MAX_FULL_LISTINGS
        );
        let headers = [(header::RETRY_AFTER, RETRY_AFTER_SECS.to_string())];
        return (
            StatusCode::TOO_MANY_REQUESTS,
            headers,
            Json(json!({ "error": error })),
        )
            .into_response();
    };
    let chunks = pages::chunks(s.hub.clone(), filter, |_| true).map(move |chunk| {
        // Held until the last chunk is sent or the client goes away.
        let _held = &permit;
        Ok::<Bytes, std::convert::Infallible>(chunk)
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(chunks),
    )
        .into_response()
}

async fn one(
    State(s): State<ApiState>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    // Access first: a caller without it learns nothing, not even whether the app exists.
    let checked = match gate(&s, &headers, peer, names::check_path(&namespace, &name)).await {
        Ok(checked) => checked,
        Err(response) => return response,
    };
    if let Some(c) = checked {
        let needs = Attributes::apps(Verb::Get, Some(&namespace), Some(&name));
        if let Err(refusal) = c.reviewer.require(&c.caller, needs).await {
            return refusal.into_response();
        }
    }
    match s.hub.get(&AppKey {
        namespace: namespace.as_str().into(),
        name: name.as_str().into(),
    }) {
        Some(record) => Json(record).into_response(),
        None => {
            let error = format!(
                "no app {namespace}/{name}; list apps with GET /apps?namespace={namespace}"
            );
            (StatusCode::NOT_FOUND, Json(json!({ "error": error }))).into_response()
        }
    }
}

/// What a watch with this filter needs: one app by name, a namespace, or every namespace.
fn watch_needs(filter: &Filter) -> Attributes {
    let name = filter.namespace.as_ref().and(filter.name.as_deref());
    Attributes::apps(Verb::Watch, filter.namespace.as_deref(), name)
}

async fn watch(
    State(s): State<ApiState>,
    stopping: Option<Extension<Stopping>>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    Query(filter): Query<Filter>,
) -> Response {
    let recheck = match gate(&s, &headers, peer, names::check_filter(&filter)).await {
        Ok(None) => None,
        Ok(Some(c)) => {
            let needs = watch_needs(&filter);
            if let Err(refusal) = c.reviewer.require(&c.caller, needs.clone()).await {
                return refusal.into_response();
            }
            Some(Recheck::new(c, needs))
        }
        Err(response) => return response,
    };
    let who = recheck
        .as_ref()
        .map(|r| r.checked.caller.user.username.clone());
    let slot = match Slot::open(&s, who) {
        Ok(slot) => slot,
        Err(hit) => {
            let labels = vec![("limit", hit.label())];
            s.metrics.watch_rejected.get_or_create(&labels).inc();
            let headers = [(header::RETRY_AFTER, RETRY_AFTER_SECS.to_string())];
            let body = Json(json!({ "error": hit.to_string() }));
            return (StatusCode::TOO_MANY_REQUESTS, headers, body).into_response();
        }
    };
    let sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    let streaming = Streaming {
        sub: s.hub.subscribe(filter, s.buffer),
        _slot: slot,
        recheck,
        stopping: stopping.map(|Extension(stopping)| stopping),
        sse,
        ended: false,
        metrics: s.metrics.clone(),
    };
    let stream = futures::stream::unfold(streaming, |mut st| async move {
        if st.ended {
            return None;
        }
        let bytes = st.step().await;
        Some((Ok::<Bytes, std::convert::Infallible>(bytes), st))
    });
    let content_type = if sse {
        "text/event-stream"
    } else {
        "application/x-ndjson"
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// One counted stream; dropping it (the client went away, or the stream ended) frees its place.
struct Slot {
    limits: Arc<Mutex<StreamLimits>>,
    caller: Option<String>,
    metrics: StatusMetrics,
}

impl Slot {
    fn open(s: &ApiState, caller: Option<String>) -> Result<Self, LimitHit> {
        let mut limits = lock(&s.limits);
        limits.open(caller.as_deref())?;
        s.metrics.watch_streams.set(open_gauge(&limits));
        Ok(Self {
            limits: s.limits.clone(),
            caller,
            metrics: s.metrics.clone(),
        })
    }
}

fn open_gauge(limits: &StreamLimits) -> i64 {
    i64::try_from(limits.open_streams()).unwrap_or(i64::MAX)
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut limits = lock(&self.limits);
        limits.close(self.caller.as_deref());
        self.metrics.watch_streams.set(open_gauge(&limits));
    }
}

/// The periodic access check of an open stream.
struct Recheck {
    checked: Checked,
    needs: Attributes,
    next: tokio::time::Instant,
    /// Re-checks in a row that could not be made.
    tries: u32,
}

impl Recheck {
    fn new(checked: Checked, needs: Attributes) -> Self {
        let next = tokio::time::Instant::now() + checked.reviewer.recheck();
        Self {
            checked,
            needs,
            next,
            tries: 0,
        }
    }

    /// Token and access again (through the cache: a fresh review once the answer expired; a
    /// stream over the review budgets ends, never goes on unchecked).
    async fn still_allowed(&mut self) -> Result<(), Refusal> {
        let reviewer = &self.checked.reviewer;
        let caller = reviewer.reauthenticate(&self.checked.caller).await?;
        reviewer.require(&caller, self.needs.clone()).await?;
        self.next = tokio::time::Instant::now() + reviewer.recheck();
        self.tries = 0;
        Ok(())
    }

    /// After `refusal`, when to try again: only when the review could not be made (retrying
    /// can help), and only [`streams::RECHECK_RETRIES`] times in a row; `None` ends the stream.
    fn retry(&mut self, refusal: &Refusal) -> Option<std::time::Duration> {
        refusal.retry_after()?;
        let wait = streams::recheck_backoff(self.tries)?;
        self.tries += 1;
        self.next = tokio::time::Instant::now() + wait;
        Some(wait)
    }
}

/// The state of one `/apps/watch` response body.
struct Streaming {
    sub: Subscription,
    _slot: Slot,
    recheck: Option<Recheck>,
    /// Set when served by the server: resolves once it stops accepting.
    stopping: Option<Stopping>,
    sse: bool,
    ended: bool,
    metrics: StatusMetrics,
}

impl Streaming {
    /// The next frame: an event, or the final `ERROR` once access is gone or the server stops.
    async fn step(&mut self) -> Bytes {
        loop {
            let recheck_at = self.recheck.as_ref().map(|r| r.next);
            tokio::select! {
                event = self.sub.next() => return encode(&event, self.sse),
                () = until(recheck_at) => {
                    let Some(recheck) = self.recheck.as_mut() else { continue };
                    let Err(refusal) = recheck.still_allowed().await else { continue };
                    let user = recheck.checked.caller.user.username.clone();
                    if let Some(wait) = recheck.retry(&refusal) {
                        tracing::info!(user = ?user, reason = ?refusal.to_string(), retry_in_secs = wait.as_secs(), tries = recheck.tries, "status watch stream's re-check could not be made; waiting to try again");
                        continue;
                    }
                    tracing::info!(user = ?user, reason = ?refusal.to_string(), "status watch stream cut off");
                    self.metrics.watch_cut.inc();
                    self.ended = true;
                    return encode_end(&refusal, self.sse);
                }
                () = stopped(&mut self.stopping) => {
                    self.ended = true;
                    return encode_going_away(self.sse);
                }
            }
        }
    }
}

/// Resolves at `at`; never without one.
async fn until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Resolves once the server stops accepting; never outside a server.
async fn stopped(stopping: &mut Option<Stopping>) {
    match stopping {
        Some(stopping) => stopping.wait().await,
        None => std::future::pending().await,
    }
}
