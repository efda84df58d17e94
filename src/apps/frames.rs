//! How `/apps/watch` writes on the wire: each event as an NDJSON line, or as a Server-Sent Events
//! frame when the client accepts `text/event-stream`; and the last frame of a stream that ends
//! (access gone, or the server stopping), an `ERROR` with a Kubernetes-style status. Pure
//! encoding; never decides when a stream ends.

use axum::http::StatusCode;
use bytes::Bytes;
use serde_json::json;

use super::auth::Refusal;
use crate::watch::hub::WatchEvent;

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

/// The last frame of a stream whose caller lost access: `{"type":"ERROR","status":{…}}`.
pub fn encode_end(refusal: &Refusal, sse: bool) -> Bytes {
    encode_error(refusal.status(), &format!("stream ended: {refusal}"), sse)
}

/// The last frame of every stream when the server stops: an `ERROR` of code 503.
pub fn encode_going_away(sse: bool) -> Bytes {
    let message = "stream ended: the server is shutting down; reconnect to reach another replica";
    encode_error(StatusCode::SERVICE_UNAVAILABLE, message, sse)
}

/// `{"type":"ERROR","status":{"code","reason","message"}}`, as NDJSON or an SSE `error` frame.
fn encode_error(code: StatusCode, message: &str, sse: bool) -> Bytes {
    let status = json!({
        "code": code.as_u16(),
        "reason": code.canonical_reason().unwrap_or_default(),
        "message": message,
    });
    let data = json!({"type": "ERROR", "status": status}).to_string();
    match sse {
        true => Bytes::from(format!("event: error\ndata: {data}\n\n")),
        false => Bytes::from(data + "\n"),
    }
}
