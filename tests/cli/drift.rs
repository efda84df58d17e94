//! `ksvc-webhook drift`, run as a user runs it: the real binary, offline on the output of
//! `kubectl get ksvc -A -o yaml`, and against the in-test API with a kubeconfig, whose
//! port-forward reaches the server's loopback status listener (the real `serve`'s too). Exit
//! codes follow `kubectl diff`: 0 nothing drifted, 1 something has, 2 an error.

#![allow(clippy::unwrap_used)] // a test: a failed step should panic loudly

use std::process::{Command, Output};

use axum::http::Method;
use ksvc_webhook::admission::sidecars::Catalogue;
use ksvc_webhook::admission::{Policy, Request, decide};
use serde_json::{Value, json};
use support::FakeApi;

/// A managed app `app` of proj/dev in `ns`, as someone applied it before the webhook existed.
fn before_the_webhook(ns: &str, app: &str) -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {
            "name": format!("{app}-proj-dev"), "namespace": ns, "resourceVersion": "7",
            "labels": {"flyte.org/project": "proj", "flyte.org/domain": "dev", "flyte.org/app-name": app},
            "annotations": {"serving.knative.dev/lastModifier": "alice"}
        },
        "spec": {"template": {"spec": {"containers": [{
            "name": "user-container", "image": "registry.example/app:1", "ports": [{"containerPort": 8080}]
        }]}}},
        "status": {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

fn admitted(object: Value) -> Value {
    let ns = object["metadata"]["namespace"].as_str().unwrap().to_owned();
    let decision = decide(
        Request::kservice("u", "CREATE", &ns, object, None),
        &Policy::default(),
    );
    decision.object_json().unwrap()
}

fn list(items: Vec<Value>) -> String {
    serde_saphyr::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": items})).unwrap()
}

fn drift(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ksvc-webhook"))
        .arg("drift")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The cells of the table row of `name`.
fn cells<'t>(table: &'t str, name: &str) -> Vec<&'t str> {
    let row = table.lines().find(|l| l.contains(name)).unwrap();
    row.split_whitespace().collect()
}

fn file(dir: &tempfile::TempDir, name: &str, content: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, content).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn a_file_of_apps_from_before_the_webhook_is_reported_in_a_table_and_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(
        &dir,
        "ksvc.yaml",
        &list(vec![
            before_the_webhook("apps", "old"),
            admitted(before_the_webhook("apps", "current")),
            before_the_webhook("kube-system", "system"),
            before_the_webhook("opted", "elsewhere"),
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": "opted", "labels": {"ksvc-webhook.flyte.org/inject": "disabled"}}}),
        ]),
    );
    let out = drift(&["-f", &path]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines,
        [
            vec!["NAMESPACE", "NAME", "REASONS", "NEW-REVISION"],
            vec!["apps", "current-proj-dev", "-", "no"],
            vec![
                "apps",
                "old-proj-dev",
                "missing-spec-sha,missing-endpoint-env,other",
                "yes"
            ],
            vec!["kube-system", "system-proj-dev", "excluded", "no"],
            vec!["opted", "elsewhere-proj-dev", "excluded", "no"],
        ],
        "{table}"
    );

    let out = drift(&["-f", &path, "-n", "apps", "-o", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 2, "{rows:#}");
    let old = &rows[1];
    assert_eq!(old["name"], "old-proj-dev");
    assert_eq!(old["new_revision"], true);
    assert_eq!(old["drift"][1]["reason"], "missing-endpoint-env");
    assert_eq!(
        old["drift"][1]["detail"],
        "admission adds INTERNAL_APP_ENDPOINT_PATTERN=\"http://{app_fqdn}-proj-dev.apps.svc.cluster.local\""
    );
    let yaml = text(&drift(&["-f", &path, "-n", "apps", "-o", "yaml"]).stdout);
    assert!(yaml.contains("reason: missing-spec-sha"), "{yaml}");
}

#[test]
fn nothing_drifted_is_0_an_unreadable_kservice_is_2_and_never_stops_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let current = admitted(before_the_webhook("apps", "current"));
    let clean = file(&dir, "clean.json", &current.to_string());
    let out = drift(&["-f", &clean]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // The policy flags are `mutate`'s: a catalogue makes the same app stale.
    let catalogue = "--sidecars=examples/sidecars.yaml";
    let out = drift(&["-f", &clean, catalogue, "-o", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["drift"][0]["reason"], "stale-sidecars", "{rows:#}");

    let mut broken = before_the_webhook("apps", "broken");
    broken["metadata"]["labels"] = json!(["not", "a", "map"]);
    let mixed = file(
        &dir,
        "mixed.yaml",
        &list(vec![broken, before_the_webhook("apps", "old"), current]),
    );
    let out = drift(&["-f", &mixed]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert_eq!(
        cells(&table, "broken-proj-dev"),
        ["apps", "broken-proj-dev", "error", "-"]
    );
    assert!(table.contains("cannot be read as a KService"), "{table}");
    assert!(table.contains("old-proj-dev"), "{table}");
    assert!(table.contains("current-proj-dev"), "{table}");

    let missing = drift(&["-f", "no/such/file.yaml"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing.stderr).contains("cannot read no/such/file.yaml"));
    assert!(missing.stdout.is_empty());
}

/// The catalogue of examples/sidecars.yaml, which the server below runs and the CLI is not told.
fn server_policy() -> Policy {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/sidecars.yaml"
    ))
    .unwrap();
    Policy {
        sidecars: std::sync::Arc::new(Catalogue::parse(&text).unwrap()),
        ..Policy::default()
    }
}

/// The rows `drift -o json` prints for the records of `/apps`: each app's drift as the server
/// reports it.
fn drift_rows(records: &Value) -> Value {
    let rows = records.as_array().unwrap().iter().map(|r| {
        json!({"namespace": r["namespace"], "name": r["name"], "drift": r["drift"],
               "new_revision": r["drift_new_revision"]})
    });
    Value::Array(rows.collect())
}

/// The server's `/apps`, asked directly.
async fn apps(router: &axum::Router, query: &str) -> (Value, axum::http::HeaderMap) {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let request = axum::http::Request::get(format!("/apps{query}"))
        .body(axum::body::Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (serde_json::from_slice(&body).unwrap(), headers)
}

/// `drift` with no flags says what the server says: the watch loop's report on `/apps`, with the
/// catalogue the server runs (not the flags the CLI is given), read through a port-forward to
/// the status listener of the status API's Ready pod; nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_flags_the_report_is_the_servers() {
    let fake = FakeApi::start().await;
    let policy = server_policy();
    fake.put("services", before_the_webhook("apps", "old"));
    // Current for the server's catalogue; stale for a CLI judging without one.
    let mut current = admitted(before_the_webhook("apps", "current"));
    current = {
        let ns = current["metadata"]["namespace"]
            .as_str()
            .unwrap()
            .to_owned();
        let decision = decide(
            Request::kservice("u", "UPDATE", &ns, current.clone(), Some(current)),
            &policy,
        );
        decision.object_json().unwrap()
    };
    fake.put("services", current);
    fake.put("services", before_the_webhook("other", "elsewhere"));
    let (_tx, leading) = tokio::sync::watch::channel(true);
    let replica = support::Replica::start_with_policy(&fake, "r1", leading, policy);
    replica.wait_synced().await;
    let router = ksvc_webhook::apps::http::router(
        replica.hub.clone(),
        replica.synced.clone(),
        ksvc_webhook::apps::http::Options::unauthenticated(8),
    );
    support::status_api::behind_port_forward(&fake, router.clone()).await;

    let ran = support::cli::run(&fake, &["drift", "-A", "-o", "json"]).await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    let rows: Value = serde_json::from_str(&ran.stdout).unwrap();
    let (served, _) = apps(&router, "").await;
    assert_eq!(rows, drift_rows(&served), "drift -A agrees with /apps");
    let drifted: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !r["drift"].as_array().unwrap().is_empty())
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(drifted, ["old-proj-dev", "elsewhere-proj-dev"], "{rows:#}");

    // The kubeconfig's namespace (system) has none; -n asks for one namespace.
    let own = support::cli::run(&fake, &["drift"]).await;
    assert_eq!(
        (own.code, own.stdout.lines().count()),
        (Some(0), 1),
        "{own:?}"
    );
    let one = support::cli::run(&fake, &["drift", "-n", "apps"]).await;
    assert_eq!(one.code, Some(1), "{one:?}");
    assert_eq!(
        cells(&one.stdout, "current-proj-dev"),
        ["apps", "current-proj-dev", "-", "no"]
    );
    for method in [Method::PUT, Method::PATCH, Method::POST, Method::DELETE] {
        assert!(fake.requests_to(method, "services").is_empty());
    }
}

/// Policy flags judge a file; without `-f` the server's policy is the one, so they are refused.
#[test]
fn policy_flags_need_a_file() {
    let out = drift(&["--sidecars", "examples/sidecars.yaml"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--filename"),
        "{}",
        text(&out.stderr)
    );
    let out = drift(&["--sidecars-from-cluster"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// The server's report is read page by page (`limit`, then `continue` with the token of the
/// `x-ksvc-webhook-continue` header) until a page comes without the header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_is_read_page_by_page() {
    use axum::extract::Query;
    use std::collections::HashMap;
    let fake = FakeApi::start().await;
    let record = |ns: &str, name: &str| {
        let mut record = serde_json::to_value(support::status_api::record(ns, name)).unwrap();
        record["drift"] = json!([{"reason": "missing-spec-sha", "detail": "x"}]);
        record
    };
    let pages = move |Query(q): Query<HashMap<String, String>>| async move {
        assert_eq!(q.get("limit").map(String::as_str), Some("2"));
        let (items, next) = match q.get("continue").map(String::as_str) {
            None => (vec![record("a", "x"), record("a", "y")], Some("t1")),
            Some("t1") => (vec![record("b", "z")], None),
            Some(other) => panic!("unknown token {other}"),
        };
        let mut response = axum::response::IntoResponse::into_response(axum::Json(items));
        if let Some(next) = next {
            response
                .headers_mut()
                .insert("x-ksvc-webhook-continue", next.parse().unwrap());
        }
        response
    };
    let router = axum::Router::new().route("/apps", axum::routing::get(pages));
    let addr = support::status_api::behind_port_forward(&fake, router).await;
    let url = format!("http://{addr}");
    // Through the port-forward, and from --status-url (the user's own port-forward).
    for extra in [vec![], vec!["--status-url", &url]] {
        let mut args = vec!["drift", "-A", "--chunk-size", "2"];
        args.extend(extra);
        let ran = support::cli::run(&fake, &args).await;
        assert_eq!(ran.code, Some(1), "{ran:?}");
        let names: Vec<&str> = ran
            .stdout
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().nth(1).unwrap())
            .collect();
        assert_eq!(names, ["x", "y", "z"], "{args:?}: {}", ran.stdout);
    }
}

/// Errors read as `app`'s do, each saying what to do: the API server's answer as kubectl prints
/// it, never a debug dump; no Ready pod (how to see them), port-forward forbidden (the exact
/// permission), nothing at the port (an old server, or the listener off), the listener's own
/// refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_worded_as_app_words_them() {
    let fake = FakeApi::start().await;
    let drift_a = || support::cli::run(&fake, &["drift", "-A"]);
    let missing = drift_a().await;
    assert_eq!(missing.code, Some(2), "{missing:?}");
    assert_eq!(
        missing.stderr,
        "error: cannot read the server's report through Service ksvc-system/ksvc-webhook-controller: Error from server (NotFound): services \"ksvc-webhook-controller\" not found\n"
    );

    let (ns, service, pod) = (
        "ksvc-system",
        "ksvc-webhook-controller",
        support::status_api::POD,
    );
    fake.put_webhook_service(ns, service);
    fake.put_webhook_pod(ns, service, pod, false);
    let unready = drift_a().await;
    assert_eq!(unready.code, Some(2), "{unready:?}");
    assert_eq!(
        unready.stderr,
        "error: no Ready pod of Service ksvc-system/ksvc-webhook-controller (selector app.kubernetes.io/name=ksvc-webhook-controller) to read the report from; see them with: kubectl -n ksvc-system get pods -l app.kubernetes.io/name=ksvc-webhook-controller\n"
    );

    // Ready, and nothing listens at its port: what to do, then the kubelet's reason (or, when
    // the reason lost the race with the closed stream, that the stream closed unanswered).
    fake.put_webhook_pod(ns, service, pod, true);
    let closed = drift_a().await;
    assert_eq!(closed.code, Some(2), "{closed:?}");
    assert!(
        closed.stderr.starts_with(&format!(
            "error: nothing answers on port 8444 of pod ksvc-system/{pod}: the server is older \
             than this command, or runs with --local-status-listen=off or on another port \
             (forward that one yourself: kubectl -n ksvc-system port-forward pod/{pod} PORT, then \
             pass --status-url http://127.0.0.1:PORT) ("
        )),
        "{}",
        closed.stderr
    );
    let reasons = [
        "connect: connection refused)\n",
        "connection closed before message completed)\n",
    ];
    assert!(
        reasons.iter().any(|r| closed.stderr.ends_with(r)),
        "{}",
        closed.stderr
    );

    // The listener answers for itself: a cache not yet synced.
    let synced = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hub = ksvc_webhook::watch::hub::Hub::new();
    let router = ksvc_webhook::apps::http::router_with_buffer(hub, synced, 8);
    support::status_api::behind_port_forward(&fake, router).await;
    let unsynced = drift_a().await;
    assert_eq!(unsynced.code, Some(2), "{unsynced:?}");
    assert_eq!(
        unsynced.stderr,
        format!(
            "error: the status listener on port 8444 of pod ksvc-system/{pod} answers 503: the app cache has not synced with the cluster yet; retry shortly\n"
        )
    );

    fake.forbid_port_forward();
    let forbidden = drift_a().await;
    assert_eq!(forbidden.code, Some(2), "{forbidden:?}");
    assert!(
        forbidden.stderr.starts_with(&format!(
            "error: you may not port-forward to pod ksvc-system/{pod}: reading the server's \
             report needs create on pods/portforward in ksvc-system (kubectl auth can-i create \
             pods/portforward -n ksvc-system), or judge offline: kubectl get ksvc -A -o yaml | \
             ksvc-webhook drift -f - --sidecars-from-cluster (pods \"{pod}\" is forbidden: User"
        )),
        "{}",
        forbidden.stderr
    );

    let down = support::cli::run_against("http://127.0.0.1:9", &["drift", "-A"]).await;
    assert_eq!(down.code, Some(2), "{down:?}");
    assert!(
        !down.stderr.contains("Error {") && !down.stderr.contains("Status {"),
        "{}",
        down.stderr
    );
    assert!(
        down.stderr
            .contains("The connection to the server 127.0.0.1:9 was refused"),
        "{}",
        down.stderr
    );
    let nowhere = support::cli::run(
        &fake,
        &["drift", "-A", "--status-url", "http://127.0.0.1:9"],
    )
    .await;
    assert_eq!(nowhere.code, Some(2), "{nowhere:?}");
    assert!(
        nowhere
            .stderr
            .starts_with("error: cannot reach the status listener at http://127.0.0.1:9: "),
        "{}",
        nowhere.stderr
    );
    let https =
        support::cli::run(&fake, &["drift", "--status-url", "https://127.0.0.1:8444"]).await;
    assert_eq!(https.code, Some(2), "{https:?}");
    assert!(
        https.stderr.contains("plain http, not https"),
        "{}",
        https.stderr
    );
}

/// The words after the flags are the ones beside `DriftArgs`: the exit codes CI relies on, and
/// where the report comes from.
#[test]
fn drift_help_shows_the_exit_codes() {
    let ran = support::cli::run_bin(&["drift", "--help"], &[], b"");
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(
        ran.stdout
            .contains("Exit status: 0 nothing has drifted, 1 something has, 2 an error."),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout
            .contains("Without -f, the report is the server's"),
        "{}",
        ran.stdout
    );
    let explain = support::cli::run_bin(&["explain", "--help"], &[], b"");
    assert!(
        explain
            .stdout
            .contains("Exit status: 0 admitted, 1 refused"),
        "{}",
        explain.stdout
    );
}

/// `GET path` over plain HTTP/1.1 at `addr`, without a token: the status, the continue header
/// and the JSON body.
async fn plain_get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, Option<String>, Value)> {
    use http_body_util::BodyExt;
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let io = hyper_util::rt::TokioIo::new(tcp);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.ok()?;
    tokio::spawn(conn);
    let request = axum::http::Request::get(path)
        .header("host", addr.to_string())
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.ok()?;
    let code = response.status().as_u16();
    let next = response
        .headers()
        .get("x-ksvc-webhook-continue")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.ok()?.to_bytes();
    Some((
        code,
        next,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    ))
}

/// The real `serve` (the watch loop against the in-test API, the status API asking tokens):
/// its loopback status listener answers `/apps` without one, in the same pages, while the TLS
/// listener asks for it; and `drift`, through the port-forward and with `--status-url`, says
/// what that listener says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_servers_loopback_listener_answers_without_a_token_and_drift_agrees() {
    let fake = FakeApi::start().await;
    fake.put("services", before_the_webhook("apps", "old"));
    fake.put("services", admitted(before_the_webhook("apps", "current")));
    fake.put("services", before_the_webhook("other", "elsewhere"));
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let made = support::cli::run_bin(
        &[
            "certs",
            "--service-namespace",
            "ksvc-system",
            "--out",
            certs.to_str().unwrap(),
        ],
        &[],
        b"",
    );
    assert_eq!(made.code, Some(0), "{made:?}");
    let free_port = support::control_plane::free_port;
    let (https, local) = (free_port(), free_port());
    let local: std::net::SocketAddr = format!("127.0.0.1:{local}").parse().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_ksvc-webhook"))
        .args(["serve", "--listen", &format!("127.0.0.1:{https}")])
        .args(["--self-managed-certs=false", "--workers", "1"])
        .args(["--local-status-listen", &local.to_string()])
        .arg("--tls-dir")
        .arg(&certs)
        .arg("--kubeconfig")
        .arg(fake.kubeconfig(dir.path()))
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _child = support::harness::KillOnDrop(Some(child));

    // 503 until the loop's cache has synced; then every app, without a token.
    let listed = || async {
        let answer = plain_get(local, "/apps").await;
        matches!(answer, Some((200, None, apps)) if apps.as_array().is_some_and(|a| a.len() == 3))
    };
    support::poll::until_async(
        "the local listener lists the apps",
        support::poll::LIMIT,
        listed,
    )
    .await;
    let (_, _, all) = plain_get(local, "/apps").await.unwrap();
    let mut paged = Vec::new();
    let mut path = "/apps?limit=2".to_owned();
    loop {
        let (code, next, page) = plain_get(local, &path).await.unwrap();
        assert_eq!(code, 200, "{page}");
        assert!(page.as_array().unwrap().len() <= 2, "{page}");
        paged.extend(page.as_array().unwrap().iter().cloned());
        match next {
            Some(token) => path = format!("/apps?limit=2&continue={token}"),
            None => break,
        }
    }
    assert_eq!(
        Value::Array(paged),
        all,
        "the same pages as the status API's"
    );
    let ca = std::fs::read_to_string(certs.join("ca.crt")).unwrap();
    let tls: std::net::SocketAddr = format!("127.0.0.1:{https}").parse().unwrap();
    let mut conn = support::harness::connect(tls, &ca, &[b"http/1.1"])
        .await
        .unwrap();
    let (status, body) = conn.get("/apps").await;
    assert_eq!(
        status.as_u16(),
        401,
        "the TLS listener asks a token: {body}"
    );

    let served = drift_rows(&all);
    let url = format!("http://{local}");
    fake.put_webhook_service("ksvc-system", "ksvc-webhook-controller");
    fake.put_webhook_pod(
        "ksvc-system",
        "ksvc-webhook-controller",
        "controller-0",
        true,
    );
    fake.forward_port(ksvc_webhook::apps::args::LOCAL_STATUS_PORT, local);
    for extra in [vec![], vec!["--status-url", url.as_str()]] {
        let mut args = vec!["drift", "-A", "-o", "json"];
        args.extend(extra);
        let ran = support::cli::run(&fake, &args).await;
        assert_eq!(ran.code, Some(1), "{ran:?}");
        let rows: Value = serde_json::from_str(&ran.stdout).unwrap();
        assert_eq!(rows, served, "{args:?} agrees with /apps");
    }
}

/// A listener at `--status-url` that answers every request with `head`, then `body_len` bytes of
/// `fill`, and gives its address.
async fn answering(head: String, fill: u8, body_len: usize) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let head = head.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = conn.read(&mut request).await;
                conn.write_all(head.as_bytes()).await?;
                let chunk = vec![fill; 1 << 20];
                let mut left = body_len;
                while left > 0 {
                    let n = left.min(chunk.len());
                    conn.write_all(&chunk[..n]).await?;
                    left -= n;
                }
                std::io::Result::Ok(())
            });
        }
    });
    addr
}

/// What answers at `--status-url` is read within bounds: a page past 64 MiB is refused, not
/// held, and a refusal's own text is quoted cut to 256 bytes.
#[tokio::test]
async fn a_status_url_that_answers_too_much_is_cut() {
    let fake = FakeApi::start().await;
    let huge = 65 << 20;
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {huge}\r\n\r\n"
    );
    let addr = answering(head, b' ', huge).await;
    let url = format!("http://{addr}");
    let big = support::cli::run(&fake, &["drift", "-A", "--status-url", &url]).await;
    assert_eq!(big.code, Some(2), "{big:?}");
    assert!(
        big.stderr.contains("a page of more than 64 MiB"),
        "{}",
        big.stderr
    );

    let long = 10_000;
    let head = format!("HTTP/1.1 500 Internal Server Error\r\ncontent-length: {long}\r\n\r\n");
    let addr = answering(head, b'x', long).await;
    let url = format!("http://{addr}");
    let refused = support::cli::run(&fake, &["drift", "-A", "--status-url", &url]).await;
    assert_eq!(refused.code, Some(2), "{refused:?}");
    assert!(refused.stderr.contains("answers 500"), "{}", refused.stderr);
    assert!(
        refused.stderr.contains(&"x".repeat(256)) && !refused.stderr.contains(&"x".repeat(257)),
        "{}",
        refused.stderr
    );
}
