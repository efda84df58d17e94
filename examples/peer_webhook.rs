//! The yardstick of `make bench-load` (`PEER=1`): the smallest mutating webhook one would
//! write with axum and rustls, to measure the server's own latency and handshake cost beside.
//!
//! It answers `POST /mutate` on the current-thread runtime, as `serve --workers 1` runs, in one
//! of two ways:
//! - `noop`: the review's uid and a one-operation JSON Patch, the body decoded by serde_json
//!   into a `Value`: the minimal webhook;
//! - `decide`: admission's own decision (`admission::review` with the default policy), so the
//!   difference from `serve` is only the server around it.
//!
//! No limits, no deadlines, no metrics, no logs: what it lacks is what the server's hardening
//! costs. Its handshakes are full ones, as kube-apiserver's are (no session resumption). Never
//! used outside the benchmark.
//!
//! `cargo run --release --example peer_webhook -- ADDR TLS_DIR noop|decide` (TLS_DIR holds
//! `tls.crt` and `tls.key`, as `ksvc-webhook certs --out` writes them).

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::{Json, Router, routing::post};
use base64::Engine;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use ksvc_webhook::admission::{Policy, review};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(addr), Some(dir), Some(mode)) = (args.next(), args.next(), args.next()) else {
        anyhow::bail!("usage: peer_webhook ADDR TLS_DIR noop|decide");
    };
    let mutate = match mode.as_str() {
        "noop" => post(noop),
        "decide" => post(decide),
        other => anyhow::bail!("unknown mode {other:?}: noop or decide"),
    };
    let router = Router::new()
        .route("/mutate", mutate)
        .route("/readyz", axum::routing::get(|| async { "ok" }));
    let tls = tls_config(std::path::Path::new(&dir))?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(serve(&addr, router, TlsAcceptor::from(Arc::new(tls))))
}

async fn serve(addr: &str, router: Router, acceptor: TlsAcceptor) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    loop {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        let (acceptor, router) = (acceptor.clone(), router.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = TowerToHyperService::new(router);
            let builder = auto::Builder::new(TokioExecutor::new());
            let _ = builder.serve_connection(TokioIo::new(tls), service).await;
        });
    }
}

async fn noop(Json(review): Json<Value>) -> Json<Value> {
    let uid = review["request"]["uid"].clone();
    let patch = json!([{"op": "add", "path": "/metadata/annotations/peer", "value": "yes"}]);
    let patch = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
    Json(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch},
    }))
}

async fn decide(body: Bytes) -> axum::response::Response {
    static POLICY: std::sync::LazyLock<Policy> = std::sync::LazyLock::new(Policy::default);
    match review(&body, &POLICY) {
        Ok(reviewed) => {
            ([(header::CONTENT_TYPE, "application/json")], reviewed.body).into_response()
        }
        Err(err) => (StatusCode::BAD_REQUEST, err.to_string()).into_response(),
    }
}

fn tls_config(dir: &std::path::Path) -> anyhow::Result<rustls::ServerConfig> {
    let certs = rustls_pemfile::certs(&mut std::fs::read(dir.join("tls.crt"))?.as_slice())
        .collect::<Result<Vec<_>, _>>()?;
    let key = rustls_pemfile::private_key(&mut std::fs::read(dir.join("tls.key"))?.as_slice())?
        .ok_or_else(|| anyhow::anyhow!("no private key in tls.key"))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, key)?;
    // As `serve` offers by default (no `--http2`); rustls's other defaults are kept.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // No session resumption, as kube-apiserver never resumes (client-go sets no session cache):
    // oha does, and a resumed handshake skips the certificate and its signature, so with
    // rustls's default tickets the new-connection run would time a cheaper handshake than
    // `serve`'s, which makes none.
    config.send_tls13_tickets = 0;
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    Ok(config)
}
