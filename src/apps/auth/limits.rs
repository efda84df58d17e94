//! PURE: how many reviews the status API may send: token buckets (a steady rate with a burst),
//! one for the TokenReviews of tokens it has never seen, one per address in front of it, and one
//! per caller for everything else, the per-key ones in a map of bounded size; and the reviews in
//! flight per address ([`InFlight`]).
//!
//! Owns no clock (time comes in as an argument) and sends nothing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A steady rate of reviews per second, with a burst allowed on top of an idle period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub per_second: u32,
    pub burst: u32,
}

/// Reviews that may be sent now, refilled at a [`Rate`] up to its burst. Kept as the time at
/// which the bucket would be full again (the generic cell rate algorithm), in whole
/// nanoseconds: no rounding drift however long it runs.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    full_at: Instant,
}

impl Rate {
    /// The time one review refills.
    fn interval(self) -> Duration {
        Duration::from_secs(1) / self.per_second.max(1)
    }

    /// How far ahead of now `full_at` may be while a review is still allowed.
    fn tolerance(self) -> Duration {
        self.interval() * self.burst.saturating_sub(1)
    }
}

impl TokenBucket {
    /// A bucket holding the whole burst at `now`.
    pub fn full(now: Instant) -> Self {
        Self { full_at: now }
    }

    /// Take one review at `now`, or say how long until one is there.
    pub fn take(&mut self, rate: Rate, now: Instant) -> Result<(), Duration> {
        let full_at = self.full_at.max(now);
        let ahead = full_at - now;
        if ahead > rate.tolerance() {
            return Err(ahead - rate.tolerance());
        }
        self.full_at = full_at + rate.interval();
        Ok(())
    }

    /// Whether the bucket has refilled to its burst by `now` (it is then no different from a
    /// new one).
    fn is_full(&self, now: Instant) -> bool {
        self.full_at <= now
    }
}

/// One [`TokenBucket`] per key (a caller), at most `capacity` of them.
///
/// When the map is full, buckets that have refilled are forgotten (a new one would be the
/// same); if none has, keys without a bucket share one overflow bucket, so neither memory nor
/// the total rate grows with the number of keys.
#[derive(Debug)]
pub struct Buckets {
    rate: Rate,
    capacity: usize,
    by_key: HashMap<String, TokenBucket>,
    overflow: TokenBucket,
}

impl Buckets {
    /// No bucket yet; at most `capacity` (at least one) at a time.
    pub fn new(rate: Rate, capacity: usize, now: Instant) -> Self {
        Self {
            rate,
            capacity: capacity.max(1),
            by_key: HashMap::new(),
            overflow: TokenBucket::full(now),
        }
    }

    /// Take one review from `key`'s bucket at `now`, or say how long until one is there.
    pub fn take(&mut self, key: &str, now: Instant) -> Result<(), Duration> {
        let rate = self.rate;
        if let Some(bucket) = self.by_key.get_mut(key) {
            return bucket.take(rate, now);
        }
        if self.by_key.len() >= self.capacity {
            self.by_key.retain(|_, b| !b.is_full(now));
        }
        if self.by_key.len() >= self.capacity {
            return self.overflow.take(rate, now);
        }
        let bucket = self.by_key.entry(key.to_owned());
        bucket
            .or_insert_with(|| TokenBucket::full(now))
            .take(rate, now)
    }

    /// Buckets kept now.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether no bucket is kept.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// Reviews in flight per key (an address), at most `max` each. Holds only keys with a review
/// in flight, so it never outgrows the reviews in flight.
#[derive(Debug)]
pub struct InFlight {
    max: usize,
    by_key: HashMap<String, usize>,
}

impl InFlight {
    /// None in flight; at most `max` (at least one) per key.
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            by_key: HashMap::new(),
        }
    }

    /// Count one more review of `key`, unless it has its most in flight already.
    pub fn begin(&mut self, key: &str) -> bool {
        if let Some(n) = self.by_key.get_mut(key) {
            if *n >= self.max {
                return false;
            }
            *n += 1;
            return true;
        }
        self.by_key.insert(key.to_owned(), 1);
        true
    }

    /// Forget a review [`begin`](Self::begin) counted.
    pub fn end(&mut self, key: &str) {
        if let Some(n) = self.by_key.get_mut(key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_key.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: Rate = Rate {
        per_second: 10,
        burst: 3,
    };

    #[test]
    fn a_bucket_allows_its_burst_then_its_rate() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::full(t0);
        for _ in 0..3 {
            assert_eq!(bucket.take(RATE, t0), Ok(()));
        }
        let wait = bucket.take(RATE, t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100), "one review per 100 ms");
        let wait = bucket
            .take(RATE, t0 + Duration::from_millis(60))
            .unwrap_err();
        assert_eq!(wait, Duration::from_millis(40));
        assert!(bucket.take(RATE, t0 + Duration::from_millis(99)).is_err());
        assert_eq!(bucket.take(RATE, t0 + Duration::from_millis(200)), Ok(()));
        // An idle hour refills the burst, no more.
        let later = t0 + Duration::from_secs(3600);
        let taken = (0..10).filter(|_| bucket.take(RATE, later).is_ok()).count();
        assert_eq!(taken, 3);
        // A clock that went backwards refills nothing.
        assert!(bucket.take(RATE, t0).is_err());
    }

    #[test]
    fn over_a_second_a_bucket_allows_burst_plus_rate() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::full(t0);
        let allowed = (0..1000)
            .map(|i| t0 + Duration::from_millis(i))
            .filter(|now| bucket.take(RATE, *now).is_ok())
            .count();
        assert_eq!(allowed, 3 + 9, "the burst, then 10/s over 999 ms");
    }

    #[test]
    fn callers_have_their_own_buckets_in_a_bounded_map() {
        let t0 = Instant::now();
        let mut buckets = Buckets::new(RATE, 2, t0);
        for _ in 0..3 {
            assert_eq!(buckets.take("alice", t0), Ok(()));
        }
        assert!(buckets.take("alice", t0).is_err(), "alice's burst is spent");
        assert_eq!(buckets.take("bob", t0), Ok(()), "bob has his own");
        // The map is full: carol and everyone after her share the overflow bucket.
        let overflow: usize = (0..100)
            .map(|i| format!("caller-{i}"))
            .filter(|k| buckets.take(k, t0).is_ok())
            .count();
        assert_eq!(overflow, 3, "a thousand new callers get one burst together");
        assert_eq!(buckets.len(), 2);
        // Once a bucket has refilled it is forgotten, and a new caller gets its place.
        let later = t0 + Duration::from_secs(1);
        assert_eq!(buckets.take("dave", later), Ok(()));
        assert_eq!(
            buckets.len(),
            1,
            "alice and bob refilled and went; dave stays"
        );
        assert!(!buckets.is_empty());
    }

    #[test]
    fn each_address_has_its_share_of_the_reviews_in_flight() {
        let mut flights = InFlight::new(2);
        assert!(flights.begin("10.0.0.1"));
        assert!(flights.begin("10.0.0.1"));
        assert!(!flights.begin("10.0.0.1"), "its share is taken");
        assert!(flights.begin("10.0.0.2"), "another address has its own");
        flights.end("10.0.0.1");
        assert!(flights.begin("10.0.0.1"), "an ended review frees its place");
        for _ in 0..2 {
            flights.end("10.0.0.1");
        }
        flights.end("10.0.0.2");
        flights.end("10.0.0.3");
        assert!(
            flights.by_key.is_empty(),
            "only addresses with a review in flight are kept"
        );
    }
}
