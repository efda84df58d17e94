//! The revision guard against the real API and the real garbage collector: a user's delete of a
//! Revision that still serves is refused; deleting the KService lets kube-controller-manager's
//! garbage collector remove its Configuration and Revisions with no refusal.

use serde_json::Value;
use std::time::Duration;
use support::control_plane::{ControlPlane, Webhook};
use support::poll;

use crate::knative;
use crate::objects::{example, text};

/// The webhook name of the guard, as kubectl prints it in a refusal.
const GUARD_WEBHOOK: &str = "revision-guard.ksvc-webhook.flyte.org";

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn a_serving_revision_is_kept_from_a_user_and_the_garbage_collector_removes_it_after_its_ksvc() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let ns = plane.namespace("guard");
    let _webhook = Webhook::start(plane, "guard", &[]);
    plane
        .kubectl_in(
            &["apply", "-f", "-"],
            example("plain-ksvc.yaml", &ns).as_bytes(),
        )
        .ok("apply a KService");
    knative::configuration(plane, &ns, "hello");
    let revision = knative::revision(plane, &ns, "hello", 1, 1);
    knative::route(plane, &ns, "hello", &revision, &[(&revision, 100)]);

    let refused = plane.kubectl(&["delete", "revision", &revision, "-n", &ns]);
    assert_eq!(
        refused.code,
        Some(1),
        "deleted a serving revision: {}",
        refused.stdout
    );
    assert!(
        refused.stderr.contains(&format!(
            "admission webhook \"{GUARD_WEBHOOK}\" denied the request"
        )),
        "{}",
        refused.stderr
    );
    plane.get_json(&["revision", &revision, "-n", &ns]);

    plane
        .kubectl(&["delete", "ksvc", "hello", "-n", &ns])
        .ok("delete the KService");
    poll::blocking(
        "the garbage collector has removed the Revision",
        Duration::from_secs(120),
        || {
            let left = plane
                .kubectl(&["get", "revisions", "-n", &ns, "-o", "name"])
                .ok("list");
            left.stdout.is_empty().then_some(())
        },
    );
    // The collector's delete went through the guard and was allowed at once.
    let collector = "system:serviceaccount:kube-system:generic-garbage-collector";
    let deletes: Vec<Value> = crate::audit::events(plane)
        .into_iter()
        .filter(|e| {
            e["verb"] == "delete"
                && e["objectRef"]["resource"] == "revisions"
                && e["objectRef"]["namespace"] == ns.as_str()
                && text(e, "/objectRef/name") == revision
        })
        .collect();
    let by_collector: Vec<&Value> = deletes
        .iter()
        .filter(|e| e["user"]["username"] == collector)
        .collect();
    assert!(
        !by_collector.is_empty(),
        "no delete by the collector in the audit log: {deletes:#?}"
    );
    for event in by_collector {
        assert_eq!(event["responseStatus"]["code"], 200, "{event:#}");
    }
}
