//! The attack table of docs/reliability.md, answers never read: answers are bounded too. A review
//! whose uid is megabytes long is refused with a short 400 (the uid is never echoed), and a denial
//! quotes a megabyte label cut to 64 bytes, once per violation. Sixteen such reviews sent by a pod
//! that never reads the answers leave the resident memory under the arithmetic's bound, and
//! kube-apiserver's reviews on fresh connections are answered 200 within 2 s meanwhile. A pod that
//! sends reviews and never reads their answers loses its connection at the write deadline
//! (`--request-timeout`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use serde_json::json;
use tokio::io::AsyncWriteExt as _;

use super::attack::{self, Answered};
use super::served::{DEPLOYMENT, Served, mib};
use support::harness::{self, SERVER_NAME};
use support::poll;

/// A 6 MiB uid on a well-formed review.
fn long_uid() -> Vec<u8> {
    let uid = "u".repeat(6 << 20);
    harness::review(&uid, 10)
}

/// An UPDATE that changes the project label of a managed app from one 3 MiB value to another:
/// two violations (the value, the change) that would each quote it.
fn long_label() -> Vec<u8> {
    let object = |value: String| {
        json!({"apiVersion": "serving.knative.dev/v1", "kind": "Service",
               "metadata": {"name": "app", "namespace": "apps",
                            "labels": {"flyte.org/project": value, "flyte.org/domain": "dev",
                                       "flyte.org/app-name": "app"}},
               "spec": {"template": {"spec": {"containers": [{"image": "registry.example/a:1"}]}}}})
    };
    let gvk = json!({"group": "serving.knative.dev", "version": "v1", "kind": "Service"});
    let gvr = json!({"group": "serving.knative.dev", "version": "v1", "resource": "services"});
    serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "long-label", "kind": gvk, "resource": gvr, "requestKind": gvk,
            "requestResource": gvr, "name": "app", "namespace": "apps", "operation": "UPDATE",
            "userInfo": {"username": "tenant"}, "dryRun": false,
            "object": object("b".repeat(3 << 20)), "oldObject": object("a".repeat(3 << 20))}}),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_stay_small_whatever_the_review_holds() {
    let served = Served::start(DEPLOYMENT, None);
    let mut conn = served.h1().await;
    let (status, body) = conn.review(long_uid()).await.unwrap();
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(body.len() < 1024, "{} bytes", body.len());
    assert!(text.contains("request.uid is 6291456 bytes"), "{text}");

    let (status, body) = served.h1().await.review(long_label()).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["response"]["allowed"], false);
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(body.len() < 8 * 1024, "{} bytes: {message}", body.len());
    assert!(message.contains("(3145728 bytes)"), "{message}");
    assert!(message.contains("\"bbbb"), "{message}");
    println!(
        "a 6 MiB uid: 400 of {} bytes; a 3 MiB label changed: {} bytes of answer",
        text.len(),
        body.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_nobody_reads_hold_no_memory() {
    let (served, baseline) = Served::warmed(DEPLOYMENT, None).await;
    let end = Instant::now() + Duration::from_secs(6);
    let bodies = [Arc::new(long_uid()), Arc::new(long_label())];
    let attackers: Vec<_> = (0..16)
        .map(|i| {
            let (served, body) = (served.clone(), bodies[i % 2].clone());
            tokio::spawn(async move {
                // Send, never read, hold the connection; again when the server closes it.
                while Instant::now() < end {
                    let from = attack::attacker(i);
                    let Ok(mut tls) = attack::tls_from(&served, from).await else {
                        continue;
                    };
                    let head = format!(
                        "POST /mutate HTTP/1.1\r\nhost: {SERVER_NAME}\r\n\
                         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        body.len()
                    );
                    let sent = async {
                        tls.write_all(head.as_bytes()).await?;
                        tls.write_all(&body).await?;
                        tls.flush().await
                    };
                    if sent.await.is_err() {
                        continue;
                    }
                    let until = tokio::time::Instant::from_std(end);
                    tokio::time::sleep_until(until).await;
                }
            })
        })
        .collect();
    let reviews: Answered = attack::fresh_reviews(&served, end).await;
    for task in attackers {
        task.abort();
    }
    let peak = served.memory("VmHWM");
    let bound = served.memory_bound(baseline);
    println!(
        "16 answers never read: reviews {}/{} answered within 2 s (slowest {:.0} ms); RSS {:.1} \
         MiB idle, peak {:.1} MiB, bound {:.1} MiB",
        reviews.ok,
        reviews.total,
        reviews.slowest.as_secs_f64() * 1e3,
        mib(baseline),
        mib(peak),
        mib(bound),
    );
    reviews.assert_kept("answers never read");
    assert!(peak <= bound, "peak {peak} over the bound {bound}");
}

/// A review denied with one violation per container, as many as the webhook accepts: a 7 KB
/// answer from a 2 KB review.
fn wide_denial() -> Vec<u8> {
    let mut review: serde_json::Value =
        serde_json::from_slice(&harness::review("never-read", 0)).unwrap();
    let containers = vec![json!(1); ksvc_webhook::admission::request::MAX_CONTAINERS];
    review["request"]["object"]["spec"]["template"]["spec"]["containers"] = json!(containers);
    serde_json::to_vec(&review).unwrap()
}

/// A TLS connection from `from` whose socket buffers are small, so that its peer's writes
/// block as soon as it stops reading.
async fn narrow_tls_from(
    served: &Served,
    from: std::net::IpAddr,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.set_send_buffer_size(4096).unwrap();
    socket.bind(std::net::SocketAddr::new(from, 0)).unwrap();
    let tcp = socket.connect(served.addr).await.unwrap();
    let config = harness::client_config(&served.pki.ca.cert_pem, &[b"http/1.1"]);
    let name = rustls::pki_types::ServerName::try_from(SERVER_NAME).unwrap();
    let connector = tokio_rustls::TlsConnector::from(config);
    connector.connect(name, tcp).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_answers_loses_the_connection_at_the_deadline() {
    let served = Served::start(DEPLOYMENT, None);
    let open = r#"ksvc_webhook_connections{listener="admission"}"#;
    let mut tls = narrow_tls_from(&served, attack::attacker(0)).await;
    // Reviews one after another on the one connection, answers never read, until a write fails
    // because the server dropped the connection. No time limit on a write: on a loaded machine a
    // slow write is not yet a blocked server, and a writer that gave up early could leave the
    // server with answers its send buffer still holds, so it would never block at all.
    let review = wide_denial();
    let head = format!(
        "POST /mutate HTTP/1.1\r\nhost: {SERVER_NAME}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        review.len()
    );
    let request = [head.as_bytes(), &review].concat();
    let started = Instant::now();
    let writer = tokio::spawn(async move {
        let mut sent = 0;
        // Fewer than the 1,000 requests after which the server retires a connection by itself.
        while sent < 900 {
            if tls.write_all(&request).await.is_err() || tls.flush().await.is_err() {
                break;
            }
            sent += 1;
        }
        (sent, tls)
    });
    // kube-apiserver's reviews are answered meanwhile, and the connection is dropped once its
    // queued answers have waited the request timeout (10 s) from the first blocked write.
    let reviews = attack::fresh_reviews(&served, Instant::now() + Duration::from_secs(4)).await;
    poll::until_async(
        "the server drops the connection",
        Duration::from_secs(40),
        || async { served.metric(open).await == Some(0.0) },
    )
    .await;
    let (sent, tls) = writer.await.unwrap();
    println!(
        "{sent} reviews sent, answers never read: dropped within {:.1} s of the first; \
         reviews {}/{} answered meanwhile",
        started.elapsed().as_secs_f64(),
        reviews.ok,
        reviews.total
    );
    reviews.assert_kept("answers never read on one connection");
    drop(tls);
}
