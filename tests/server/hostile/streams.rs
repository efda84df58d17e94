//! HTTP/2 streams per address: one address opens four connections of eight streams each, 32
//! requests whose bodies never start, against `--max-connections-per-ip=16`. An address may
//! have as many requests open as connections, over all its connections: the 16 streams beyond
//! are answered 503 at once, the others are cut with 408 once their body has not started for a
//! second, and kube-apiserver's reviews are answered meanwhile.

use std::time::{Duration, Instant};

use hyper::StatusCode;

use super::attack;
use super::served::{DEPLOYMENT_H2, Served};
use ksvc_webhook::server::budget::SMALL_BODY;
use ksvc_webhook::server::routes::FIRST_BYTE;

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
            let mut stream = conns[i % 4].stream();
            tokio::spawn(async move {
                let started = Instant::now();
                let status = attack::headers_only(&mut stream, SMALL_BODY).await;
                (status, started.elapsed())
            })
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
    println!("32 streams from one address, share {SHARE}: {ended:?}");
    let refused: Vec<_> = ended
        .iter()
        .filter(|(s, _)| *s == Some(StatusCode::SERVICE_UNAVAILABLE))
        .collect();
    let cut = ended
        .iter()
        .filter(|(s, _)| *s == Some(StatusCode::REQUEST_TIMEOUT))
        .count();
    assert_eq!((refused.len(), cut), (SHARE, SHARE), "{ended:?}");
    // Refused at once, not after waiting for a body.
    for (_, after) in refused {
        assert!(
            *after < FIRST_BYTE + Duration::from_millis(500),
            "{ended:?}"
        );
    }
}
