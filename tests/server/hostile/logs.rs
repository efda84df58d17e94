//! Issue 28, the 100 KB uid row: four pods send reviews with 100 KB uids as fast as they can,
//! each refused with 400 and its line logged, while kube-apiserver's reviews come from
//! 127.0.0.1. The log stays under its bound (10 MB per 20 s, checked here per 10 s: 5 MB), and
//! every review answered meanwhile has its decision line.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::StatusCode;

use super::attack::{self, one_review};
use super::served::{DEPLOYMENT, Served};
use support::harness::review;
use support::poll;

/// Connections each attacker address floods from.
const PER_ATTACKER: usize = 2;
/// How long the flood runs.
const FLOOD: Duration = Duration::from_secs(10);
/// The bound: 10 MB of log per 20 s, for the [`FLOOD`].
const MAX_LOG_BYTES: usize = 5_000_000;

/// Until `end`, reviews with a 100 KB uid over one connection from attacker `i`; how many were
/// answered 400.
async fn long_uids(served: Arc<Served>, i: usize, end: Instant) -> usize {
    let body = review(&"u".repeat(100_000), 0);
    let mut refused = 0;
    let mut conn = None;
    while Instant::now() < end {
        let mut c = match conn.take() {
            Some(c) => c,
            None => match served
                .connect(Some(attack::attacker(i)), &[b"http/1.1"])
                .await
            {
                Ok(c) => c,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if let Ok((status, _)) = c.review(body.clone()).await {
            refused += usize::from(status == StatusCode::BAD_REQUEST);
            conn = Some(c);
        }
    }
    refused
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_long_uids_keeps_the_log_bounded_and_every_decision_line() {
    let (served, _) = Served::warmed(DEPLOYMENT, None).await;
    let before = served.logs().len();
    let end = Instant::now() + FLOOD;
    let attackers: Vec<_> = (0..4 * PER_ATTACKER)
        .map(|i| tokio::spawn(long_uids(served.clone(), i, end)))
        .collect();
    let mut answered = Vec::new();
    let mut n = 0;
    while Instant::now() < end {
        n += 1;
        let uid = format!("kube-{n}");
        let mut conn = served.h1().await;
        if one_review(&mut conn, &uid).await.is_some() {
            answered.push(uid);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut refused = 0;
    for attacker in attackers {
        refused += attacker.await.unwrap();
    }
    // The last lines leave the buffer within a flush.
    let last = format!("uid=\"{}\"", answered.last().unwrap());
    poll::until("the last decision line is written", poll::LIMIT, || {
        served.logs().contains(&last)
    })
    .await;
    let logs = served.logs();
    let written = logs.len() - before;
    let missing: Vec<&String> = answered
        .iter()
        .filter(|uid| !logs.contains(&format!("uid=\"{uid}\"")))
        .collect();
    eprintln!(
        "logs: {refused} long uids refused, {} reviews answered, {written} bytes of log in {}s",
        answered.len(),
        FLOOD.as_secs()
    );
    assert!(refused >= 100, "the flood ran: {refused}");
    assert!(answered.len() >= 10, "{}", answered.len());
    assert!(written < MAX_LOG_BYTES, "{written} bytes of log");
    assert!(missing.is_empty(), "decision lines missing: {missing:?}");
}
