//! Certificate rotation (Secret-mount symlink swap), broken pairs, and graceful shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::routing::get;
use bytes::Bytes;
use http_body_util::{BodyExt, Channel};
use hyper::StatusCode;
use tokio::sync::Semaphore;

use support::harness::{self, Pki, mutate_request, review};

const TRIES: usize = 500;

#[tokio::test]
async fn rotation_by_symlink_swap_keeps_requests_flowing() {
    let mut server = harness::start(|_| {}, |_| {}).await;
    let old_der = server.pki.leaf_der();
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut clients = Vec::new();
    for client in 0..4 {
        let (addr, ca) = (server.addr, server.pki.ca.cert_pem.clone());
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        clients.push(tokio::spawn(async move {
            let mut keep_alive = harness::connect(addr, &ca, &[b"http/1.1"]).await.unwrap();
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let uid = format!("c{client}-{i}");
                let sent = review(&uid, 100);
                // Even clients reuse one connection, odd ones open a new one each time.
                let answer = match client % 2 {
                    0 => keep_alive.review(sent.clone()).await,
                    _ => match harness::connect(addr, &ca, &[b"http/1.1"]).await {
                        Ok(mut conn) => conn.review(sent.clone()).await,
                        Err(_) => {
                            failed.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                    },
                };
                match answer {
                    Ok((StatusCode::OK, body)) => {
                        harness::assert_answer(&uid, &sent, StatusCode::OK, &body);
                        ok.fetch_add(1, Ordering::SeqCst);
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }));
    }
    let before = ok.load(Ordering::SeqCst);
    assert!(harness::eventually(TRIES, || async { ok.load(Ordering::SeqCst) > before + 20 }).await);

    let new = server.pki.rotate();
    server.secret.swap(&new.leaf.cert_pem, &new.leaf.key_pem);
    let (addr, ca) = (server.addr, server.pki.ca.cert_pem.clone());
    let served_new = harness::eventually(TRIES, || async {
        let conn = harness::connect(addr, &ca, &[b"http/1.1"]).await.unwrap();
        conn.peer_cert == new.leaf_der()
    })
    .await;
    let after = ok.load(Ordering::SeqCst);
    assert!(harness::eventually(TRIES, || async { ok.load(Ordering::SeqCst) > after + 20 }).await);
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.await.unwrap();
    }
    assert!(served_new, "the rotated certificate was never served");
    assert_ne!(old_der, new.leaf_der());
    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "requests failed during rotation"
    );
    let reloads = harness::metric(
        &server,
        "ksvc_webhook_certificate_reloads_total{result=\"ok\"}",
    );
    assert_eq!(reloads.await, Some(1.0));
}

#[tokio::test]
async fn a_broken_pair_is_rejected_and_the_old_one_keeps_serving() {
    let mut server = harness::start(|_| {}, |_| {}).await;
    let old_der = server.pki.leaf_der();
    let (a, b) = (server.pki.rotate(), server.pki.rotate());
    // A certificate with someone else's key.
    server.secret.swap(&a.leaf.cert_pem, &b.leaf.key_pem);
    let errors = "ksvc_webhook_certificate_reloads_total{result=\"error\"}";
    let server_ref = &server;
    assert!(
        harness::eventually(TRIES, || async move {
            harness::metric(server_ref, errors).await == Some(1.0)
        })
        .await
    );
    let mut conn = harness::h1(&server).await;
    assert_eq!(
        conn.peer_cert, old_der,
        "the broken pair replaced the good one"
    );
    let sent = review("still-old", 10);
    let (status, body) = conn.review(sent.clone()).await.unwrap();
    harness::assert_answer("still-old", &sent, status, &body);
    // The error is counted once per change, not once per poll; a fixed pair is picked up.
    let fixed = Pki::rotate(&server.pki);
    server
        .secret
        .swap(&fixed.leaf.cert_pem, &fixed.leaf.key_pem);
    let (addr, ca) = (server.addr, server.pki.ca.cert_pem.clone());
    let served_fixed = harness::eventually(TRIES, || async {
        let conn = harness::connect(addr, &ca, &[b"http/1.1"]).await.unwrap();
        conn.peer_cert == fixed.leaf_der()
    })
    .await;
    assert!(served_fixed);
    assert_eq!(harness::metric(&server, errors).await, Some(1.0));
}

#[tokio::test]
async fn shutdown_fails_readiness_drains_and_finishes_requests_in_flight() {
    let arrived = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(Semaphore::new(0));
    let slow = {
        let (arrived, release) = (arrived.clone(), release.clone());
        get(move || async move {
            arrived.fetch_add(1, Ordering::SeqCst);
            let _permit = release.acquire().await;
            "done"
        })
    };
    let server = harness::start(
        |o| o.drain_period = Duration::from_secs(2),
        |s| s.merge_routes(axum::Router::new().route("/slow", slow)),
    )
    .await;

    // An admission request whose body is still arriving: whitespace (valid before JSON), at a
    // pace the server accepts (fast at first, then never pausing for 2 s), until `finish` says
    // to send the review itself.
    let mut partial = harness::h1(&server).await;
    let (mut tx, body) = Channel::<Bytes, std::convert::Infallible>::new(4);
    let sent = review("in-flight", 1000);
    let (finish, mut finished_sending) = tokio::sync::oneshot::channel::<()>();
    let feeder = tokio::spawn({
        let sent = sent.clone();
        async move {
            tx.send_data(Bytes::from(vec![b' '; 512 * 1024]))
                .await
                .unwrap();
            loop {
                tokio::select! {
                    _ = &mut finished_sending => break,
                    () = tokio::time::sleep(Duration::from_millis(300)) => {
                        tx.send_data(Bytes::from_static(b" ")).await.unwrap();
                    }
                }
            }
            tx.send_data(Bytes::from(sent)).await.unwrap();
        }
    });
    let admission = tokio::spawn(async move {
        partial
            .send(mutate_request("application/json", body.boxed()))
            .await
    });
    // Slow requests the server is in the middle of answering.
    let mut slow = Vec::new();
    for _ in 0..4 {
        let mut conn = harness::h1(&server).await;
        slow.push(tokio::spawn(async move { conn.get("/slow").await }));
    }
    assert!(harness::eventually(TRIES, || async { arrived.load(Ordering::SeqCst) == 4 }).await);
    let mut idle = harness::h1(&server).await;
    assert_eq!(idle.get("/readyz").await.0, StatusCode::OK);

    server.shutdown.trigger();
    // Readiness fails at once, yet requests are still answered during the drain.
    let (status, text) = idle.get("/readyz").await;
    assert_eq!(
        (status, text.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    );
    let sent_during = review("during-drain", 10);
    let (status, body) = idle.review(sent_during.clone()).await.unwrap();
    harness::assert_answer("during-drain", &sent_during, status, &body);

    // After the drain the listener closes; the requests in flight still complete.
    let addr = server.addr;
    let closed = harness::eventually(TRIES, || async {
        tokio::net::TcpStream::connect(addr).await.is_err()
    })
    .await;
    assert!(closed, "the listener never closed");
    finish.send(()).unwrap();
    feeder.await.unwrap();
    release.add_permits(4);
    let (status, body) = admission.await.unwrap().unwrap();
    harness::assert_answer("in-flight", &sent, status, &body);
    for request in slow {
        assert_eq!(request.await.unwrap(), (StatusCode::OK, "done".into()));
    }
    let finished = tokio::time::timeout(Duration::from_secs(30), server.task).await;
    assert!(
        finished.is_ok(),
        "the server did not finish after its connections did"
    );
}
