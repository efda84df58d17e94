//! What Knative's controllers would write, written by the test (no Knative controller runs):
//! a KService's Configuration, its Revisions (owner references, labels, status through the
//! `/status` subresource) and the KService's own status (generation observed, latest
//! revisions, the route's traffic).

use serde_json::{Value, json};
use support::control_plane::ControlPlane;

/// An owner reference to `owner` (a controller reference, as Knative sets it).
fn owned_by(owner: &Value) -> Value {
    json!([{
        "apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
        "controller": true, "blockOwnerDeletion": true,
    }])
}

/// The KService `name`'s Configuration (owned by it), created; returned as stored.
pub fn configuration(plane: &ControlPlane, ns: &str, name: &str) -> Value {
    let ksvc = plane.get_json(&["ksvc", name, "-n", ns]);
    let configuration = json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Configuration",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"serving.knative.dev/service": name},
                     "ownerReferences": owned_by(&ksvc)},
        "spec": {"template": ksvc["spec"]["template"]},
    });
    let created = plane
        .kubectl_in(
            &["create", "-o", "json", "-f", "-"],
            configuration.to_string().as_bytes(),
        )
        .ok("create the Configuration");
    serde_json::from_str(&created.stdout).unwrap()
}

/// Revision `<name>-0000<n>` of the KService's current template, owned by its Configuration,
/// Ready, with `replicas` pods (Active while it has any), labelled as in the route
/// (`routingState: active`). Returns its name.
pub fn revision(plane: &ControlPlane, ns: &str, name: &str, n: u32, replicas: i64) -> String {
    let ksvc = plane.get_json(&["ksvc", name, "-n", ns]);
    let configuration = plane.get_json(&["configuration", name, "-n", ns]);
    let revision_name = format!("{name}-{n:05}");
    let revision = json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Revision",
        "metadata": {"name": revision_name, "namespace": ns,
                     "labels": {"serving.knative.dev/service": name,
                                "serving.knative.dev/configuration": name,
                                "serving.knative.dev/configurationGeneration": n.to_string(),
                                "serving.knative.dev/routingState": "active"},
                     "ownerReferences": owned_by(&configuration)},
        "spec": ksvc["spec"]["template"]["spec"],
    });
    plane
        .kubectl_in(&["create", "-f", "-"], revision.to_string().as_bytes())
        .ok("create a Revision");
    let active = if replicas > 0 { "True" } else { "False" };
    let status = json!({"status": {
        "observedGeneration": 1, "actualReplicas": replicas, "desiredReplicas": replicas,
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T00:00:00Z"},
            {"type": "Active", "status": active, "lastTransitionTime": "2026-12-01T00:00:00Z"},
            {"type": "ContainerHealthy", "status": "True", "lastTransitionTime": "2026-12-01T00:00:00Z"},
            {"type": "ResourcesAvailable", "status": "True", "lastTransitionTime": "2026-12-01T00:00:00Z"},
        ],
    }});
    status_patch(plane, "revision", &revision_name, ns, &status);
    revision_name
}

/// The KService's status as Knative's route reports it: the current generation observed, these
/// latest revisions, and `traffic` (revision, percent).
pub fn route(plane: &ControlPlane, ns: &str, name: &str, latest: &str, traffic: &[(&str, i64)]) {
    let ksvc = plane.get_json(&["ksvc", name, "-n", ns]);
    let traffic: Vec<Value> = traffic
        .iter()
        .map(|(revision, percent)| {
            json!({"revisionName": revision, "percent": percent, "latestRevision": *revision == latest})
        })
        .collect();
    let ready = |kind: &str| json!({"type": kind, "status": "True", "lastTransitionTime": "2026-12-01T00:00:00Z"});
    let status = json!({"status": {
        "observedGeneration": ksvc["metadata"]["generation"],
        "latestCreatedRevisionName": latest, "latestReadyRevisionName": latest,
        "url": format!("http://{name}.{ns}.example.com"),
        "traffic": traffic,
        "conditions": [ready("Ready"), ready("ConfigurationsReady"), ready("RoutesReady")],
    }});
    status_patch(plane, "ksvc", name, ns, &status);
}

/// The revision's `routingState` label, as Knative's labeler sets it when traffic moves
/// (`active` in the route, `reserve` once out of it).
pub fn routing_state(plane: &ControlPlane, ns: &str, revision: &str, state: &str) {
    let label = format!("serving.knative.dev/routingState={state}");
    plane.label("revision", revision, ns, &label, "label the routing state");
}

fn status_patch(plane: &ControlPlane, kind: &str, name: &str, ns: &str, status: &Value) {
    plane
        .kubectl(&[
            "patch",
            kind,
            name,
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ])
        .ok(&format!("write the status of {kind} {name}"));
}
