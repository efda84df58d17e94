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
    let longest = format!("Bearer {}", "a".repeat(MAX_TOKEN_BYTES));
    assert_eq!(
        bearer(Some(longest.as_bytes())).map(str::len),
        Ok(MAX_TOKEN_BYTES)
    );
    let over = format!("Bearer {}", "a".repeat(MAX_TOKEN_BYTES + 1));
    assert_eq!(
        bearer(Some(over.as_bytes())),
        Err(TokenError::TooLong(MAX_TOKEN_BYTES + 1))
    );
}

#[test]
fn service_account_callers_name_their_namespace() {
    let cases = [
        ("system:serviceaccount:team-a:dashboard", Some("team-a")),
        ("system:serviceaccount:team-a:", None),
        ("system:serviceaccount::dashboard", None),
        ("system:serviceaccount:team-a", None),
        ("alice@example.com", None),
        ("system:node:n1", None),
    ];
    for (username, want) in cases {
        assert_eq!(service_account_namespace(username), want, "{username}");
    }
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
        drift: Default::default(),
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
        .map(|a| a.name.to_string())
        .collect();
    assert_eq!(kept, ["1", "3", "4"]);
}
