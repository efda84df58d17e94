use serde_json::{Value, json};

use super::*;
use crate::keys;

/// A KService as kubectl and the platform write it, grown to etcd's 1.5 MB limit by its
/// `managedFields` and last-applied annotation.
fn huge_ksvc() -> Value {
    let fields: serde_json::Map<String, Value> = (0..20_000)
        .map(|i| {
            (
                format!("f:env-{i:05}"),
                json!({".": {}, "f:name": {}, "f:value": {}}),
            )
        })
        .collect();
    let last_applied = "x".repeat(500_000);
    json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {
            "name": "big", "namespace": "team", "uid": "u-1", "resourceVersion": "42", "generation": 3,
            "creationTimestamp": "2026-11-30T00:00:00Z",
            "labels": {"flyte.org/project": "p", "flyte.org/domain": "d", "flyte.org/app-name": "big"},
            "annotations": {"serving.knative.dev/creator": "admin", keys::ANNOTATION_LAST_APPLIED: last_applied},
            "finalizers": ["services.serving.knative.dev"],
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "serving.knative.dev/v1",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": fields}}]
        },
        "spec": {"template": {"metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1"}},
                              "spec": {"containers": [{"name": "app", "image": "app:1"}]}}},
        "status": {"observedGeneration": 3, "url": "http://big.team.example",
                   "conditions": [{"type": "Ready", "status": "True"}],
                   "traffic": [{"revisionName": "big-00003", "percent": 100}]}
    })
}

#[test]
fn a_kservice_at_etcds_limit_is_cached_at_its_trimmed_size() {
    let text = huge_ksvc().to_string();
    assert!(text.len() > 1_400_000, "{}", text.len());
    let ksvc: KService = serde_json::from_str(&text).unwrap();
    assert_eq!(ksvc.annotation(keys::ANNOTATION_LAST_APPLIED), None);
    // Labels and annotations the loop never reads are not kept in the view (the stored text
    // has them, below); the ones it reads are.
    assert_eq!(ksvc.annotation("serving.knative.dev/creator"), None);
    assert_eq!(ksvc.label(keys::LABEL_PROJECT), Some("p"));
    assert_eq!(
        ksvc.template_annotation(keys::ANNOTATION_MIN_SCALE),
        Some("1")
    );
    // What the loop still reads is there.
    assert_eq!(
        (ksvc.name(), ksvc.namespace(), ksvc.generation),
        ("big", "team", Some(3))
    );
    // Its creation time, for `app list`'s AGE (2026-11-30T00:00:00Z).
    assert_eq!(ksvc.created, Some(1_795_996_800));
    assert!(ksvc.routes_to("big-00003") && ksvc.generation_observed());
    // The stored text keeps what admission reads (the finalizer, the containers), not the rest.
    let stored: Value = serde_json::from_str(ksvc.stored.text().unwrap()).unwrap();
    assert_eq!(
        stored["metadata"]["finalizers"][0],
        "services.serving.knative.dev"
    );
    assert_eq!(
        stored["metadata"]["annotations"]["serving.knative.dev/creator"],
        "admin"
    );
    assert_eq!(
        stored["spec"]["template"]["spec"]["containers"][0]["image"],
        "app:1"
    );
    for gone in ["managedFields", "resourceVersion"] {
        assert!(stored["metadata"].get(gone).is_none(), "{gone}");
    }
    assert!(
        stored["metadata"]["annotations"]
            .get(keys::ANNOTATION_LAST_APPLIED)
            .is_none()
    );
    // Held: the view and the stored text, a thousandth of what came in.
    let held = serde_json::to_string(&ksvc).unwrap().len() + ksvc.stored.text().unwrap().len();
    assert!(held < 2048, "{held} bytes held of {}", text.len());
}

#[test]
fn a_revision_keeps_only_what_the_loop_reads() {
    let revision: Revision = serde_json::from_value(json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Revision",
        "metadata": {
            "name": "big-00003", "namespace": "team", "uid": "u-3", "resourceVersion": "7", "generation": 1,
            "labels": {"serving.knative.dev/service": "big", "serving.knative.dev/configuration": "big",
                       "serving.knative.dev/routingState": "active"},
            "annotations": {"serving.knative.dev/creator": "admin", "serving.knative.dev/no-gc": "true",
                            "serving.knative.dev/routingStateModified": "2026-11-30T00:00:00Z"},
            "ownerReferences": [{"apiVersion": "serving.knative.dev/v1", "kind": "Configuration", "name": "big", "uid": "c"}],
            "managedFields": [{"manager": "controller", "fieldsV1": {"f:metadata": {}}}]
        },
        "spec": {"containers": [{"name": "app", "image": "app:1"}]},
        "status": {"actualReplicas": 2, "conditions": [{"type": "Active", "status": "True"}]}
    }))
    .unwrap();
    let want = Metadata {
        name: "big-00003".into(),
        namespace: "team".into(),
        uid: Some("u-3".into()),
        resource_version: Some("7".into()),
    };
    assert_eq!(revision.metadata, want);
    assert!(revision.is_no_gc() && revision.has_pods());
    assert_eq!(revision.service(), Some("big"));
    // Null maps, and none at all, are no labels.
    let bare: Revision =
        serde_json::from_value(json!({"metadata": {"name": "r", "labels": null}})).unwrap();
    assert_eq!((bare.service(), bare.is_no_gc()), (None, false));
}
