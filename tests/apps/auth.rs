//! Who may read the status API: bearer tokens checked by TokenReview, access by
//! SubjectAccessReview, both answered by the in-test Kubernetes API; the decision cache, the
//! namespace filter, revocation of open streams, and the stream limits.
// Test helpers outside #[test] fns panic on a failed setup step, as the tests would.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use ksvc_webhook::apps::http::FILTERED_HEADER;
use ksvc_webhook::watch::hub::AppRecord;
use ksvc_webhook::watch::status::{AppStatus, Phase};
use serde_json::Value;
use support::fake_api::authn::REJECTION;
use support::status_api::{assert_code, fake, get, get_full, record, request, reviews, setup};
use tower::ServiceExt;

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}/{}",
                r["namespace"].as_str().unwrap(),
                r["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn no_token_or_an_invalid_one_is_401() {
    let fake = fake().await;
    let s = setup(fake.client(), Duration::from_secs(10), (8, 8));
    for uri in ["/apps", "/apps/a/x", "/apps/watch"] {
        let (code, headers, body) = get_full(&s.app, uri, None).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED, "{uri}");
        assert!(
            headers["www-authenticate"]
                .to_str()
                .unwrap()
                .starts_with("Bearer")
        );
        assert!(
            body["error"].as_str().unwrap().contains("Bearer <token>"),
            "{body}"
        );
    }
    assert_eq!(reviews(&fake, "tokenreviews"), 0, "no token, no review");
    let (code, body) = get(&s.app, "/apps", Some("t-stolen")).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("does not accept this token"), "{body}");
    assert!(
        !error.contains(REJECTION) && !error.contains("fake authenticator"),
        "the authenticator's words are not relayed: {error}"
    );
    let resp = s.app.clone().oneshot(
        Request::get("/apps")
            .header("authorization", "Basic YTpi")
            .body(Body::empty())
            .unwrap(),
    );
    assert_eq!(resp.await.unwrap().status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        reviews(&fake, "subjectaccessreviews"),
        0,
        "never authorized"
    );
}

#[tokio::test]
async fn a_token_without_rights_gets_403_naming_what_is_missing() {
    let fake = fake().await;
    let s = setup(fake.client(), Duration::from_secs(10), (8, 8));
    let cases = [
        (
            "/apps/b/y",
            "`get` on services.serving.knative.dev named `y` in namespace `b`",
        ),
        (
            "/apps?namespace=b",
            "`list` on services.serving.knative.dev in namespace `b`",
        ),
        (
            "/apps",
            "`list` on services.serving.knative.dev in all namespaces (cluster-wide)",
        ),
        (
            "/apps/watch?namespace=c",
            "`watch` on services.serving.knative.dev in namespace `c`",
        ),
    ];
    for (uri, missing) in cases {
        let (code, body) = get(&s.app, uri, Some("t-nobody")).await;
        assert_eq!(code, StatusCode::FORBIDDEN, "{uri}");
        let error = body["error"].as_str().unwrap();
        assert!(error.contains(missing), "{uri}: {error}");
        assert!(error.contains("nobody"), "{error}");
    }
    // The SubjectAccessReview carried the TokenReview's user and the request's attributes.
    let sar = fake.requests_to(Method::POST, "subjectaccessreviews");
    let first = &sar[0].body["spec"];
    assert_eq!(first["user"], "nobody");
    assert_eq!(first["resourceAttributes"]["verb"], "get");
    assert_eq!(first["resourceAttributes"]["namespace"], "b");
    assert_eq!(first["resourceAttributes"]["name"], "y");
}

#[tokio::test]
async fn a_namespace_scoped_caller_sees_only_its_namespace() {
    let fake = fake().await;
    let s = setup(fake.client(), Duration::from_secs(10), (8, 8));
    let (code, headers, body) = get_full(&s.app, "/apps", Some("t-alice")).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(names(&body), ["a/w", "a/x"]);
    assert_eq!(headers[FILTERED_HEADER], "namespaces");
    let (code, body) = get(&s.app, "/apps?namespace=a", Some("t-alice")).await;
    assert_eq!(
        (code, names(&body)),
        (StatusCode::OK, vec!["a/w".into(), "a/x".into()])
    );
    assert_code(&s.app, "/apps/a/x", "t-alice", StatusCode::OK).await;
    let (code, body) = get(&s.app, "/apps/b/y", Some("t-alice")).await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    assert_code(&s.app, "/apps/a/gone", "t-alice", StatusCode::NOT_FOUND).await;
    assert_code(
        &s.app,
        "/apps?namespace=b",
        "t-alice",
        StatusCode::FORBIDDEN,
    )
    .await;
    // A cluster-wide reader gets everything, unfiltered.
    let (code, headers, body) = get_full(&s.app, "/apps", Some("t-admin")).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(names(&body), ["a/w", "a/x", "b/y", "c/z"]);
    assert!(headers.get(FILTERED_HEADER).is_none());
}

/// Read NDJSON lines until `n` are in or the body ends; `(lines, ended)`.
async fn lines(body: &mut Body, n: usize) -> (Vec<Value>, bool) {
    let mut buf = String::new();
    while buf.lines().count() < n {
        match body.frame().await {
            Some(frame) => {
                buf.push_str(std::str::from_utf8(frame.unwrap().data_ref().unwrap()).unwrap())
            }
            None => return (parse(&buf), true),
        }
    }
    (parse(&buf), false)
}

fn parse(buf: &str) -> Vec<Value> {
    buf.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn a_watch_is_cut_off_once_access_is_revoked_and_the_cache_expires() {
    let fake = fake().await;
    let ttl = Duration::from_millis(200);
    let s = setup(fake.client(), ttl, (8, 8));
    let resp = s
        .app
        .clone()
        .oneshot(request("/apps/watch?namespace=a", Some("t-alice")))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let (opening, _) = lines(&mut body, 2).await;
    assert!(
        opening.iter().all(|e| e["type"] == "CREATED"),
        "{opening:?}"
    );
    // Still allowed across several re-checks: the stream stays open and keeps delivering.
    tokio::time::sleep(3 * ttl).await;
    s.hub.upsert(AppRecord {
        status: AppStatus {
            phase: Phase::Stopped,
            ..record("a", "x").status
        },
        ..record("a", "x")
    });
    let (update, ended) = lines(&mut body, 1).await;
    assert!(!ended);
    assert_eq!(update[0]["type"], "UPDATED");

    fake.revoke("alice", "watch", Some("a"));
    let (rest, ended) = lines(&mut body, 100).await;
    assert!(ended, "the stream ends");
    let last = rest.last().unwrap();
    assert_eq!(last["type"], "ERROR", "{rest:?}");
    assert_eq!(last["status"]["code"], 403);
    let message = last["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("`watch` on services.serving.knative.dev in namespace `a`"),
        "{message}"
    );
    assert_eq!(s.metrics.watch_cut.get(), 1);
    assert_eq!(s.metrics.watch_streams.get(), 0, "the slot is freed");
}

#[tokio::test]
async fn the_api_server_down_is_503_never_open() {
    // A port nothing listens on any more.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let uri: axum::http::Uri = format!("http://{addr}").parse().unwrap();
    let client = kube::Client::try_from(kube::Config::new(uri)).unwrap();
    let s = setup(client, Duration::from_secs(10), (8, 8));
    for uri in ["/apps", "/apps/a/x", "/apps/watch"] {
        let (code, headers, body) = get_full(&s.app, uri, Some("t-alice")).await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{uri}: {body}");
        assert_eq!(headers["retry-after"], "5");
        let error = body["error"].as_str().unwrap();
        assert!(error.contains("cannot check access"), "{body}");
    }

    // An API server that answers errors: 503 as well, and the error is not cached.
    let fake = fake().await;
    let s = setup(fake.client(), Duration::from_secs(10), (8, 8));
    fake.fail_requests(Method::POST, "subjectaccessreviews", 1);
    assert_code(
        &s.app,
        "/apps/a/x",
        "t-alice",
        StatusCode::SERVICE_UNAVAILABLE,
    )
    .await;
    assert_code(&s.app, "/apps/a/x", "t-alice", StatusCode::OK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_bounds_reviews_under_a_burst_of_1000_requests() {
    let fake = fake().await;
    let s = setup(fake.client(), Duration::from_secs(60), (8, 8));
    let burst = (0..1000).map(|i| {
        let uri = if i % 2 == 0 { "/apps/a/x" } else { "/apps" };
        s.app.clone().oneshot(request(uri, Some("t-alice")))
    });
    let answers = futures::future::join_all(burst).await;
    assert!(
        answers
            .iter()
            .all(|r| r.as_ref().unwrap().status() == StatusCode::OK)
    );
    assert_eq!(
        reviews(&fake, "tokenreviews"),
        1,
        "one TokenReview for one token"
    );
    // get a/x; list cluster-wide (denied), then list in each of the 3 namespaces with apps.
    assert_eq!(reviews(&fake, "subjectaccessreviews"), 5);
    let sent = |kind, result| {
        s.metrics
            .reviews
            .get_or_create(&vec![("kind", kind), ("result", result)])
            .get()
    };
    assert_eq!(
        (
            sent("token", "allowed"),
            sent("access", "allowed"),
            sent("access", "denied")
        ),
        (1, 2, 3)
    );
}

#[tokio::test]
async fn the_stream_beyond_the_limits_gets_429() {
    let fake = fake().await;
    fake.add_token("t-bob", "bob", &[]);
    fake.add_token("t-carol", "carol", &[]);
    fake.grant("bob", "watch", None);
    fake.grant("carol", "watch", None);
    let s = setup(fake.client(), Duration::from_secs(10), (3, 2));
    let open = |token: &'static str| s.app.clone().oneshot(request("/apps/watch", Some(token)));
    let first = open("t-admin").await.unwrap();
    let second = open("t-admin").await.unwrap();
    assert_eq!(
        (first.status(), second.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    let third = open("t-admin").await.unwrap();
    assert_eq!(
        third.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "per caller: 2"
    );
    assert_eq!(third.headers()["retry-after"], "5");
    let bob = open("t-bob").await.unwrap();
    assert_eq!(bob.status(), StatusCode::OK);
    let carol = open("t-carol").await.unwrap();
    assert_eq!(carol.status(), StatusCode::TOO_MANY_REQUESTS, "overall: 3");
    let body = carol.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("maximum of 3"));
    assert_eq!(s.metrics.watch_streams.get(), 3);
    let rejected = |limit| {
        s.metrics
            .watch_rejected
            .get_or_create(&vec![("limit", limit)])
            .get()
    };
    assert_eq!((rejected("per_caller"), rejected("total")), (1, 1));
    drop(first);
    assert_eq!(
        open("t-carol").await.unwrap().status(),
        StatusCode::OK,
        "a closed stream frees its place"
    );
}

#[derive(clap::Parser)]
struct Flags {
    #[command(flatten)]
    client: ksvc_webhook::cluster::client::ClientArgs,
    #[command(flatten)]
    lease: ksvc_webhook::cluster::election::LeaseArgs,
    #[command(flatten)]
    watch: ksvc_webhook::watch::args::WatchArgs,
    #[command(flatten)]
    status: ksvc_webhook::apps::args::StatusApiArgs,
}

#[tokio::test]
async fn serve_wires_the_guard_by_default_and_drops_it_with_status_auth_false() {
    use clap::Parser;
    let flags = |extra: &[&str]| {
        let base = ["x", "--no-watch", "--kubeconfig", "/nonexistent/kubeconfig"];
        Flags::try_parse_from(base.iter().chain(extra)).unwrap()
    };
    let guarded = flags(&[]);
    let handle = ksvc_webhook::watch::spawn(
        &guarded.watch,
        &guarded.client,
        &ksvc_webhook::cluster::election::Election::new(&guarded.lease),
        Default::default(),
    );
    handle
        .synced
        .store(true, std::sync::atomic::Ordering::Release);
    let metrics = ksvc_webhook::apps::metrics::StatusMetrics::default();
    let app = ksvc_webhook::apps::router(&handle, &metrics, &guarded.client, &guarded.status);
    assert_eq!(get(&app, "/apps", None).await.0, StatusCode::UNAUTHORIZED);
    // No cluster to ask (the kubeconfig does not exist): 503, never open.
    let (code, body) = get(&app, "/apps", Some("t")).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("cannot check access"), "{body}");

    let open = flags(&["--status-auth=false"]);
    let metrics = ksvc_webhook::apps::metrics::StatusMetrics::default();
    let app = ksvc_webhook::apps::router(&handle, &metrics, &open.client, &open.status);
    assert_eq!(
        get(&app, "/apps", None).await,
        (StatusCode::OK, serde_json::json!([]))
    );
}
