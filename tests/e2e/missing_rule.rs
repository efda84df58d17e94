//! One rule taken from the manifests' ClusterRole (the controller part's): the feature that needs
//! it fails loudly, its log naming the permission kube-apiserver refused, and recovers once the
//! rule is back. The least-privilege test leaves this test's namespace out (its 403s are the
//! point here).

use std::time::Duration;
use support::control_plane::{ControlPlane, Reinstall, Webhook};
use support::poll;

use crate::knative;
use crate::objects::create_managed_app;

/// The namespace prefix and webhook identity of this test: `least_privilege` leaves out these
/// namespaces' calls and this webhook's log.
pub const PREFIX: &str = "missing-rule";

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn without_the_revision_delete_rule_the_teardown_fails_naming_it_and_recovers_when_it_is_back() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let ns = plane.namespace(PREFIX);
    let reinstall = Reinstall(plane);
    let patch = r#"[{"op": "test", "path": "/rules/1/resources", "value": ["revisions"]},
                    {"op": "replace", "path": "/rules/1/verbs", "value": ["list", "watch"]}]"#;
    let role = "ksvc-webhook-controller";
    let what = "take `delete revisions` from the ClusterRole";
    plane.json_patch("clusterrole", role, patch, what);
    let webhook = Webhook::start(plane, PREFIX, &[]);

    // A stopped app whose old revision the route has left: the loop must delete it.
    let name = create_managed_app(plane, &ns, "create a managed app");
    knative::configuration(plane, &ns, &name);
    let first = knative::revision(plane, &ns, &name, 1, 1);
    let stopped = "flyte.org/app-stopped=true";
    plane.label("ksvc", &name, &ns, stopped, "stop the app");
    let second = knative::revision(plane, &ns, &name, 2, 0);
    knative::routing_state(plane, &ns, &first, "reserve");
    knative::route(plane, &ns, &name, &second, &[(&second, 100)]);

    let refused = r#"cannot delete resource \"revisions\" in API group \"serving.knative.dev\""#;
    poll::blocking(
        "the server logs the permission it lacks",
        Duration::from_secs(60),
        || webhook.log_text().contains(refused).then_some(()),
    );
    let left = plane.kubectl(&["get", "revision", &first, "-n", &ns, "-o", "name"]);
    assert_eq!(
        left.code,
        Some(0),
        "deleted without the permission: {}",
        left.stderr
    );

    drop(reinstall);
    poll::blocking(
        "the loop deletes the revision once the rule is back",
        Duration::from_secs(60),
        || {
            let gone = plane.kubectl(&["get", "revision", &first, "-n", &ns, "-o", "name"]);
            gone.stderr.contains("NotFound").then_some(())
        },
    );
}
