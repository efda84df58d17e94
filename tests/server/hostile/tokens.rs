//! Issue 28, the last row: garbage tokens on `/apps` from four pods while the API server is slow
//! (every TokenReview takes a second). Meanwhile a token the server has never seen, sent from
//! 127.0.0.1, gets 200; a known caller's requests, each needing a SubjectAccessReview, are never
//! refused 503; and an authorized `/apps/watch` stream is re-checked and stays open.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::StatusCode;
use hyper::http::Method;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::attack;
use super::served::{DEPLOYMENT, Served};
use support::harness::SERVER_NAME;
use support::poll;
use support::{FakeApi, ksvc};

/// How long each TokenReview takes at the API server.
const SLOW: Duration = Duration::from_secs(1);
/// Connections each attacker address floods from.
const PER_ATTACKER: usize = 4;
/// How long the flood runs: past the stream's first re-check (10 s) and its token's expiry.
const FLOOD: Duration = Duration::from_secs(14);

/// Until `end`, distinct garbage tokens on `/apps` over one connection from `from`, with
/// how often each status came back.
async fn garbage(served: Arc<Served>, from: IpAddr, id: usize, end: Instant) -> Vec<StatusCode> {
    let mut seen = Vec::new();
    let mut conn = None;
    let mut n = 0;
    while Instant::now() < end {
        n += 1;
        let mut c = match conn.take() {
            Some(c) => c,
            None => match served.connect(Some(from), &[b"http/1.1"]).await {
                Ok(c) => c,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let token = format!("garbage-{from}-{id}-{n}");
        if let Ok((status, _)) = c.send(attack::get("/apps/apps/app-0", &token)).await {
            seen.push(status);
            conn = Some(c);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    seen
}

/// Until `end`, a known caller from 127.0.0.1: one app after another, each a new access
/// review, on a fresh connection each; the statuses it got.
async fn known(served: Arc<Served>, end: Instant) -> Vec<StatusCode> {
    let mut seen = Vec::new();
    let mut n = 0;
    while Instant::now() < end {
        n += 1;
        let path = format!("/apps/apps/app-{}", n % 20);
        let mut conn = served.h1().await;
        let (status, _) = conn.send(attack::get(&path, "t-viewer")).await.unwrap();
        seen.push(status);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    seen
}

/// An `/apps/watch` stream of `token` from 127.0.0.1, read into `into` until the server ends
/// it (then `ended` is set).
async fn watch(served: Arc<Served>, token: &str, into: Arc<Mutex<(String, bool)>>) {
    let loopback = IpAddr::from([127, 0, 0, 1]);
    let mut tls = attack::tls_from(&served, loopback).await.unwrap();
    let request = format!(
        "GET /apps/watch?namespace=apps HTTP/1.1\r\nhost: {SERVER_NAME}\r\nauthorization: Bearer {token}\r\n\r\n"
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0; 16 * 1024];
    loop {
        match tls.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => into
                .lock()
                .unwrap()
                .0
                .push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    into.lock().unwrap().1 = true;
}

/// Garbage tokens answered so far: reviewed (and rejected), or refused before a review.
async fn garbage_answered(served: &Served) -> f64 {
    let mut sum = 0.0;
    for line in [
        "reviews_total{kind=\"token\",result=\"denied\"} ",
        "refused_total{kind=\"token\",reason=\"rate_limited\"} ",
        "refused_total{kind=\"token\",reason=\"overloaded\"} ",
    ] {
        let metric = format!("ksvc_webhook_status_{line}");
        sum += served.metric(&metric).await.unwrap_or(0.0);
    }
    sum
}

fn token_reviews_of(fake: &FakeApi, token: &str) -> usize {
    fake.requests_to(Method::POST, "tokenreviews")
        .iter()
        .filter(|r| r.body["spec"]["token"] == token)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_tokens_from_four_pods_leave_new_and_known_callers_their_share() {
    let fake = FakeApi::start().await;
    for i in 0..20 {
        fake.put(
            "services",
            ksvc(&format!("app-{i}"), false, false, 1, &[], ""),
        );
    }
    for token in ["t-viewer", "t-fresh"] {
        fake.add_token(token, "viewer", &[]);
    }
    for verb in ["get", "list", "watch"] {
        fake.grant("viewer", verb, None);
    }
    let args: Vec<&str> = DEPLOYMENT
        .iter()
        .copied()
        .chain(["--pod-name=tokens"])
        .collect();
    let served = Served::start(&args, Some(&fake));
    let s = &served;
    let synced = || async move {
        let answer = s.h1().await.send(attack::get("/apps", "t-viewer")).await;
        answer.is_ok_and(|(status, _)| status == StatusCode::OK)
    };
    poll::until_async("the status API serves the cache", poll::LIMIT, synced).await;
    let served = Arc::new(served);
    let stream = Arc::new(Mutex::new((String::new(), false)));
    let watching = tokio::spawn(watch(served.clone(), "t-viewer", stream.clone()));
    poll::until("the stream sends the apps", poll::LIMIT, || {
        stream.lock().unwrap().0.contains("app-19")
    })
    .await;
    fake.delay_writes("tokenreviews", "", "", SLOW);

    let end = Instant::now() + FLOOD;
    let attackers: Vec<_> = (0..4 * PER_ATTACKER)
        .map(|i| tokio::spawn(garbage(served.clone(), attack::attacker(i), i, end)))
        .collect();
    let caller = tokio::spawn(known(served.clone(), end));
    // The flood is under way: a hundred garbage tokens reviewed (401) or refused unasked.
    let flooding = || async { garbage_answered(&served).await >= 100.0 };
    poll::until_async("the flood is under way", poll::LIMIT, flooding).await;
    let mut fresh = served.h1().await;
    let (status, body) = fresh
        .send(attack::get("/apps/apps/app-1", "t-fresh"))
        .await
        .unwrap();
    assert_eq!(
        status,
        StatusCode::OK,
        "a new token during the flood: {}",
        String::from_utf8_lossy(&body)
    );

    let mut flood = std::collections::BTreeMap::new();
    for attacker in attackers {
        for status in attacker.await.unwrap() {
            *flood.entry(status.as_u16()).or_insert(0) += 1;
        }
    }
    let caller = caller.await.unwrap();
    eprintln!(
        "tokens: garbage answers {flood:?}; known caller: {} requests, {:?}",
        caller.len(),
        caller
            .iter()
            .filter(|s| **s != StatusCode::OK)
            .collect::<Vec<_>>()
    );
    assert!(
        flood.contains_key(&401),
        "some garbage was reviewed: {flood:?}"
    );
    assert!(caller.len() >= 20, "{}", caller.len());
    assert!(
        caller.iter().all(|s| *s == StatusCode::OK),
        "the known caller was refused: {caller:?}"
    );
    assert!(
        token_reviews_of(&fake, "t-viewer") >= 2,
        "the known token was reviewed again during the flood"
    );

    // The stream was re-checked during the flood and is still open: a new app reaches it.
    fake.put("services", ksvc("late", false, false, 1, &[], ""));
    poll::until("the stream sends the new app", poll::LIMIT, || {
        stream.lock().unwrap().0.contains("\"late\"")
    })
    .await;
    let (text, ended) = stream.lock().unwrap().clone();
    assert!(
        !ended && !text.contains("ERROR"),
        "the stream was cut: {text:.2000}"
    );
    watching.abort();
}
