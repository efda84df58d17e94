//! The server as `serve` wires it (real `watch::spawn`, kubeconfig at the fake) while every list
//! the watch loop makes fails: admission answers and `/readyz` is 200 all along (readiness is
//! admission's), while `/apps` answers 503 until the cache has synced, then serves it.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use ksvc_webhook::apps::args::StatusApiArgs;

use crate::common::{SLACK, since_fault};
use support::FakeApi;
use support::fake_api::Fault;
use support::harness;
use support::watched::{client_args, election, watch_args};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_answers_and_status_tells_the_truth_while_the_lists_fail() {
    let fake = FakeApi::start().await;
    // Three failures each: 0.8 s, 1.6 s and 3.2 s of backoff (and as much again of jitter). The
    // lists are streamed, so they are the first watch requests.
    for resource in ["services", "revisions"] {
        fake.inject("watch", resource, None, Fault::Status(500), 3);
    }
    let dir = tempfile::tempdir().unwrap();
    let client = client_args(fake.kubeconfig(dir.path()), Duration::from_secs(3));
    // The cache is all this needs: an election that never starts (no replica leads).
    let election = election("replica-a", Some("system"));
    let args = watch_args();
    let mut watch = None;
    let server = harness::start(
        |_| {},
        |server| {
            let handle = ksvc_webhook::watch::spawn(&args, &client, &election, server.policy());
            let open = StatusApiArgs {
                status_auth: false,
                status_auth_cache_ttl: Duration::from_secs(10),
                status_auth_cache_size: 16,
                status_auth_cache_bytes: 1 << 20,
                status_auth_timeout: Duration::from_secs(2),
                status_auth_audiences: Vec::new(),
                status_auth_new_token_rate: 20,
                status_auth_caller_rate: 20,
                status_auth_max_in_flight: 16,
                status_watch_recheck: Duration::from_secs(10),
                max_watch_streams: 16,
                max_watch_streams_per_caller: 4,
                max_watch_streams_per_namespace: 16,
                local_status_listen: ksvc_webhook::apps::args::LocalListen(None),
                metrics_auth: false,
            };
            let metrics = ksvc_webhook::apps::metrics::StatusMetrics::default();
            server.merge_routes(ksvc_webhook::apps::router(
                &handle, &metrics, &client, &open,
            ));
            watch = Some(handle);
        },
    )
    .await;
    let mut conn = harness::h1(&server).await;

    let (status, text) = conn.get("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let (status, text) = conn.get("/apps").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    let body = harness::review("uid-during-faults", 0);
    let (status, answer) = conn.review(body.clone()).await.unwrap();
    harness::assert_answer("uid-during-faults", &body, status, &answer);
    assert!(
        fake.faults_left() > 0,
        "answered while the lists were failing"
    );

    let limit = Instant::now() + Duration::from_secs(30);
    let ready = loop {
        let (status, _) = conn.get("/apps").await;
        if status == StatusCode::OK {
            break Instant::now();
        }
        let (status, text) = conn.get("/readyz").await;
        assert_eq!(
            status,
            StatusCode::OK,
            "readiness never waits on the loop: {text}"
        );
        assert!(Instant::now() < limit, "/apps never synced");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        fake.faults_left(),
        0,
        "synced only once the lists succeeded"
    );
    let took = since_fault(&fake, ready);
    // The third backoff step, jitter included.
    let bound = Duration::from_millis(3200 * 2);
    println!(
        "admission: lists failing | /apps synced after {:.2}s | bound {:.1}s",
        took.as_secs_f64(),
        bound.as_secs_f64()
    );
    assert!(took <= bound + SLACK, "{took:?}");
    let body = harness::review("uid-after-faults", 0);
    let (status, answer) = conn.review(body.clone()).await.unwrap();
    harness::assert_answer("uid-after-faults", &body, status, &answer);
    if let Some(mut watch) = watch {
        watch.shutdown().await;
    }
}
