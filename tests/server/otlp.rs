//! `serve --otlp-endpoint` against an in-test OTLP/HTTP receiver: one span per review whose
//! `traceparent` kube-apiserver sampled, a child of its span (none when the API server does not
//! sample; without a `traceparent` none, or a new trace with `--otlp-untraced-reviews`), with
//! the decision's attributes, all sent by the time the process
//! exits, over HTTP or HTTPS; and a collector that never answers costs no review anything, its queue stays bounded,
//! and the exit waits for it only so long.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use hyper::StatusCode;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value::Value};
use opentelemetry_proto::tonic::trace::v1::{Span, span::SpanKind};
use prost::Message;

use super::cli::{self, certs, started};
use support::harness::{self, Conn, KillOnDrop};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";
const UNSAMPLED_TRACE: &str = "5cf92f3577b34da6a3ce929d0e0e4736";

/// What the receiver was sent: each span with its resource's attributes.
type Received = Arc<Mutex<Vec<(Vec<KeyValue>, Span)>>>;

/// The collector's side of OTLP/HTTP: `POST /v1/traces` (protobuf), each span kept with its
/// resource's attributes.
fn collector(received: Received) -> axum::Router {
    async fn export(State(received): State<Received>, body: Bytes) -> StatusCode {
        let request = ExportTraceServiceRequest::decode(body).unwrap();
        let mut received = received.lock().unwrap();
        for resource_spans in request.resource_spans {
            let resource = resource_spans.resource.unwrap_or_default().attributes;
            for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
                received.push((resource.clone(), span));
            }
        }
        // An empty body is an `ExportTraceServiceResponse` without partial success.
        StatusCode::OK
    }
    axum::Router::new()
        .route("/v1/traces", post(export))
        .with_state(received)
}

/// An OTLP/HTTP receiver on 127.0.0.1, as a collector is.
async fn receiver() -> (SocketAddr, Received) {
    let received = Received::default();
    let router = collector(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (addr, received)
}

/// The same receiver behind TLS, serving `certs/tls.crt` (valid for `localhost`).
async fn tls_receiver(certs: &Path) -> (SocketAddr, Received) {
    let pem = |name: &str| std::fs::read(certs.join(name)).unwrap();
    let chain = rustls_pemfile::certs(&mut &pem("tls.crt")[..])
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls_pemfile::private_key(&mut &pem("tls.key")[..])
        .unwrap()
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let received = Received::default();
    let router = collector(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, router) = (acceptor.clone(), router.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(router);
                let http = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let _ = http.serve_connection(TokioIo::new(tls), service).await;
            });
        }
    });
    (addr, received)
}

/// A started `serve --otlp-endpoint http://<collector>`, its address and its log lines from
/// the address on (plain format).
struct Served {
    child: KillOnDrop,
    addr: SocketAddr,
    lines: std::sync::mpsc::Receiver<String>,
    ca: String,
    _dir: tempfile::TempDir,
}

fn serve(collector: SocketAddr, untraced: bool) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs(dir.path());
    serve_in(dir, &certs, &format!("http://{collector}"), untraced)
}

/// `serve` with its certificates in `certs` (under `dir`), exporting to `endpoint` (with
/// `untraced`, the reviews without a `traceparent` too); the system CAs it trusts are
/// `certs/ca.crt` alone (`SSL_CERT_FILE`).
fn serve_in(dir: tempfile::TempDir, certs: &Path, endpoint: &str, untraced: bool) -> Served {
    let mut serve = cli::serve("127.0.0.1:0", certs);
    serve
        .args(["--no-watch", "--drain-period", "0s"])
        .env("KSVC_WEBHOOK_OTLP_ENDPOINT", endpoint)
        .env("KSVC_WEBHOOK_OTLP_UNTRACED_REVIEWS", untraced.to_string())
        .env("SSL_CERT_FILE", certs.join("ca.crt"))
        .env_remove("SSL_CERT_DIR");
    let (child, stdout, addr) = started(serve);
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || stdout.map_while(Result::ok).try_for_each(|l| tx.send(l)));
    let ca = std::fs::read_to_string(certs.join("ca.crt")).unwrap();
    Served {
        child,
        addr,
        lines,
        ca,
        _dir: dir,
    }
}

impl Served {
    async fn connect(&self) -> Conn {
        harness::connect(self.addr, &self.ca, &[b"http/1.1"])
            .await
            .unwrap()
    }

    /// Ctrl-C, then wait (bounded by the server's own deadlines) for a clean exit; the log lines.
    async fn interrupt(mut self) -> Vec<String> {
        let pid = self.child.get().id().to_string();
        assert!(
            Command::new("kill")
                .args(["-INT", &pid])
                .status()
                .unwrap()
                .success()
        );
        let mut child = self.child.0.take().unwrap();
        let status = tokio::task::spawn_blocking(move || child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "{status}");
        // The reader ends at the closed pipe.
        tokio::task::spawn_blocking(move || self.lines.iter().collect())
            .await
            .unwrap()
    }
}

/// POST `body` to `/mutate` with a `traceparent` when given; the answer's `allowed`.
async fn review(conn: &mut Conn, body: Vec<u8>, traceparent: Option<String>) -> bool {
    let mut request = harness::mutate_request("application/json", harness::full(body));
    if let Some(value) = traceparent {
        request
            .headers_mut()
            .insert("traceparent", value.parse().unwrap());
    }
    let (status, body) = conn.send(request).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    answer["response"]["allowed"].as_bool().unwrap()
}

/// The value of attribute `key`, as text.
fn attr(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|a| a.key == key)?.value.as_ref()?;
    match value.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        Value::BoolValue(b) => Some(b.to_string()),
        Value::IntValue(i) => Some(i.to_string()),
        other => Some(format!("{other:?}")),
    }
}

#[tokio::test]
async fn each_review_is_one_span_a_child_of_the_api_servers_span() {
    let (collector, received) = receiver().await;
    let served = serve(collector, false);
    let mut conn = served.connect().await;
    let sampled = Some(format!("00-{TRACE}-{PARENT}-01"));
    assert!(review(&mut conn, harness::review("otlp-1", 0), sampled.clone()).await);
    let invalid = std::fs::read(format!(
        "{}/examples/invalid-review.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    // Without a `traceparent`: not exported by default.
    assert!(!review(&mut conn, invalid, None).await);
    // A namespace no API server sends: the span keeps its first 256 bytes. (A uid that long is
    // refused before any decision.)
    let huge = "n".repeat(100_000);
    let mut long =
        serde_json::from_slice::<serde_json::Value>(&harness::review("otlp-2", 0)).unwrap();
    long["request"]["namespace"] = serde_json::json!(huge);
    assert!(review(&mut conn, serde_json::to_vec(&long).unwrap(), sampled).await);
    // The API server did not sample this one: neither does the webhook.
    let unsampled = Some(format!("00-{UNSAMPLED_TRACE}-{PARENT}-00"));
    assert!(review(&mut conn, harness::review("otlp-3", 0), unsampled).await);
    drop(conn);
    // The spans are still queued (one export every 5 s): the exit sends them.
    served.interrupt().await;

    let received = received.lock().unwrap();
    assert_eq!(received.len(), 2, "{received:#?}");
    let by_uid = |want: &str| {
        let uid = |s: &Span| attr(&s.attributes, "admission.uid");
        let found = received
            .iter()
            .find(|(_, s)| uid(s).as_deref() == Some(want));
        found.unwrap_or_else(|| panic!("no span of uid {want}: {received:#?}"))
    };
    let (resource, child) = by_uid("otlp-1");
    assert_eq!(
        attr(resource, "service.name").as_deref(),
        Some("ksvc-webhook")
    );
    assert_eq!(
        attr(resource, "service.version").as_deref(),
        Some(env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(hex::encode(&child.trace_id), TRACE);
    assert_eq!(hex::encode(&child.parent_span_id), PARENT);
    assert_eq!(child.name, "admission.review");
    assert_eq!(child.kind, SpanKind::Server as i32);
    let want = [
        ("admission.uid", "otlp-1"),
        ("admission.operation", "CREATE"),
        ("admission.kind", "Service"),
        ("admission.namespace", "default"),
        ("admission.name", "myapp"),
        ("admission.allowed", "true"),
        ("http.route", "/mutate"),
        ("http.response.status_code", "200"),
    ];
    for (key, value) in want {
        assert_eq!(
            attr(&child.attributes, key).as_deref(),
            Some(value),
            "{key}"
        );
    }
    assert_eq!(attr(&child.attributes, "admission.rejected_rules"), None);

    // Cut to 256 bytes: the namespace the span carries.
    let (_, long) = by_uid("otlp-2");
    let namespace = attr(&long.attributes, "admission.namespace");
    assert_eq!(namespace.as_deref(), Some(&huge[..256]));
}

/// With `--otlp-untraced-reviews`, a review without a `traceparent` is a new trace; one the API
/// server did not sample is still not exported.
#[tokio::test]
async fn untraced_reviews_are_new_traces_when_asked_for() {
    let (collector, received) = receiver().await;
    let served = serve(collector, true);
    let mut conn = served.connect().await;
    let invalid = std::fs::read(format!(
        "{}/examples/invalid-review.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    assert!(!review(&mut conn, invalid, None).await);
    let unsampled = Some(format!("00-{UNSAMPLED_TRACE}-{PARENT}-00"));
    assert!(review(&mut conn, harness::review("otlp-3", 0), unsampled).await);
    drop(conn);
    served.interrupt().await;

    let received = received.lock().unwrap();
    assert_eq!(received.len(), 1, "{received:#?}");
    let (_, root) = &received[0];
    assert_eq!(
        attr(&root.attributes, "admission.uid").as_deref(),
        Some("c4e5f6a7-8b9c-4d0e-a1f2-3b4c5d6e7f03")
    );
    assert!(root.parent_span_id.is_empty(), "{root:?}");
    assert_ne!(hex::encode(&root.trace_id), TRACE);
    assert_eq!(
        attr(&root.attributes, "admission.rejected_rules").as_deref(),
        Some("identity-partial,name,stopped-value")
    );
    assert_eq!(
        attr(&root.attributes, "admission.allowed").as_deref(),
        Some("false")
    );
}

/// A collector that accepts connections and never answers: every review is answered as
/// without export, spans beyond the queue are dropped (and said once), and the exit waits for
/// the stuck export only until its deadline.
#[tokio::test]
async fn a_collector_that_never_answers_holds_up_no_review() {
    // The kernel completes the handshakes; nothing ever reads or answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let served = serve(silent.local_addr().unwrap(), false);
    let sampled = format!("00-{TRACE}-{PARENT}-01");
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(served.connect().await);
    }
    // Rounds of reviews until the queue (2,048 spans, and a batch of 512 in the stuck export)
    // overflows; one export of 512 times out every 5 s. At most 20,000 reviews.
    let mut lines = Vec::new();
    for round in 0..20 {
        let sends = conns.iter_mut().enumerate().map(|(c, conn)| {
            let sampled = sampled.clone();
            async move {
                for i in 0..250 {
                    let uid = format!("silent-{round}-{c}-{i}");
                    let traced = Some(sampled.clone());
                    assert!(review(conn, harness::review(&uid, 0), traced).await);
                }
            }
        });
        futures::future::join_all(sends).await;
        lines.extend(served.lines.try_iter());
        if lines.iter().any(|l| l.contains("SpanDroppingStarted")) {
            break;
        }
    }
    let text = lines.join("\n");
    assert!(text.contains("SpanDroppingStarted"), "{text}");
    drop(conns);
    let stopped = Instant::now();
    let text = served.interrupt().await.join("\n");
    let waited = stopped.elapsed();
    assert!(
        text.contains("review spans not all exported at exit"),
        "{text}"
    );
    // The export and the shutdown deadlines are 5 s each.
    assert!(waited < Duration::from_secs(30), "{waited:?}");
    drop(silent);
}

/// An https collector, verified against the CAs `SSL_CERT_FILE` names, gets the spans as a
/// plain one does.
#[tokio::test]
async fn an_https_collector_gets_the_spans_over_verified_tls() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs(dir.path());
    let (collector, received) = tls_receiver(&certs).await;
    let endpoint = format!("https://localhost:{}", collector.port());
    let served = serve_in(dir, &certs, &endpoint, false);
    let mut conn = served.connect().await;
    let sampled = Some(format!("00-{TRACE}-{PARENT}-01"));
    assert!(review(&mut conn, harness::review("otlp-tls", 0), sampled).await);
    drop(conn);
    let lines = served.interrupt().await.join("\n");
    let received = received.lock().unwrap();
    assert_eq!(received.len(), 1, "{received:#?}\n{lines}");
    let (_, span) = &received[0];
    assert_eq!(hex::encode(&span.trace_id), TRACE);
    assert_eq!(hex::encode(&span.parent_span_id), PARENT);
    assert_eq!(
        attr(&span.attributes, "admission.uid").as_deref(),
        Some("otlp-tls")
    );
}
