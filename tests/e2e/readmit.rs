//! Apps that were there first: a KService stored while the webhook did not see its namespace is
//! reported as drift (by `ksvc-webhook drift` and on `/apps`), and with `--readmit=all` it is
//! written again through the real admission chain until it is in step.

use serde_json::Value;
use std::time::Duration;
use support::cli::run_bin;
use support::control_plane::{ControlPlane, Webhook};
use support::poll;

use crate::objects::{example, text};
use crate::status_api::{get, reader};

const SHA: &str = "/metadata/annotations/flyte.org~1spec-sha";

/// The drift report of the KServices in `ns` as `ksvc-webhook drift -f -` judges the cluster's
/// objects, read by the admin, with the catalogue from the cluster: before any server runs,
/// there is no server's report to read ([`server_drift_report`] reads it once one does).
pub fn drift_report(plane: &ControlPlane, ns: &str) -> Value {
    let kubeconfig = plane.kubeconfig.display().to_string();
    let stored = plane
        .kubectl(&["get", "ksvc", "-n", ns, "-o", "yaml"])
        .ok("read the KServices");
    let args = [
        "drift",
        "-f",
        "-",
        "--sidecars-from-cluster",
        "-o",
        "json",
        "--kubeconfig",
    ];
    let drift = run_bin(
        &[&args[..], &[kubeconfig.as_str()]].concat(),
        &[],
        stored.stdout.as_bytes(),
    );
    serde_json::from_str(&drift.stdout)
        .unwrap_or_else(|e| panic!("drift -o json ({e}): {}{}", drift.stdout, drift.stderr))
}

/// The server's own drift report, as `ksvc-webhook drift` gives it by default: `/apps` of the
/// controller part's loopback status listener, read with `--status-url` (here, with no kubelet,
/// nothing can port-forward; the listener is the one a port-forward reaches). `ns`: one
/// namespace, or every one.
pub fn server_drift_report(plane: &ControlPlane, webhook: &Webhook, ns: Option<&str>) -> Value {
    let kubeconfig = plane.kubeconfig.display().to_string();
    let url = format!("http://127.0.0.1:{}", webhook.local_status_port);
    let mut args = vec![
        "drift",
        "-o",
        "json",
        "--status-url",
        &url,
        "--kubeconfig",
        &kubeconfig,
    ];
    match ns {
        Some(ns) => args.extend(["-n", ns]),
        None => args.push("-A"),
    }
    let drift = run_bin(&args, &[], b"");
    assert!(drift.code == Some(0) || drift.code == Some(1), "{drift:?}");
    serde_json::from_str(&drift.stdout)
        .unwrap_or_else(|e| panic!("drift -o json ({e}): {}{}", drift.stdout, drift.stderr))
}

/// The drift report names `name` in `ns` as drifted.
fn assert_drift_reported(plane: &ControlPlane, ns: &str, name: &str) {
    let report = drift_report(plane, ns);
    let row = report
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in the drift report: {report:#}"));
    assert!(!row["drift"].as_array().unwrap().is_empty(), "{row:#}");
}

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn an_app_stored_before_the_webhook_saw_it_is_reported_and_readmitted() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let ns = plane.namespace("readmit");
    reader(plane, &ns);
    // Stored while the namespace opted out: admission never saw it.
    plane
        .kubectl(&[
            "label",
            "namespace",
            &ns,
            "ksvc-webhook.flyte.org/inject=disabled",
        ])
        .ok("opt the namespace out");
    let name = "myapp-proj-dev";
    let yaml = example("managed-ksvc.yaml", &ns).replacen(
        "\nmetadata:\n",
        &format!("\nmetadata:\n  name: {name}\n"),
        1,
    );
    plane
        .kubectl_in(&["create", "-f", "-"], yaml.as_bytes())
        .ok("create before admission");
    assert_eq!(text(&plane.get_json(&["ksvc", name, "-n", &ns]), SHA), "");
    plane
        .kubectl(&["label", "namespace", &ns, "ksvc-webhook.flyte.org/inject-"])
        .ok("opt the namespace back in");

    assert_drift_reported(plane, &ns, name);

    let _webhook = Webhook::start(
        plane,
        "readmit",
        &["--readmit=all", "--readmit-interval=1s"],
    );
    let token = plane.token(&ns, "reader", None);
    // Before it converges, or right after, /apps carried the same report; in the end, none.
    let readmitted = poll::blocking(
        "the app has been written again through admission",
        Duration::from_secs(90),
        || {
            let ksvc = plane.get_json(&["ksvc", name, "-n", &ns]);
            (!text(&ksvc, SHA).is_empty()).then_some(ksvc)
        },
    );
    assert!(
        readmitted["metadata"]["annotations"]["ksvc-webhook.flyte.org/readmitted"].is_string(),
        "{:#}",
        readmitted["metadata"]
    );
    poll::blocking(
        "/apps reports no drift for it",
        Duration::from_secs(60),
        || {
            let (code, body) = get(plane, &token, &format!("/apps/{ns}/{name}"));
            let app: Value = serde_json::from_str(&body).unwrap_or_default();
            (code == 200 && app["drift"].as_array().is_some_and(Vec::is_empty)).then_some(())
        },
    );
}
