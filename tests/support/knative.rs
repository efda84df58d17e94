//! Knative objects as Knative reports them, for the fake API server: a managed KService and its
//! Revisions.

use serde_json::{Value, json};

/// A managed KService, as Knative reports it.
pub fn ksvc(
    name: &str,
    stopped: bool,
    stop_edits: bool,
    generation: i64,
    traffic: &[&str],
    latest: &str,
) -> Value {
    let mut labels =
        json!({"flyte.org/project": "proj", "flyte.org/domain": "dev", "flyte.org/app-name": name});
    let mut template_annotations = json!({});
    if stopped {
        labels["flyte.org/app-stopped"] = json!("true");
    }
    if stop_edits {
        labels["networking.knative.dev/visibility"] = json!("cluster-local");
        template_annotations["autoscaling.knative.dev/min-scale"] = json!("0");
    }
    let traffic: Vec<Value> = traffic
        .iter()
        .map(|r| json!({"revisionName": r, "percent": 100 / traffic.len(), "latestRevision": *r == latest}))
        .collect();
    json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "apps", "generation": generation, "labels": labels,
                     "annotations": {"flyte.org/app-managed": "true", "user/keep": "me"}},
        "spec": {"template": {"metadata": {"annotations": template_annotations},
                              "spec": {"containers": [{"image": "registry.example/app:1"}]}}},
        "status": {
            "observedGeneration": generation,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T00:00:00Z"}],
            "latestCreatedRevisionName": latest, "latestReadyRevisionName": latest,
            "url": format!("http://{name}.apps.svc.cluster.local"), "traffic": traffic
        }
    })
}

/// A revision of `service` with `replicas` pods.
pub fn revision(service: &str, name: &str, replicas: i32, no_gc: bool) -> Value {
    let annotations = if no_gc {
        json!({"serving.knative.dev/no-gc": "true"})
    } else {
        json!({})
    };
    json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Revision",
        "metadata": {"name": name, "namespace": "apps", "annotations": annotations,
                     "labels": {"serving.knative.dev/service": service}},
        "status": {"actualReplicas": replicas,
                   "conditions": [{"type": "Ready", "status": "True"},
                                  {"type": "Active", "status": if replicas > 0 { "True" } else { "False" },
                                   "reason": if replicas > 0 { "" } else { "NoTraffic" }}]}
    })
}
