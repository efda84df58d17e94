use std::collections::BTreeMap;

use super::*;
use crate::apps::auth::access::Verb;

impl Weigh for bool {
    fn heap_bytes(&self) -> usize {
        0
    }
}

impl Weigh for String {
    fn heap_bytes(&self) -> usize {
        self.capacity()
    }
}

const MIB: usize = 1 << 20;

#[test]
fn cache_answers_until_the_ttl_then_forgets() {
    let t0 = Instant::now();
    let ttl = Duration::from_secs(10);
    let mut cache = TtlCache::new(4, MIB, ttl);
    assert!(cache.insert("k", true, t0));
    assert_eq!(cache.get(&"k", t0), Some(true));
    assert_eq!(
        cache.get(&"k", t0 + ttl - Duration::from_millis(1)),
        Some(true)
    );
    assert_eq!(cache.get(&"k", t0 + ttl), None, "expired at the TTL");
    assert_eq!(cache.last(&"k"), Some(true), "still known until pushed out");
    assert_eq!(cache.get(&"other", t0), None);
    cache.insert("k", false, t0 + ttl);
    assert_eq!(
        cache.get(&"k", t0 + ttl),
        Some(false),
        "a new answer replaces"
    );
}

#[test]
fn cache_stays_within_its_size_dropping_expired_then_soonest() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut cache = TtlCache::new(3, MIB, Duration::from_secs(10));
    cache.insert(1, true, t0);
    cache.insert(2, true, t0 + s);
    cache.insert(3, true, t0 + 2 * s);
    cache.insert(4, true, t0 + 3 * s);
    assert_eq!(cache.len(), 3);
    assert_eq!(
        cache.get(&1, t0 + 3 * s),
        None,
        "the soonest to expire went"
    );
    assert!(cache.get(&2, t0 + 3 * s).is_some());
    // At t0+12s, 2 and 3 have expired: both go, 4 and 5 stay.
    cache.insert(5, true, t0 + 12 * s);
    assert_eq!(cache.len(), 2);
    assert!(cache.get(&4, t0 + 12 * s).is_some());
    for i in 0..1000 {
        cache.insert(100 + i, true, t0 + 12 * s);
    }
    assert_eq!(cache.len(), 3, "bounded under a burst of keys");
    let mut zero = TtlCache::new(0, MIB, Duration::from_secs(1));
    zero.insert(1, true, t0);
    assert_eq!(zero.len(), 1, "a capacity of 0 still caches one answer");
}

#[test]
fn cache_stays_within_its_bytes_whatever_the_values_weigh() {
    let t0 = Instant::now();
    let budget = 64 * 1024;
    let mut cache = TtlCache::new(1_000_000, budget, Duration::from_secs(10));
    for i in 0..2_000u32 {
        let value = "x".repeat(1_000 + (i as usize % 7) * 1_000);
        assert!(cache.insert(i, value, t0));
        assert!(cache.bytes() <= budget, "{} > {budget}", cache.bytes());
    }
    assert!(cache.len() < 64, "{} entries", cache.len());
    let counted: usize = (0..2_000u32)
        .filter_map(|i| cache.last(&i))
        .map(|v| v.capacity() + size_of::<(u32, Entry<String>)>() + 1)
        .sum();
    assert_eq!(cache.bytes(), counted, "the count matches the entries");
    assert!(
        !cache.insert(9_999, "x".repeat(budget), t0),
        "a value over the whole budget is not kept"
    );
    assert_eq!(cache.last(&9_999), None);
    // Replacing an entry gives its bytes back.
    let before = cache.bytes();
    let key = (0..2_000u32).find(|i| cache.last(i).is_some()).unwrap();
    let old = cache.last(&key).unwrap().capacity();
    cache.insert(key, String::new(), t0);
    assert_eq!(cache.bytes(), before - old);
}

fn user(name: &str, groups: &[&str]) -> User {
    User {
        username: name.into(),
        uid: Some("uid-1".into()),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        extra: BTreeMap::new(),
    }
}

#[test]
fn keys_are_digests_of_everything_an_answer_depends_on() {
    let alice = user("alice", &["team-a"]);
    let get = |ns: &str, name: &str| Attributes::apps(Verb::Get, Some(ns), Some(name));
    let key = CacheKey::access(&alice, &get("a", "x"));
    assert_eq!(key, CacheKey::access(&alice.clone(), &get("a", "x")));
    let different = [
        CacheKey::access(&user("alice", &["team-b"]), &get("a", "x")),
        CacheKey::access(&user("bob", &["team-a"]), &get("a", "x")),
        CacheKey::access(&alice, &get("a", "y")),
        CacheKey::access(&alice, &get("ax", "")),
        CacheKey::access(&alice, &Attributes::apps(Verb::List, Some("a"), None)),
        CacheKey::access(&alice, &Attributes::apps(Verb::List, None, None)),
        CacheKey::access(&alice, &Attributes::Path("/metrics".into())),
        CacheKey::token(&TokenHash::of("t")),
    ];
    for other in different {
        assert_ne!(key, other);
    }
    let mut with_extra = alice.clone();
    with_extra.extra.insert("scope".into(), vec!["x".into()]);
    assert_ne!(key, CacheKey::access(&with_extra, &get("a", "x")));
    // The same size whatever it stands for.
    let huge = Attributes::apps(Verb::Get, Some(&"n".repeat(60_000)), Some("x"));
    assert_eq!(size_of_val(&CacheKey::access(&alice, &huge)), 32);
}
