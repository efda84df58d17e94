//! What one client may make the server hold (issue 19): a body the byte budget cannot take is
//! refused at once with 503 and `Retry-After` while small reviews still pass, and a newcomer to
//! a full listener takes the place of a connection waiting on its client, or is refused when
//! every connection is busy; both are counted.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::channel::Sender;
use http_body_util::{BodyExt, Channel};
use hyper::StatusCode;
use ksvc_webhook::server::routes::BODY_LIMIT;

use axum::Router;
use axum::routing::get;
use support::harness::{self, Running, SERVER_NAME, review};

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
    // One large body held: 5 MiB sent at once, the rest slowly, so it is never cut for
    // another (it holds its whole declared length after the first 4 MiB).
    let mut holder = harness::h1(&server).await;
    let (tx, request) = declared(BODY_LIMIT);
    let feeder = tokio::spawn(feed(tx, 5 << 20));
    let held = tokio::spawn(async move { holder.send(request).await });
    let s = &server;
    let reserved = "ksvc_webhook_admission_body_bytes ";
    let held_all = || async { value(s, reserved).await == Some(BODY_LIMIT as f64) };
    assert!(harness::eventually(500, held_all).await);

    // A second one does not fit: refused as soon as its bytes pass what is left (5 MiB).
    let request = hyper::Request::post("/mutate")
        .header("host", SERVER_NAME)
        .header("content-type", "application/json")
        .body(harness::full(vec![b' '; BODY_LIMIT]))
        .unwrap();
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
    feeder.abort();
    held.abort();
}

/// Send `fast` bytes of body at once, then 64 KiB every 200 ms: slow, never paused, and all but
/// the last byte of a 7 MiB body.
async fn feed(mut tx: Sender<Bytes>, fast: usize) {
    let chunk = Bytes::from(vec![b' '; 64 * 1024]);
    for i in 0..(BODY_LIMIT / chunk.len() - 1) {
        tx.send_data(chunk.clone()).await.unwrap();
        if i * chunk.len() >= fast {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    std::future::pending::<()>().await;
}

/// The `/metrics` line starting with `prefix`, from the plain listener (the TLS one may be
/// full).
async fn plain_value(server: &Running, prefix: &str) -> Option<f64> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut tcp = tokio::net::TcpStream::connect(server.metrics_addr?)
        .await
        .ok()?;
    let request = b"GET /metrics HTTP/1.1\r\nhost: m\r\nconnection: close\r\n\r\n";
    tcp.write_all(request).await.ok()?;
    let mut text = String::new();
    tcp.read_to_string(&mut text).await.ok()?;
    let line = text.lines().find(|l| l.starts_with(prefix))?;
    line.rsplit(' ').next()?.parse().ok()
}

#[tokio::test]
async fn a_full_listener_closes_a_waiting_connection_and_refuses_only_when_all_are_busy() {
    let server = harness::start(
        |o| {
            o.limits.max_connections = 4;
            o.limits.max_connections_per_ip = 2;
            o.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        },
        // A request the server works on for ever: its connection is busy.
        |s| s.merge_routes(Router::new().route("/hold", get(std::future::pending::<()>))),
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
    let healthz = || {
        hyper::Request::get("/healthz")
            .header("host", SERVER_NAME)
            .body(harness::full(Vec::new()))
            .unwrap()
    };
    // A third from address 1 takes the place of its own idle connection that waited longest;
    // one from a new address that of the longest waiting of the heaviest (both hold two now):
    // address 1's second.
    let mut third = open(1).await.unwrap();
    assert_eq!(third.get("/healthz").await.0, StatusCode::OK);
    let mut newcomer = open(3).await.unwrap();
    assert_eq!(newcomer.get("/healthz").await.0, StatusCode::OK);
    assert!(held[0].send(healthz()).await.is_err(), "not closed");
    assert!(held[1].send(healthz()).await.is_err(), "not closed");
    // Every connection busy: newcomers are refused, during the handshake.
    let mut busy: Vec<_> = held.drain(2..).collect();
    busy.extend([third, newcomer]);
    let working: Vec<_> = busy
        .into_iter()
        .map(|mut conn| {
            tokio::spawn(async move {
                let request = hyper::Request::get("/hold")
                    .header("host", SERVER_NAME)
                    .body(harness::full(Vec::new()))
                    .unwrap();
                conn.send(request).await
            })
        })
        .collect();
    let s = &server;
    let refused = r#"ksvc_webhook_connections_refused_total{listener="admission",reason="#;
    let busy_now = || async {
        plain_value(s, "ksvc_webhook_connections{listener=\"admission\"}").await == Some(4.0)
    };
    assert!(harness::eventually(200, busy_now).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(open(5).await.is_err(), "over the listener's cap");
    assert!(open(2).await.is_err(), "over the per-address share");
    for reason in ["evicted", "max_connections", "max_connections_per_ip"] {
        let line = format!("{refused}\"{reason}\"}}");
        let n = plain_value(s, &line).await;
        assert!(n.is_some_and(|n| n >= 1.0), "{line}: {n:?}");
    }
    // A connection that ends frees its place.
    for task in working {
        task.abort();
    }
    let reopened = harness::eventually(200, || async { open(5).await.is_ok() }).await;
    assert!(reopened, "the freed place was never given again");
}

/// Send a `/mutate` request declaring `declared` bytes and then `sent` bytes of body in full,
/// without `Expect: 100-continue`, before reading anything, as Python's `http.client` does;
/// then read the answer's status code (`Err`: the client saw a reset or a closed connection).
async fn send_then_read(server: &Running, declared: usize, sent: usize) -> std::io::Result<u16> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let config = harness::client_config(&server.pki.ca.cert_pem, &[b"http/1.1"]);
    let tcp = tokio::net::TcpStream::connect(server.addr).await?;
    let name = rustls::pki_types::ServerName::try_from(SERVER_NAME).unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await?;
    let head = format!(
        "POST /mutate HTTP/1.1\r\nhost: {SERVER_NAME}\r\ncontent-type: application/json\r\n\
         content-length: {declared}\r\n\r\n"
    );
    tls.write_all(head.as_bytes()).await?;
    let chunk = vec![b' '; 64 * 1024];
    let mut left = sent;
    while left > 0 {
        let n = left.min(chunk.len());
        tls.write_all(&chunk[..n]).await?;
        left -= n;
    }
    tls.flush().await?;
    let mut answer = Vec::new();
    tls.read_to_end(&mut answer).await?;
    let status = answer.get(9..12).and_then(|s| std::str::from_utf8(s).ok());
    status
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(String::from_utf8_lossy(&answer).into_owned()))
}

/// Issue 33, item 2: an answer sent before the body is read whole (413 for a body over the
/// limit, 503 when the budget is full) reaches a client that sends its whole body before it
/// reads, as Go's and Python's do: the server shuts its side and reads what still comes for a
/// moment instead of closing at once, which the client would read as a reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_answer_reaches_a_client_that_sends_its_whole_body_first() {
    // 8 MiB of budget, none of it reserved: one body of 7 MiB fills it.
    let server = harness::start(
        |o| {
            o.limits.body_budget = 8 << 20;
            o.limits.small_body_reserve = 0;
            o.limits.request_timeout = Duration::from_secs(60);
        },
        |_| {},
    )
    .await;
    let mut tally = std::collections::BTreeMap::new();
    for _ in 0..20 {
        let status = send_then_read(&server, 8 << 20, 8 << 20).await;
        *tally.entry(format!("{status:?}")).or_insert(0) += 1;
    }
    assert_eq!(tally.get("Ok(413)"), Some(&20), "{tally:?}");

    // A body kept arriving, slowly, holds the budget: it is never cut for a newcomer.
    let mut holder = harness::h1(&server).await;
    let (tx, request) = declared(BODY_LIMIT);
    let feeder = tokio::spawn(feed(tx, 9 << 19));
    let held = tokio::spawn(async move { holder.send(request).await });
    let s = &server;
    let reserved = "ksvc_webhook_admission_body_bytes ";
    let held_all = || async { value(s, reserved).await == Some(BODY_LIMIT as f64) };
    assert!(harness::eventually(500, held_all).await);
    let mut tally = std::collections::BTreeMap::new();
    for _ in 0..20 {
        let status = send_then_read(&server, BODY_LIMIT, BODY_LIMIT).await;
        *tally.entry(format!("{status:?}")).or_insert(0) += 1;
    }
    assert!(
        !feeder.is_finished(),
        "the holder finished before the newcomers did"
    );
    assert_eq!(tally.get("Ok(503)"), Some(&20), "{tally:?}");
    feeder.abort();
    held.abort();
}
