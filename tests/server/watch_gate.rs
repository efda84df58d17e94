//! Admission readiness is admission's: the real binary, with a watch loop whose API server never
//! answers or refuses every list, is ready and answers reviews, while `/apps` answers 503.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::{StatusCode as AxumStatus, Uri};
use axum::response::IntoResponse;
use hyper::StatusCode;
use serde_json::json;

use crate::cli::{BIN, certs, listen_addr, stdout_lines};
use support::harness::{self, KillOnDrop, review};
use support::poll;

/// An API server that accepts connections and never answers; counts the connections.
async fn silent_api() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });
    (addr, accepted)
}

/// An API server that answers the version probe and refuses everything else with 403, as an API
/// server does when the ServiceAccount lacks RBAC; counts the refused lists of KServices.
async fn denying_api() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let denied = Arc::new(AtomicUsize::new(0));
    let count = denied.clone();
    let app = axum::Router::new()
        .route(
            "/version",
            axum::routing::get(|| async { axum::Json(json!({"major": "1", "minor": "35"})) }),
        )
        .fallback(move |uri: Uri| {
            let count = count.clone();
            async move {
                if uri.path().ends_with("/services") {
                    count.fetch_add(1, Ordering::SeqCst);
                }
                let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Failure", "reason": "Forbidden", "code": 403,
                    "message": format!("forbidden: cannot get {}", uri.path())});
                (AxumStatus::FORBIDDEN, axum::Json(status)).into_response()
            }
        });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, denied)
}

/// Start `serve` against the API server at `api`; once the loop has tried it (`tried` counts
/// above zero), admission must be ready and answer while `/apps` refuses.
async fn admission_ready_while_the_loop_cannot_sync(api: SocketAddr, tried: Arc<AtomicUsize>) {
    let dir = tempfile::tempdir().unwrap();
    let tls = certs(dir.path());
    let ca = std::fs::read_to_string(tls.join("ca.crt")).unwrap();
    let child = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--self-managed-certs=false",
        ])
        .arg("--tls-dir")
        .arg(&tls)
        .arg("--kubeconfig")
        .arg(support::kubeconfig(
            &format!("http://{api}"),
            "system",
            dir.path(),
        ))
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(Some(child));
    let addr = listen_addr(&mut stdout_lines(&mut child));
    let reached = || tried.load(Ordering::SeqCst) > 0;
    poll::until(
        "the watch loop reaches the API server",
        poll::LIMIT,
        reached,
    )
    .await;

    let mut conn = harness::connect(addr, &ca, &[b"http/1.1"]).await.unwrap();
    assert_eq!(conn.get("/readyz").await, (StatusCode::OK, "ok\n".into()));
    let sent = review("gate-1", 10);
    let (status, body) = conn.review(sent.clone()).await.unwrap();
    harness::assert_answer("gate-1", &sent, status, &body);
    let (status, body) = conn.get("/apps").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("not synced"), "{body}");
    let (_, metrics) = conn.get("/metrics").await;
    assert!(
        metrics.lines().any(|l| l == "ksvc_webhook_watch_synced 0"),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_api_server_that_never_answers_does_not_hold_admission_readiness() {
    let (api, accepted) = silent_api().await;
    admission_ready_while_the_loop_cannot_sync(api, accepted).await;
}

#[tokio::test]
async fn an_api_server_that_denies_every_list_does_not_hold_admission_readiness() {
    let (api, denied) = denying_api().await;
    admission_ready_while_the_loop_cannot_sync(api, denied).await;
}
