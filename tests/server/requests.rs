//! Requests on a steady server: keep-alive, HTTP/2, bad requests, probes and extension points.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::routing::get;
use hyper::StatusCode;
use ksvc_webhook::server::routes::BODY_LIMIT;
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::harness::{self, full, mutate_request, review};

#[tokio::test]
async fn keep_alive_serves_many_sequential_reviews_on_one_connection() {
    let server = harness::start(|_| {}, |_| {}).await;
    let mut conn = harness::h1(&server).await;
    assert!(!conn.h2);
    for i in 0..200 {
        let uid = format!("uid-{i}");
        let sent = review(&uid, 100);
        let (status, body) = conn.review(sent.clone()).await.unwrap();
        harness::assert_answer(&uid, &sent, status, &body);
    }
    assert_eq!(conn.get("/healthz").await.0, StatusCode::OK);
    let allowed = r#"ksvc_webhook_admission_requests_total{operation="CREATE",result="allowed"} "#;
    let count = harness::metric(&server, allowed).await;
    assert!(count.unwrap_or_default() >= 200.0, "{count:?}");
}

#[tokio::test]
async fn http2_only_when_enabled() {
    let both: &[&[u8]] = &[b"h2", b"http/1.1"];
    let off = harness::start(|_| {}, |_| {}).await;
    let conn = harness::connect(off.addr, &off.pki.ca.cert_pem, both)
        .await
        .unwrap();
    assert!(!conn.h2, "h2 negotiated although disabled");

    let on = harness::start(|o| o.http2 = true, |_| {}).await;
    let mut conn = harness::connect(on.addr, &on.pki.ca.cert_pem, both)
        .await
        .unwrap();
    assert!(conn.h2, "h2 not negotiated although enabled");
    // Concurrent streams, more than one connection may carry at once: the rest wait their turn
    // (once the client knows the server's settings, after the first answer; a client that
    // opens more at once gets REFUSED_STREAM for the rest, safe to retry).
    let (status, _) = conn.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    let streams = (0..20).map(|i| {
        let mut stream = conn.stream();
        tokio::spawn(async move {
            let uid = format!("h2-{i}");
            let sent = review(&uid, 100);
            let (status, body) = stream.review(sent.clone()).await.unwrap();
            harness::assert_answer(&uid, &sent, status, &body);
        })
    });
    for stream in streams.collect::<Vec<_>>() {
        stream.await.unwrap();
    }
}

#[tokio::test]
async fn bad_requests_get_413_415_and_400_with_json_errors() {
    let server = harness::start(|_| {}, |_| {}).await;
    let mut conn = harness::h1(&server).await;
    let cases: Vec<(&str, Vec<u8>, StatusCode)> = vec![
        (
            "application/json",
            b"not json".to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        ("application/json", b"{}".to_vec(), StatusCode::BAD_REQUEST),
        (
            "application/json",
            vec![b' '; BODY_LIMIT],
            StatusCode::BAD_REQUEST,
        ),
        (
            "text/plain",
            review("u", 10),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        ("", review("u", 10), StatusCode::UNSUPPORTED_MEDIA_TYPE),
        (
            "application/json; charset=utf-8",
            review("u", 10),
            StatusCode::OK,
        ),
    ];
    for (content_type, body, want) in cases {
        let (status, answer) = conn
            .send(mutate_request(content_type, full(body)))
            .await
            .unwrap();
        assert_eq!(status, want, "{content_type}");
        let json: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        if want != StatusCode::OK {
            assert!(
                json["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{json}"
            );
        }
    }
    // Over the limit: 413 (the server may close this connection, so use a fresh one).
    let mut conn = harness::h1(&server).await;
    let big = vec![b' '; BODY_LIMIT + 1];
    let (status, answer) = conn
        .send(mutate_request("application/json", full(big)))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let json: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert!(json["error"].as_str().is_some());
    // The server is still fine.
    let sent = review("after", 10);
    let (status, body) = harness::h1(&server)
        .await
        .review(sent.clone())
        .await
        .unwrap();
    harness::assert_answer("after", &sent, status, &body);
}

#[tokio::test]
async fn probes_metrics_and_extension_points() {
    let mut gate = None;
    let counter = Counter::<u64>::default();
    let server = harness::start(
        |o| o.metrics_listen = Some("127.0.0.1:0".parse().unwrap()),
        |s| {
            s.merge_routes(axum::Router::new().route("/apps", get(|| async { "apps" })));
            gate = Some(s.readiness().gate("watch-cache"));
            s.registry_mut()
                .register("extra_things", "A component's metric", counter.clone());
            let policy = s.policy();
            policy.store(std::sync::Arc::new(policy.load().as_ref().clone()));
        },
    )
    .await;
    let gate = gate.unwrap();
    counter.inc();
    let mut conn = harness::h1(&server).await;
    assert_eq!(conn.get("/healthz").await.0, StatusCode::OK);
    let (status, text) = conn.get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(text.contains("watch-cache"), "{text}");
    gate.store(true, Ordering::SeqCst);
    assert_eq!(conn.get("/readyz").await.0, StatusCode::OK);
    assert_eq!(conn.get("/apps").await, (StatusCode::OK, "apps".into()));
    let (_, metrics) = conn.get("/metrics").await;
    assert!(metrics.contains("extra_things_total 1"), "{metrics}");
    assert!(metrics.contains("ksvc_webhook_certificate_expiry_timestamp_seconds"));

    // The plain listener: probes and metrics, as its --help says; no admission, no extra
    // routes (the status API is served over TLS only).
    let plain = server.metrics_addr.unwrap();
    for (path, want) in [
        ("/healthz", 200),
        ("/readyz", 200),
        ("/metrics", 200),
        ("/apps", 404),
    ] {
        assert_eq!(plain_get(plain, "GET", path).await, want, "{path}");
    }
    assert_eq!(plain_get(plain, "POST", "/mutate").await, 404);
}

/// Status code of a plain-HTTP/1.1 request (no body) to `addr`.
async fn plain_get(addr: std::net::SocketAddr, method: &str, path: &str) -> u16 {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    answer[9..12].parse().unwrap()
}

#[tokio::test]
async fn slow_clients_are_cut_off() {
    let server = harness::start(
        |o| o.header_read_timeout = Duration::from_millis(200),
        |_| {},
    )
    .await;
    // No TLS handshake at all.
    let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(30), tcp.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "{read:?}");
    // A handshake, then headers that never end.
    let connector = tokio_rustls::TlsConnector::from(harness::client_config(
        &server.pki.ca.cert_pem,
        &[b"http/1.1"],
    ));
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(harness::SERVER_NAME).unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    tls.write_all(b"POST /mutate HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    // The server closes the connection (a hang would mean no cut-off; 30 s is only a bound).
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), tls.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "connection still open");
    assert!(!String::from_utf8_lossy(&answer).contains("200 OK"));
}
