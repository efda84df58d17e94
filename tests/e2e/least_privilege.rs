//! RBAC, least privilege, over the whole run: the webhook ran every test under its real
//! identity (a TokenRequest token of `ksvc-system/ksvc-webhook`), so kube-apiserver's audit log
//! holds every call it made and the answer each got. None may have been refused, and every call
//! the server declares (`api_calls(Role::All)`, which the manifests' RBAC is held to) must have
//! been made at least once: a declared call never made is a permission granted for nothing.
//!
//! scripts/e2e.sh runs this test after the rest of the suite; alone it has nothing to read.

use ksvc_webhook::cli::serve::api_calls;
use ksvc_webhook::cluster::rbac::ApiCall;
use ksvc_webhook::server::role::Role;
use support::control_plane::ControlPlane;

use crate::audit;

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn the_webhook_was_never_refused_and_made_every_declared_call() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    // The missing-rule test's 403s are its point: its namespace is left out.
    let calls: Vec<_> = audit::webhook_calls(plane)
        .into_iter()
        .filter(|e| {
            !e["objectRef"]["namespace"]
                .as_str()
                .is_some_and(|ns| ns.starts_with(crate::missing_rule::PREFIX))
        })
        .collect();
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

    // And the servers' own logs agree: no call they made was forbidden.
    for entry in std::fs::read_dir(&plane.dir).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        if file.starts_with("ksvc-webhook-")
            && file.ends_with(".log")
            && !file.contains(crate::missing_rule::PREFIX)
        {
            let log = std::fs::read_to_string(&path).unwrap();
            assert!(
                !log.contains("is forbidden"),
                "{file} logs a forbidden call"
            );
        }
    }

    // The loop lists by streaming (a watch with `sendInitialEvents=true`, authorized as a
    // watch), which kube-apiserver 1.36 serves; its `list` grant is for the paged lists it falls
    // back to on a server that refuses streaming, which this one never does. So a streaming list
    // of a resource stands for its declared list.
    let made = |call: &ApiCall, e: &serde_json::Value| {
        let on = e["objectRef"]["resource"] == call.resource
            && e["objectRef"]["apiGroup"].as_str().unwrap_or("") == call.group;
        let streamed = e["verb"] == "watch"
            && e["requestURI"]
                .as_str()
                .is_some_and(|uri| uri.contains("sendInitialEvents=true"));
        on && (e["verb"] == call.verb || (call.verb == "list" && streamed))
    };
    let missing: Vec<String> = api_calls(Role::All)
        .into_iter()
        .flatten()
        .filter(|call| !calls.iter().any(|e| made(call, e)))
        .map(|call| format!("{} {}.{}", call.verb, call.resource, call.group))
        .collect();
    assert_eq!(
        missing,
        Vec::<String>::new(),
        "declared calls the webhook never made in the whole run"
    );
}
