//! Two replicas against the real coordination API: one Lease, one leader; when the leader dies
//! without releasing it, the other takes over once it expires, and stop and start through the
//! label keep working with the survivor alone.

use serde_json::Value;
use std::time::Duration;
use support::control_plane::{ControlPlane, SYSTEM_NS, Webhook, free_port};
use support::poll;

use crate::objects::create_managed_app;

const LEASE: &str = "ksvc-webhook-watch";
const DURATION: &str = "--lease-duration=4s";

fn holder(plane: &ControlPlane) -> String {
    let lease: Value = plane.get_json(&["lease", LEASE, "-n", SYSTEM_NS]);
    lease["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn when_the_leader_dies_the_other_replica_takes_the_lease_and_serves_alone() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let ns = plane.namespace("lease");
    let mut alpha = Webhook::start(plane, "alpha", &[DURATION]);
    poll::blocking("alpha holds the Lease", Duration::from_secs(30), || {
        (holder(plane) == "alpha").then_some(())
    });
    let beta_port = free_port();
    let beta = Webhook::spawn(plane, "beta", beta_port, &[DURATION]);
    beta.wait_ready(beta_port);
    assert_eq!(
        holder(plane),
        "alpha",
        "the second replica took a held Lease"
    );

    alpha.kill();
    plane.point_webhooks_at(beta_port);
    poll::blocking("beta holds the Lease", Duration::from_secs(60), || {
        (holder(plane) == "beta").then_some(())
    });

    let name = create_managed_app(plane, &ns, "create with the survivor alone");
    for (stopped, min_scale) in [("true", Some("0")), ("false", None)] {
        let label = format!("flyte.org/app-stopped={stopped}");
        let what = "stop or start through the label";
        plane.label("ksvc", &name, &ns, &label, what);
        let ksvc = plane.get_json(&["ksvc", &name, "-n", &ns]);
        let scale = ksvc["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"].as_str();
        let want = min_scale.or(Some("1"));
        assert_eq!(
            scale, want,
            "app-stopped={stopped}: {:#}",
            ksvc["spec"]["template"]["metadata"]
        );
    }
    drop(beta);
    plane.point_webhooks_at(plane.webhook_port);
}
