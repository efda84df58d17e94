//! `--metrics-auth`: `/metrics` of a real server (plain listener, real sockets) needs a bearer
//! token allowed `get` on the non-resource URL /metrics, as Prometheus scrapes behind
//! kube-rbac-proxy; the probes and `/mutate` stay as they were.
// Test helpers outside #[test] fns panic on a failed setup step, as the tests would.
#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use ksvc_webhook::apps::auth::{ClientSource, MetricsAccess, Reviewer, Settings};
use ksvc_webhook::apps::metrics::StatusMetrics;
use support::FakeApi;
use support::harness;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Status line code and body of a plain GET with an optional bearer token.
async fn get(addr: std::net::SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    let head = format!("GET {path} HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n");
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    let body = answer.split_once("\r\n\r\n").unwrap().1.to_owned();
    (answer[9..12].parse().unwrap(), body)
}

#[tokio::test]
async fn metrics_need_a_token_allowed_to_get_the_metrics_url() {
    let fake = FakeApi::start().await;
    fake.add_token(
        "t-prometheus",
        "system:serviceaccount:monitoring:prometheus",
        &[],
    );
    fake.add_token("t-alice", "alice", &[]);
    fake.grant_path("system:serviceaccount:monitoring:prometheus", "/metrics");
    let settings = Settings {
        ttl: Duration::from_secs(10),
        cache_size: 16,
        timeout: Duration::from_secs(2),
        ..Settings::default()
    };
    let reviewer = Reviewer::new(
        ClientSource::Ready(fake.client()),
        settings,
        StatusMetrics::default(),
    );
    let guard = Arc::new(MetricsAccess::new(Arc::new(reviewer)));
    let server = harness::start(
        |o| o.metrics_listen = Some("127.0.0.1:0".parse().unwrap()),
        |s| s.guard_metrics(guard),
    )
    .await;
    let plain = server.metrics_addr.unwrap();

    let (code, body) = get(plain, "/metrics", None).await;
    assert_eq!(code, 401, "{body}");
    let (code, body) = get(plain, "/metrics", Some("t-alice")).await;
    assert_eq!(code, 403);
    assert!(
        body.contains("`get` on the non-resource URL /metrics"),
        "{body}"
    );
    let (code, body) = get(plain, "/metrics", Some("t-prometheus")).await;
    assert_eq!(code, 200);
    assert!(body.contains("ksvc_webhook_admission"), "{body}");
    // The probes ask nobody.
    let reviews = fake.requests_to(Method::POST, "tokenreviews").len();
    assert_eq!(get(plain, "/healthz", None).await.0, 200);
    assert_eq!(
        fake.requests_to(Method::POST, "tokenreviews").len(),
        reviews
    );
    let sar = fake.requests_to(Method::POST, "subjectaccessreviews");
    let attrs = &sar.last().unwrap().body["spec"]["nonResourceAttributes"];
    assert_eq!(
        (attrs["path"].as_str(), attrs["verb"].as_str()),
        (Some("/metrics"), Some("get"))
    );
}
