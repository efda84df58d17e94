//! What an open connection costs: many connections, each having sent a request and now idle,
//! raise the resident memory by no more than the arithmetic's per-connection term. Prints the
//! measured cost, which docs/reliability.md reports.

use std::net::IpAddr;

use hyper::StatusCode;
use ksvc_webhook::server::memory::per_connection;

use super::served::{Served, mib};

/// Connections opened; spread over addresses to stay under the per-address share.
const CONNECTIONS: usize = 200;

async fn cost(http2: bool) {
    let args: &[&str] = if http2 { &["--http2"] } else { &[] };
    let served = Served::start(args, None);
    let alpn: &[&[u8]] = if http2 { &[b"h2"] } else { &[b"http/1.1"] };
    let mut warm = served.connect(None, alpn).await.unwrap();
    assert_eq!(warm.get("/healthz").await.0, StatusCode::OK);
    let before = served.memory("VmRSS");
    let mut open = Vec::new();
    for i in 0..CONNECTIONS {
        let from = IpAddr::from([127, 0, 1, u8::try_from(i % 8).unwrap() + 1]);
        let mut conn = served.connect(Some(from), alpn).await.unwrap();
        assert_eq!(conn.get("/healthz").await.0, StatusCode::OK);
        open.push(conn);
    }
    let after = served.memory("VmRSS");
    let each = after.saturating_sub(before) / CONNECTIONS as u64;
    let bound = per_connection(http2, true);
    println!(
        "{} connections ({}): RSS {:.1} → {:.1} MiB, {:.1} KiB each, arithmetic {:.0} KiB",
        CONNECTIONS,
        if http2 { "HTTP/2" } else { "HTTP/1.1" },
        mib(before),
        mib(after),
        each as f64 / 1024.0,
        bound as f64 / 1024.0
    );
    assert!(
        each <= bound,
        "{each} bytes per connection, arithmetic {bound}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_connection_costs_at_most_the_arithmetic() {
    cost(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_connection_costs_at_most_the_arithmetic() {
    cost(true).await;
}
