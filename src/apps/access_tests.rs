use super::*;
use crate::watch::status::{AppStatus, Phase};

#[test]
fn bearer_headers() {
    let cases: [(Option<&str>, Result<&str, TokenError>); 9] = [
        (None, Err(TokenError::Missing)),
        (Some("Bearer abc.def"), Ok("abc.def")),
        (Some("bearer abc"), Ok("abc")),
        (Some("BEARER  abc  "), Ok("abc")),
        (Some("Bearer"), Err(TokenError::Malformed)),
        (Some("Bearer "), Err(TokenError::Malformed)),
        (Some("Basic dXNlcjpwYXNz"), Err(TokenError::Malformed)),
        (Some("Bearer a b"), Err(TokenError::Malformed)),
        (Some(""), Err(TokenError::Malformed)),
    ];
    for (header, want) in cases {
        assert_eq!(bearer(header.map(str::as_bytes)), want, "{header:?}");
    }
    assert_eq!(bearer(Some(b"Bearer \xff")), Err(TokenError::Malformed));
}

#[test]
fn token_hashes_differ_per_token_and_hide_it() {
    assert_eq!(TokenHash::of("a"), TokenHash::of("a"));
    assert_ne!(TokenHash::of("a"), TokenHash::of("b"));
    assert!(!format!("{:?}", TokenHash::of("secret")).contains("secret"));
}

#[test]
fn attributes_name_what_is_missing() {
    let cases = [
        (
            Attributes::apps(Verb::Get, Some("b"), Some("y")),
            "`get` on services.serving.knative.dev named `y` in namespace `b`",
        ),
        (
            Attributes::apps(Verb::List, None, None),
            "`list` on services.serving.knative.dev in all namespaces (cluster-wide)",
        ),
        (
            Attributes::apps(Verb::Watch, Some("a"), None),
            "`watch` on services.serving.knative.dev in namespace `a`",
        ),
        (
            Attributes::Path("/metrics".into()),
            "`get` on the non-resource URL /metrics",
        ),
    ];
    for (attrs, want) in cases {
        assert_eq!(attrs.to_string(), want);
    }
}

#[test]
fn cache_answers_until_the_ttl_then_forgets() {
    let t0 = Instant::now();
    let ttl = Duration::from_secs(10);
    let mut cache = TtlCache::new(4, ttl);
    cache.insert("k", true, t0);
    assert_eq!(cache.get(&"k", t0), Some(true));
    assert_eq!(
        cache.get(&"k", t0 + ttl - Duration::from_millis(1)),
        Some(true)
    );
    assert_eq!(cache.get(&"k", t0 + ttl), None, "expired at the TTL");
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
    let mut cache = TtlCache::new(3, Duration::from_secs(10));
    cache.insert(1, (), t0);
    cache.insert(2, (), t0 + s);
    cache.insert(3, (), t0 + 2 * s);
    cache.insert(4, (), t0 + 3 * s);
    assert_eq!(cache.len(), 3);
    assert_eq!(
        cache.get(&1, t0 + 3 * s),
        None,
        "the soonest to expire went"
    );
    assert!(cache.get(&2, t0 + 3 * s).is_some());
    // At t0+12s, 2 and 3 have expired: both go, 4 and 5 stay.
    cache.insert(5, (), t0 + 12 * s);
    assert_eq!(cache.len(), 2);
    assert!(cache.get(&4, t0 + 12 * s).is_some());
    for i in 0..1000 {
        cache.insert(100 + i, (), t0 + 12 * s);
    }
    assert_eq!(cache.len(), 3, "bounded under a burst of keys");
    let mut zero = TtlCache::new(0, Duration::from_secs(1));
    zero.insert(1, (), t0);
    assert_eq!(zero.len(), 1, "a capacity of 0 still caches one answer");
}

fn record(ns: &str, name: &str) -> AppRecord {
    AppRecord {
        namespace: ns.into(),
        name: name.into(),
        project: None,
        domain: None,
        app_name: None,
        status: AppStatus {
            phase: Phase::Active,
            message: String::new(),
            last_transition_time: "2026-12-01T00:00:00Z".into(),
            replicas: None,
            url: None,
            substate: None,
        },
    }
}

#[test]
fn the_filter_keeps_the_allowed_namespaces_in_order() {
    let apps = vec![
        record("a", "1"),
        record("b", "2"),
        record("a", "3"),
        record("c", "4"),
    ];
    let namespaces = namespaces_of(&apps);
    assert_eq!(namespaces.iter().collect::<Vec<_>>(), ["a", "b", "c"]);
    let allowed = BTreeSet::from(["a".to_owned(), "c".to_owned()]);
    let kept: Vec<_> = keep_namespaces(apps, &allowed)
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(kept, ["1", "3", "4"]);
}

#[test]
fn stream_limits_per_caller_and_overall() {
    let mut limits = StreamLimits::new(3, 2);
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
