//! The status routes over a fixed set of apps, guarded by a reviewer that asks the fake API,
//! with the fake's users and the request helpers the status tests share, and the same routes
//! behind the fake's port-forward, as a pod's loopback status listener ([`behind_port_forward`]).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use ksvc_webhook::apps::args::LOCAL_STATUS_PORT;
use ksvc_webhook::apps::auth::{ClientSource, Reviewer, Settings};
use ksvc_webhook::apps::http::{Options, router};
use ksvc_webhook::apps::metrics::StatusMetrics;
use ksvc_webhook::apps::streams::Maximums;
use ksvc_webhook::watch::hub::{AppRecord, Hub};
use ksvc_webhook::watch::status::{AppStatus, Phase};
use serde_json::Value;
use tower::ServiceExt;

use super::FakeApi;

pub fn record(ns: &str, name: &str) -> AppRecord {
    AppRecord {
        namespace: ns.into(),
        name: name.into(),
        project: Some("p".into()),
        domain: Some("dev".into()),
        app_name: Some(name.into()),
        status: AppStatus {
            phase: Phase::Active,
            message: "ready".into(),
            last_transition_time: "2026-12-01T00:00:00Z".into(),
            replicas: Some(1),
            url: None,
            substate: None,
        },
        drift: Default::default(),
    }
}

pub struct Setup {
    pub app: axum::Router,
    pub hub: Arc<Hub>,
    pub metrics: StatusMetrics,
}

/// The status routes over apps a/x, a/w, b/y, c/z, answers kept and streams re-checked every
/// `ttl`, at most `streams.0` streams, `streams.1` per caller.
pub fn setup(client: kube::Client, ttl: Duration, streams: (usize, usize)) -> Setup {
    let settings = Settings {
        ttl,
        recheck: ttl,
        cache_size: 64,
        ..Settings::default()
    };
    let (total, per_caller) = streams;
    let maximums = Maximums {
        total,
        per_caller,
        per_namespace: total,
    };
    setup_with(client, settings, maximums)
}

/// [`setup`] with every setting and limit chosen.
pub fn setup_with(client: kube::Client, settings: Settings, streams: Maximums) -> Setup {
    let hub = Hub::new();
    for (ns, name) in [("a", "x"), ("a", "w"), ("b", "y"), ("c", "z")] {
        hub.upsert(record(ns, name));
    }
    let metrics = StatusMetrics::default();
    let reviewer = Reviewer::new(ClientSource::Ready(client), settings, metrics.clone());
    let options = Options {
        buffer: 8,
        reviewer: Some(Arc::new(reviewer)),
        streams,
        metrics: metrics.clone(),
    };
    let app = router(hub.clone(), Arc::new(AtomicBool::new(true)), options);
    Setup { app, hub, metrics }
}

/// A fake API where `alice` may read namespace `a`, `admin` everything, `nobody` nothing.
pub async fn fake() -> FakeApi {
    let fake = FakeApi::start().await;
    fake.add_token("t-alice", "alice", &["team-a"]);
    fake.add_token("t-admin", "admin", &["ops"]);
    fake.add_token("t-nobody", "nobody", &[]);
    for verb in ["get", "list", "watch"] {
        fake.grant("alice", verb, Some("a"));
        fake.grant("admin", verb, None);
    }
    fake
}

pub fn request(uri: &str, token: Option<&str>) -> Request<Body> {
    let mut req = Request::get(uri);
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    req.body(Body::empty()).unwrap()
}

pub async fn get(app: &axum::Router, uri: &str, token: Option<&str>) -> (StatusCode, Value) {
    let (status, _, body) = get_full(app, uri, token).await;
    (status, body)
}

/// A GET of `uri` with the bearer token `token` must be answered `want`.
pub async fn assert_code(app: &axum::Router, uri: &str, token: &str, want: StatusCode) {
    let (code, body) = get(app, uri, Some(token)).await;
    assert_eq!(code, want, "GET {uri} as {token}: {body}");
}

pub async fn get_full(
    app: &axum::Router,
    uri: &str,
    token: Option<&str>,
) -> (StatusCode, HeaderMap, Value) {
    let resp = app.clone().oneshot(request(uri, token)).await.unwrap();
    let headers = resp.headers().clone();
    let (status, body) = body_of(resp).await;
    (status, headers, body)
}

/// The status and JSON body of a whole response.
pub async fn body_of(resp: Response<Body>) -> (StatusCode, Value) {
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

/// Reviews of `resource` (`tokenreviews`, `subjectaccessreviews`) the fake was sent.
pub fn reviews(fake: &FakeApi, resource: &str) -> usize {
    fake.requests_to(Method::POST, resource).len()
}

/// The pod [`behind_port_forward`] puts behind the status API's Service.
pub const POD: &str = "ksvc-webhook-controller-5d8f7-x2x9q";

/// Serve `router` on a loopback port of its own, as a pod's local status listener
/// (`--local-status-listen`), behind the fake's port-forward: the status API's Service
/// `ksvc-system/ksvc-webhook-controller` (as `drift` finds it by default) with one Ready pod,
/// [`POD`], whose port [`LOCAL_STATUS_PORT`] forwards there. Returns the listener's address.
pub async fn behind_port_forward(fake: &FakeApi, router: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let (ns, service) = ("ksvc-system", "ksvc-webhook-controller");
    fake.put_webhook_service(ns, service);
    fake.put_webhook_pod(ns, service, POD, true);
    fake.forward_port(LOCAL_STATUS_PORT, addr);
    addr
}
