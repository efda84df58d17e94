//! RBAC, least privilege, over the whole run, per part: the admission part ran every test under
//! a TokenRequest token of `ksvc-system/ksvc-webhook` and the controller part under one of
//! `ksvc-system/ksvc-webhook-controller`, so kube-apiserver's audit log holds every call each
//! made and the answer each got. None may have been refused, and every call a part declares
//! (`serve::api_calls` of its role, which tests/manifests.rs holds its account's RBAC to) must
//! have been made by that part's account at least once: a declared call never made is a
//! permission granted for nothing.
//!
//! scripts/e2e.sh runs this test after the rest of the suite; alone it has nothing to read.

use ksvc_webhook::cli::serve::{CertMode, api_calls};
use ksvc_webhook::cluster::rbac::ApiCall;
use ksvc_webhook::server::role::Role;
use support::control_plane::ControlPlane;

use crate::audit::{self, CONTROLLER_USER, WEBHOOK_USER};

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn each_part_was_never_refused_and_made_every_call_it_declares() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    for (user, role) in [
        (WEBHOOK_USER, Role::Admission),
        (CONTROLLER_USER, Role::Controller),
    ] {
        part_was_never_refused_and_made_its_calls(plane, user, role);
    }

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
}

fn part_was_never_refused_and_made_its_calls(plane: &ControlPlane, user: &str, role: Role) {
    // The missing-rule test's 403s are its point: its namespace is left out.
    let calls: Vec<_> = audit::calls_of(plane, user)
        .into_iter()
        .filter(|e| {
            !e["objectRef"]["namespace"]
                .as_str()
                .is_some_and(|ns| ns.starts_with(crate::missing_rule::PREFIX))
        })
        .collect();
    assert!(
        calls.len() > 50,
        "only {} calls of {user} in {}: run the whole suite first (make e2e)",
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
        "calls of {user} refused by RBAC"
    );

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
    let missing: Vec<String> = api_calls(role, CertMode::SelfManaged)
        .iter()
        .flat_map(|calls| calls.iter())
        .filter(|call| !calls.iter().any(|e| made(call, e)))
        .map(|call| format!("{} {}.{}", call.verb, call.resource, call.group))
        .collect();
    assert_eq!(
        missing,
        Vec::<String>::new(),
        "calls {user} declares but never made in the whole run"
    );
}
