//! Knative objects as a real cluster holds them, for the benchmarks and the scale test: a
//! KService as kubectl applies it and the platform and Knative then write it (kubectl's
//! last-applied annotation, `managedFields` of three managers, two containers with env, probes
//! and resources, a status of three conditions; about 6.9 KB of JSON), and its Revisions with
//! Knative's labels and annotations, their own container spec and `managedFields` (about 4.7 KB).
//!
//! Each kind is rendered once into a template and copied per app with its index put in: making
//! 50,000 apps costs string copies, not JSON building.

use std::sync::OnceLock;

use serde_json::{Value, json};

/// Where the app's index goes in a template.
const INDEX: &str = "IDX";
/// Where a Revision's number goes.
const REVISION: &str = "REVNUM";

/// The KService name of app `i` (`app-{i}-team-production`, as the platform names it) and its
/// namespace (`team-{i % 50}`).
pub fn names(i: usize) -> (String, String) {
    (
        format!("team-{}", i % 50),
        format!("app-{i}-team-production"),
    )
}

fn spec() -> Value {
    let env: Vec<Value> = (0..12)
        .map(|n| json!({"name": format!("SETTING_{n:02}"), "value": format!("value-of-setting-{n:02}-for-app-IDX")}))
        .collect();
    json!({
        "containerConcurrency": 0, "timeoutSeconds": 300, "serviceAccountName": "team-apps",
        "containers": [
            {"name": "app", "image": "registry.example.com/team/app-IDX@sha256:4f1c2e7b9d0a6c3e8f5b2d1a0c9e8f7b6a5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b",
             "args": ["serve", "--port", "8080", "--workers", "4"], "env": env,
             "ports": [{"name": "http1", "containerPort": 8080, "protocol": "TCP"}],
             "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "2Gi"}},
             "readinessProbe": {"httpGet": {"path": "/healthz", "port": 0}, "successThreshold": 1}},
            {"name": "log-shipper", "image": "registry.example.com/platform/log-shipper:2.4.1",
             "env": [{"name": "SHIP_TO", "value": "http://logs.platform.svc:9880"}],
             "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}}
        ]
    })
}

fn fields_of(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (format!("f:{k}"), fields_of(v)))
                .collect(),
        ),
        Value::Array(items) => {
            json!({".": {}, "k:{\"name\":\"app\"}": items.first().map(fields_of).unwrap_or(json!({}))})
        }
        _ => json!({}),
    }
}

fn kservice_template() -> String {
    let labels = json!({"flyte.org/project": "team", "flyte.org/domain": "production",
                        "flyte.org/app-name": "app-IDX", "flyte.org/app-managed": "true"});
    let template_meta = json!({"annotations": {"autoscaling.knative.dev/min-scale": "1",
                               "autoscaling.knative.dev/max-scale": "10", "autoscaling.knative.dev/target": "100"},
                               "labels": {"flyte.org/app-name": "app-IDX"}});
    let applied = json!({"apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"name": "app-IDX-team-production", "namespace": "team-NS", "labels": labels,
                     "annotations": {"flyte.org/app-managed": "true"}},
        "spec": {"template": {"metadata": template_meta, "spec": spec()}}});
    let spec_fields = fields_of(&applied["spec"]);
    let time = "2026-11-29T10:00:00Z";
    let condition = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": time});
    json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {
            "name": "app-IDX-team-production", "namespace": "team-NS", "uid": "5d0c3a4e-7f1b-4c2d-9e8f-IDX", "resourceVersion": "1",
            "generation": 2, "creationTimestamp": time, "labels": labels,
            "annotations": {
                "flyte.org/app-managed": "true", "serving.knative.dev/creator": "system:serviceaccount:flyte:platform",
                "serving.knative.dev/lastModifier": "system:serviceaccount:flyte:platform",
                "kubectl.kubernetes.io/last-applied-configuration": applied.to_string(),
            },
            "finalizers": ["services.serving.knative.dev"],
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "serving.knative.dev/v1",
                 "time": time, "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {".": {},
                 "f:kubectl.kubernetes.io/last-applied-configuration": {}}, "f:labels": fields_of(&labels)}, "f:spec": spec_fields}},
                {"manager": "controller", "operation": "Update", "apiVersion": "serving.knative.dev/v1", "time": time,
                 "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {"f:status": {".": {}, "f:address": {".": {}, "f:url": {}},
                 "f:conditions": {}, "f:latestCreatedRevisionName": {}, "f:latestReadyRevisionName": {},
                 "f:observedGeneration": {}, "f:traffic": {}, "f:url": {}}}}
            ]
        },
        "spec": {"template": {"metadata": template_meta, "spec": spec()},
                 "traffic": [{"latestRevision": true, "percent": 100}]},
        "status": {
            "observedGeneration": 2, "url": "https://app-IDX.team-NS.apps.example.com",
            "address": {"url": "http://app-IDX.team-NS.svc.cluster.local"},
            "conditions": [condition("ConfigurationsReady"), condition("Ready"), condition("RoutesReady")],
            "latestCreatedRevisionName": "app-IDX-team-production-00002", "latestReadyRevisionName": "app-IDX-team-production-00002",
            "traffic": [{"revisionName": "app-IDX-team-production-00002", "latestRevision": true, "percent": 100}]
        }
    })
    .to_string()
}

fn revision_template() -> String {
    let time = "2026-11-29T10:00:00Z";
    let condition = |t: &str, s: &str, reason: &str| json!({"type": t, "status": s, "reason": reason, "lastTransitionTime": time, "severity": if t == "Ready" { "" } else { "Info" }});
    json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Revision",
        "metadata": {
            "name": "app-IDX-team-production-REVNUM", "namespace": "team-NS", "uid": "8a1e0b2c-3d4f-4a5b-8c6d-IDX-REVNUM",
            "resourceVersion": "1", "generation": 1, "creationTimestamp": time,
            "labels": {"serving.knative.dev/configuration": "app-IDX-team-production", "serving.knative.dev/configurationGeneration": "2",
                       "serving.knative.dev/configurationUID": "0b1c2d3e-IDX", "serving.knative.dev/routingState": "active",
                       "serving.knative.dev/service": "app-IDX-team-production", "serving.knative.dev/serviceUID": "5d0c3a4e-7f1b-4c2d-9e8f-IDX",
                       "flyte.org/app-name": "app-IDX"},
            "annotations": {"autoscaling.knative.dev/min-scale": "1", "autoscaling.knative.dev/max-scale": "10",
                            "autoscaling.knative.dev/target": "100", "serving.knative.dev/creator": "system:serviceaccount:flyte:platform",
                            "serving.knative.dev/routes": "app-IDX", "serving.knative.dev/routingStateModified": time},
            "ownerReferences": [{"apiVersion": "serving.knative.dev/v1", "kind": "Configuration", "name": "app-IDX",
                                 "uid": "0b1c2d3e-IDX", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "controller", "operation": "Update", "apiVersion": "serving.knative.dev/v1",
                               "time": time, "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {}, "f:annotations": {}},
                               "f:spec": fields_of(&spec())}}]
        },
        "spec": spec(),
        "status": {
            "observedGeneration": 1, "actualReplicas": 1, "desiredReplicas": 1,
            "logUrl": "https://logs.example.com/app-IDX-team-production-REVNUM",
            "containerStatuses": [{"name": "app", "imageDigest": "registry.example.com/team/app-IDX@sha256:4f1c2e7b9d0a"}],
            "conditions": [condition("Active", "True", ""), condition("ContainerHealthy", "True", ""),
                           condition("Ready", "True", ""), condition("ResourcesAvailable", "True", "")]
        }
    })
    .to_string()
}

/// The KService of app `i` as JSON text.
pub fn kservice(i: usize) -> String {
    static TEMPLATE: OnceLock<String> = OnceLock::new();
    fill(TEMPLATE.get_or_init(kservice_template), i, "")
}

/// Revision `n` (1 or 2: the old one scaled to zero, the current one serving) of app `i` as
/// JSON text.
pub fn revision(i: usize, n: usize) -> String {
    static TEMPLATE: OnceLock<String> = OnceLock::new();
    let text = fill(
        TEMPLATE.get_or_init(revision_template),
        i,
        &format!("{n:05}"),
    );
    match n {
        2 => text,
        // The old revision: no pods, no traffic, and Knative no longer routes to it.
        _ => text
            .replace("\"actualReplicas\":1", "\"actualReplicas\":0")
            .replace(
                "\"serving.knative.dev/routingState\":\"active\"",
                "\"serving.knative.dev/routingState\":\"reserve\"",
            )
            .replace("\"desiredReplicas\":1", "\"desiredReplicas\":0")
            .replacen(
                "\"reason\":\"\",\"severity\":\"Info\",\"status\":\"True\",\"type\":\"Active\"",
                "\"reason\":\"NoTraffic\",\"severity\":\"Info\",\"status\":\"False\",\"type\":\"Active\"",
                1,
            ),
    }
}

fn fill(template: &str, i: usize, revision: &str) -> String {
    template
        .replace(INDEX, &i.to_string())
        .replace("team-NS", &names(i).0)
        .replace(REVISION, revision)
}
