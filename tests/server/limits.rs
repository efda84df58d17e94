//! What one client may make the server hold: a body the byte budget cannot take is
//! refused at once with 503 and `Retry-After` while small reviews still pass, and connections
//! over the listener's caps are closed at once and counted.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::channel::Sender;
use http_body_util::{BodyExt, Channel};
use hyper::StatusCode;
use ksvc_webhook::server::routes::BODY_LIMIT;

use support::harness::{self, Running, SERVER_NAME, review};
use support::poll;

/// A `/mutate` request declaring a `size`-byte body, and the sender of that body.
fn declared(size: usize) -> (Sender<Bytes>, hyper::Request<harness::Body>) {
    let (tx, body) = Channel::<Bytes, std::convert::Infallible>::new(2);
    let request = hyper::Request::post("/mutate")
        .header("host", SERVER_NAME)
        .header("content-type", "application/json")
        .header("content-length", size)
        .body(body.boxed())
        .unwrap();
    (tx, request)
}

/// The value of the `/metrics` line starting with `prefix` (`None` while no connection can be
/// opened).
async fn value(server: &Running, prefix: &str) -> Option<f64> {
    let ca = &server.pki.ca.cert_pem;
    let mut conn = harness::connect(server.addr, ca, &[b"http/1.1"])
        .await
        .ok()?;
    let (_, text) = conn.get("/metrics").await;
    let line = text.lines().find(|l| l.starts_with(prefix))?;
    line.rsplit(' ').next()?.parse().ok()
}

#[tokio::test]
async fn a_body_over_the_budget_gets_503_at_once_and_small_reviews_still_pass() {
    // 12 MiB for large bodies, 4 MiB kept for small ones.
    let server = harness::start(
        |o| {
            o.limits.body_budget = 16 << 20;
            o.limits.small_body_reserve = 4 << 20;
            o.limits.request_timeout = Duration::from_secs(60);
        },
        |_| {},
    )
    .await;
    // One large body held, half sent.
    let mut holder = harness::h1(&server).await;
    let (mut tx, request) = declared(BODY_LIMIT);
    tx.send_data(Bytes::from(vec![b' '; 1 << 20]))
        .await
        .unwrap();
    let held = tokio::spawn(async move { holder.send(request).await });
    let s = &server;
    let reserved = "ksvc_webhook_admission_body_bytes ";
    let held_all = || async { value(s, reserved).await == Some(BODY_LIMIT as f64) };
    poll::until_async(
        "the first body holds the whole budget",
        poll::LIMIT,
        held_all,
    )
    .await;

    // A second one does not fit: refused before anything of it is read.
    let (_tx, request) = declared(BODY_LIMIT);
    let started = Instant::now();
    let (status, headers, body) = harness::h1(&server).await.exchange(request).await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body:?}");
    assert_eq!(headers["retry-after"], "1");
    assert!(started.elapsed() < Duration::from_secs(5));
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(
        answer["error"].as_str().unwrap().contains("retry"),
        "{answer}"
    );
    // kube-apiserver's reviews are small: they take the reserve.
    let mut kube = harness::h1(&server).await;
    for i in 0..5 {
        let uid = format!("small-{i}");
        let sent = review(&uid, 20_000);
        let (status, body) = kube.review(sent.clone()).await.unwrap();
        harness::assert_answer(&uid, &sent, status, &body);
    }
    let refused =
        r#"ksvc_webhook_admission_requests_total{operation="unknown",result="over_budget"}"#;
    assert_eq!(value(&server, refused).await, Some(1.0));
    drop(tx);
    drop(held);
}

#[tokio::test]
async fn connections_over_the_caps_are_closed_at_once_and_counted() {
    let server = harness::start(
        |o| {
            o.limits.max_connections = 4;
            o.limits.max_connections_per_ip = 2;
        },
        |_| {},
    )
    .await;
    let ca = server.pki.ca.cert_pem.clone();
    let from = |last: u8| Some(IpAddr::from([127, 0, 0, last]));
    let open = |last: u8| harness::connect_from(from(last), server.addr, &ca, &[b"http/1.1"]);
    let mut held = Vec::new();
    for last in [1, 1, 2, 2] {
        let mut conn = open(last).await.unwrap();
        assert_eq!(conn.get("/healthz").await.0, StatusCode::OK);
        held.push(conn);
    }
    // A third from one address, then any from a new one: closed during the handshake.
    assert!(open(1).await.is_err(), "over the per-address share");
    assert!(open(3).await.is_err(), "over the listener's cap");
    // A closed connection frees its place.
    held.truncate(3);
    let reopened = || async { open(3).await.is_ok() };
    poll::until_async("the freed place is given again", poll::LIMIT, reopened).await;
    drop(held);
    // One refusal per address share; one or more at the cap (the retries above, until the
    // server saw the close).
    let s = &server;
    let refused = r#"ksvc_webhook_connections_refused_total{listener="admission",reason="#;
    let per_ip = format!("{refused}\"max_connections_per_ip\"}}");
    let full = format!("{refused}\"max_connections\"}}");
    let counted = || async {
        value(s, &per_ip).await == Some(1.0) && value(s, &full).await.is_some_and(|n| n >= 1.0)
    };
    poll::until_async("both refusals are counted", poll::LIMIT, counted).await;
}
