//! Shutdown is bounded: SIGTERM with an open `/apps/watch` stream and a
//! stalled upload. The process exits within the drain period plus the bound, the stream ends
//! with its final event, and the Lease is released for the other replica.

use std::time::{Duration, Instant};

use hyper::StatusCode;
use ksvc_webhook::server::routes::BODY_LIMIT;

use super::attack;
use super::served::Served;
use support::harness::{self, SERVER_NAME};
use support::poll;
use support::{FakeApi, ksvc};

const LEASE: (&str, &str) = ("ksvc-system", "ksvc-webhook-watch");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_streams_drops_stalled_uploads_and_releases_the_lease_within_the_bound() {
    let fake = FakeApi::start().await;
    fake.put(
        "services",
        ksvc("app", false, false, 1, &["app-00001"], "app-00001"),
    );
    let drain = Duration::from_secs(1);
    let bound = Duration::from_secs(2);
    let api_timeout = Duration::from_secs(2);
    let mut served = Served::start(
        &[
            "--drain-period=1s",
            "--shutdown-timeout=2s",
            "--api-timeout=2s",
            // The stalled upload below is not cut by its deadline: only the bound ends it.
            "--request-timeout=60s",
            "--status-auth=false",
            "--pod-name=replica-a",
        ],
        Some(&fake),
    );
    let leads = || {
        let lease = fake.get("leases", LEASE.0, LEASE.1);
        lease.is_some_and(|l| l["spec"]["holderIdentity"] == "replica-a")
    };
    // Start-up runs a real election and a first list: a wider bound than the others.
    let start = Duration::from_secs(30);
    poll::until("replica-a leads", start, leads).await;
    let s = &served;
    let synced = || async move { s.h1().await.get("/apps").await.0 == StatusCode::OK };
    poll::until_async("the status API serves the cache", start, synced).await;

    let mut watcher = served.h1().await;
    let stream = tokio::spawn(async move {
        let request = hyper::Request::get("/apps/watch")
            .header("host", SERVER_NAME)
            .body(harness::full(Vec::new()))
            .unwrap();
        watcher.send(request).await
    });
    let upload = tokio::spawn(attack::stalled(served.h1().await, BODY_LIMIT));
    // The upload holds its body (the budget says so) before the signal.
    let held = || async move {
        let (_, text) = s.h1().await.get("/metrics").await;
        text.contains(&format!("ksvc_webhook_admission_body_bytes {BODY_LIMIT}"))
    };
    poll::until_async("the upload holds its body", poll::LIMIT, held).await;

    served.sigterm();
    let signalled = Instant::now();
    let limit = drain + bound.max(api_timeout + Duration::from_secs(1));
    let status = served.exited(limit + Duration::from_secs(5)).await;
    let took = signalled.elapsed();
    println!(
        "shutdown with an open stream and a stalled upload: exited after {:.2}s, bound {:.1}s",
        took.as_secs_f64(),
        limit.as_secs_f64()
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        served.logs()
    );
    assert!(took <= limit + Duration::from_secs(3), "{took:?}");

    let (code, body) = stream.await.unwrap().unwrap();
    assert_eq!(code, StatusCode::OK);
    let text = String::from_utf8(body.to_vec()).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "ERROR", "{text}");
    assert_eq!(last["status"]["code"], 503, "{text}");
    assert!(text.lines().next().unwrap().contains("CREATED"), "{text}");

    let upload = upload.await.unwrap();
    assert_ne!(upload.status, Some(StatusCode::OK), "{upload:?}");
    let lease = fake.get("leases", LEASE.0, LEASE.1).unwrap();
    assert!(lease["spec"]["holderIdentity"].is_null(), "{lease}");
    assert!(
        served.logs().contains("lease released"),
        "{}",
        served.logs()
    );
}
