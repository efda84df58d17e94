//! The status routes: `/apps`, `/apps/{namespace}/{name}`, `/apps/watch` (NDJSON and SSE).
// Test helpers outside #[test] fns panic on a failed setup step, as the tests would.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use ksvc_webhook::apps::http::router_with_buffer;
use ksvc_webhook::watch::hub::{AppRecord, Hub};
use ksvc_webhook::watch::status::{AppStatus, Phase};
use serde_json::Value;
use tower::ServiceExt;

fn record(ns: &str, name: &str, project: &str, phase: Phase) -> AppRecord {
    AppRecord {
        namespace: ns.into(),
        name: name.into(),
        project: Some(project.into()),
        domain: Some("dev".into()),
        app_name: Some(name.into()),
        status: AppStatus {
            phase,
            message: format!("{phase:?}"),
            last_transition_time: "2026-11-30T00:00:00Z".into(),
            replicas: Some(1),
            url: None,
            substate: None,
        },
        drift: Default::default(),
    }
}

async fn get(app: &axum::Router, uri: &str) -> (StatusCode, Value) {
    let resp = app
        .clone()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

/// Read NDJSON lines from a streaming body until `n` lines are in.
async fn lines(body: &mut Body, n: usize) -> Vec<Value> {
    let mut buf = String::new();
    while buf.lines().count() < n {
        let frame = body.frame().await.unwrap().unwrap();
        buf.push_str(std::str::from_utf8(frame.data_ref().unwrap()).unwrap());
    }
    buf.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn list_and_get_are_filtered_and_gated_on_sync() {
    let hub = Hub::new();
    let synced = Arc::new(AtomicBool::new(false));
    let app = router_with_buffer(hub.clone(), synced.clone(), 8);
    assert_eq!(get(&app, "/apps").await.0, StatusCode::SERVICE_UNAVAILABLE);

    synced.store(true, Ordering::Release);
    hub.upsert(record("a", "x", "p1", Phase::Active));
    hub.upsert(record("b", "y", "p1", Phase::Stopped));
    hub.upsert(record("b", "z", "p2", Phase::Failed));
    let names = |v: Value| {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(get(&app, "/apps").await.1), ["x", "y", "z"]);
    assert_eq!(names(get(&app, "/apps?namespace=b").await.1), ["y", "z"]);
    assert_eq!(
        names(get(&app, "/apps?project=p1&domain=dev").await.1),
        ["x", "y"]
    );
    let (code, one) = get(&app, "/apps/b/y").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(one["status"]["phase"], "STOPPED");
    let (code, missing) = get(&app, "/apps/b/nope").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(missing["error"].as_str().unwrap().contains("b/nope"));
}

#[tokio::test]
async fn watch_streams_created_updated_deleted_as_ndjson() {
    let hub = Hub::new();
    let app = router_with_buffer(hub.clone(), Arc::new(AtomicBool::new(true)), 8);
    hub.upsert(record("ns", "a", "p", Phase::Pending));
    let resp = app
        .oneshot(
            Request::get("/apps/watch?namespace=ns")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let mut body = resp.into_body();
    hub.upsert(record("ns", "a", "p", Phase::Active));
    hub.upsert(record("other", "b", "p", Phase::Active));
    hub.remove(&record("ns", "a", "p", Phase::Active).key());
    let got = lines(&mut body, 3).await;
    let kinds: Vec<(&str, &str)> = got
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap(),
                e["app"]["status"]["phase"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("CREATED", "PENDING"),
            ("UPDATED", "ACTIVE"),
            ("DELETED", "ACTIVE")
        ]
    );
}

#[tokio::test]
async fn a_slow_watcher_gets_resync_and_the_current_state() {
    let hub = Hub::new();
    let app = router_with_buffer(hub.clone(), Arc::new(AtomicBool::new(true)), 2);
    let resp = app
        .oneshot(Request::get("/apps/watch").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let mut body = resp.into_body();
    // The client reads nothing while ten transitions happen: its buffer of two overflows.
    for i in 0..10 {
        hub.upsert(record(
            "ns",
            "a",
            "p",
            if i % 2 == 0 {
                Phase::Deploying
            } else {
                Phase::Active
            },
        ));
        hub.upsert(record("ns", &format!("b{i}"), "p", Phase::Pending));
    }
    let got = lines(&mut body, 12).await;
    assert_eq!(got[0]["type"], "RESYNC");
    assert_eq!(got.len(), 12, "resync, then the 11 apps");
    let a = got.iter().find(|e| e["app"]["name"] == "a").unwrap();
    assert_eq!(
        (a["type"].as_str(), a["app"]["status"]["phase"].as_str()),
        (Some("UPDATED"), Some("ACTIVE"))
    );
}

#[tokio::test]
async fn watch_speaks_server_sent_events_when_asked() {
    let hub = Hub::new();
    let app = router_with_buffer(hub.clone(), Arc::new(AtomicBool::new(true)), 8);
    hub.upsert(record("ns", "a", "p", Phase::Active));
    let req = Request::get("/apps/watch?name=a")
        .header("accept", "text/event-stream")
        .body(Body::empty())
        .unwrap();
    let resp = app.oneshot(req).await.unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let frame = resp.into_body().frame().await.unwrap().unwrap();
    let text = std::str::from_utf8(frame.data_ref().unwrap())
        .unwrap()
        .to_owned();
    assert!(text.starts_with("event: created\ndata: {"), "{text}");
    assert!(text.ends_with("}\n\n"), "{text}");
}

#[tokio::test]
async fn listings_page_with_limit_and_continue_and_full_ones_stream_two_at_a_time() {
    let hub = Hub::new();
    for i in 0..1203 {
        hub.upsert(record(
            &format!("ns-{}", i % 7),
            &format!("app-{i:04}"),
            "p",
            Phase::Active,
        ));
    }
    let app = router_with_buffer(hub.clone(), Arc::new(AtomicBool::new(true)), 16);
    let (_, whole) = get(&app, "/apps").await;
    let whole = whole.as_array().unwrap().clone();
    assert_eq!(whole.len(), 1203);

    // Pages of 500 follow the continue header to the same list, in (namespace, name) order.
    let mut paged = Vec::new();
    let mut uri = "/apps?limit=500".to_owned();
    let mut pages = 0;
    loop {
        let resp = app
            .clone()
            .oneshot(Request::get(&uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let next = resp
            .headers()
            .get("x-ksvc-webhook-continue")
            .map(|v| v.to_str().unwrap().to_owned());
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let page: Vec<Value> = serde_json::from_slice(&bytes).unwrap();
        pages += 1;
        assert!(page.len() <= 500);
        paged.extend(page);
        match next {
            Some(token) => uri = format!("/apps?limit=500&continue={token}"),
            None => break,
        }
    }
    assert_eq!((pages, &paged), (3, &whole));
    let keys: Vec<(String, String)> = paged
        .iter()
        .map(|r| {
            (
                r["namespace"].as_str().unwrap().into(),
                r["name"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]));

    // A filtered listing pages too; its token is refused with other filters.
    let (status, page) = get(&app, "/apps?namespace=ns-3&limit=100").await;
    assert_eq!(
        (status, page.as_array().unwrap().len()),
        (StatusCode::OK, 100)
    );
    let resp = app
        .clone()
        .oneshot(
            Request::get("/apps?namespace=ns-3&limit=100")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let token = resp.headers()["x-ksvc-webhook-continue"]
        .to_str()
        .unwrap()
        .to_owned();
    let (status, body) = get(
        &app,
        &format!("/apps?namespace=ns-4&limit=100&continue={token}"),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"].as_str().unwrap().contains("other filters"),
        "{body}"
    );
    for bad in [
        "/apps?limit=0",
        "/apps?limit=5001",
        "/apps?limit=x",
        "/apps?continue=abc",
        "/apps?limit=5&continue=%21%21",
    ] {
        let (status, body) = get(&app, bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(
            body["error"].as_str().unwrap().contains("limit")
                || body["error"].as_str().unwrap().contains("continue"),
            "{bad}: {body}"
        );
    }

    // Full listings are streamed; a third while two are being sent is told to retry.
    let full = || {
        app.clone()
            .oneshot(Request::get("/apps").body(Body::empty()).unwrap())
    };
    let first = full().await.unwrap();
    let second = full().await.unwrap();
    let third = full().await.unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(third.headers().contains_key("retry-after"));
    let (_, body) = support::status_api::body_of(third).await;
    assert!(
        body["error"].as_str().unwrap().contains("limit=500"),
        "{body}"
    );
    // A listing read to its end frees its place.
    let (status, body) = support::status_api::body_of(first).await;
    assert_eq!(
        (status, body.as_array().unwrap().len()),
        (StatusCode::OK, 1203)
    );
    assert_eq!(full().await.unwrap().status(), StatusCode::OK);
    drop(second);
}
