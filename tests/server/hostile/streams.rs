//! HTTP/2 streams per address: one address opens four connections of eight streams each, 32
//! uploads of 256 KiB that keep arriving a byte at a time (never the last), against
//! `--max-connections-per-ip=16`. An address may have as many requests open as connections, over
//! all its connections: the 16 streams beyond are answered 503 at once, before any of the others
//! is cut with 408 when its pace runs out, and kube-apiserver's reviews are answered meanwhile.

use std::time::Duration;

use hyper::StatusCode;

use super::attack;
use super::served::{DEPLOYMENT_H2, Served};
use ksvc_webhook::server::budget::SMALL_BODY;

/// The address's share of open requests, `--max-connections-per-ip` of [`DEPLOYMENT_H2`].
const SHARE: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_has_no_more_streams_open_than_its_share_over_all_its_connections() {
    let (served, _) = Served::warmed(DEPLOYMENT_H2, None).await;
    let mut conns = Vec::new();
    for _ in 0..4 {
        let mut conn = served
            .connect(Some(attack::attacker(0)), &[b"h2"])
            .await
            .unwrap();
        // One answer first: then the client knows the server's 8 streams at once.
        assert_eq!(conn.get("/healthz").await.0, StatusCode::OK);
        conns.push(conn);
    }
    let streams: Vec<_> = (0..32)
        .map(|i| {
            let stream = conns[i % 4].stream();
            let drip = Some(Duration::from_millis(200));
            tokio::spawn(attack::dripping(stream, SMALL_BODY, drip))
        })
        .collect();
    for i in 0..5 {
        let took = attack::one_review(&mut served.h1().await, &format!("kube-{i}")).await;
        assert!(took.is_some(), "a review failed beside the streams");
    }
    let mut ended = Vec::new();
    for stream in streams {
        ended.push(stream.await.unwrap());
    }
    println!(
        "32 streams from one address, share {SHARE}: {:?}",
        attack::tally(&ended)
    );
    let with = |status: StatusCode| ended.iter().filter(move |e| e.status == Some(status));
    let refused = with(StatusCode::SERVICE_UNAVAILABLE).count();
    let cut = with(StatusCode::REQUEST_TIMEOUT).count();
    assert_eq!((refused, cut), (SHARE, SHARE), "{ended:?}");
    // Refused at once: before any of the held ones ended.
    let last_refused = with(StatusCode::SERVICE_UNAVAILABLE).map(|e| e.after).max();
    let first_cut = with(StatusCode::REQUEST_TIMEOUT).map(|e| e.after).min();
    assert!(last_refused < first_cut, "{ended:?}");
}
