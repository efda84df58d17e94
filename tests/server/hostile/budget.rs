//! The attack table of docs/reliability.md, the byte budget rows: the byte budget "filled" by
//! requests that declare bodies and send headers only, 96 at a time (6 of 7 MiB fill the large
//! bodies' share, 90 of 256 KiB the rest, small-body reserve included), from two addresses over
//! HTTP/1.1 and from one over HTTP/2 streams. A body holds only the bytes that have arrived, and
//! one that has not started within a second is cut: the attack holds nothing, kube-apiserver's
//! reviews on fresh connections are answered 200 within 2 s (at least 99 %), and the resident
//! memory stays under the arithmetic's bound.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::StatusCode;

use super::attack::{self, Answered};
use super::served::{DEPLOYMENT, DEPLOYMENT_H2, Served, mib};
use ksvc_webhook::server::budget::SMALL_BODY;
use ksvc_webhook::server::routes::BODY_LIMIT;

/// Requests held at once: enough declared bytes for the whole 64 MiB budget.
const REQUESTS: usize = 96;
/// What request `i` declares: the first six the largest body, the others the largest small one.
fn declared(i: usize) -> usize {
    match i % REQUESTS < 6 {
        true => BODY_LIMIT,
        false => SMALL_BODY,
    }
}
/// How long the reviews are measured.
const MEASURED: Duration = Duration::from_secs(10);

/// Run the attack `one` (a loop of header-only requests) on `tasks` tasks while
/// kube-apiserver's reviews are measured.
async fn attacked<F, Fut>(what: &str, args: &[&str], tasks: usize, one: F)
where
    F: Fn(Arc<Served>, usize, Instant) -> Fut,
    Fut: Future<Output = Vec<Option<StatusCode>>> + Send + 'static,
{
    let (served, baseline) = Served::warmed(args, None).await;
    let end = Instant::now() + MEASURED;
    let attackers: Vec<_> = (0..tasks)
        .map(|i| tokio::spawn(one(served.clone(), i, end)))
        .collect();
    // Once the attack's requests are all in, measure.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reviews: Answered = attack::fresh_reviews(&served, end).await;
    let mut tally = std::collections::BTreeMap::new();
    for task in attackers {
        for status in task.await.unwrap() {
            let key = status.map_or("dropped".to_owned(), |s| s.as_u16().to_string());
            *tally.entry(key).or_insert(0) += 1;
        }
    }
    let peak = served.memory("VmHWM");
    let bound = served.memory_bound(baseline);
    let most_held = served.metric("ksvc_webhook_admission_body_bytes ").await;
    println!(
        "{what}: reviews {}/{} answered within 2 s (slowest {:.0} ms); attack answered \
         {tally:?}; body bytes held now {most_held:?}; RSS {:.1} MiB idle, peak {:.1} MiB, \
         bound {:.1} MiB",
        reviews.ok,
        reviews.total,
        reviews.slowest.as_secs_f64() * 1e3,
        mib(baseline),
        mib(peak),
        mib(bound),
    );
    reviews.assert_kept(what);
    assert!(
        tally.get("408").is_some_and(|&n| n >= REQUESTS),
        "{what}: header-only requests not cut: {tally:?}"
    );
    assert!(peak <= bound, "{what}: peak {peak} over the bound {bound}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_only_requests_from_two_addresses_hold_nothing() {
    attacked(
        "96 header-only requests, HTTP/1.1",
        DEPLOYMENT,
        REQUESTS,
        |served, i, end| async move {
            let mut answers = Vec::new();
            while Instant::now() < end {
                let from = Some(attack::attacker(i % 2));
                let Ok(mut conn) = served.connect(from, &[b"http/1.1"]).await else {
                    continue;
                };
                answers.push(attack::headers_only(&mut conn, declared(i)).await);
            }
            answers
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_only_http2_streams_from_one_address_hold_nothing() {
    // Twelve connections of eight streams each.
    attacked(
        "96 header-only streams, HTTP/2",
        DEPLOYMENT_H2,
        REQUESTS / 8,
        |served, i, end| async move {
            let mut answers = Vec::new();
            while Instant::now() < end {
                let from = Some(attack::attacker(0));
                let Ok(conn) = served.connect(from, &[b"h2"]).await else {
                    continue;
                };
                let streams: Vec<_> = (0..8)
                    .map(|j| {
                        let size = declared(i * 8 + j);
                        let mut stream = conn.stream();
                        tokio::spawn(async move {
                            let mut answers = Vec::new();
                            while Instant::now() < end {
                                let answer = attack::headers_only(&mut stream, size).await;
                                answers.push(answer);
                                if answer.is_none() {
                                    break;
                                }
                            }
                            answers
                        })
                    })
                    .collect();
                for stream in streams {
                    answers.extend(stream.await.unwrap());
                }
            }
            answers
        },
    )
    .await;
}
