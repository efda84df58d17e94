//! The status API for people and programs: an axum [`Router`] the server merges into its own.
//!
//! - `GET /apps?namespace=&project=&domain=` — JSON list of apps.
//! - `GET /apps/{namespace}/{name}` — one app, or 404.
//! - `GET /apps/watch?namespace=&name=&project=&domain=` — a stream of `CREATED` / `UPDATED` /
//!   `DELETED` / `RESYNC` events: NDJSON, or Server-Sent Events when the client accepts
//!   `text/event-stream`. It opens with the current state as `CREATED` events; a subscriber that
//!   falls more than the buffer behind gets `RESYNC` and then the current state as `UPDATED`.
//!
//! Served from this replica's cache; answers 503 until the cache has synced. Never calls the API.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use serde_json::json;

use super::hub::{AppKey, DEFAULT_SUBSCRIBER_BUFFER, Filter, Hub, WatchEvent};

#[derive(Clone)]
struct ApiState {
    hub: Arc<Hub>,
    synced: Arc<AtomicBool>,
    buffer: usize,
}

/// The status routes over a hub; `synced` gates them with 503 until the cache is complete.
pub fn router(hub: Arc<Hub>, synced: Arc<AtomicBool>) -> Router {
    router_with_buffer(hub, synced, DEFAULT_SUBSCRIBER_BUFFER)
}

/// [`router`] with a chosen per-subscriber queue length.
pub fn router_with_buffer(hub: Arc<Hub>, synced: Arc<AtomicBool>, buffer: usize) -> Router {
    Router::new()
        .route("/apps", get(list))
        .route("/apps/watch", get(watch))
        .route("/apps/{namespace}/{name}", get(one))
        .with_state(ApiState {
            hub,
            synced,
            buffer,
        })
}

fn not_synced() -> Response {
    let body =
        Json(json!({"error": "the app cache has not synced with the cluster yet; retry shortly"}));
    (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
}

async fn list(State(s): State<ApiState>, Query(filter): Query<Filter>) -> Response {
    if !s.synced.load(Ordering::Acquire) {
        return not_synced();
    }
    Json(s.hub.list(&filter)).into_response()
}

async fn one(
    State(s): State<ApiState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    if !s.synced.load(Ordering::Acquire) {
        return not_synced();
    }
    match s.hub.get(&AppKey {
        namespace: namespace.clone(),
        name: name.clone(),
    }) {
        Some(record) => Json(record).into_response(),
        None => {
            let error = format!(
                "no app {namespace}/{name}; list apps with GET /apps?namespace={namespace}"
            );
            (StatusCode::NOT_FOUND, Json(json!({ "error": error }))).into_response()
        }
    }
}

async fn watch(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Query(filter): Query<Filter>,
) -> Response {
    if !s.synced.load(Ordering::Acquire) {
        return not_synced();
    }
    let sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    let sub = s.hub.subscribe(filter, s.buffer);
    let stream = futures::stream::unfold(sub, move |mut sub| async move {
        let event = sub.next().await;
        Some((
            Ok::<Bytes, std::convert::Infallible>(encode(&event, sse)),
            sub,
        ))
    });
    let content_type = if sse {
        "text/event-stream"
    } else {
        "application/x-ndjson"
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// One event as an NDJSON line or an SSE frame.
pub fn encode(event: &WatchEvent, sse: bool) -> Bytes {
    let data = serde_json::to_string(event).unwrap_or_else(|_| r#"{"type":"RESYNC"}"#.to_owned());
    if sse {
        let kind = match event {
            WatchEvent::Created { .. } => "created",
            WatchEvent::Updated { .. } => "updated",
            WatchEvent::Deleted { .. } => "deleted",
            WatchEvent::Resync => "resync",
        };
        Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
    } else {
        Bytes::from(data + "\n")
    }
}
