//! Sidecar injection through the same `decide` the server calls: selection, clashes, the
//! user's port, re-admission and the review's answer. Every decision's patch is replayed on its
//! input. The fixtures here serve [`super::sidecar_upgrades`] too.

#![allow(clippy::unwrap_used)] // test helpers may panic

use std::sync::Arc;

use base64::Engine as _;
use ksvc_webhook::admission::sidecars::{Catalogue, Status};
use ksvc_webhook::admission::{self, Decision, Policy};
use ksvc_webhook::json::Node;
use serde_json::{Value, json};
use support::admit::{admit, out};

pub(crate) const CATALOGUE: &str = concat!(
    shipper!(),
    r#"  proxy:
    containers:
      - {name: auth-proxy, image: "oauth2-proxy:7", args: ["--client-id={{ .Project }}-{{ .Domain }}"]}
"#
);

pub(crate) fn catalogue() -> Catalogue {
    Catalogue::parse(CATALOGUE).unwrap()
}

pub(crate) fn policy(catalogue: Catalogue) -> Policy {
    Policy {
        sidecars: Arc::new(catalogue),
        ..Policy::default()
    }
}

/// A plain KService named `web` in `apps`, with a serving port and the given annotations.
pub(crate) fn ksvc(annotations: Value) -> Value {
    let mut obj = json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "apps"},
        "spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "web:1", "ports": [{"containerPort": 8080}]}
        ]}}},
    });
    if !annotations.is_null() {
        obj["metadata"]["annotations"] = annotations;
    }
    obj
}

pub(crate) fn names(obj: &Value, list: &str) -> Vec<String> {
    obj["spec"]["template"]["spec"][list]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| i["name"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn status(obj: &Value) -> Status {
    Status::read(&Node::from_json(obj.clone())).unwrap()
}

fn rules(d: &Decision) -> Vec<&'static str> {
    d.violations.iter().map(|v| v.rule).collect()
}

#[test]
fn defaults_are_injected_after_the_users_containers_with_parameters_filled() {
    let o = out(&admit("CREATE", ksvc(Value::Null), &policy(catalogue())));
    assert_eq!(names(&o, "containers"), ["app", "log-shipper"]);
    assert_eq!(names(&o, "volumes"), ["app-logs"]);
    let containers = &o["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[1]["env"][0]["value"], "ns=apps,app=web,ksvc=web");
    let s = status(&o);
    assert_eq!(s.templates.len(), 1);
    assert_eq!(s.templates[0].name, "shipper");
    assert_eq!(
        s.templates[0].hash,
        catalogue().get("shipper").unwrap().hash
    );
    assert_eq!(s.templates[0].containers, ["log-shipper"]);
    assert_eq!(s.templates[0].volumes, ["app-logs"]);
}

#[test]
fn selection_by_annotation_default_and_opt_out() {
    let p = policy(catalogue());
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (Value::Null, vec!["app", "log-shipper"]),
        (
            json!({"sidecar.flyte.org/inject": ""}),
            vec!["app", "log-shipper"],
        ),
        (
            json!({"sidecar.flyte.org/inject": "proxy"}),
            vec!["app", "log-shipper", "auth-proxy"],
        ),
        (
            json!({"sidecar.flyte.org/inject": " proxy , shipper,proxy"}),
            vec!["app", "log-shipper", "auth-proxy"],
        ),
        (json!({"sidecar.flyte.org/inject": "none"}), vec!["app"]),
        (json!({"sidecar.flyte.org/inject": "None"}), vec!["app"]),
        (
            json!({"sidecar.flyte.org/inject": "none,proxy"}),
            vec!["app", "auth-proxy"],
        ),
        (
            json!({"sidecar.flyte.org/inject": "proxy, NONE"}),
            vec!["app", "auth-proxy"],
        ),
    ];
    for (annotations, want) in cases {
        let o = out(&admit("CREATE", ksvc(annotations.clone()), &p));
        assert_eq!(names(&o, "containers"), want, "{annotations}");
    }
    let o = out(&admit(
        "CREATE",
        ksvc(json!({"sidecar.flyte.org/inject": "none"})),
        &p,
    ));
    assert!(
        o["metadata"]["annotations"]
            .get("sidecar.flyte.org/status")
            .is_none()
    );
    assert!(o["spec"]["template"]["spec"].get("volumes").is_none());
    // Managed apps fill the identity parameters.
    let mut managed = ksvc(json!({"sidecar.flyte.org/inject": "proxy"}));
    managed["metadata"]["name"] = json!("shop-proj-dev");
    managed["metadata"]["labels"] = json!({"flyte.org/project": "proj", "flyte.org/domain": "dev", "flyte.org/app-name": "shop"});
    let o = out(&admit("CREATE", managed, &p));
    let c = &o["spec"]["template"]["spec"]["containers"];
    assert_eq!(c[2]["args"][0], "--client-id=proj-dev");
    assert_eq!(
        c[1]["env"][0]["value"],
        "ns=apps,app=shop,ksvc=shop-proj-dev"
    );
}

#[test]
fn unknown_names_are_rejected_with_the_names_that_exist() {
    let p = policy(catalogue());
    let d = admit(
        "CREATE",
        ksvc(json!({"sidecar.flyte.org/inject": "proxy,nope,zzz"})),
        &p,
    );
    assert_eq!(rules(&d), ["sidecar-unknown"]);
    let msg = d.message();
    assert!(msg.contains("\"nope\", \"zzz\""), "{msg}");
    assert!(msg.contains("\"proxy\", \"shipper\""), "{msg}");
    assert!(
        msg.starts_with("metadata.annotations[sidecar.flyte.org/inject]"),
        "{msg}"
    );
    // With no catalogue at all, any name is unknown.
    let d = admit(
        "CREATE",
        ksvc(json!({"sidecar.flyte.org/inject": "proxy"})),
        &Policy::default(),
    );
    assert!(
        d.message().contains("the sidecar catalogue is empty"),
        "{}",
        d.message()
    );
}

#[test]
fn clashes_with_the_users_names_are_rejected_naming_both() {
    let p = policy(catalogue());
    let mut obj = ksvc(json!({"sidecar.flyte.org/inject": "proxy"}));
    let spec = &mut obj["spec"]["template"]["spec"];
    spec["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "auth-proxy", "image": "mine"}));
    spec["volumes"] = json!([{"name": "app-logs", "emptyDir": {}}]);
    let d = admit("CREATE", obj, &p);
    assert_eq!(rules(&d), ["sidecar-clash", "sidecar-clash"]);
    let v = &d.violations;
    assert_eq!(v[0].path, "spec.template.spec.containers[1].name");
    assert!(v[0].problem.contains("your container \"auth-proxy\" clashes with container \"auth-proxy\" of sidecar template \"proxy\""), "{}", v[0].problem);
    assert!(v[0].fix.contains("leave \"proxy\" out of"), "{}", v[0].fix);
    assert_eq!(v[1].path, "spec.template.spec.volumes[0].name");
    assert!(
        v[1].problem.contains("sidecar template \"shipper\""),
        "{}",
        v[1].problem
    );
    assert!(
        v[1].fix.contains("\"none\""),
        "a default names the opt-out: {}",
        v[1].fix
    );
}

#[test]
fn sidecars_need_the_users_port() {
    let p = policy(catalogue());
    let mut obj = ksvc(Value::Null);
    obj["spec"]["template"]["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("ports");
    assert_eq!(rules(&admit("CREATE", obj.clone(), &p)), ["sidecar-port"]);
    obj["metadata"]["annotations"] = json!({"sidecar.flyte.org/inject": "none"});
    assert!(admit("CREATE", obj, &p).allowed);
}

#[test]
fn readmitting_changes_nothing_and_keeps_knative_defaults() {
    let p = policy(catalogue());
    let first = out(&admit(
        "CREATE",
        ksvc(json!({"sidecar.flyte.org/inject": "proxy"})),
        &p,
    ));
    let again = admit("UPDATE", first.clone(), &p);
    assert!(again.patch.is_empty(), "{:?}", again.patch);
    // Knative's defaulting adds fields to every container; an unchanged template keeps them.
    let mut defaulted = first;
    defaulted["spec"]["template"]["spec"]["containers"][1]["resources"] = json!({});
    let again = admit("UPDATE", defaulted, &p);
    assert!(again.patch.is_empty(), "{:?}", again.patch);
}

#[test]
fn an_unreadable_status_is_rejected() {
    let d = admit(
        "CREATE",
        ksvc(json!({"sidecar.flyte.org/status": "{not json"})),
        &policy(catalogue()),
    );
    assert_eq!(rules(&d), ["sidecar-status"]);
}

#[test]
fn review_answers_with_a_patch_that_injects() {
    let body = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "operation": "CREATE",
            "kind": {"group": "serving.knative.dev", "version": "v1", "kind": "Service"},
            "object": ksvc(json!({"sidecar.flyte.org/inject": "proxy"}))}
    }))
    .unwrap();
    let reviewed = admission::review(&body, &policy(catalogue())).unwrap();
    let response: Value = serde_json::from_slice(&reviewed.body).unwrap();
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["response"]["patch"].as_str().unwrap())
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
    let mut obj = ksvc(json!({"sidecar.flyte.org/inject": "proxy"}));
    json_patch::patch(&mut obj, &patch).unwrap();
    assert_eq!(
        names(&obj, "containers"),
        ["app", "log-shipper", "auth-proxy"]
    );
}

#[test]
fn the_injected_example_is_what_mutate_prints_now() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ksvc-webhook"))
        .args(["mutate", "--sidecars", "examples/sidecars.yaml"])
        .args(["-f", "examples/sidecar-ksvc.yaml"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let file = std::fs::read_to_string("examples/sidecar-ksvc.injected.yaml").unwrap();
    // The file opens with comments saying how it was made; the rest is mutate's output.
    let generated: String = file
        .lines()
        .skip_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        generated,
        String::from_utf8(output.stdout).unwrap(),
        "regenerate examples/sidecar-ksvc.injected.yaml with the command in its first line"
    );
}
