//! The certificate manager at start (`certmgr::start`, the bootstrap `serve` waits for) with
//! every call it makes failing first: the Secret's get, create and update and the caBundle patch.
//!
//! Bound: a failed attempt is retried after `FIRST_BACKOFF` (1 s), doubling up to 30 s; a call
//! that never answers costs its `CALL_TIMEOUT` (10 s) first. 429 is retried inside the call by the
//! client, honouring Retry-After; a 409 is re-read and retried within the same attempt.

use std::time::{Duration, Instant};

use futures::future::join_all;
use ksvc_webhook::certmgr::shell::FIRST_BACKOFF;
use ksvc_webhook::certmgr::{self, CertArgs, Manager};
use ksvc_webhook::cluster::call::CALL_TIMEOUT;
use serde_json::{Value, json};
use tracing::instrument::WithSubscriber;

use crate::common::{Logs, Outcome, report};
use support::FakeApi;
use support::certs::cert_args;
pub use support::certs::{CONFIG, CONFIGS, NS, SECRET, bundles};
use support::fake_api::Fault;
use support::harness::trusted;

/// Faulted calls per row (one for a call that never answers: each costs a whole call timeout).
const TIMES: u32 = 2;

/// The manager's arguments, with a bootstrap timeout longer than any row's recovery.
pub fn args() -> CertArgs {
    CertArgs {
        cert_bootstrap_timeout: Duration::from_secs(60),
        ..cert_args()
    }
}

/// The webhook configuration the manifests install: two webhooks, no caBundle yet.
pub fn webhook_config() -> Value {
    support::certs::webhook_config(&[CONFIG, "second.flyte.org"])
}

/// The certificate the server would serve from `dir` chains to every published bundle.
pub fn serves_a_trusted_chain(fake: &FakeApi, dir: &std::path::Path) -> bool {
    let Ok(cert) = std::fs::read_to_string(dir.join("tls.crt")) else {
        return false;
    };
    let now = time::OffsetDateTime::now_utc();
    bundles(fake)
        .iter()
        .all(|b| trusted(b, &cert, now) == Some(true))
}

/// Whether the fault makes the bootstrap attempt fail (and be retried after a backoff step).
fn fails_attempt(verb: &str, fault: Fault) -> bool {
    match fault {
        // The client retries 429 inside the call, waiting as Retry-After says.
        Fault::Throttled => false,
        // A conflicting write is re-read and retried within the attempt.
        Fault::Status(409) => verb == "get",
        // A Secret that reads as missing is created; AlreadyExists makes the attempt re-read.
        Fault::Status(404) => verb != "get",
        _ => true,
    }
}

async fn row(verb: &'static str, resource: &'static str, fault: Fault) -> Outcome {
    let fake = FakeApi::start().await;
    fake.put(CONFIGS, webhook_config());
    match verb {
        // A restart: the Secret exists and only needs reading.
        "get" => {
            let first = tempfile::tempdir().unwrap();
            let manager = Manager::new(fake.client(), &args(), first.path());
            manager.sync(time::OffsetDateTime::now_utc(), false).await.unwrap();
        }
        // A Secret someone broke: the manager replaces it.
        "update" => fake.put(
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                   "metadata": {"name": SECRET, "namespace": NS}, "data": {"tls.crt": "Z2FyYmFnZQ=="}}),
        ),
        _ => {}
    }
    let times = if fault == Fault::Hang { 1 } else { TIMES };
    fake.inject(verb, resource, None, fault, times);
    let logs = Logs::default();
    let dir = tempfile::tempdir().unwrap();
    let leader = tokio::sync::watch::channel(true).1;
    let started = certmgr::start(
        fake.client(),
        &args(),
        leader,
        dir.path().into(),
        Default::default(),
    )
    .with_subscriber(logs.dispatch())
    .await;
    let recovered = Instant::now();
    let call = format!("{resource} {verb}");
    let task = started.unwrap_or_else(|e| panic!("{call} × {fault:?}: {e:#}"));
    task.unwrap().abort();
    assert_eq!(
        fake.faults_left(),
        0,
        "{call} × {fault:?}: the fault was hit"
    );
    assert!(
        serves_a_trusted_chain(&fake, dir.path()),
        "{call} × {fault:?}"
    );
    let warns = logs
        .warns(&["certificates not ready yet", "retry_in"])
        .len();
    let failing = fails_attempt(verb, fault);
    let expected = if failing { times as usize } else { 0 };
    assert_eq!(
        warns,
        expected,
        "{call} × {fault:?}: one line per failed attempt\n{}",
        logs.text()
    );
    // The backoff step after the last failed attempt (1 s, 2 s, …), after the call timeout if
    // the call never answered; Retry-After for throttling; nothing when the attempt went on.
    let bound = match (failing, fault) {
        (true, Fault::Hang) => CALL_TIMEOUT + FIRST_BACKOFF,
        (true, _) => FIRST_BACKOFF * 2u32.pow(times - 1),
        (false, Fault::Throttled) => Duration::from_secs(1),
        (false, _) => Duration::ZERO,
    };
    Outcome::measured(call, fault, &fake, recovered, bound, warns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_bootstrap_recovers_from_every_fault_of_every_call() {
    let calls = [
        ("get", "secrets"),
        ("create", "secrets"),
        ("update", "secrets"),
        ("patch", CONFIGS),
    ];
    let rows = calls
        .iter()
        .flat_map(|(verb, resource)| Fault::ALL.map(|fault| row(verb, resource, fault)));
    let outcomes = join_all(rows.map(tokio::spawn)).await;
    let outcomes: Vec<_> = outcomes.into_iter().map(Result::unwrap).collect();
    report("certificates", &outcomes);
}
