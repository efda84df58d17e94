//! A webhook kube-apiserver cannot reach (its Service pointing nowhere, the process behind the
//! old address gone), as the manifests' failure policies promise: KService writes are refused,
//! naming the webhook (`failurePolicy: Fail`: nothing is created unvalidated), a namespace that
//! opted out is not held up, and Revision deletes go through (the guard's `failurePolicy:
//! Ignore`: an outage never blocks a delete).

use std::time::Duration;
use support::control_plane::{ControlPlane, Reinstall, SYSTEM_NS, Webhook};
use support::poll;

use crate::objects::example;

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn with_the_service_pointing_nowhere_writes_are_refused_and_deletes_go_through() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let ns = plane.namespace("outage");
    let opted_out = plane.namespace("outage-optout");
    plane
        .kubectl(&[
            "label",
            "namespace",
            &opted_out,
            "ksvc-webhook.flyte.org/inject=disabled",
        ])
        .ok("opt a namespace out");
    let webhook = Webhook::start(plane, "outage", &[]);
    plane
        .kubectl_in(
            &["apply", "-f", "-"],
            example("plain-ksvc.yaml", &ns).as_bytes(),
        )
        .ok("apply the KService the revision serves");
    let revision = serde_json::json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Revision",
        "metadata": {"name": "hello-00001", "namespace": ns,
                     "labels": {"serving.knative.dev/service": "hello",
                                "serving.knative.dev/routingState": "active"}},
        "spec": {"containers": [{"image": "ghcr.io/knative/helloworld-go:latest"}]},
    });
    plane
        .kubectl_in(&["create", "-f", "-"], revision.to_string().as_bytes())
        .ok("create a serving revision");

    // Reachable, the guard keeps it.
    let kept = plane.kubectl(&["delete", "revision", "hello-00001", "-n", &ns]);
    assert_eq!(
        kept.code,
        Some(1),
        "the guard let a serving revision go: {}",
        kept.stdout
    );

    let _reinstall = Reinstall(plane);
    plane
        .kubectl(&[
            "patch",
            "service",
            "ksvc-webhook",
            "-n",
            SYSTEM_NS,
            "--type=merge",
            "-p",
            r#"{"spec": {"externalName": "nowhere.invalid"}}"#,
        ])
        .ok("point the Service nowhere");

    let another = example("plain-ksvc.yaml", &ns).replace("name: hello", "name: hello-again");
    // kube-apiserver resolves the Service when it dials, and keeps its open connections to the
    // old address: only once the process behind them is gone does it dial the new name.
    drop(webhook);
    poll::blocking(
        "kube-apiserver dials the Service's new name",
        Duration::from_secs(30),
        || {
            let dry = plane.kubectl_in(
                &["create", "--dry-run=server", "-f", "-"],
                another.as_bytes(),
            );
            (dry.code == Some(1)).then_some(())
        },
    );
    let refused = plane.kubectl_in(&["create", "-f", "-"], another.as_bytes());
    refused.refused_by_the_webhook("created with the webhook unreachable");
    plane
        .kubectl_in(
            &["create", "-f", "-"],
            example("plain-ksvc.yaml", &opted_out).as_bytes(),
        )
        .ok("a create in an opted-out namespace");
    plane
        .kubectl(&["delete", "revision", "hello-00001", "-n", &ns])
        .ok("delete a serving revision while the guard is unreachable");
}
