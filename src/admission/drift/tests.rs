//! Table tests of the drift report, on a KService as Knative stores it (defaulted, with its
//! creator annotations, managed fields and status).

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::admission::decide;
use crate::admission::sidecars::Catalogue;
use crate::admission::writers::Principals;

/// A managed app created before the webhook, as `kubectl get ksvc -o json` shows it.
fn stored() -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {
            "name": "myapp-proj-dev",
            "namespace": "flyte",
            "uid": "4c2a8a3e-5d55-4a8e-9d0c-0a5c1f2b7e11",
            "resourceVersion": "81723",
            "generation": 3,
            "creationTimestamp": "2026-01-12T09:30:00Z",
            "labels": {
                "flyte.org/project": "proj",
                "flyte.org/domain": "dev",
                "flyte.org/app-name": "myapp"
            },
            "annotations": {
                "serving.knative.dev/creator": "alice@example.com",
                "serving.knative.dev/lastModifier": "alice@example.com",
                "kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"serving.knative.dev/v1\",\"kind\":\"Service\"}"
            },
            "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update",
                               "apiVersion": "serving.knative.dev/v1", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:spec": {".": {}}}}]
        },
        "spec": {
            "template": {
                "metadata": {
                    "creationTimestamp": null,
                    "annotations": {"autoscaling.knative.dev/min-scale": "1"}
                },
                "spec": {
                    "containerConcurrency": 0,
                    "enableServiceLinks": false,
                    "timeoutSeconds": 300,
                    "containers": [{
                        "name": "user-container",
                        "image": "ghcr.io/acme/myapp:1.4.2",
                        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                        "env": [{"name": "LOG_LEVEL", "value": "info"}],
                        "readinessProbe": {"successThreshold": 1, "tcpSocket": {"port": 0}},
                        "resources": {}
                    }]
                }
            },
            "traffic": [{"latestRevision": true, "percent": 100}]
        },
        "status": {
            "observedGeneration": 3,
            "latestCreatedRevisionName": "myapp-proj-dev-00003",
            "latestReadyRevisionName": "myapp-proj-dev-00003",
            "url": "http://myapp-proj-dev.flyte.example.com",
            "conditions": [{"type": "Ready", "status": "True",
                            "lastTransitionTime": "2026-01-12T09:31:00Z"}]
        }
    })
}

const SHIPPER_V1: &str = "default: [log-shipper]\ntemplates:\n  log-shipper:\n    containers:\n      - name: log-shipper\n        image: fluent/fluent-bit:3.1.9\n";

fn with_catalogue(text: &str) -> Policy {
    Policy {
        sidecars: Arc::new(Catalogue::parse(text).unwrap()),
        ..Policy::default()
    }
}

/// `object` as admission writes it under `policy` (a CREATE), status and all kept.
fn admitted(object: Value, policy: &Policy) -> Value {
    let request = Request::kservice("u", "CREATE", "flyte", object, None);
    let decision = decide(request, policy);
    assert!(decision.allowed, "{}", decision.message());
    decision.object_json().unwrap()
}

/// `object` with `value` at `pointer`, whose parent exists.
fn set(mut object: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let key = key.replace("~1", "/").replace("~0", "~");
    match object.pointer_mut(parent).unwrap() {
        Value::Array(items) => items[key.parse::<usize>().unwrap()] = value,
        parent => {
            parent.as_object_mut().unwrap().insert(key, value);
        }
    }
    object
}

fn without(mut object: Value, parent: &str, key: &str) -> Value {
    object
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap()
        .remove(key);
    object
}

fn evaluate(object: &Value, inject: Option<&str>, policy: &Policy) -> Drift {
    drift(&object.to_string(), inject, policy).unwrap()
}

struct Case {
    name: &'static str,
    object: Value,
    policy: Policy,
    inject: Option<&'static str>,
    reasons: &'static [Reason],
    new_revision: bool,
    /// Words each finding's detail holds, in finding order.
    details: &'static [&'static str],
}

fn cases() -> Vec<Case> {
    use Reason::*;
    let none = Policy::default();
    let shipper = with_catalogue(SHIPPER_V1);
    let shipper_v2 = with_catalogue(&SHIPPER_V1.replace("3.1.9", "3.2.0"));
    let example = with_catalogue(include_str!("../../../examples/sidecars.yaml"));
    let current = admitted(stored(), &none);
    let current_shipped = admitted(stored(), &shipper);
    let env = "/spec/template/spec/containers/0/env/1/value";
    vec![
        Case {
            name: "created before the webhook",
            object: stored(),
            policy: none.clone(),
            inject: None,
            reasons: &[MissingSpecSha, MissingEndpointEnv, Other],
            new_revision: true,
            details: &[
                "admission adds flyte.org/spec-sha=\"",
                "http://{app_fqdn}-proj-dev.flyte.svc.cluster.local",
                "/metadata/annotations/flyte.org~1app-id, /metadata/labels/flyte.org~1app-managed",
            ],
        },
        Case {
            name: "created before the webhook, under the example catalogue",
            object: stored(),
            policy: example.clone(),
            inject: None,
            reasons: &[MissingSpecSha, MissingEndpointEnv, StaleSidecars, Other],
            new_revision: true,
            details: &[
                "",
                "-proj-dev.flyte.svc.cluster.local",
                "add log-shipper",
                "",
            ],
        },
        Case {
            name: "admitted today",
            object: current.clone(),
            policy: none.clone(),
            inject: None,
            reasons: &[],
            new_revision: false,
            details: &[],
        },
        Case {
            name: "an endpoint another release wrote",
            object: set(current.clone(), env, json!("http://{app_fqdn}.flyte.svc")),
            policy: none.clone(),
            inject: None,
            reasons: &[StaleEndpointEnv],
            new_revision: true,
            details: &[
                "is \"http://{app_fqdn}.flyte.svc\"; admission writes \"http://{app_fqdn}-proj-dev",
            ],
        },
        Case {
            name: "the spec SHA lost",
            object: without(
                current.clone(),
                "/metadata/annotations",
                "flyte.org/spec-sha",
            ),
            policy: none.clone(),
            inject: None,
            reasons: &[MissingSpecSha],
            new_revision: false,
            details: &["flyte.org/spec-sha"],
        },
        Case {
            name: "a platform's own SHA is kept",
            object: set(
                current.clone(),
                "/metadata/annotations/flyte.org~1spec-sha",
                json!("platform0000hash"),
            ),
            policy: none.clone(),
            inject: None,
            reasons: &[],
            new_revision: false,
            details: &[],
        },
        Case {
            name: "the managed annotation of an older release",
            object: set(
                without(current.clone(), "/metadata/labels", "flyte.org/app-managed"),
                "/metadata/annotations/flyte.org~1app-managed",
                json!("true"),
            ),
            policy: none.clone(),
            inject: None,
            reasons: &[ManagedAnnotation],
            new_revision: false,
            details: &["becomes the label"],
        },
        Case {
            name: "a default sidecar added to the catalogue",
            object: current.clone(),
            policy: shipper.clone(),
            inject: None,
            reasons: &[StaleSidecars],
            new_revision: true,
            details: &["add log-shipper"],
        },
        Case {
            name: "a sidecar's new version",
            object: current_shipped.clone(),
            policy: shipper_v2,
            inject: None,
            reasons: &[StaleSidecars],
            new_revision: true,
            details: &["upgrade log-shipper"],
        },
        Case {
            name: "a sidecar taken out of the catalogue",
            object: current_shipped.clone(),
            policy: none.clone(),
            inject: None,
            reasons: &[StaleSidecars],
            new_revision: true,
            details: &["remove log-shipper"],
        },
        Case {
            name: "in step with the catalogue",
            object: current_shipped,
            policy: shipper,
            inject: None,
            reasons: &[],
            new_revision: false,
            details: &[],
        },
        Case {
            name: "refused today: an identity label missing",
            object: without(stored(), "/metadata/labels", "flyte.org/domain"),
            policy: none.clone(),
            inject: None,
            reasons: &[WouldReject],
            new_revision: false,
            details: &[
                "metadata.labels: has flyte.org/project, flyte.org/app-name but not flyte.org/domain",
            ],
        },
        Case {
            name: "a system namespace",
            object: set(stored(), "/metadata/namespace", json!("knative-serving")),
            policy: none.clone(),
            inject: None,
            reasons: &[Excluded],
            new_revision: false,
            details: &["\"knative-serving\" is never served"],
        },
        Case {
            name: "a namespace that opted out",
            object: stored(),
            policy: none.clone(),
            inject: Some("disabled"),
            reasons: &[Excluded],
            new_revision: false,
            details: &["labelled ksvc-webhook.flyte.org/inject=disabled"],
        },
        Case {
            name: "another value of the namespace label is served",
            object: current.clone(),
            policy: none.clone(),
            inject: Some("enabled"),
            reasons: &[],
            new_revision: false,
            details: &[],
        },
        Case {
            name: "a named revision template",
            object: set(
                set(current.clone(), env, json!("stale")),
                "/spec/template/metadata/name",
                json!("myapp-proj-dev-v7"),
            ),
            policy: none.clone(),
            inject: None,
            reasons: &[StaleEndpointEnv, BlockedRevisionName],
            new_revision: true,
            details: &["\"stale\"", "\"myapp-proj-dev-v7\""],
        },
        Case {
            name: "a named template that only lacks its SHA is not blocked",
            object: set(
                without(
                    current.clone(),
                    "/metadata/annotations",
                    "flyte.org/spec-sha",
                ),
                "/spec/template/metadata/name",
                json!("myapp-proj-dev-v7"),
            ),
            policy: none.clone(),
            inject: None,
            reasons: &[MissingSpecSha],
            new_revision: false,
            details: &[""],
        },
        Case {
            name: "a stop that bypassed the webhook",
            object: set(
                current,
                "/metadata/labels/flyte.org~1app-stopped",
                json!("true"),
            ),
            policy: none,
            inject: None,
            reasons: &[Other],
            new_revision: true,
            details: &["/spec/template/metadata/annotations/autoscaling.knative.dev~1min-scale"],
        },
    ]
}

#[test]
fn each_kind_of_drift_is_reported_with_its_reason() {
    for case in cases() {
        let got = evaluate(&case.object, case.inject, &case.policy);
        let reasons: Vec<Reason> = got.reasons().collect();
        assert_eq!(reasons, case.reasons, "{}: {got:#?}", case.name);
        assert_eq!(
            got.new_revision, case.new_revision,
            "{}: {got:#?}",
            case.name
        );
        for (finding, words) in got.findings.iter().zip(case.details) {
            assert!(
                finding.detail.contains(words),
                "{}: {:?} lacks {words:?}",
                case.name,
                finding.detail
            );
        }
        let drifted = case.reasons.iter().any(|r| *r != Reason::Excluded);
        assert_eq!(got.drifted(), drifted, "{}", case.name);
    }
}

#[test]
fn a_write_that_changes_no_user_spec_keeps_the_stored_sha() {
    // A platform writer that left no SHA: its write would get the computed one, as any write.
    let platform = Policy {
        platform_writers: Principals::users(["alice@example.com"]),
        ..Policy::default()
    };
    let got = evaluate(&stored(), None, &platform);
    assert_eq!(got.findings[0].reason, Reason::MissingSpecSha);
    // The spec edited behind the webhook's back (webhook down, namespace opted back in): the
    // SHA no longer matches, but a write that leaves the user spec as stored keeps the stored
    // SHA, whoever sends it, so there is nothing to converge.
    let current = admitted(stored(), &Policy::default());
    let edited = set(
        current,
        "/spec/template/spec/containers/0/image",
        json!("ghcr.io/acme/myapp:1.5.0"),
    );
    assert_eq!(evaluate(&edited, None, &platform), Drift::default());
    assert_eq!(
        evaluate(&edited, None, &Policy::default()),
        Drift::default()
    );
}

#[test]
fn what_cannot_be_read_is_an_error_never_a_panic() {
    let policy = Policy::default();
    assert!(matches!(
        drift("{\"metadata\":", None, &policy),
        Err(Error::Unreadable(_))
    ));
    assert_eq!(drift("[1,2]", None, &policy), Err(Error::NotAnObject));
    // Odd but well-formed shapes are decided on like any write.
    for odd in [
        json!({"apiVersion": "serving.knative.dev/v1", "kind": "Service"}),
        json!({"metadata": {"name": "x", "namespace": "ns", "annotations": null}, "spec": null}),
        json!({"metadata": {"name": "x", "namespace": "ns"}, "spec": {"template": {"spec": {"containers": "no"}}}}),
    ] {
        assert!(drift(&odd.to_string(), None, &policy).is_ok(), "{odd}");
    }
}

#[test]
fn every_reason_has_its_label_and_only_three_are_left_alone() {
    for reason in Reason::ALL {
        let json = serde_json::to_value(reason).unwrap();
        assert_eq!(json, json!(reason.as_str()));
    }
    let left: Vec<Reason> = Reason::ALL.into_iter().filter(|r| !r.fixable()).collect();
    assert_eq!(
        left,
        [
            Reason::WouldReject,
            Reason::Excluded,
            Reason::BlockedRevisionName
        ]
    );
}
