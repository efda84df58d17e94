//! `ksvc-webhook drift`, run as a user runs it: the real binary, offline on the output of
//! `kubectl get ksvc -A -o yaml`, and against the in-test API with a kubeconfig. Exit codes
//! follow `kubectl diff`: 0 nothing drifted, 1 something has, 2 an error.

#![allow(clippy::unwrap_used)] // a test: a failed step should panic loudly

use std::process::{Command, Output};

use axum::http::Method;
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

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_is_read_with_the_users_kubeconfig_and_never_written() {
    let fake = FakeApi::start().await;
    fake.put(
        "namespaces",
        json!({"metadata": {"name": "opted", "labels": {"ksvc-webhook.flyte.org/inject": "disabled"}}}),
    );
    fake.put("services", before_the_webhook("apps", "old"));
    fake.put("services", admitted(before_the_webhook("apps", "current")));
    fake.put("services", before_the_webhook("opted", "elsewhere"));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake.kubeconfig(dir.path());
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            drift(&args)
        })
    };
    let config = kubeconfig.to_str().unwrap().to_owned();
    let all = run(vec!["-A".into(), "--kubeconfig".into(), config.clone()])
        .await
        .unwrap();
    assert_eq!(all.status.code(), Some(1), "{}", text(&all.stderr));
    let table = text(&all.stdout);
    assert_eq!(
        cells(&table, "elsewhere-proj-dev"),
        ["opted", "elsewhere-proj-dev", "excluded", "no"]
    );
    assert_eq!(table.lines().count(), 4, "{table}");

    let opted = run(vec![
        "-n".into(),
        "opted".into(),
        "--kubeconfig".into(),
        config.clone(),
        "--context".into(),
        "fake".into(),
    ])
    .await
    .unwrap();
    assert_eq!(opted.status.code(), Some(0), "{}", text(&opted.stderr));
    assert_eq!(text(&opted.stdout).lines().count(), 2);

    // The kubeconfig's context namespace (ksvc-system) holds nothing.
    let own = run(vec!["--kubeconfig".into(), config]).await.unwrap();
    assert_eq!(own.status.code(), Some(0));
    assert_eq!(text(&own.stdout).lines().count(), 1, "only the header");

    for method in [Method::PUT, Method::PATCH, Method::POST, Method::DELETE] {
        assert!(fake.requests_to(method, "services").is_empty());
    }
}
