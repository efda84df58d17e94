//! Admission beside the Flyte platform, decided in-process: the platform's spec SHA,
//! SHA stability across metadata-only writes, the one-write stop and its start, the zero initial
//! scale Knative refuses, and the `flyte.org/app-managed` label with its migration.
#![allow(clippy::unwrap_used)]

use ksvc_webhook::admission::writers::{Principals, UserInfo};
use ksvc_webhook::admission::{self, Decision, Policy, Request};
use serde_json::{Value, json};
use support::admit::out;

const PLATFORM: &str = "system:serviceaccount:flyte:flyteadmin";
const SHA: &str = "flyte.org/spec-sha";

fn policy(zero_initial_scale: bool) -> Policy {
    let mut policy = Policy {
        platform_writers: Principals::parse(&[PLATFORM, "group:flyte-platform"]).unwrap(),
        ..Policy::default()
    };
    policy.mutate.allow_zero_initial_scale = zero_initial_scale;
    policy
}

/// A platform-made app as its client builds it, with its own SHA.
fn platform_app(sha: &str) -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"name": "myapp-proj-dev", "namespace": "flyte",
            "labels": {"flyte.org/project": "proj", "flyte.org/domain": "dev",
                       "flyte.org/app-name": "myapp", "flyte.org/app-managed": "true"},
            "annotations": {SHA: sha, "flyte.org/app-id": "proj/dev/myapp"}},
        "spec": {"template": {
            "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1",
                                         "autoscaling.knative.dev/max-scale": "3"},
                         "labels": {"team": "data"}},
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                                     "ports": [{"name": "http1", "containerPort": 8080}]}]}}}
    })
}

/// The platform's app as its CREATE stored it (the platform's SHA kept).
fn platform_created(p: &Policy) -> Value {
    out(&decide(
        p,
        "CREATE",
        &platform_app("platform-sha-1"),
        None,
        PLATFORM,
    ))
}

/// The platform's stored app, and the same with a label someone else added (`kubectl label`).
fn stored_and_labelled(p: &Policy) -> (Value, Value) {
    let stored = platform_created(p);
    let mut labelled = stored.clone();
    labelled["metadata"]["labels"]["owner"] = json!("alice");
    (stored, labelled)
}

fn decide(
    policy: &Policy,
    op: &str,
    obj: &Value,
    old: Option<&Value>,
    user: &str,
) -> Decision<'static> {
    let request = Request {
        user_info: UserInfo {
            username: user.into(),
            groups: vec!["system:authenticated".into()],
        },
        ..Request::kservice("u", op, "flyte", obj.clone(), old.cloned())
    };
    let d = support::admit::decide(request, obj, policy);
    assert!(d.allowed, "{}", d.message());
    d
}

/// The platform's one-write Stop of `running`, decided.
fn platform_stops(p: &Policy, running: &Value) -> Decision<'static> {
    decide(
        p,
        "UPDATE",
        &platform_stop(running),
        Some(running),
        PLATFORM,
    )
}

/// The platform's one-write Stop, applied as a JSON merge patch.
fn platform_stop(obj: &Value) -> Value {
    let mut stopped = obj.clone();
    json_patch::merge(
        &mut stopped,
        &json!({"metadata": {"labels": {"flyte.org/app-stopped": "true",
                                        "networking.knative.dev/visibility": "cluster-local"}},
                "spec": {"template": {"metadata": {"annotations": {
                    "autoscaling.knative.dev/min-scale": "0",
                    "autoscaling.knative.dev/initial-scale": "0"}}}}}),
    );
    stopped
}

/// A start: the stop label removed.
fn start(obj: &Value) -> Value {
    let mut started = obj.clone();
    json_patch::merge(
        &mut started,
        &json!({"metadata": {"labels": {"flyte.org/app-stopped": null}}}),
    );
    started
}

#[test]
fn a_platform_writers_sha_is_kept_and_anyone_elses_is_computed() {
    let p = policy(false);
    let app = platform_app("platform-sha-1");
    let by_platform = out(&decide(&p, "CREATE", &app, None, PLATFORM));
    assert_eq!(
        by_platform["metadata"]["annotations"][SHA],
        "platform-sha-1"
    );
    // A member of a platform group counts too.
    let request = Request {
        user_info: UserInfo {
            username: "ci".into(),
            groups: vec!["flyte-platform".into()],
        },
        ..Request::kservice("u", "CREATE", "flyte", app.clone(), None)
    };
    let by_group = admission::decide(request, &p).object_json().unwrap();
    assert_eq!(by_group["metadata"]["annotations"][SHA], "platform-sha-1");
    // Anyone else: the webhook's own hash.
    let by_user = out(&decide(&p, "CREATE", &app, None, "alice"));
    let ours = by_user["metadata"]["annotations"][SHA].as_str().unwrap();
    assert_ne!(ours, "platform-sha-1");
    assert_eq!(ours.len(), 16);
    // A platform writer without a SHA of its own gets the webhook's.
    let mut bare = app.clone();
    bare["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(SHA);
    let computed = out(&decide(&p, "CREATE", &bare, None, PLATFORM));
    assert_eq!(computed["metadata"]["annotations"][SHA], ours);
}

#[test]
fn the_sha_changes_only_when_the_user_spec_does() {
    let p = policy(false);
    // `kubectl label` by someone else: the platform's value stays, so its Deploy stays a no-op.
    let (stored, labelled) = stored_and_labelled(&p);
    let d = decide(&p, "UPDATE", &labelled, Some(&stored), "alice");
    assert_eq!(out(&d)["metadata"]["annotations"][SHA], "platform-sha-1");
    assert!(d.patch.is_empty(), "{:?}", d.patch);
    // Even a write that drops the annotation gets the stored value back.
    let mut dropped = labelled.clone();
    dropped["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(SHA);
    let d = decide(&p, "UPDATE", &dropped, Some(&stored), "alice");
    assert_eq!(out(&d)["metadata"]["annotations"][SHA], "platform-sha-1");
    // A real spec edit moves it: that is how the platform notices drift.
    let mut edited = stored.clone();
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = json!("registry.example/app:2");
    let d = decide(&p, "UPDATE", &edited, Some(&stored), "alice");
    let sha = out(&d)["metadata"]["annotations"][SHA].clone();
    assert_ne!(sha, "platform-sha-1");
    assert_eq!(
        sha,
        out(&decide(&p, "CREATE", &edited, None, "alice"))["metadata"]["annotations"][SHA]
    );
}

#[test]
fn the_same_through_a_review_body_and_its_user_info() {
    let p = policy(false);
    let (stored, labelled) = stored_and_labelled(&p);
    for user in ["alice", PLATFORM] {
        let body = serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "operation": "UPDATE", "namespace": "flyte",
                "kind": {"group": "serving.knative.dev", "version": "v1", "kind": "Service"},
                "userInfo": {"username": user, "uid": "1", "groups": ["system:authenticated"]},
                "object": labelled, "oldObject": stored}
        }))
        .unwrap();
        let reviewed = admission::review(&body, &p).unwrap();
        assert!(reviewed.summary.allowed);
        assert_eq!(reviewed.summary.patch_ops, 0, "{user}: nothing to change");
    }
}

#[test]
fn start_after_a_one_write_stop_brings_back_the_running_app() {
    for zero in [false, true] {
        let p = policy(zero);
        let running = platform_created(&p);
        let d = platform_stops(&p, &running);
        let stopped = out(&d);
        let template = &stopped["spec"]["template"]["metadata"]["annotations"];
        assert_eq!(template["autoscaling.knative.dev/min-scale"], "0");
        let restore: Value = serde_json::from_str(
            stopped["metadata"]["annotations"]["flyte.org/stop-restore"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        // The record holds the running values, not the stopping write's.
        assert_eq!(
            restore["templateAnnotations"]["autoscaling.knative.dev/min-scale"],
            "1"
        );
        assert_eq!(
            restore["labels"]["networking.knative.dev/visibility"],
            Value::Null
        );
        match zero {
            true => assert_eq!(template["autoscaling.knative.dev/initial-scale"], "0"),
            false => {
                assert!(
                    template
                        .get("autoscaling.knative.dev/initial-scale")
                        .is_none()
                );
                assert!(
                    d.warnings
                        .iter()
                        .any(|w| w.contains("allow-zero-initial-scale"))
                );
            }
        }
        // The user spec did not change: the platform's SHA stays.
        assert_eq!(stopped["metadata"]["annotations"][SHA], "platform-sha-1");
        // Re-admitting the stopped app changes nothing.
        let again = decide(&p, "UPDATE", &stopped, Some(&stopped), "alice");
        assert!(again.patch.is_empty(), "{:?}", again.patch);
        // The start: exactly the running template and labels again, and public.
        let started = out(&decide(
            &p,
            "UPDATE",
            &start(&stopped),
            Some(&stopped),
            PLATFORM,
        ));
        assert_eq!(
            started["spec"]["template"], running["spec"]["template"],
            "zero={zero}"
        );
        assert_eq!(started["metadata"]["labels"], running["metadata"]["labels"]);
        assert_eq!(started, running);
    }
}

#[test]
fn a_stopping_writes_zero_initial_scale_is_dropped_with_a_reason() {
    let p = policy(false);
    let running = out(&decide(&p, "CREATE", &platform_app("s"), None, PLATFORM));
    let d = platform_stops(&p, &running);
    let warning = d
        .warnings
        .iter()
        .find(|w| w.contains("initial-scale"))
        .unwrap();
    assert!(
        warning.contains("allow-zero-initial-scale: \"true\""),
        "{warning}"
    );
    assert!(warning.contains("--allow-zero-initial-scale"), "{warning}");
    // A stored initial scale the stop did not set is not touched; nor is a running app's.
    let mut with_initial = running.clone();
    with_initial["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/initial-scale"] =
        json!("2");
    let stopped = out(&platform_stops(&p, &with_initial));
    assert_eq!(
        stopped["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/initial-scale"],
        "2"
    );
    let mut zero_running = running.clone();
    zero_running["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/initial-scale"] =
        json!("0");
    let d = decide(&p, "UPDATE", &zero_running, Some(&running), "alice");
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn app_managed_is_a_label_and_the_old_annotation_goes() {
    let p = policy(false);
    let mut app = platform_app("s");
    app["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("flyte.org/app-managed");
    app["metadata"]["annotations"]["flyte.org/app-managed"] = json!("true");
    let d = decide(&p, "UPDATE", &app, Some(&app), "alice");
    let o = out(&d);
    assert_eq!(o["metadata"]["labels"]["flyte.org/app-managed"], "true");
    assert!(
        o["metadata"]["annotations"]
            .get("flyte.org/app-managed")
            .is_none()
    );
    // An app without an identity is not marked, but still loses the old annotation.
    let mut plain = platform_app("s");
    plain["metadata"]["labels"] = json!({"team": "data"});
    plain["metadata"]["annotations"]["flyte.org/app-managed"] = json!("true");
    let o = out(&decide(&p, "CREATE", &plain, None, "alice"));
    assert!(
        o["metadata"]["labels"]
            .get("flyte.org/app-managed")
            .is_none()
    );
    assert!(
        o["metadata"]["annotations"]
            .get("flyte.org/app-managed")
            .is_none()
    );
}

#[test]
fn managed_and_stopped_have_one_definition() {
    use ksvc_webhook::admission::ksvc;
    use ksvc_webhook::json::Node;
    use ksvc_webhook::watch::view::KService;
    #[rustfmt::skip]
    let cases = [
        (json!({"labels": {"flyte.org/app-managed": "true"}}), true, false),
        (json!({"labels": {"flyte.org/app-managed": "false", "flyte.org/app-name": "a"}}), false, false),
        (json!({"annotations": {"flyte.org/app-managed": "true"}}), true, false),
        (json!({"labels": {"flyte.org/app-name": "a"}}), true, false),
        (json!({"labels": {"flyte.org/app-stopped": "true"}}), true, true),
        (json!({"labels": {"flyte.org/app-stopped": "false"}}), true, false),
        (json!({"labels": {"team": "data"}}), false, false),
    ];
    for (metadata, managed, stopped) in cases {
        let obj = json!({"metadata": metadata, "spec": {}});
        let view: KService = serde_json::from_value(obj.clone()).unwrap();
        let node = Node::from_json(obj.clone());
        assert_eq!(view.is_managed(), managed, "{obj}");
        assert_eq!(ksvc::managed(&node), managed, "{obj}");
        assert_eq!(view.is_stopped(), stopped, "{obj}");
        assert_eq!(ksvc::stopped(&node), stopped, "{obj}");
    }
}
