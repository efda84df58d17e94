//! `ksvc-webhook explain`, run as a user runs it: the real binary on files offline, and against
//! the in-test API server with a kubeconfig (the stored KService, its Namespace's labels and the
//! webhook configuration's namespaceSelector read from there).

#![allow(clippy::unwrap_used)] // a test: a failed step should panic loudly

use serde_json::{Value, json};
use support::FakeApi;
use support::cli::{Ran, run, run_bin};

fn explain(args: &[&str], stdin: &[u8]) -> Ran {
    let mut all = vec!["explain"];
    all.extend(args);
    run_bin(&all, &[], stdin)
}

#[test]
fn a_managed_app_shows_each_step_and_its_field_paths() {
    let ran = explain(&["-f", "examples/managed-ksvc.yaml"], b"");
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let out = &ran.stdout;
    assert!(out.contains("served:    yes"), "{out}");
    assert!(
        out.contains("managed:   yes: identity proj/dev/myapp, name myapp-proj-dev"),
        "{out}"
    );
    assert!(
        out.contains("naming:\n    add /metadata/name = \"myapp-proj-dev\""),
        "{out}"
    );
    assert!(
        out.contains("spec_sha:\n    add /metadata/annotations/flyte.org~1spec-sha = \""),
        "{out}"
    );
    assert!(
        out.contains("env_var:\n    add /spec/template/spec/containers/0/env/-"),
        "{out}"
    );
    assert!(out.contains("INTERNAL_APP_ENDPOINT_PATTERN"), "{out}");
}

#[test]
fn what_is_refused_is_listed_with_its_path_and_exit_1() {
    let ran = explain(&["-f", "examples/invalid-ksvc.yaml"], b"");
    assert_eq!(ran.code, Some(1), "{}", ran.stdout);
    assert!(
        ran.stdout.contains("refused:   3 problem(s)"),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout
            .contains("metadata.name: \"My_App\" is not a DNS-1035 label"),
        "{}",
        ran.stdout
    );
    assert!(ran.stdout.contains("[stopped-value]"), "{}", ran.stdout);
}

#[test]
fn sidecars_and_the_namespace_opt_out_are_explained_as_data() {
    let ran = explain(
        &[
            "-f",
            "examples/managed-ksvc.yaml",
            "--sidecars",
            "examples/sidecars.yaml",
            "--namespace-label",
            "ksvc-webhook.flyte.org/inject=disabled",
            "-o",
            "json",
        ],
        b"",
    );
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let out: Value = serde_json::from_str(&ran.stdout).unwrap();
    let one = &out[0];
    assert_eq!(one["served"]["served"], json!(false), "{one}");
    assert!(
        one["served"]["why"]
            .as_str()
            .unwrap()
            .contains("ksvc-webhook.flyte.org/inject=disabled"),
        "{one}"
    );
    assert_eq!(one["sidecars"], json!(["log-shipper"]));
    let steps: Vec<&str> = one["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert!(steps.contains(&"sidecars"), "{steps:?}");
    let plain = explain(&["-f", "-"], br#"{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"x","namespace":"knative-serving"},"spec":{"template":{"spec":{"containers":[{"image":"a"}]}}}}"#);
    assert!(
        plain
            .stdout
            .contains("served:    no: namespace \"knative-serving\" is never served"),
        "{}",
        plain.stdout
    );
    assert!(plain.stdout.contains("managed:   no"), "{}", plain.stdout);
}

#[test]
fn a_file_without_a_kservice_is_an_error() {
    let ran = explain(
        &["-f", "-"],
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n",
    );
    assert_eq!(ran.code, Some(1));
    assert!(
        ran.stderr
            .contains("holds no serving.knative.dev/v1 Service"),
        "{}",
        ran.stderr
    );
}

#[tokio::test]
async fn from_the_cluster_it_reads_the_object_the_namespace_and_the_selector() {
    let fake = FakeApi::start().await;
    fake.put(
        "services",
        json!({"apiVersion": "serving.knative.dev/v1", "kind": "Service",
               "metadata": {"name": "hello", "namespace": "team-a", "resourceVersion": "3"},
               "spec": {"template": {"spec": {"containers": [{"image": "nginx"}]}}}}),
    );
    fake.put_namespace("team-a", &[("tier", "apps")]);
    fake.put(
        "mutatingwebhookconfigurations",
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
               "metadata": {"name": "zz-ksvc-webhook.flyte.org"},
               "webhooks": [{"name": "zz-ksvc-webhook.flyte.org", "admissionReviewVersions": ["v1"],
                             "sideEffects": "None",
                             "clientConfig": {"service": {"name": "ksvc-webhook", "namespace": "ksvc-system"}},
                             "namespaceSelector": {"matchLabels": {"tier": "webhooked"}}}]}),
    );
    let ran = run(&fake, &["explain", "hello", "-n", "team-a"]).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(
        ran.stdout.starts_with("Service team-a/hello\n"),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout.contains("served:    no: the webhook's namespaceSelector does not match namespace \"team-a\": matchLabels wants tier=webhooked"),
        "{}",
        ran.stdout
    );
    // A plain KService stored before the webhook: re-admitting it adds the SHA and the env var.
    assert!(ran.stdout.contains("spec_sha:"), "{}", ran.stdout);
    assert!(ran.stdout.contains("env_var:"), "{}", ran.stdout);

    fake.edit("namespaces", "", "team-a", |ns| {
        ns["metadata"]["labels"]["tier"] = json!("webhooked");
    });
    let served = run(&fake, &["explain", "hello", "-n", "team-a"]).await;
    assert!(
        served
            .stdout
            .contains("served:    yes: the webhook's namespaceSelector matches"),
        "{}",
        served.stdout
    );
    let missing = run(&fake, &["explain", "nothere", "-n", "team-a"]).await;
    assert_eq!(missing.code, Some(1));
    assert!(
        missing.stderr.contains("no KService team-a/nothere"),
        "{}",
        missing.stderr
    );
}
