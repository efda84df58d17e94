//! The install's window on the real control plane (docs/install.md): with the webhook
//! configuration installed (`failurePolicy: Ignore`) and no webhook process running, `kubectl
//! create` of a KService succeeds, even of one admission would refuse. Once the webhook has
//! answered, the policy is `Fail`: an invalid KService is refused, and with the process gone a
//! write is refused too. The app created in the gap is in the drift report.

use support::control_plane::{ControlPlane, MUTATING, Webhook, free_port};

use crate::objects::example;
use crate::readmit::drift_report;

/// The configuration as a fresh install leaves it: `Ignore`, pointed at a port nobody serves.
fn fresh_install(plane: &ControlPlane) {
    let patch = r#"[{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]"#;
    let ignore = "registered Ignore, as installed";
    plane.json_patch("mutatingwebhookconfiguration", MUTATING, patch, ignore);
    plane.point_webhooks_at(free_port());
}

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn a_write_before_the_webhook_answered_passes_and_shows_in_drift_then_fail_holds() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    fresh_install(plane);
    let ns = plane.namespace("window");
    // Admission would refuse this one (its identity labels); nobody answers, so kube-apiserver
    // lets it through. Its name is made valid: kube-apiserver's own checks still apply.
    let invalid = example("invalid-ksvc.yaml", &ns).replacen("name: My_App", "name: gap-app", 1);
    plane
        .kubectl_in(&["create", "-f", "-"], invalid.as_bytes())
        .ok("create in the install window, no webhook running");
    let gap_name = "gap-app";

    let mut webhook = Webhook::start(plane, "window", &[]);
    let config = plane.get_json(&["mutatingwebhookconfiguration", MUTATING]);
    assert_eq!(config["webhooks"][0]["failurePolicy"], "Fail");
    let again = invalid.replacen("name: gap-app", "name: again", 1);
    let refused = plane.kubectl_in(&["create", "-f", "-"], again.as_bytes());
    assert_eq!(refused.code, Some(1), "{}", refused.stdout);
    assert!(refused.stderr.contains(MUTATING), "{}", refused.stderr);

    let report = drift_report(plane, &ns);
    let row = report
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == gap_name)
        .unwrap_or_else(|| panic!("{gap_name} not in the drift report: {report:#}"));
    assert!(!row["drift"].as_array().unwrap().is_empty(), "{row:#}");

    // With the process gone, Fail holds: kube-apiserver refuses the write.
    webhook.stop();
    let plain = example("plain-ksvc.yaml", &ns);
    let down = plane.kubectl_in(&["create", "-f", "-"], plain.as_bytes());
    assert_eq!(
        down.code,
        Some(1),
        "created with the webhook down: {}",
        down.stdout
    );
    assert!(
        down.stderr.contains("failed calling webhook"),
        "{}",
        down.stderr
    );
    // The gap's app stays out of the rest of the suite's drift.
    plane
        .kubectl(&["delete", "ksvc", gap_name, "-n", &ns])
        .ok("delete the gap's KService");
}
