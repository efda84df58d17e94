//! The real binary: `certs` writes a usable pair, `serve` answers over it, and a real SIGTERM
//! fails readiness, keeps answering during the drain, then exits 0; a Ctrl-C (SIGINT) at a
//! terminal ends it at once; `--listen :PORT` binds every interface; a missing `--kubeconfig`
//! fails the start with one sentence instead of retrying forever.

use std::io::{BufRead, BufReader, Lines};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::StatusCode;

use support::harness::{self, KillOnDrop, review};
use support::poll;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_ksvc-webhook");

#[tokio::test]
async fn sigterm_fails_readiness_drains_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs(dir.path());
    let ca = std::fs::read_to_string(certs.join("ca.crt")).unwrap();

    // No cluster here: serve the generated files, without the watch loop (its state never
    // gates readiness; see watch_gate.rs for serve with an unreachable cluster).
    let mut serve = serve("127.0.0.1:0", &certs);
    serve.args(["--no-watch", "--drain-period", "2s"]);
    let (mut child, _, addr) = started(serve);
    let mut conn = harness::connect(addr, &ca, &[b"http/1.1"]).await.unwrap();
    let sent = review("cli-1", 10);
    let (status, body) = conn.review(sent.clone()).await.unwrap();
    harness::assert_answer("cli-1", &sent, status, &body);
    assert_eq!(conn.get("/readyz").await.0, StatusCode::OK);

    let kill = Command::new("kill")
        .args(["-TERM", &child.get().id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    // Asked on new connections; `conn` shows below that one kept open is still answered.
    let failing = || async {
        let mut probe = harness::connect(addr, &ca, &[b"http/1.1"]).await.unwrap();
        probe.get("/readyz").await.0 == StatusCode::SERVICE_UNAVAILABLE
    };
    // Within the 2 s drain, while the server still accepts connections.
    let drain = Duration::from_secs(2);
    poll::until_async("readiness fails after SIGTERM", drain, failing).await;
    let sent = review("cli-2", 10);
    let (status, body) = conn.review(sent.clone()).await.unwrap();
    harness::assert_answer("cli-2", &sent, status, &body);
    drop(conn);
    let status = tokio::task::spawn_blocking(move || child.get().wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
}

/// A generated CA and serving pair in `dir/certs`.
pub(crate) fn certs(dir: &std::path::Path) -> std::path::PathBuf {
    let certs = dir.join("certs");
    let out = Command::new(BIN)
        .args(["certs", "--service-namespace", "ksvc-system", "--out"])
        .arg(&certs)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    certs
}

#[tokio::test]
async fn ctrl_c_skips_the_drain_and_listen_takes_a_bare_port() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs(dir.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut serve = serve(&format!(":{port}"), &certs);
    serve.args(["--no-watch", "--drain-period", "60s"]);
    let (mut child, _, addr) = started(serve);
    assert_eq!(
        addr.to_string(),
        format!("0.0.0.0:{port}"),
        "`:PORT` is every interface"
    );
    let started = std::time::Instant::now();
    let kill = Command::new("kill")
        .args(["-INT", &child.get().id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = tokio::task::spawn_blocking(move || child.get().wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "a Ctrl-C waited out the 60 s drain: {:?}",
        started.elapsed()
    );
}

#[test]
fn a_missing_kubeconfig_fails_the_start_in_one_sentence() {
    let out = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let sentence = "no kubeconfig at /nonexistent/kubeconfig (named by --kubeconfig)";
    assert_eq!(err.matches(sentence).count(), 1, "{err}");
}

/// The HTTPS address from the `serving admission reviews` log line (`listen=…` in plain
/// lines, `"listen":"…"` in JSON ones), read from `lines`, which go on after it.
pub(crate) fn listen_addr(lines: &mut Lines<BufReader<ChildStdout>>) -> SocketAddr {
    for line in lines.map_while(Result::ok) {
        let plain = line
            .split("listen=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next());
        let json = || line.split("\"listen\":\"").nth(1)?.split('"').next();
        if let Some(addr) = plain.or_else(json) {
            return addr.parse().unwrap();
        }
    }
    panic!("serve exited before logging its address");
}

/// The lines `child` writes on its piped stdout.
pub(crate) fn stdout_lines(child: &mut KillOnDrop) -> Lines<BufReader<ChildStdout>> {
    BufReader::new(child.get().stdout.take().unwrap()).lines()
}

/// `serve` on `listen` with the pair in `certs` and the default log filter, stdout piped; the
/// caller adds what its test needs (`--no-watch` without a cluster).
pub(crate) fn serve(listen: &str, certs: &Path) -> Command {
    let mut serve = Command::new(BIN);
    serve
        .args(["serve", "--listen", listen, "--self-managed-certs=false"])
        // A port of its own: tests run servers side by side.
        .arg("--local-status-listen=127.0.0.1:0")
        .arg("--tls-dir")
        .arg(certs)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped());
    serve
}

/// `serve` started: the child, its stdout lines after the address, and the address.
pub(crate) fn started(
    mut serve: Command,
) -> (KillOnDrop, Lines<BufReader<ChildStdout>>, SocketAddr) {
    let mut child = KillOnDrop(Some(serve.spawn().unwrap()));
    let mut stdout = stdout_lines(&mut child);
    let addr = listen_addr(&mut stdout);
    (child, stdout, addr)
}

/// The first `admission decision` line of `stdout`.
async fn decision_line(stdout: Lines<BufReader<ChildStdout>>) -> String {
    let find = move || {
        stdout
            .map_while(Result::ok)
            .find(|l| l.contains("admission decision"))
    };
    let line = tokio::task::spawn_blocking(find).await.unwrap();
    line.expect("serve exited before logging a decision")
}

#[tokio::test]
async fn an_unreachable_cluster_is_said_once_at_warn_and_never_as_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs(dir.path());
    // Nothing listens on port 9: every connect is refused.
    let kubeconfig = support::kubeconfig("http://127.0.0.1:9", "system", dir.path());
    let child = serve("127.0.0.1:0", &certs)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(Some(child));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let (seen, stdout) = (seen.clone(), stdout_lines(&mut child));
        std::thread::spawn(move || {
            for line in stdout.map_while(Result::ok) {
                seen.lock().unwrap().push(line);
            }
        })
    };
    // Both parts (the election and the watch loop) retry once after their warning, then a
    // Ctrl-C.
    let retried = || {
        let seen = seen.lock().unwrap();
        seen.iter()
            .filter(|l| l.contains("still no cluster"))
            .count()
            >= 2
    };
    poll::until("each part retries once", poll::LIMIT, retried).await;
    let kill = Command::new("kill")
        .args(["-INT", &child.get().id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    reader.join().unwrap();
    let lines = std::mem::take(&mut *seen.lock().unwrap());
    let text = lines.join("\n");
    assert!(!text.contains(" ERROR "), "{text}");
    let warned = lines
        .iter()
        .filter(|l| l.contains(" WARN ") && l.contains("admission is unaffected"))
        .count();
    // Once for each part that waits for the cluster (the election and the watch loop).
    assert_eq!(warned, 2, "{text}");
    assert!(
        text.contains("The connection to the server 127.0.0.1:9 was refused"),
        "{text}"
    );
}

/// kube-apiserver's `traceparent` (APIServerTracing) reaches the decision's log line, so a slow
/// `kubectl apply` can be followed to the webhook.
#[tokio::test]
async fn the_decision_line_names_the_api_servers_trace() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs(dir.path());
    let mut serve = serve("127.0.0.1:0", &certs);
    serve.args(["--no-watch", "--log-format", "json"]);
    let (_child, stdout, addr) = started(serve);
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let span = "00f067aa0ba902b7";
    let sent = Command::new("curl")
        .args(["-s", "--max-time", "5", "--cacert"])
        .arg(certs.join("ca.crt"))
        .args(["-H", "Content-Type: application/json"])
        .args(["-H", &format!("traceparent: 00-{trace}-{span}-01")])
        .args(["--data", "@examples/managed-review.json"])
        .arg(format!("https://localhost:{}/mutate", addr.port()))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&sent.stdout).contains("\"allowed\":true"));
    let line = decision_line(stdout).await;
    assert!(
        line.contains(&format!("\"trace_id\":\"{trace}\"")),
        "{line}"
    );
    assert!(line.contains(&format!("\"span_id\":\"{span}\"")), "{line}");
}

/// A decision's line holds the review's own strings: in JSON each field is a JSON string of the
/// value itself (what `jq 'select(.uid == …)'` or Loki match against kube-apiserver's audit log),
/// in plain text each is quoted and escaped. Values a sender chose (quotes, a newline, a
/// backslash escape, a terminal escape) forge neither a field nor a line in either format.
#[tokio::test]
async fn decision_lines_hold_the_reviews_strings_in_either_format() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs(dir.path());
    let ca = std::fs::read_to_string(certs.join("ca.crt")).unwrap();
    let fields = [
        ("uid", "7f0c1a52-\"} {\"uid\":\"forged"),
        ("operation", "CREATE"),
        (
            "namespace",
            "team-a\n2026-01-01T00:00:00Z  WARN forged line",
        ),
        ("name", "app\\u0022\\n\u{1b}[31mred"),
    ];
    let mut sent: serde_json::Value = serde_json::from_slice(&review("x", 0)).unwrap();
    for (field, value) in fields {
        sent["request"][field] = value.into();
    }
    for format in ["json", "plain"] {
        let mut serve = serve("127.0.0.1:0", &certs);
        serve.args(["--no-watch", "--log-format", format]);
        let (_child, stdout, addr) = started(serve);
        let mut conn = harness::connect(addr, &ca, &[b"http/1.1"]).await.unwrap();
        let body = serde_json::to_vec(&sent).unwrap();
        let (status, _) = conn.review(body).await.unwrap();
        assert_eq!(status, StatusCode::OK);
        let line = decision_line(stdout).await;
        for (field, value) in fields {
            match format {
                "json" => {
                    let logged: serde_json::Value = serde_json::from_str(&line).unwrap();
                    assert_eq!(logged[field], value, "{field} in {line}");
                }
                _ => {
                    let escaped = format!("{field}={value:?}");
                    assert!(line.contains(&escaped), "{escaped} not in {line}");
                }
            }
        }
    }
}

/// `--role controller` serves the status API's listener without the admission routes (a
/// review sent there is a 404, never a decision), and will not manage certificates: it serves
/// the admission part's.
#[tokio::test]
async fn the_controller_role_answers_no_review_and_manages_no_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs(dir.path());
    let ca = std::fs::read_to_string(certs.join("ca.crt")).unwrap();
    for (role, mutate) in [
        ("all", hyper::StatusCode::OK),
        ("controller", hyper::StatusCode::NOT_FOUND),
    ] {
        let mut serve = serve("127.0.0.1:0", &certs);
        serve.args(["--no-watch", "--role", role]);
        let (_child, _, addr) = started(serve);
        let mut conn = support::harness::connect(addr, &ca, &[b"http/1.1"])
            .await
            .unwrap();
        let (status, body) = conn
            .review(support::harness::review("role", 0))
            .await
            .unwrap();
        assert_eq!(status, mutate, "{role}: {}", String::from_utf8_lossy(&body));
        let (status, _) = conn.get("/healthz").await;
        assert_eq!(status, hyper::StatusCode::OK, "{role}");
    }

    let out = Command::new(BIN)
        .args(["serve", "--role", "controller", "--self-managed-certs=true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--role controller serves the certificate the admission part manages"),
        "{stderr}"
    );
}
