//! The `flyte.org/stop-restore` record is trusted only where it came from the webhook:
//! forged records are refused with their rule, through real AdmissionReview v1 bodies and the
//! server's `review`; the platform's one-write Stop and a start still work, also on an app
//! admitted with a forged record before these rules existed.

#![allow(clippy::unwrap_used)] // test helpers may panic

use ksvc_webhook::admission::validate::{self, Input};
use ksvc_webhook::admission::violation::Operation;
use ksvc_webhook::admission::{self, Policy, naming::DomainTemplate};
use ksvc_webhook::json::Node;
use serde_json::{Value, json};

const RECORD: &str = "flyte.org/stop-restore";

fn app() -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"name": "myapp-proj-dev", "namespace": "flyte",
            "labels": {"flyte.org/project": "proj", "flyte.org/domain": "dev",
                       "flyte.org/app-name": "myapp"}},
        "spec": {"template": {
            "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1"}},
            "spec": {"containers": [{"image": "registry.example/app:1",
                                     "ports": [{"containerPort": 8080}]}]}}}
    })
}

/// What the server answers: `allowed`, the rules refused, the message, the object after the patch.
struct Answer {
    allowed: bool,
    rules: Vec<String>,
    message: String,
    object: Value,
}

fn review(op: &str, object: &Value, old: Option<&Value>) -> Answer {
    let body = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-1", "operation": op, "namespace": "flyte",
            "kind": {"group": "serving.knative.dev", "version": "v1", "kind": "Service"},
            "userInfo": {"username": "alice"},
            "object": object, "oldObject": old}
    });
    let reviewed =
        admission::review(&serde_json::to_vec(&body).unwrap(), &Policy::default()).unwrap();
    let answer: Value = serde_json::from_slice(&reviewed.body).unwrap();
    let response = &answer["response"];
    let mut object = object.clone();
    if let Some(patch) = response["patch"].as_str() {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut object, &patch).unwrap();
    }
    Answer {
        allowed: response["allowed"].as_bool().unwrap(),
        rules: reviewed
            .summary
            .rejected_rules
            .iter()
            .map(|r| r.to_string())
            .collect(),
        message: response["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .into(),
        object,
    }
}

fn admitted(op: &str, object: &Value, old: Option<&Value>) -> Value {
    let a = review(op, object, old);
    assert!(a.allowed, "{}", a.message);
    a.object
}

fn with_record(obj: &Value, record: Value) -> Value {
    let mut o = obj.clone();
    o["metadata"]["annotations"][RECORD] = json!(record.to_string());
    o
}

fn stopped(obj: &Value, value: Option<&str>) -> Value {
    let mut o = obj.clone();
    let labels = o["metadata"]["labels"].as_object_mut().unwrap();
    match value {
        Some(v) => labels.insert("flyte.org/app-stopped".into(), json!(v)),
        None => labels.remove("flyte.org/app-stopped"),
    };
    o
}

fn record_of(obj: &Value) -> Option<Value> {
    obj["metadata"]["annotations"][RECORD]
        .as_str()
        .map(|r| serde_json::from_str(r).unwrap())
}

#[test]
fn a_record_forged_onto_a_running_app_is_refused_and_changes_nothing() {
    let running = admitted("CREATE", &app(), None);
    let forged = with_record(&running, json!({"labels": {"flyte.org/project": "victim"}}));
    let a = review("UPDATE", &forged, Some(&running));
    assert!(!a.allowed);
    assert_eq!(a.rules, ["stop-record-keys", "stop-record-untrusted"]);
    assert!(
        a.message
            .contains("metadata.annotations[flyte.org/stop-restore]: names labels[flyte.org/project], which a stop never sets"),
        "{}",
        a.message
    );
    assert!(a.message.contains("remove the annotation"), "{}", a.message);
    // A record of stop keys only is refused too: a start would apply what the user wrote.
    let public = with_record(
        &running,
        json!({"labels": {"networking.knative.dev/visibility": null}}),
    );
    let a = review("UPDATE", &public, Some(&running));
    assert_eq!(a.rules, ["stop-record-untrusted"]);
    assert!(
        a.message.contains("is not on the stored object"),
        "{}",
        a.message
    );
}

#[test]
fn a_running_apps_create_may_not_bring_a_record() {
    let banana = with_record(
        &app(),
        json!({"labels": {"flyte.org/app-name": null, "flyte.org/app-stopped": "banana"}}),
    );
    let a = review("CREATE", &banana, None);
    assert!(!a.allowed);
    assert_eq!(a.rules, ["stop-record-keys", "stop-record-untrusted"]);
    assert!(
        a.message
            .contains("labels[flyte.org/app-name], labels[flyte.org/app-stopped]"),
        "{}",
        a.message
    );
    let only_stop_keys = with_record(
        &app(),
        json!({"templateAnnotations": {"autoscaling.knative.dev/min-scale": "9"}}),
    );
    assert_eq!(
        review("CREATE", &only_stop_keys, None).rules,
        ["stop-record-untrusted"]
    );
    // A stopped app's CREATE (a restore from a backup) keeps a record of stop keys only…
    let mut backup = stopped(&only_stop_keys, Some("true"));
    backup["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] =
        json!("0");
    let created = admitted("CREATE", &backup, None);
    let started = admitted("UPDATE", &stopped(&created, None), Some(&created));
    assert_eq!(
        started["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"],
        "9"
    );
    assert_eq!(record_of(&started), None);
    // …and refuses one that names anything else.
    let a = review("CREATE", &stopped(&banana, Some("true")), None);
    assert_eq!(a.rules, ["stop-record-keys"]);
}

#[test]
fn only_the_stored_record_counts_on_update() {
    let running = admitted("CREATE", &app(), None);
    let stopped_app = admitted("UPDATE", &stopped(&running, Some("true")), Some(&running));
    let kept = record_of(&stopped_app).unwrap();
    assert_eq!(
        kept["templateAnnotations"]["autoscaling.knative.dev/min-scale"],
        "1"
    );
    let changed = json!({"templateAnnotations": {"autoscaling.knative.dev/min-scale": "7"}});
    // Kept stopped, a changed record is replaced with the stored one.
    let still = admitted(
        "UPDATE",
        &with_record(&stopped_app, changed.clone()),
        Some(&stopped_app),
    );
    assert_eq!(record_of(&still), Some(kept));
    assert_eq!(still, stopped_app);
    // A start with a changed record is refused; with the stored one it restores the running app.
    let a = review(
        "UPDATE",
        &stopped(&with_record(&stopped_app, changed), None),
        Some(&stopped_app),
    );
    assert_eq!(a.rules, ["stop-record-untrusted"]);
    assert!(
        a.message.contains("differs from the stored object's"),
        "{}",
        a.message
    );
    let started = admitted("UPDATE", &stopped(&stopped_app, None), Some(&stopped_app));
    assert_eq!(started, running);
}

/// An app admitted with a forged record before these rules: the platform's Stop and a start
/// work, and apply only the stop keys of that record.
#[test]
fn a_record_admitted_before_the_rules_is_cut_to_the_stop_keys() {
    let running = admitted("CREATE", &app(), None);
    let legacy = with_record(
        &running,
        json!({"labels": {"flyte.org/project": "victim",
                          "networking.knative.dev/visibility": null}}),
    );
    // Still running: carried unchanged, a write is a start that applies the stop keys only.
    let cleaned = admitted("UPDATE", &legacy, Some(&legacy));
    assert_eq!(cleaned["metadata"]["labels"]["flyte.org/project"], "proj");
    assert_eq!(record_of(&cleaned), None);
    // Stopped with it: the platform's one-write Stop works and records from the stored object.
    let mut stop = legacy.clone();
    json_patch::merge(
        &mut stop,
        &json!({"metadata": {"labels": {"flyte.org/app-stopped": "true",
                                        "networking.knative.dev/visibility": "cluster-local"}},
                "spec": {"template": {"metadata": {"annotations": {
                    "autoscaling.knative.dev/min-scale": "0"}}}}}),
    );
    let stopped_app = admitted("UPDATE", &stop, Some(&legacy));
    assert!(
        record_of(&stopped_app).unwrap()["labels"]
            .get("flyte.org/project")
            .is_none()
    );
    let started = admitted("UPDATE", &stopped(&stopped_app, None), Some(&stopped_app));
    assert_eq!(started["metadata"]["labels"], running["metadata"]["labels"]);
    // A stopped app whose stored record names other keys starts with its stop keys only.
    let stopped_legacy = with_record(
        &stopped_app,
        json!({"labels": {"flyte.org/project": "victim"},
               "templateAnnotations": {"autoscaling.knative.dev/min-scale": "1"}}),
    );
    let started = admitted(
        "UPDATE",
        &stopped(&stopped_legacy, None),
        Some(&stopped_legacy),
    );
    assert_eq!(started["metadata"]["labels"]["flyte.org/project"], "proj");
    assert_eq!(
        started["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"],
        "1"
    );
}

#[test]
fn the_identity_and_stop_rules_hold_after_the_edits() {
    let node = |v: Value| Node::from_json(v);
    let stored = node(app());
    let template = DomainTemplate::default();
    let check = |op: Operation, object: &Node, old: Option<&Node>| -> Vec<(&'static str, String)> {
        validate::after_edits(&Input {
            operation: op,
            object,
            old_object: old,
            namespace: "flyte",
            domain_template: &template,
        })
        .into_iter()
        .map(|v| (v.rule, v.problem))
        .collect()
    };
    assert_eq!(check(Operation::Update, &stored, Some(&stored)), []);
    let mut victim = app();
    victim["metadata"]["labels"]["flyte.org/project"] = json!("victim");
    victim["metadata"]["name"] = json!("myapp-victim-dev");
    assert_eq!(
        check(Operation::Update, &node(victim), Some(&stored)),
        [(
            "identity-immutable",
            "after the webhook's edits: changed from \"proj\" to \"victim\"".to_string()
        )]
    );
    let banana = stopped(&app(), Some("banana"));
    assert_eq!(
        check(Operation::Create, &node(banana), None)[0].0,
        "stopped-value"
    );
    let left = with_record(&app(), json!({"labels": {"flyte.org/app-name": null}}));
    let rules: Vec<&str> = check(Operation::Create, &node(left), None)
        .iter()
        .map(|(r, _)| *r)
        .collect();
    assert_eq!(rules, ["stop-record-keys", "stop-record-untrusted"]);
}

/// The watch loop finishes a stop that bypassed the webhook with one write carrying the stop
/// edits and a record; admitted (the webhook is back), the record is the stored object's values.
#[test]
fn the_loops_stop_edits_pass_and_keep_their_record() {
    let running = admitted("CREATE", &app(), None);
    let bypassed = stopped(&running, Some("true"));
    let mut edited = bypassed.clone();
    assert!(ksvc_webhook::watch::edit::apply_stop_edits(&mut edited));
    let loops = record_of(&edited).unwrap();
    let stored = admitted("UPDATE", &edited, Some(&bypassed));
    assert_eq!(record_of(&stored), Some(loops));
    let started = admitted("UPDATE", &stopped(&stored, None), Some(&stored));
    assert_eq!(started, running);
}
