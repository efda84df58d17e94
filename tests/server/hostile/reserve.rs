//! The attack table of docs/reliability.md, the small-body reserve row: the whole 64 MiB budget
//! held by bodies that keep arriving (a byte every 200 ms, so none is ever the one cut for
//! another, until its pace or its deadline ends it and it starts again): one address fills the
//! small-body reserve with 64 bodies of 256 KiB, two more fill the large bodies' part with
//! 7 MiB bodies and the rest with small ones. An address may hold only an eighth of the
//! reserve, so kube-apiserver's reviews from 127.0.0.1, on fresh connections, are answered 200
//! within 2 s (at least 99 %), and the resident memory stays under the arithmetic's bound.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::StatusCode;

use super::attack::{self, Ended};
use super::served::{DEPLOYMENT, Served, mib};
use ksvc_webhook::server::budget::SMALL_BODY;
use ksvc_webhook::server::routes::BODY_LIMIT;
use support::poll;

/// A dripping body sends a byte this often: under the half second after which it may be cut.
const DRIP: Duration = Duration::from_millis(200);
/// How long the reviews are measured.
const MEASURED: Duration = Duration::from_secs(10);
/// A refused upload tries again after this.
const RETRY: Duration = Duration::from_secs(1);

/// The uploads, as (attacker, body size, how many at once): 64 × 256 KiB, the whole 16 MiB
/// reserve from one address; 6 × 7 MiB of the large bodies' 48 MiB from two others, and
/// 24 × 256 KiB for the 6 MiB they leave.
const UPLOADS: &[(usize, usize, usize)] = &[
    (0, SMALL_BODY, 64),
    (1, SMALL_BODY, 24),
    (1, BODY_LIMIT, 3),
    (2, BODY_LIMIT, 3),
];

/// Until `end`, one dripping upload of `size` bytes from attacker `i` after another.
async fn keep_uploading(served: Arc<Served>, i: usize, size: usize, end: Instant) -> Vec<Ended> {
    let mut ended = Vec::new();
    while Instant::now() < end {
        let Ok(conn) = served
            .connect(Some(attack::attacker(i)), &[b"http/1.1"])
            .await
        else {
            tokio::time::sleep(RETRY).await;
            continue;
        };
        let one = attack::dripping(conn, size, Some(DRIP)).await;
        if one.status != Some(StatusCode::REQUEST_TIMEOUT) {
            tokio::time::sleep(RETRY).await;
        }
        ended.push(one);
    }
    ended
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_bodies_from_one_address_leave_the_reserve_to_the_others() {
    let (served, baseline) = Served::warmed(DEPLOYMENT, None).await;
    let end = Instant::now() + MEASURED + Duration::from_secs(2);
    let mut uploads = Vec::new();
    for &(i, size, n) in UPLOADS {
        for _ in 0..n {
            uploads.push(tokio::spawn(keep_uploading(served.clone(), i, size, end)));
        }
    }
    let s = &served;
    let held = || async move {
        let held = s.metric("ksvc_webhook_admission_body_bytes ").await;
        held.is_some_and(|b| b >= 40.0 * f64::from(1 << 20))
    };
    poll::until_async("the uploads hold the budget", poll::LIMIT, held).await;
    let held = served.metric("ksvc_webhook_admission_body_bytes ").await;
    let reviews = attack::fresh_reviews(&served, Instant::now() + MEASURED).await;
    let mut ended = Vec::new();
    for upload in uploads {
        ended.extend(upload.await.unwrap());
    }
    let peak = served.memory("VmHWM");
    let bound = served.memory_bound(baseline);
    println!(
        "small-body reserve from one address: reviews {}/{} answered within 2 s (slowest \
         {:.0} ms); body bytes held {:.1} MiB; uploads answered {:?}; RSS {:.1} MiB idle, peak \
         {:.1} MiB, bound {:.1} MiB",
        reviews.ok,
        reviews.total,
        reviews.slowest.as_secs_f64() * 1e3,
        held.unwrap_or_default() / f64::from(1 << 20),
        attack::tally(&ended),
        mib(baseline),
        mib(peak),
        mib(bound),
    );
    reviews.assert_kept("small bodies from one address");
    // The attack held bodies until their pace or deadline cut them.
    assert!(
        ended
            .iter()
            .any(|e| e.status == Some(StatusCode::REQUEST_TIMEOUT)),
        "{:?}",
        attack::tally(&ended)
    );
    assert!(peak <= bound, "peak {peak} over the bound {bound}");
}
