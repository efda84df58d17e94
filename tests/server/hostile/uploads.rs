//! Stalled uploads: headers for a 7 MiB `/mutate` body, all but its last byte, then nothing. Over
//! HTTP/1.1 (one connection each) and HTTP/2 (streams of one connection), the resident memory stays
//! under the documented bound, the uploads the budget took are cut once they pause for 2 s, the
//! others are refused at once, and kube-apiserver's reviews are answered meanwhile.
//!
//! The server runs with the Deployment's allocator settings ([`super::served`]): with
//! mimalloc's default purge delay, the pages of the bodies refused or cut stayed resident beside
//! those that replaced them, and the peak varied from run to run (33 to 49 MiB over the baseline
//! on HTTP/1.1, 25 to 26 MiB with the Deployment's settings), up to the bound on a loaded machine.

use std::time::Duration;

use hyper::StatusCode;
use ksvc_webhook::server::routes::{BODY_LIMIT, STALL};

use super::attack::{self, Ended, one_review};
use super::served::{Served, mib};
use support::{harness, poll};

/// The request deadline of these tests: longer than the pause that cuts a stalled body.
const DEADLINE: Duration = Duration::from_secs(3);
/// Scheduling slack on a busy 2-core machine.
const SLACK: Duration = Duration::from_secs(3);

/// 32 MiB of bodies, 8 MiB of them kept for small ones: three 7 MiB bodies fit beside it.
const LIMITS: &[&str] = &[
    "--request-timeout",
    "3s",
    "--body-budget",
    "32Mi",
    "--small-body-reserve",
    "8Mi",
    "--max-connections",
    "64",
];
const HELD: usize = 3;

/// Wait for the `uploads`; meanwhile kube-apiserver's reviews must be answered. Then check how
/// each ended, the metrics, and the resident memory against the idle `baseline` plus what
/// admission may add by the arithmetic (bodies and connections).
async fn under_attack(
    served: &Served,
    baseline: u64,
    uploads: Vec<tokio::task::JoinHandle<Ended>>,
    what: &str,
) {
    let mut kube = served.h1().await;
    let s = served;
    let held = || async move {
        let (_, text) = s.h1().await.get("/metrics").await;
        text.lines().any(|l| {
            l.strip_prefix("ksvc_webhook_admission_body_bytes ")
                .and_then(|v| v.parse::<usize>().ok())
                .is_some_and(|v| v >= HELD * BODY_LIMIT)
        })
    };
    poll::until_async("the stalled uploads hold the budget", poll::LIMIT, held).await;
    for i in 0..10 {
        let took = one_review(&mut kube, &format!("kube-{i}")).await;
        assert!(took.is_some(), "a review failed while the budget was held");
    }
    let mut ended = Vec::new();
    for upload in uploads {
        ended.push(upload.await.unwrap());
    }
    let peak = served.memory("VmHWM");
    let bound = served.memory_bound(baseline);
    println!(
        "{what}: {} uploads of {} MiB: {:?}; RSS {:.1} MiB idle, peak {:.1} MiB, bound {:.1} MiB",
        ended.len(),
        BODY_LIMIT >> 20,
        attack::tally(&ended),
        mib(baseline),
        mib(peak),
        mib(bound)
    );
    assert!(peak <= bound, "peak {peak} over the bound {bound}");
    // The others are refused at once: 503, or, over HTTP/1.1, a reset that overtook the 503
    // (a client whose body the server drains for longer than the linger). The held ones are cut
    // once they have paused for 2 s: 408, or 503 if a later upload needed their room first. The
    // server counts every one.
    let timeouts = count(&ended, 408);
    assert!(timeouts <= HELD, "{ended:?}");
    for e in &ended {
        match e.status {
            Some(StatusCode::REQUEST_TIMEOUT) => {
                assert!(e.after >= STALL && e.after <= STALL + SLACK, "{e:?}")
            }
            Some(StatusCode::SERVICE_UNAVAILABLE) | None => {
                assert!(e.after < DEADLINE, "not refused at once: {e:?}")
            }
            Some(other) => panic!("answered {other}: {e:?}"),
        }
    }
    let (_, text) = kube.get("/metrics").await;
    let counted = |result: &str| {
        let prefix = format!(
            "ksvc_webhook_admission_requests_total{{operation=\"unknown\",result=\"{result}\"}} "
        );
        let line = text.lines().find_map(|l| l.strip_prefix(prefix.as_str()));
        line.map_or(0, |n| n.parse::<usize>().unwrap())
    };
    assert_eq!(counted("timeout"), timeouts, "{text}");
    assert_eq!(
        counted("timeout") + counted("over_budget"),
        ended.len(),
        "{text}"
    );
}

fn count(ended: &[Ended], status: u16) -> usize {
    ended
        .iter()
        .filter(|e| e.status.is_some_and(|s| s.as_u16() == status))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_http1_uploads_are_cut_at_the_deadline_within_the_memory_bound() {
    let (served, baseline) = Served::warmed(LIMITS, None).await;
    let mut uploads = Vec::new();
    for _ in 0..24 {
        let conn = served.h1().await;
        uploads.push(tokio::spawn(attack::stalled(conn, BODY_LIMIT)));
    }
    under_attack(&served, baseline, uploads, "HTTP/1.1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_http2_streams_are_cut_at_the_deadline_within_the_memory_bound() {
    let mut args = LIMITS.to_vec();
    args.push("--http2");
    let (served, baseline) = Served::warmed(&args, None).await;
    let mut conn = served.connect(None, &[b"h2"]).await.unwrap();
    assert!(conn.h2);
    // One answer first: then the client knows the server's settings (8 streams at once) and
    // queues the rest instead of having them refused.
    assert_eq!(conn.get("/healthz").await.0, StatusCode::OK);
    let uploads = (0..20)
        .map(|_| tokio::spawn(attack::stalled(conn.stream(), BODY_LIMIT)))
        .collect();
    under_attack(&served, baseline, uploads, "HTTP/2, one connection").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_connection_without_requests_is_closed_after_the_header_timeout() {
    let served = Served::start(&["--http2", "--header-read-timeout", "300ms"], None);
    let mut idle = served.connect(None, &[b"h2"]).await.unwrap();
    let mut busy = served.connect(None, &[b"h2"]).await.unwrap();
    // A connection in use stays open past the limit; the idle one is closed.
    for _ in 0..10 {
        assert_eq!(busy.get("/healthz").await.0, StatusCode::OK);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let request = hyper::Request::get("/healthz")
        .header("host", harness::SERVER_NAME)
        .body(harness::full(Vec::new()))
        .unwrap();
    assert!(
        idle.send(request).await.is_err(),
        "the idle connection is still open"
    );
}
