//! An HTTP/2 client that never opens its receive window: it sends a review on a connection
//! whose streams start with a window of 0 and never sends WINDOW_UPDATE, so the answer's body
//! can never be sent. The answer waiting on the window is not activity, and it must be taken
//! within the write limit (`--request-timeout`) like a blocked socket write: the server drops
//! the connection then, and the answer's place in the byte budget is given back.

use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::StatusCode;

use super::served::Served;
use support::harness::{self, SERVER_NAME, review};
use support::poll;

/// Well past the write limit and the watchdog's check (header-read timeout), well before the
/// 120 s idle limit that alone closed such a connection before.
const WITHIN: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_waiting_on_a_shut_window_ends_its_connection_at_the_write_limit() {
    let args = [
        "--http2",
        "--request-timeout=2s",
        "--metrics-listen=127.0.0.1:0",
    ];
    let served = Served::start(&args, None);
    let config = harness::client_config(&served.pki.ca.cert_pem, &[b"h2"]);
    let tcp = tokio::net::TcpStream::connect(served.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(SERVER_NAME).unwrap();
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .unwrap();
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, Bytes>(tls)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let body = review("zero-window", 2_000);
    let request = hyper::Request::post(format!("https://{SERVER_NAME}/mutate?timeout=10s"))
        .header("content-type", "application/json")
        .header("content-length", body.len())
        .body(())
        .unwrap();
    let (answer, mut stream) = client.send_request(request, false).unwrap();
    stream.send_data(Bytes::from(body), true).unwrap();
    // The headers need no window; the body does, and never gets any.
    let answer = answer.await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let answered = Instant::now();
    let closed = tokio::time::timeout(WITHIN, connection).await;
    let after = answered.elapsed();
    println!("an answer on a shut window: connection closed {after:?} after its headers");
    assert!(
        closed.is_ok(),
        "the connection is still open after {WITHIN:?}"
    );
    let s = &served;
    let given_back = || async move {
        let held = s.metric("ksvc_webhook_admission_body_bytes ").await;
        held == Some(0.0)
    };
    poll::until_async("the answer's bytes are given back", poll::LIMIT, given_back).await;
}
