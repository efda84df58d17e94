//! The one way a test waits for something: poll a condition every [`EVERY`] until it holds, and
//! panic naming what was awaited once `limit` has passed. The limit bounds liveness only, and is
//! generous so that a loaded machine never fails a test that would pass: no test asserts how fast
//! something happened. [`until`] takes a plain condition, [`until_async`] one that awaits (a
//! request, a scrape). Both return the moment the condition held, for the callers that measure
//! from a moment of their own (the fault table's recovery times). [`blocking`] is their twin for
//! the e2e suite, which has no runtime: it polls on the test's thread, every [`EVERY_BLOCKING`],
//! and returns the value its check gave.
//!
//! The limit runs on tokio's clock, so under `tokio::time::pause()` it is virtual time too.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is polled.
pub const EVERY: Duration = Duration::from_millis(10);

/// How often [`blocking`] polls: each try of an e2e check runs a process (kubectl, curl).
pub const EVERY_BLOCKING: Duration = Duration::from_millis(100);

/// The limit when nothing tighter is meant: far beyond what any wait takes on a quiet machine.
pub const LIMIT: Duration = Duration::from_secs(20);

/// Poll `cond` until it holds; the moment it did. Panics after `limit`, naming `what`.
pub async fn until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Instant {
    until_async(what, limit, || std::future::ready(cond())).await
}

/// [`until`] for a condition that awaits.
pub async fn until_async<F, Fut>(what: &str, limit: Duration, mut cond: F) -> Instant
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = tokio::time::Instant::now();
    loop {
        if cond().await {
            return Instant::now();
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting until {what}"
        );
        tokio::time::sleep(EVERY).await;
    }
}

/// Poll `check` on this thread until it gives a value, and return it. Panics after `limit`,
/// naming `what`.
pub fn blocking<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting until {what}"
        );
        std::thread::sleep(EVERY_BLOCKING);
    }
}
