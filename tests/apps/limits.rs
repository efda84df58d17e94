//! What the status API spends for a caller who means harm: names checked before any review,
//! oversized tokens refused unasked, reviews within their budgets (429/503 with `Retry-After`
//! beyond, never "allowed"), cached answers within their bytes, tokens held to the configured
//! audiences, and watch streams counted per ServiceAccount namespace. Reviews are counted at the
//! in-test API server.
// Test helpers outside #[test] fns panic on a failed setup step, as the tests would.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use ksvc_webhook::apps::auth::Settings;
use ksvc_webhook::apps::auth::limits::Rate;
use ksvc_webhook::apps::streams::Maximums;
use support::fake_api::Fault;
use support::fake_api::authn::REJECTION;
use support::status_api::{assert_code, fake, get, get_full, request, reviews, setup, setup_with};
use tower::ServiceExt;

const STREAMS: Maximums = Maximums {
    total: 64,
    per_caller: 16,
    per_namespace: 64,
};

/// The status code of every answer to `uris`, sent all at once by the holder of `token`, with
/// whether each refusal said when to retry.
async fn flood(
    app: &axum::Router,
    uris: Vec<String>,
    token: impl Fn(usize) -> String,
) -> Vec<(StatusCode, bool)> {
    let sent = uris.iter().enumerate().map(|(i, uri)| {
        let app = app.clone();
        let req = request(uri, Some(&token(i)));
        tokio::spawn(async move { app.oneshot(req).await.unwrap() })
    });
    let answers = futures::future::join_all(sent).await;
    answers
        .into_iter()
        .map(|a| {
            let a = a.unwrap();
            (a.status(), a.headers().contains_key("retry-after"))
        })
        .collect()
}

fn count(answers: &[(StatusCode, bool)], code: StatusCode) -> usize {
    answers.iter().filter(|(c, _)| *c == code).count()
}

/// A flood's `answers` held to a review budget of `budget`, of which `sent` were spent: one
/// `refusal` per review sent, never anything allowed, the rest waiting for the budget (429) or
/// for room (503), each saying when to retry. `(429s, 503s)`.
fn held_to_budget(
    answers: &[(StatusCode, bool)],
    refusal: StatusCode,
    sent: usize,
    budget: f64,
) -> (usize, usize) {
    let (refused, limited, busy) = (
        count(answers, refusal),
        count(answers, StatusCode::TOO_MANY_REQUESTS),
        count(answers, StatusCode::SERVICE_UNAVAILABLE),
    );
    let all = answers.len();
    assert_eq!(
        refused + limited + busy,
        all,
        "never allowed, never anything else"
    );
    assert_eq!(refused, sent, "every review sent answered its request");
    assert!(
        limited >= all.saturating_sub(budget as usize),
        "the rest waits for the budget: {limited}"
    );
    assert!(
        answers.iter().all(|(c, retry)| *c == refusal || *retry),
        "every 429 and 503 says when to retry"
    );
    (limited, busy)
}

#[tokio::test]
async fn malformed_and_oversized_names_get_400_before_any_review() {
    let fake = fake().await;
    let s = setup(fake.client(), Duration::from_secs(10), (8, 8));
    let huge = "a".repeat(60_000);
    let uris = [
        format!("/apps/a/{huge}"),
        format!("/apps/{huge}/x"),
        "/apps/A/x".to_owned(),
        "/apps/a/X".to_owned(),
        "/apps/a/-x".to_owned(),
        "/apps/a/x%2Fy".to_owned(),
        "/apps/a/0x".to_owned(),
        format!("/apps?namespace={huge}"),
        "/apps?namespace=a%0Ab".to_owned(),
        format!("/apps/watch?namespace=a&name={huge}"),
        "/apps/watch?name=a.b".to_owned(),
        format!("/apps?project={huge}"),
        "/apps?domain=a%20b".to_owned(),
    ];
    for uri in &uris {
        for token in [Some("t-nobody"), Some("t-garbage"), None] {
            let (code, body) = get(&s.app, uri, token).await;
            let shown: String = body.to_string().chars().take(300).collect();
            assert_eq!(code, StatusCode::BAD_REQUEST, "{uri:.60}: {shown}");
            let error = body["error"].as_str().unwrap();
            assert!(error.len() < 400, "{uri:.60}: a short message: {error}");
            assert!(
                ["namespace ", "name ", "project ", "domain "]
                    .iter()
                    .any(|w| error.starts_with(w)),
                "names the bad value: {error}"
            );
        }
    }
    let (_, body) = get(&s.app, &uris[0], Some("t-nobody")).await;
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("(60000 bytes)") && error.contains("more than 63"),
        "{error}"
    );
    let (_, body) = get(&s.app, "/apps?namespace=a%0Ab", None).await;
    assert!(
        body["error"].as_str().unwrap().contains(r#""a\nb""#),
        "escaped: {body}"
    );
    assert_eq!(reviews(&fake, "tokenreviews"), 0, "no TokenReview");
    assert_eq!(
        reviews(&fake, "subjectaccessreviews"),
        0,
        "no SubjectAccessReview"
    );
    // Well-formed names still go through.
    assert_code(&s.app, "/apps/a/x", "t-alice", StatusCode::OK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_distinct_names_is_held_to_the_callers_review_budget() {
    let fake = fake().await;
    // Room for every review in flight at once: the budget, not the concurrency, binds.
    let settings = Settings {
        max_in_flight: 1_000,
        ..Settings::default()
    };
    let Rate { per_second, burst } = settings.caller_rate;
    let s = setup_with(fake.client(), settings, STREAMS);
    let started = Instant::now();
    let uris = (0..2_000).map(|i| format!("/apps/a/app-{i}")).collect();
    let answers = flood(&s.app, uris, |_| "t-nobody".to_owned()).await;
    let elapsed = started.elapsed().as_secs_f64();

    let sent = reviews(&fake, "subjectaccessreviews");
    let budget = f64::from(burst) + f64::from(per_second) * elapsed.ceil();
    assert!(
        (sent as f64) <= budget,
        "{sent} SubjectAccessReviews in {elapsed:.1}s, over the budget of {budget}"
    );
    let (limited, busy) = held_to_budget(&answers, StatusCode::FORBIDDEN, sent, budget);
    eprintln!("names: {sent} reviews in {elapsed:.2}s, {limited} × 429, {busy} × 503");
    assert_eq!(
        reviews(&fake, "tokenreviews"),
        1,
        "one token, one TokenReview"
    );
    let refused = |reason| {
        s.metrics
            .refused
            .get_or_create(&vec![("kind", "access"), ("reason", reason)])
            .get()
    };
    assert_eq!(refused("rate_limited") as usize, limited);
    assert_eq!(refused("overloaded") as usize, busy);
    // Another caller has a budget of its own.
    assert_code(&s.app, "/apps/a/x", "t-alice", StatusCode::OK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_cache_stays_within_its_bytes_under_distinct_names() {
    let fake = fake().await;
    let cache_bytes = 16 * 1024;
    let settings = Settings {
        cache_size: 1_000_000,
        cache_bytes,
        caller_rate: Rate {
            per_second: 100_000,
            burst: 100_000,
        },
        max_in_flight: 1_000,
        ..Settings::default()
    };
    let s = setup_with(fake.client(), settings, STREAMS);
    let bytes = |cache| {
        s.metrics
            .cache_bytes
            .get_or_create(&vec![("cache", cache)])
            .get()
    };
    for batch in 0..10 {
        let uris = (0..200)
            .map(|i| format!("/apps/a/app-{batch}-{i}"))
            .collect();
        let answers = flood(&s.app, uris, |_| "t-nobody".to_owned()).await;
        assert_eq!(count(&answers, StatusCode::FORBIDDEN), 200, "batch {batch}");
        assert!(
            bytes("access") <= cache_bytes as i64,
            "{} bytes",
            bytes("access")
        );
    }
    assert_eq!(
        reviews(&fake, "subjectaccessreviews"),
        2_000,
        "each name asked once"
    );
    let held = bytes("access");
    assert!(held > cache_bytes as i64 / 2, "the budget is used: {held}");
    assert!(
        bytes("token") > 0 && bytes("token") < 2_048,
        "one token: {}",
        bytes("token")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_garbage_tokens_is_held_to_the_new_token_budget() {
    let fake = fake().await;
    let settings = Settings {
        // Short enough that alice's answer expires during the test.
        ttl: Duration::from_millis(50),
        max_in_flight: 1_000,
        // One new token a second: a loaded machine's pauses between the flood and the last
        // request below do not refill the budget.
        new_token_rate: Rate {
            per_second: 1,
            burst: 40,
        },
        ..Settings::default()
    };
    let Rate { per_second, burst } = settings.new_token_rate;
    let s = setup_with(fake.client(), settings, STREAMS);
    assert_code(&s.app, "/apps/a/x", "t-alice", StatusCode::OK).await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    let started = Instant::now();
    let uris = vec!["/apps/a/x".to_owned(); 1_000];
    let answers = flood(&s.app, uris, |i| format!("garbage-{i}")).await;
    let elapsed = started.elapsed().as_secs_f64();
    let sent = reviews(&fake, "tokenreviews") - 1;
    let budget = f64::from(burst) + f64::from(per_second) * elapsed.ceil();
    assert!(
        (sent as f64) <= budget,
        "{sent} TokenReviews in {elapsed:.1}s, over the budget of {budget}"
    );
    let (limited, _) = held_to_budget(&answers, StatusCode::UNAUTHORIZED, sent, budget);
    eprintln!("tokens: {sent} reviews in {elapsed:.2}s, {limited} × 429");
    assert_eq!(reviews(&fake, "subjectaccessreviews"), 1, "only alice's");

    // The new-token budget is spent, yet alice's expired token is known: it is re-checked on
    // her own budget.
    let (code, body) = get(&s.app, "/apps/a/x", Some("t-alice")).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let (code, headers, body) = get_full(&s.app, "/apps/a/x", Some("garbage-new")).await;
    assert_eq!(code, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(headers.contains_key("retry-after"));
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("too many new tokens"),
        "{body}"
    );
}

#[tokio::test]
async fn too_many_reviews_in_flight_is_503_never_allowed() {
    let fake = fake().await;
    let settings = Settings {
        max_in_flight: 1,
        timeout: Duration::from_millis(500),
        ..Settings::default()
    };
    let s = setup_with(fake.client(), settings, STREAMS);
    assert_code(&s.app, "/apps/a/x", "t-admin", StatusCode::OK).await;
    fake.inject("create", "subjectaccessreviews", None, Fault::Hang, 1);
    let hung = tokio::spawn({
        let app = s.app.clone();
        async move { get(&app, "/apps/a/w", Some("t-admin")).await.0 }
    });
    support::poll::until("the review hangs", support::poll::LIMIT, || {
        fake.faults_left() == 0
    })
    .await;
    let (code, headers, body) = get_full(&s.app, "/apps/b/y", Some("t-admin")).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(headers["retry-after"], "5");
    assert!(
        body["error"].as_str().unwrap().contains("in flight"),
        "{body}"
    );
    assert_eq!(
        hung.await.unwrap(),
        StatusCode::SERVICE_UNAVAILABLE,
        "the timeout ends it"
    );
    assert_code(&s.app, "/apps/b/y", "t-admin", StatusCode::OK).await;
}

#[tokio::test]
async fn an_oversized_token_is_401_without_a_review() {
    let fake = fake().await;
    let s = setup(fake.client(), Duration::from_secs(10), (8, 8));
    let token = "x".repeat(9_000);
    let (code, headers, body) = get_full(&s.app, "/apps/a/x", Some(&token)).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "{body}");
    assert!(headers.contains_key("www-authenticate"));
    assert!(
        body["error"].as_str().unwrap().contains("9000 bytes"),
        "{body}"
    );
    assert_eq!(reviews(&fake, "tokenreviews"), 0);
}

#[tokio::test]
async fn tokens_must_be_minted_for_the_configured_audience() {
    let fake = fake().await;
    fake.add_token_for("t-minted", "dashboard", &[], &["ksvc-webhook"]);
    fake.add_audience_unaware_token("t-unaware", "dashboard");
    fake.grant("dashboard", "get", Some("a"));
    let settings = Settings {
        audiences: Arc::new(["ksvc-webhook".to_owned()]),
        ..Settings::default()
    };
    let s = setup_with(fake.client(), settings, STREAMS);
    assert_code(&s.app, "/apps/a/x", "t-minted", StatusCode::OK).await;
    let sent = fake.requests_to(Method::POST, "tokenreviews");
    assert_eq!(
        sent[0].body["spec"]["audiences"],
        serde_json::json!(["ksvc-webhook"])
    );
    for token in ["t-alice", "t-unaware"] {
        let (code, body) = get(&s.app, "/apps/a/x", Some(token)).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED, "{token}: {body}");
        let error = body["error"].as_str().unwrap();
        assert!(error.contains("--audience ksvc-webhook"), "{error}");
        assert!(!error.contains(REJECTION), "{error}");
    }
    // Without audiences, the API server's own: the minted token is not for it.
    let s = setup(fake.client(), Duration::from_secs(10), (8, 8));
    assert_code(&s.app, "/apps/a/x", "t-alice", StatusCode::OK).await;
    assert_code(&s.app, "/apps/a/x", "t-minted", StatusCode::UNAUTHORIZED).await;
    let last = fake
        .requests_to(Method::POST, "tokenreviews")
        .pop()
        .unwrap();
    assert!(last.body["spec"]["audiences"].is_null());
}

#[tokio::test]
async fn streams_of_one_service_account_namespace_are_capped() {
    let fake = fake().await;
    let sa = |ns: &str, n: u32| format!("system:serviceaccount:{ns}:sa-{n}");
    for (ns, n) in [("tenant", 0), ("tenant", 1), ("tenant", 2), ("other", 0)] {
        fake.add_token(&format!("t-{ns}-{n}"), &sa(ns, n), &[]);
        fake.grant(&sa(ns, n), "watch", None);
    }
    let streams = Maximums {
        total: 8,
        per_caller: 8,
        per_namespace: 2,
    };
    let s = setup_with(fake.client(), Settings::default(), streams);
    let open = |token: &'static str| s.app.clone().oneshot(request("/apps/watch", Some(token)));
    let first = open("t-tenant-0").await.unwrap();
    let second = open("t-tenant-1").await.unwrap();
    assert_eq!(
        (first.status(), second.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    let third = open("t-tenant-2").await.unwrap();
    assert_eq!(
        third.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "a third ServiceAccount of tenant"
    );
    assert_eq!(third.headers()["retry-after"], "5");
    let (_, body) = support::status_api::body_of(third).await;
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains(r#"namespace "tenant""#),
        "{body}"
    );
    assert_eq!(open("t-other-0").await.unwrap().status(), StatusCode::OK);
    let rejected = s
        .metrics
        .watch_rejected
        .get_or_create(&vec![("limit", "per_namespace")])
        .get();
    assert_eq!(rejected, 1);
    drop(first);
    assert_eq!(
        open("t-tenant-2").await.unwrap().status(),
        StatusCode::OK,
        "freed"
    );
}
