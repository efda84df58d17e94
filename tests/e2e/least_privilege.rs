//! RBAC, least privilege, over the whole run: the webhook ran every test under its real
//! identity (a TokenRequest token of `ksvc-system/ksvc-webhook`), so kube-apiserver's audit log
//! holds every call it made and the answer each got. None may have been refused, and every call
//! the server declares (`SERVER_CALLS`, which the manifests' RBAC is held to) must have been made
//! at least once: a declared call never made is a permission granted for nothing.
//!
//! scripts/e2e.sh runs this test after the rest of the suite; alone it has nothing to read.

use ksvc_webhook::cli::check::SERVER_CALLS;
use support::control_plane::ControlPlane;

use crate::audit;

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn the_webhook_was_never_refused_and_made_every_declared_call() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let calls = audit::webhook_calls(plane);
    assert!(
        calls.len() > 100,
        "only {} calls of the webhook in {}: run the whole suite first (make e2e)",
        calls.len(),
        plane.dir.join("audit.log").display()
    );

    let refused: Vec<String> = calls
        .iter()
        .filter(|e| e["responseStatus"]["code"] == 403)
        .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
        .collect();
    assert_eq!(
        refused,
        Vec::<String>::new(),
        "calls of the webhook refused by RBAC"
    );

    let missing: Vec<String> = SERVER_CALLS
        .iter()
        .flat_map(|calls| calls.iter())
        .filter(|call| {
            !calls.iter().any(|e| {
                e["verb"] == call.verb
                    && e["objectRef"]["resource"] == call.resource
                    && e["objectRef"]["apiGroup"].as_str().unwrap_or("") == call.group
            })
        })
        .map(|call| format!("{} {}.{}", call.verb, call.resource, call.group))
        .collect();
    assert_eq!(
        missing,
        Vec::<String>::new(),
        "declared calls the webhook never made in the whole run"
    );
}
