//! `serve` against an API server that never lets it start: it must give up within
//! `--cert-bootstrap-timeout`, exit non-zero, and say in one line what it gave up on.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::certs::{CONFIGS, webhook_config};
use crate::common::SLACK;
use support::FakeApi;
use support::fake_api::Fault;

const BUDGET_SECS: u64 = 3;

/// Run `serve` with self-managed certificates against `fake`; its exit status, stderr, stdout
/// and how long it ran.
async fn serve(fake: &FakeApi) -> (Option<i32>, String, String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake.kubeconfig(dir.path());
    let certs = dir.path().join("certs");
    let child = support::cli::self_managed_serve(&kubeconfig, &certs)
        .args(["--cert-bootstrap-timeout", &format!("{BUDGET_SECS}s")])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code(),
        text(&out.stderr),
        text(&out.stdout),
        started.elapsed(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_gives_up_on_certificates_it_can_never_create_with_one_clear_line() {
    let fake = FakeApi::start().await;
    fake.put(CONFIGS, webhook_config());
    // RBAC that never lets it write the Secret.
    fake.inject("create", "secrets", None, Fault::Status(403), u32::MAX);
    let (code, stderr, stdout, ran) = serve(&fake).await;
    assert_eq!(code, Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with(&format!(
            "error: cannot set up the self-managed certificates: no usable certificates after 1s of retries (start-up budget {BUDGET_SECS}s): kubernetes API call failed: create secret"
        )),
        "{stderr}"
    );
    assert!(
        lines[0].contains("Forbidden") || lines[0].contains("403"),
        "{stderr}"
    );
    // Attempts at 0 s and 1 s; the next would be at 3 s, past the budget: one retry line, then
    // the exit.
    let retries = stdout
        .lines()
        .filter(|l| l.contains("certificates not ready yet"))
        .count();
    assert_eq!(retries, 1, "{stdout}");
    assert!(ran <= Duration::from_secs(BUDGET_SECS) + SLACK, "{ran:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_gives_up_within_its_budget_on_an_api_server_that_never_answers() {
    let fake = FakeApi::start().await;
    fake.inject("get", "secrets", None, Fault::Hang, u32::MAX);
    let (code, stderr, _, ran) = serve(&fake).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("the start-up budget ran out while waiting for: get secret"),
        "{stderr}"
    );
    // The call's own timeout is 10 s: the budget cut it short.
    assert!(ran <= Duration::from_secs(BUDGET_SECS) + SLACK, "{ran:?}");
}
