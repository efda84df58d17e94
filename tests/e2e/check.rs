//! `ksvc-webhook check` on the installed control plane: each check's verdict from the real
//! objects, and a × of its own for each fault.
//!
//! No kubelet runs here, so the Service has no pods behind it: `endpoints` (no EndpointSlice
//! with a ready address) and `status-api` (kube-apiserver's service proxy only dials pod
//! addresses) report × by design; every other check must be ✓.

use std::collections::BTreeMap;

use serde_json::Value;
use support::cli::run_bin;
use support::control_plane::{ControlPlane, MUTATING, Webhook};

/// The checks a cluster without pods cannot pass.
const NEED_PODS: [&str; 2] = ["endpoints", "status-api"];

/// `check -o json` as the admin: each check's id with (ok, message and details).
fn check(plane: &ControlPlane) -> BTreeMap<String, (bool, String)> {
    let kubeconfig = plane.kubeconfig.display().to_string();
    let ran = run_bin(
        &["check", "-o", "json", "--kubeconfig", &kubeconfig],
        &[],
        b"",
    );
    let report: Value = serde_json::from_str(&ran.stdout)
        .unwrap_or_else(|e| panic!("check -o json ({e}):\n{}\n{}", ran.stdout, ran.stderr));
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let id = c["check"].as_str().unwrap().to_owned();
            (id, (c["ok"] == true, message_and_details(c)))
        })
        .collect()
}

/// A check's message, then its details (a missing permission a line), one a line.
fn message_and_details(check: &Value) -> String {
    let details = check["details"].as_array().into_iter().flatten();
    let lines = std::iter::once(&check["message"]).chain(details);
    let text: Vec<&str> = lines.filter_map(Value::as_str).collect();
    text.join("\n")
}

fn failing(report: &BTreeMap<String, (bool, String)>) -> Vec<&str> {
    report
        .iter()
        .filter(|(id, (ok, _))| !ok && !NEED_PODS.contains(&id.as_str()))
        .map(|(id, _)| id.as_str())
        .collect()
}

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn check_passes_on_the_installed_control_plane_and_names_an_empty_ca_bundle() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let webhook = Webhook::start(plane, "check", &[]);

    let report = check(plane);
    assert_eq!(failing(&report), Vec::<&str>::new(), "{report:#?}");
    for id in [
        "knative-crd",
        "mutating-webhook",
        "revision-guard",
        "certificate",
        "rbac-admission",
        "rbac-controller",
    ] {
        assert!(report.contains_key(id), "no check {id}: {report:#?}");
    }

    // An empty caBundle, with the webhook stopped (no leader to publish it again): the
    // webhook's own check fails, and only it; a webhook started again puts it back.
    drop(webhook);
    let patch = r#"[{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": ""}]"#;
    plane.json_patch(
        "mutatingwebhookconfiguration",
        MUTATING,
        patch,
        "empty the caBundle",
    );
    let report = check(plane);
    // The admission dry run fails too: kube-apiserver cannot call a stopped webhook.
    assert_eq!(
        failing(&report),
        ["admission", "mutating-webhook"],
        "{report:#?}"
    );
    let _webhook = Webhook::start(plane, "check-again", &[]);
    let report = check(plane);
    assert_eq!(failing(&report), Vec::<&str>::new(), "{report:#?}");
}

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn check_names_a_missing_crd_and_a_missing_permission() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let _webhook = Webhook::start(plane, "check-faults", &[]);

    // A missing Knative CRD.
    plane
        .kubectl(&["delete", "crd", "services.serving.knative.dev", "--wait"])
        .ok("delete the KService CRD");
    let report = check(plane);
    plane
        .kubectl(&[
            "apply",
            "--server-side",
            "-f",
            "e2e/crds/knative-service-crd.yaml",
        ])
        .ok("install the KService CRD again");
    plane
        .kubectl(&[
            "wait",
            "--for",
            "condition=Established",
            "crd/services.serving.knative.dev",
        ])
        .ok("the KService CRD is back");
    // The admission dry run fails too: there is no KService resource to create.
    assert_eq!(
        failing(&report),
        ["admission", "knative-crd"],
        "{report:#?}"
    );

    // A permission taken from the controller part's ClusterRole: `rbac-controller`, which
    // reviews the controller's account, names the call it no longer may make.
    let patch = r#"[{"op": "test", "path": "/rules/3/apiGroups/0", "value": "events.k8s.io"},
                    {"op": "remove", "path": "/rules/3"}]"#;
    let role = "ksvc-webhook-controller";
    plane.json_patch("clusterrole", role, patch, "remove the Events rule");
    let report = check(plane);
    plane
        .kubectl(&["apply", "-k", "target/e2e/install"])
        .ok("install the manifests again");
    assert_eq!(failing(&report), ["rbac-controller"], "{report:#?}");
    let (_, message) = &report["rbac-controller"];
    assert!(message.contains("events"), "{message}");
}
