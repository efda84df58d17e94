//! Admission readiness is admission's: the real binary, with a watch loop whose API server (the
//! fake, through its fault injection) never answers or refuses every list (a streaming list is a
//! watch request), is ready and answers reviews, while `/apps` answers 503.

use axum::http::Method;
use hyper::StatusCode;

use crate::cli::{certs, serve, started};
use support::FakeApi;
use support::fake_api::Fault;
use support::harness::{self, review};
use support::poll;

/// Start `serve` against the fake, whose lists of the loop's resources all get `fault`; once the
/// loop has asked for the KServices, admission must be ready and answer while `/apps` refuses.
async fn admission_ready_while_the_loop_cannot_sync(fault: Fault) {
    let fake = FakeApi::start().await;
    for resource in ["services", "revisions", "namespaces"] {
        // The lists are streamed: watch requests.
        fake.inject("watch", resource, None, fault, u32::MAX);
    }
    let dir = tempfile::tempdir().unwrap();
    let tls = certs(dir.path());
    let ca = std::fs::read_to_string(tls.join("ca.crt")).unwrap();
    let mut serve = serve("127.0.0.1:0", &tls);
    serve.arg("--kubeconfig").arg(fake.kubeconfig(dir.path()));
    let (_child, _, addr) = started(serve);
    let asked = || !fake.requests_to(Method::GET, "services").is_empty();
    poll::until("the watch loop asks for the KServices", poll::LIMIT, asked).await;

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
async fn an_api_server_that_never_answers_a_list_does_not_hold_admission_readiness() {
    admission_ready_while_the_loop_cannot_sync(Fault::Hang).await;
}

/// 403, as an API server answers when the ServiceAccount lacks RBAC.
#[tokio::test]
async fn an_api_server_that_denies_every_list_does_not_hold_admission_readiness() {
    admission_ready_while_the_loop_cannot_sync(Fault::Status(403)).await;
}
