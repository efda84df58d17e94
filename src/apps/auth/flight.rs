//! In-flight deduplication over the answer cache: a cached answer is reused; concurrent misses
//! of one key share one lookup; a new lookup starts only once its caller's `admit` lets it
//! (rate and concurrency budgets), holding what `admit` gave (a permit) until it ends.
//!
//! Owns the cache's lock and its byte gauge; never decides what is asked or whether it may be.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use prometheus_client::metrics::gauge::Gauge;

use super::cache::{CacheKey, TtlCache, Weigh};
use super::refusal::Refusal;
use crate::locks::lock;

/// An answer, or why the API server could not give one (never cached).
pub type Answer<V> = Result<V, String>;

/// A TTL cache whose misses share one in-flight lookup per key.
pub(super) struct Flight<V> {
    cache: Mutex<TtlCache<CacheKey, V>>,
    pending: Mutex<HashMap<CacheKey, Shared<BoxFuture<'static, Answer<V>>>>>,
    bytes: Gauge,
}

fn now() -> Instant {
    // Tokio's clock, so tests with a paused clock see answers expire.
    tokio::time::Instant::now().into_std()
}

fn delta(before: usize, after: usize) -> i64 {
    let signed = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    signed(after) - signed(before)
}

impl<V> Flight<V>
where
    V: Clone + Weigh + Send + Sync + 'static,
{
    /// An empty cache of at most `capacity` answers and `max_bytes`, each kept for `ttl`; its
    /// bytes are added to `bytes`.
    pub(super) fn new(capacity: usize, max_bytes: usize, ttl: Duration, bytes: Gauge) -> Self {
        Self {
            cache: Mutex::new(TtlCache::new(capacity, max_bytes, ttl)),
            pending: Mutex::default(),
            bytes,
        }
    }

    /// The cached answer for `key`, else the pending lookup's, else the one `fetch` gets once
    /// `admit` (given the last answer for `key`, expired, if still known) lets it start.
    pub(super) async fn get_or_fetch<P, A, F, Fut>(
        self: &Arc<Self>,
        key: CacheKey,
        admit: A,
        fetch: F,
    ) -> Result<V, Refusal>
    where
        P: Send + 'static,
        A: FnOnce(Option<V>) -> Result<P, Refusal>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Answer<V>> + Send + 'static,
    {
        let last = {
            let cache = lock(&self.cache);
            if let Some(value) = cache.get(&key, now()) {
                return Ok(value);
            }
            cache.last(&key)
        };
        let shared = {
            let mut pending = lock(&self.pending);
            match pending.get(&key) {
                Some(shared) => shared.clone(),
                None => {
                    let permit = admit(last)?;
                    let shared = self.spawn(key, permit, fetch());
                    pending.insert(key, shared.clone());
                    shared
                }
            }
        };
        shared.await.map_err(Refusal::Unavailable)
    }

    fn spawn<P, Fut>(
        self: &Arc<Self>,
        key: CacheKey,
        permit: P,
        fetch: Fut,
    ) -> Shared<BoxFuture<'static, Answer<V>>>
    where
        P: Send + 'static,
        Fut: Future<Output = Answer<V>> + Send + 'static,
    {
        let me = self.clone();
        // A task of its own: the review ends (bounded by its timeout) and leaves the pending
        // map even when every request waiting for it has gone away.
        let task = tokio::spawn(async move {
            let answer = fetch.await;
            drop(permit);
            if let Ok(value) = &answer {
                let mut cache = lock(&me.cache);
                let before = cache.bytes();
                cache.insert(key, value.clone(), now());
                me.bytes.inc_by(delta(before, cache.bytes()));
            }
            lock(&me.pending).remove(&key);
            answer
        });
        let joined = async move {
            let failed = |_| Err("the review task ended early".to_owned());
            task.await.unwrap_or_else(failed)
        };
        joined.boxed().shared()
    }
}
