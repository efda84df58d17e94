//! Table tests of `plan` and the raw stop edits.

use serde_json::{Value, json};

use super::*;
use crate::watch::edit::apply_stop_edits;

fn ksvc(stopped: bool, edits: bool, generation: i64, observed: i64, traffic: &[&str]) -> KService {
    let mut labels = json!({"flyte.org/app-name": "app"});
    let mut annotations = json!({"flyte.org/app-managed": "true"});
    if stopped {
        labels["flyte.org/app-stopped"] = json!("true");
    }
    let mut template = json!({});
    if edits {
        labels["networking.knative.dev/visibility"] = json!("cluster-local");
        template["autoscaling.knative.dev/min-scale"] = json!("0");
    }
    annotations["x"] = json!("y");
    let traffic: Vec<Value> = traffic
        .iter()
        .map(|r| json!({"revisionName": r, "percent": 100}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "app", "namespace": "ns", "generation": generation,
                     "labels": labels, "annotations": annotations},
        "spec": {"template": {"metadata": {"annotations": template}}},
        "status": {"observedGeneration": observed, "traffic": traffic,
                   "latestCreatedRevisionName": "app-00003", "latestReadyRevisionName": "app-00003"}
    }))
    .unwrap()
}

fn rev(name: &str, replicas: i32, no_gc: bool) -> Revision {
    let annotations = if no_gc {
        json!({"serving.knative.dev/no-gc": "true"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "resourceVersion": "7",
                     "labels": {"serving.knative.dev/service": "app"}, "annotations": annotations},
        "status": {"actualReplicas": replicas}
    }))
    .unwrap()
}

fn deleted(plan: &Plan) -> Vec<&str> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::DeleteRevision { name, .. } => Some(name.as_str()),
            Action::ApplyStopEdits => None,
        })
        .collect()
}

/// (case, service, revisions, revisions deleted, stop edits applied)
type PlanCase = (
    &'static str,
    KService,
    Vec<Revision>,
    Vec<&'static str>,
    bool,
);

#[test]
fn plan_table() {
    let old = || {
        vec![
            rev("app-00001", 0, false),
            rev("app-00002", 2, false),
            rev("app-00003", 0, false),
        ]
    };
    let cases: Vec<PlanCase> = vec![
        (
            "running app: nothing",
            ksvc(false, false, 2, 2, &["app-00003"]),
            old(),
            vec![],
            false,
        ),
        (
            "webhook bypassed: apply the edits first",
            ksvc(true, false, 2, 2, &["app-00002"]),
            old(),
            vec![],
            true,
        ),
        (
            "stale generation: wait",
            ksvc(true, true, 3, 2, &["app-00003"]),
            old(),
            vec![],
            false,
        ),
        (
            "traffic still on the old revision: wait",
            ksvc(true, true, 2, 2, &["app-00002"]),
            old(),
            vec![],
            false,
        ),
        (
            "traffic split across old and new: wait",
            ksvc(true, true, 2, 2, &["app-00002", "app-00003"]),
            old(),
            vec![],
            false,
        ),
        (
            "no traffic reported yet: wait",
            ksvc(true, true, 2, 2, &[]),
            old(),
            vec![],
            false,
        ),
        (
            "traffic moved: delete the old serving revision",
            ksvc(true, true, 2, 2, &["app-00003"]),
            old(),
            vec!["app-00002"],
            false,
        ),
        (
            "no-gc is respected",
            ksvc(true, true, 2, 2, &["app-00003"]),
            vec![rev("app-00002", 2, true), rev("app-00003", 1, false)],
            vec![],
            false,
        ),
        (
            "latest created is never deleted, even with pods",
            ksvc(true, true, 2, 2, &["app-00002"]),
            vec![rev("app-00002", 0, false), rev("app-00003", 1, false)],
            vec![],
            false,
        ),
        (
            "drained: nothing left to do",
            ksvc(true, true, 2, 2, &["app-00003"]),
            vec![rev("app-00002", 0, false), rev("app-00003", 0, false)],
            vec![],
            false,
        ),
        (
            "two old serving revisions, both deleted in name order",
            ksvc(true, true, 2, 2, &["app-00003"]),
            vec![rev("app-00002", 1, false), rev("app-00001", 1, false)],
            vec!["app-00001", "app-00002"],
            false,
        ),
    ];
    for (name, k, revs, want, edits) in cases {
        let got = plan(&k, &revs);
        assert_eq!(deleted(&got), want, "{name}");
        assert_eq!(
            got.actions.contains(&Action::ApplyStopEdits),
            edits,
            "{name}"
        );
    }
}

/// A revision the route has left but Knative still labels `routingState: active` (the label
/// lags `status.traffic`) is kept, as the revision guard would refuse its delete; once the label
/// moves on, it is deleted.
#[test]
fn a_revision_still_labelled_routed_waits_for_its_label() {
    let labelled = |state: &str| -> Revision {
        serde_json::from_value(json!({
            "metadata": {"name": "app-00002", "namespace": "ns", "uid": "uid-app-00002",
                         "resourceVersion": "7",
                         "labels": {"serving.knative.dev/service": "app",
                                    "serving.knative.dev/routingState": state}},
            "status": {"actualReplicas": 2}
        }))
        .unwrap()
    };
    let stopped = ksvc(true, true, 2, 2, &["app-00003"]);
    let lagging = plan(&stopped, &[labelled("active"), rev("app-00003", 0, false)]);
    assert_eq!(deleted(&lagging), Vec::<&str>::new());
    assert_eq!(
        lagging.waiting.as_deref(),
        Some(
            "Knative to stop routing to revision app-00002 (label serving.knative.dev/routingState)"
        )
    );
    let moved_on = plan(&stopped, &[labelled("reserve"), rev("app-00003", 0, false)]);
    assert_eq!(deleted(&moved_on), ["app-00002"]);
}

#[test]
fn deletes_carry_preconditions() {
    let got = plan(
        &ksvc(true, true, 2, 2, &["app-00003"]),
        &[rev("app-00002", 2, false)],
    );
    assert_eq!(
        got.actions,
        vec![Action::DeleteRevision {
            name: "app-00002".into(),
            uid: Some("uid-app-00002".into()),
            resource_version: Some("7".into()),
        }]
    );
}

#[test]
fn unmanaged_services_are_left_alone() {
    let k: KService = serde_json::from_value(json!({
        "metadata": {"name": "app", "namespace": "ns", "labels": {}},
        "status": {"traffic": [{"revisionName": "app-00003"}]}
    }))
    .unwrap();
    assert_eq!(plan(&k, &[rev("app-00002", 2, false)]), Plan::default());
}

#[test]
fn stop_edits_are_surgical_and_idempotent() {
    let mut raw = json!({"metadata": {"name": "app", "futureField": 1},
                         "spec": {"template": {"spec": {"containers": []}}}});
    assert!(apply_stop_edits(&mut raw));
    assert_eq!(
        raw["metadata"]["labels"]["networking.knative.dev/visibility"],
        "cluster-local"
    );
    assert_eq!(
        raw["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"],
        "0"
    );
    assert_eq!(raw["metadata"]["futureField"], 1);
    // The record a start needs to give back what the Service had (nothing, here).
    assert_eq!(
        raw["metadata"]["annotations"]["flyte.org/stop-restore"],
        r#"{"labels":{"networking.knative.dev/visibility":null},"templateAnnotations":{"autoscaling.knative.dev/min-scale":null}}"#
    );
    let once = raw.clone();
    assert!(!apply_stop_edits(&mut raw));
    assert_eq!(raw, once);
    let view: KService = serde_json::from_value(raw).unwrap();
    assert!(has_stop_edits(&view));
}
