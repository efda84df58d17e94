//! The status API's delegated authentication and authorization, as Kubernetes add-ons do it: a
//! bearer token is checked with a TokenReview (authentication.k8s.io/v1), the caller it names is
//! authorized with a SubjectAccessReview (authorization.k8s.io/v1) as if it read the Knative
//! Services itself. Answers are cached ([`TtlCache`], keyed by token hash and attributes) and
//! concurrent lookups of one key share one API call, so a burst costs one review per key and TTL.
//!
//! A thin shell: every decision is the API server's or [`super::access`]'s; the two calls are
//! [`super::reviews`]'s. Every call has a
//! timeout; when the API server cannot be asked the answer is 503, never "allowed". Tokens are
//! never logged and never stored beyond the request (or the watch stream) that carries them.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::Json;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use kube::Client;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::sync::OnceCell;

use super::access::{Access, Attributes, Identity, TokenHash, TtlCache, User};
use super::args::StatusApiArgs;
use super::reviews;
use crate::report::error_chain;
use crate::watch::args::WatchArgs;

/// Seconds a client is told to wait after a 503 or a 429.
pub const RETRY_AFTER_SECS: u64 = 5;

/// Why a request is not served.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refusal {
    /// 401: no token, or one the API server does not accept.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// 403: the caller lacks the access the request needs.
    #[error(
        "forbidden: {user} may not read this; it needs {needs} (see docs/status-api.md for the ClusterRole and RoleBinding that grant it)"
    )]
    Forbidden { user: String, needs: Attributes },
    /// 503: the API server could not be asked (why is logged, not told to an unknown caller).
    #[error("cannot check access with the API server right now; retry shortly")]
    Unavailable(String),
}

impl Refusal {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Refusal::Forbidden { .. } => StatusCode::FORBIDDEN,
            Refusal::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = Json(json!({ "error": self.to_string() }));
        let mut response = (self.status(), body).into_response();
        let headers = response.headers_mut();
        match self {
            Refusal::Unauthenticated(_) => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static(r#"Bearer realm="ksvc-webhook""#),
                );
            }
            Refusal::Unavailable(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
            }
            Refusal::Forbidden { .. } => {}
        }
        response
    }
}

/// An authenticated caller. Keeps its token so an open stream can re-check it.
#[derive(Clone)]
pub struct Caller {
    token: Arc<str>,
    hash: TokenHash,
    /// Who the TokenReview said the caller is.
    pub user: User,
}

/// The status API's metric handles (`ksvc_webhook_status_…`).
#[derive(Clone, Default)]
pub struct StatusMetrics {
    /// `reviews_total{kind,result}`: TokenReviews and SubjectAccessReviews sent (cache misses).
    pub reviews: Family<Vec<(&'static str, &'static str)>, Counter>,
    /// `watch_streams`: `/apps/watch` streams open now.
    pub watch_streams: Gauge,
    /// `watch_rejected_total{limit}`: streams refused with 429, by the limit hit.
    pub watch_rejected: Family<Vec<(&'static str, &'static str)>, Counter>,
    /// `watch_cut_total`: streams ended because the caller lost access (or it could not be
    /// re-checked).
    pub watch_cut: Counter,
}

impl StatusMetrics {
    /// Register every metric under the `ksvc_webhook_status` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("ksvc_webhook_status");
        let reviews = "TokenReviews and SubjectAccessReviews sent, by kind and result";
        r.register("reviews", reviews, self.reviews.clone());
        let streams = "Open /apps/watch streams";
        r.register("watch_streams", streams, self.watch_streams.clone());
        let rejected = "/apps/watch streams refused with 429, by limit";
        r.register("watch_rejected", rejected, self.watch_rejected.clone());
        let cut = "/apps/watch streams ended because the caller's access was revoked";
        r.register("watch_cut", cut, self.watch_cut.clone());
    }

    pub(super) fn review(&self, kind: &'static str, result: &'static str) {
        let labels = vec![("kind", kind), ("result", result)];
        self.reviews.get_or_create(&labels).inc();
    }
}

/// Where the reviewer gets its client: one given (tests), or connected on first use.
pub enum ClientSource {
    Ready(Client),
    Connect(Box<WatchArgs>),
}

/// Cache and timeout settings of a [`Reviewer`].
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub ttl: Duration,
    pub cache_size: usize,
    pub timeout: Duration,
}

impl Settings {
    /// The settings the flags describe.
    pub fn from_args(args: &StatusApiArgs) -> Self {
        Self {
            ttl: args.status_auth_cache_ttl,
            cache_size: usize::try_from(args.status_auth_cache_size).unwrap_or(usize::MAX),
            timeout: args.status_auth_timeout,
        }
    }
}

/// A client for the cluster `args` names, without the watch loop's version probe: an unreachable
/// API server shows in each review (bounded by its timeout), not in a serialized connect.
async fn client_for(args: &WatchArgs, timeout: Duration) -> Result<Client, String> {
    let mut config = crate::cluster::config_for(args.kubeconfig.as_deref()).await?;
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    Client::try_from(config).map_err(|e| error_chain(&e))
}

/// Asks the API server who a token belongs to and what it may read, through the caches.
pub struct Reviewer {
    source: ClientSource,
    client: OnceCell<Client>,
    settings: Settings,
    tokens: Arc<Flight<TokenHash, Identity>>,
    access: Arc<Flight<(TokenHash, Attributes), Access>>,
    metrics: StatusMetrics,
}

impl Reviewer {
    /// A reviewer asking through `source`.
    pub fn new(source: ClientSource, settings: Settings, metrics: StatusMetrics) -> Self {
        Self {
            source,
            client: OnceCell::new(),
            settings,
            tokens: Arc::new(Flight::new(settings)),
            access: Arc::new(Flight::new(settings)),
            metrics,
        }
    }

    /// How long answers are reused; open streams re-check this often.
    pub fn ttl(&self) -> Duration {
        self.settings.ttl
    }

    async fn client(&self) -> Result<Client, Refusal> {
        let timeout = self.settings.timeout;
        let client = match &self.source {
            ClientSource::Ready(client) => return Ok(client.clone()),
            ClientSource::Connect(args) => {
                let connect = || client_for(args, timeout);
                self.client.get_or_try_init(connect).await
            }
        };
        client.cloned().map_err(|error| {
            tracing::warn!(error = %error, "no client for the status API's access reviews");
            Refusal::Unavailable(error)
        })
    }

    /// The caller of a request with these headers: 401 without a token or with one the API
    /// server rejects.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, Refusal> {
        let header = headers
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes);
        let token =
            super::access::bearer(header).map_err(|e| Refusal::Unauthenticated(e.to_string()))?;
        self.authenticate_token(Arc::from(token)).await
    }

    /// Check `caller`'s token again (an open stream does so every TTL).
    pub async fn reauthenticate(&self, caller: &Caller) -> Result<Caller, Refusal> {
        self.authenticate_token(caller.token.clone()).await
    }

    async fn authenticate_token(&self, token: Arc<str>) -> Result<Caller, Refusal> {
        let hash = TokenHash::of(&token);
        let client = self.client().await?;
        let (timeout, metrics) = (self.settings.timeout, self.metrics.clone());
        let review = reviews::token_review(client, token.to_string(), timeout, metrics);
        match self.tokens.get_or_fetch(hash, review).await {
            Ok(Identity::User(user)) => Ok(Caller { token, hash, user }),
            Ok(Identity::Rejected(reason)) => Err(Refusal::Unauthenticated(format!(
                "the API server does not accept this token{}; use a current ServiceAccount or user token",
                reason.map(|r| format!(" ({r})")).unwrap_or_default()
            ))),
            Err(unavailable) => Err(Refusal::Unavailable(unavailable)),
        }
    }

    /// Whether `caller` has `needs` (503 when the API server cannot say).
    pub async fn check(&self, caller: &Caller, needs: &Attributes) -> Result<Access, Refusal> {
        let client = self.client().await?;
        let (timeout, metrics) = (self.settings.timeout, self.metrics.clone());
        let review = reviews::access_review(
            client,
            reviews::review_of(&caller.user, needs),
            timeout,
            metrics,
        );
        let key = (caller.hash, needs.clone());
        self.access
            .get_or_fetch(key, review)
            .await
            .map_err(Refusal::Unavailable)
    }

    /// [`check`](Self::check), with a denial as 403 naming what is missing.
    pub async fn require(&self, caller: &Caller, needs: Attributes) -> Result<(), Refusal> {
        match self.check(caller, &needs).await? {
            Access::Allowed => Ok(()),
            Access::Denied(reason) => {
                tracing::info!(user = %caller.user.username, needs = %needs, reason = ?reason, "status API access denied");
                Err(Refusal::Forbidden {
                    user: caller.user.username.clone(),
                    needs,
                })
            }
        }
    }
}

/// An answer, or why the API server could not give one (never cached).
pub(super) type Answer<V> = Result<V, String>;

/// A TTL cache whose misses share one in-flight lookup per key.
struct Flight<K, V> {
    cache: Mutex<TtlCache<K, V>>,
    pending: Mutex<HashMap<K, Shared<BoxFuture<'static, Answer<V>>>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn now() -> Instant {
    // Tokio's clock, so tests with a paused clock see answers expire.
    tokio::time::Instant::now().into_std()
}

impl<K, V> Flight<K, V>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn new(settings: Settings) -> Self {
        Self {
            cache: Mutex::new(TtlCache::new(settings.cache_size, settings.ttl)),
            pending: Mutex::default(),
        }
    }

    /// The cached answer for `key`, else the one `fetch` gets (shared with concurrent callers).
    async fn get_or_fetch<F>(self: &Arc<Self>, key: K, fetch: F) -> Answer<V>
    where
        F: Future<Output = Answer<V>> + Send + 'static,
    {
        if let Some(value) = lock(&self.cache).get(&key, now()) {
            return Ok(value);
        }
        let shared = {
            let mut pending = lock(&self.pending);
            let entry = pending.entry(key.clone()).or_insert_with(|| {
                let (me, key) = (self.clone(), key.clone());
                // A task of its own: the review ends (bounded by its timeout) and leaves the
                // pending map even when every request waiting for it has gone away.
                let task = tokio::spawn(async move {
                    let answer = fetch.await;
                    if let Ok(value) = &answer {
                        lock(&me.cache).insert(key.clone(), value.clone(), now());
                    }
                    lock(&me.pending).remove(&key);
                    answer
                });
                let joined = async move {
                    let failed = |_| Err("the review task ended early".to_owned());
                    task.await.unwrap_or_else(failed)
                };
                joined.boxed().shared()
            });
            entry.clone()
        };
        shared.await
    }
}

/// Say how the status API is guarded and where the certificates come from: the first log line
/// of `serve`, so an unauthenticated status API (`--status-auth=false`) is never a surprise.
pub fn announce(args: &StatusApiArgs, certificates: &str) {
    match args.status_auth {
        true => tracing::info!(
            certificates,
            cache_ttl_ms = args.status_auth_cache_ttl.as_millis() as u64,
            cache_size = args.status_auth_cache_size,
            max_watch_streams = args.max_watch_streams,
            max_watch_streams_per_caller = args.max_watch_streams_per_caller,
            metrics_auth = args.metrics_auth,
            "status API (/apps) needs a bearer token; access checked with TokenReview and SubjectAccessReview"
        ),
        false => tracing::warn!(
            certificates,
            "status API (/apps) is UNAUTHENTICATED (--status-auth=false): anyone who reaches the server reads every app"
        ),
    }
}

/// The `/metrics` check of `--metrics-auth`: a bearer token allowed `get` on the non-resource
/// URL `/metrics` (what kube-rbac-proxy asks for Prometheus).
pub struct MetricsAccess {
    reviewer: Arc<Reviewer>,
}

impl std::fmt::Debug for MetricsAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsAccess")
            .field("settings", &self.reviewer.settings)
            .finish_non_exhaustive()
    }
}

impl MetricsAccess {
    /// A check asking through `reviewer`.
    pub fn new(reviewer: Arc<Reviewer>) -> Self {
        Self { reviewer }
    }
}

impl crate::server::routes::Guard for MetricsAccess {
    fn check(&self, headers: HeaderMap) -> BoxFuture<'static, Result<(), Response>> {
        let reviewer = self.reviewer.clone();
        async move {
            let caller = reviewer.authenticate(&headers).await;
            let needs = Attributes::Path("/metrics".into());
            let allowed = match caller {
                Ok(caller) => reviewer.require(&caller, needs).await,
                Err(refusal) => Err(refusal),
            };
            allowed.map_err(IntoResponse::into_response)
        }
        .boxed()
    }
}

/// The `/metrics` guard of `serve`: its own reviewer (and cache) on the watch loop's cluster.
pub fn metrics_guard(
    watch: &WatchArgs,
    status: &StatusApiArgs,
    metrics: &StatusMetrics,
) -> Arc<dyn crate::server::routes::Guard> {
    let source = ClientSource::Connect(Box::new(watch.clone()));
    let settings = Settings::from_args(status);
    let reviewer = Reviewer::new(source, settings, metrics.clone());
    Arc::new(MetricsAccess::new(Arc::new(reviewer)))
}
