//! kube-apiserver's audit log (scripts/e2e-cluster.sh records every request of the two parts'
//! ServiceAccounts and every Revision delete): who called what, and what the API answered.

use serde_json::Value;
use support::control_plane::ControlPlane;

/// The user the admission part runs as.
pub const WEBHOOK_USER: &str = "system:serviceaccount:ksvc-system:ksvc-webhook";
/// The user the controller part runs as.
pub const CONTROLLER_USER: &str = "system:serviceaccount:ksvc-system:ksvc-webhook-controller";

/// Every audit event recorded so far (stages ResponseComplete and Panic: one per request).
pub fn events(plane: &ControlPlane) -> Vec<Value> {
    let text = std::fs::read_to_string(plane.dir.join("audit.log")).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["stage"] != "ResponseStarted")
        .collect()
}

/// The events of the calls `user` made (one of the parts).
pub fn calls_of(plane: &ControlPlane, user: &str) -> Vec<Value> {
    events(plane)
        .into_iter()
        .filter(|e| e["user"]["username"] == user)
        .collect()
}
