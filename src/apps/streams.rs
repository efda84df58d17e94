//! PURE: the count of open `/apps/watch` streams against their limits: overall, per caller
//! (username) and per ServiceAccount namespace (every `system:serviceaccount:NS:…` caller of one
//! namespace together, so a tenant who can create ServiceAccounts cannot multiply its share);
//! and how long a stream whose re-check could not be made waits before trying again
//! ([`recheck_backoff`]).
//!
//! Owns only counts; never opens, ends or times a stream (that is the routes', in http.rs).

use std::collections::HashMap;
use std::time::Duration;

use super::auth::access::service_account_namespace;

/// Which stream limit a caller hit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitHit {
    #[error("the server already serves its maximum of {0} /apps/watch streams; retry later")]
    Total(usize),
    #[error(
        "you already have the maximum of {0} open /apps/watch streams; close one or retry later"
    )]
    PerCaller(usize),
    #[error(
        "the ServiceAccounts of namespace {namespace:?} already have the maximum of {max} open /apps/watch streams; close one or retry later"
    )]
    PerNamespace { namespace: String, max: usize },
}

impl LimitHit {
    /// The metric label of the limit.
    pub fn label(&self) -> &'static str {
        match self {
            LimitHit::Total(_) => "total",
            LimitHit::PerCaller(_) => "per_caller",
            LimitHit::PerNamespace { .. } => "per_namespace",
        }
    }
}

/// The maximum open streams, overall, per caller and per ServiceAccount namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Maximums {
    pub total: usize,
    pub per_caller: usize,
    pub per_namespace: usize,
}

/// Open `/apps/watch` streams, overall, per caller and per ServiceAccount namespace.
///
/// The maps hold only callers and namespaces with an open stream, so they never outgrow the
/// total.
#[derive(Debug)]
pub struct StreamLimits {
    max: Maximums,
    open: usize,
    by_caller: HashMap<String, usize>,
    by_namespace: HashMap<String, usize>,
}

impl StreamLimits {
    /// No stream open yet.
    pub fn new(max: Maximums) -> Self {
        Self {
            max,
            open: 0,
            by_caller: HashMap::new(),
            by_namespace: HashMap::new(),
        }
    }

    /// Count a new stream of `caller` (`None`: unauthenticated, only the total applies), or
    /// say which limit it would break.
    pub fn open(&mut self, caller: Option<&str>) -> Result<(), LimitHit> {
        if self.open >= self.max.total {
            return Err(LimitHit::Total(self.max.total));
        }
        if let Some(caller) = caller {
            if count(&self.by_caller, caller) >= self.max.per_caller {
                return Err(LimitHit::PerCaller(self.max.per_caller));
            }
            let namespace = service_account_namespace(caller);
            if let Some(ns) = namespace
                && count(&self.by_namespace, ns) >= self.max.per_namespace
            {
                let (namespace, max) = (ns.to_owned(), self.max.per_namespace);
                return Err(LimitHit::PerNamespace { namespace, max });
            }
            *self.by_caller.entry(caller.to_owned()).or_insert(0) += 1;
            if let Some(ns) = namespace {
                *self.by_namespace.entry(ns.to_owned()).or_insert(0) += 1;
            }
        }
        self.open += 1;
        Ok(())
    }

    /// Forget a stream [`open`](Self::open) counted.
    pub fn close(&mut self, caller: Option<&str>) {
        self.open = self.open.saturating_sub(1);
        if let Some(caller) = caller {
            release(&mut self.by_caller, caller);
            if let Some(ns) = service_account_namespace(caller) {
                release(&mut self.by_namespace, ns);
            }
        }
    }

    /// Streams open now.
    pub fn open_streams(&self) -> usize {
        self.open
    }
}

/// Times an open stream tries its re-check again when the review could not be made (the review
/// budgets or the API server were overloaded) before it ends.
pub const RECHECK_RETRIES: u32 = 3;

/// How long a stream waits before re-check retry number `tries` (from 0): 1 s, 2 s, then 4 s;
/// `None` once [`RECHECK_RETRIES`] are spent. Seven seconds in all: a stream goes on unchecked
/// for at most that beyond its re-check period.
pub fn recheck_backoff(tries: u32) -> Option<Duration> {
    (tries < RECHECK_RETRIES).then(|| Duration::from_secs(1 << tries))
}

fn count(map: &HashMap<String, usize>, key: &str) -> usize {
    map.get(key).copied().unwrap_or(0)
}

fn release(map: &mut HashMap<String, usize>, key: &str) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Maximums = Maximums {
        total: 5,
        per_caller: 2,
        per_namespace: 3,
    };

    #[test]
    fn stream_limits_per_caller_and_overall() {
        let mut limits = StreamLimits::new(Maximums { total: 3, ..MAX });
        assert_eq!(limits.open(Some("alice")), Ok(()));
        assert_eq!(limits.open(Some("alice")), Ok(()));
        assert_eq!(limits.open(Some("alice")), Err(LimitHit::PerCaller(2)));
        assert_eq!(limits.open(Some("bob")), Ok(()));
        assert_eq!(limits.open(Some("carol")), Err(LimitHit::Total(3)));
        assert_eq!(limits.open(None), Err(LimitHit::Total(3)));
        limits.close(Some("alice"));
        assert_eq!(limits.open_streams(), 2);
        assert_eq!(
            limits.open(Some("alice")),
            Ok(()),
            "a closed stream frees a slot"
        );
        limits.close(Some("bob"));
        assert_eq!(
            limits.open(None),
            Ok(()),
            "unauthenticated: only the total counts"
        );
        assert_eq!(LimitHit::Total(1).label(), "total");
        assert_eq!(LimitHit::PerCaller(1).label(), "per_caller");
    }

    #[test]
    fn service_accounts_of_one_namespace_share_a_limit() {
        let mut limits = StreamLimits::new(MAX);
        let sa = |n: u32| format!("system:serviceaccount:tenant:sa-{n}");
        for n in 0..3 {
            assert_eq!(limits.open(Some(&sa(n))), Ok(()), "sa-{n}");
        }
        let hit = limits.open(Some(&sa(3))).unwrap_err();
        assert_eq!(
            hit,
            LimitHit::PerNamespace {
                namespace: "tenant".into(),
                max: 3
            }
        );
        assert_eq!(hit.label(), "per_namespace");
        assert!(hit.to_string().contains("\"tenant\""), "{hit}");
        assert_eq!(
            limits.open(Some("system:serviceaccount:other:sa-0")),
            Ok(()),
            "another namespace has its own count"
        );
        assert_eq!(limits.open(Some("alice")), Ok(()), "users are not grouped");
        limits.close(Some(&sa(0)));
        assert_eq!(
            limits.open(Some(&sa(9))),
            Ok(()),
            "a closed stream frees it"
        );
        assert_eq!(limits.open_streams(), 5);
        for n in [1, 2, 9] {
            limits.close(Some(&sa(n)));
        }
        limits.close(Some("system:serviceaccount:other:sa-0"));
        limits.close(Some("alice"));
        assert!(limits.by_caller.is_empty() && limits.by_namespace.is_empty());
    }

    #[test]
    fn a_recheck_is_tried_again_three_times_with_growing_waits() {
        let waits: Vec<_> = (0..5).map(recheck_backoff).collect();
        let secs = Duration::from_secs;
        assert_eq!(
            waits,
            [Some(secs(1)), Some(secs(2)), Some(secs(4)), None, None]
        );
    }
}
