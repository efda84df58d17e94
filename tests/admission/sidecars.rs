//! Sidecar injection through the same `decide` the server calls: selection, clashes, upgrade,
//! removal and uninject. Every decision's patch is replayed on its input.

#![allow(clippy::unwrap_used)] // test helpers may panic

use std::sync::Arc;

use base64::Engine as _;
use ksvc_webhook::admission::mutate;
use ksvc_webhook::admission::sidecars::{Catalogue, Status};
use ksvc_webhook::admission::{self, Decision, Policy};
use ksvc_webhook::json::Node;
use ksvc_webhook::json::edit::Editor;
use serde_json::{Value, json};
use support::admit::{admit, admit_over, out};

const CATALOGUE: &str = r#"
default: [shipper]
templates:
  shipper:
    containers:
      - name: log-shipper
        image: fluent/fluent-bit:3.1
        env:
          - {name: TAGS, value: "ns={{ .Namespace }},app={{ .AppName }},ksvc={{ .Name }}"}
        volumeMounts: [{name: app-logs, mountPath: /var/log/app}]
    volumes:
      - {name: app-logs, emptyDir: {}}
  proxy:
    containers:
      - {name: auth-proxy, image: "oauth2-proxy:7", args: ["--client-id={{ .Project }}-{{ .Domain }}"]}
"#;

fn catalogue() -> Catalogue {
    Catalogue::parse(CATALOGUE).unwrap()
}

fn policy(catalogue: Catalogue) -> Policy {
    Policy {
        sidecars: Arc::new(catalogue),
        ..Policy::default()
    }
}

/// A plain KService named `web` in `apps`, with a serving port and the given annotations.
fn ksvc(annotations: Value) -> Value {
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

fn names(obj: &Value, list: &str) -> Vec<String> {
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

fn status(obj: &Value) -> Status {
    Status::read(&Node::from_json(obj.clone())).unwrap()
}

fn rules(d: &Decision) -> Vec<&'static str> {
    d.violations.iter().map(|v| v.rule).collect()
}

fn uninject(obj: Value) -> Value {
    let mut node = Node::from_json(obj);
    assert!(mutate::strip(&mut Editor::new(&mut node)));
    node.to_json()
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
fn an_injected_sidecar_edited_in_place_is_put_back() {
    let p = policy(catalogue());
    let first = out(&admit(
        "CREATE",
        ksvc(json!({"sidecar.flyte.org/inject": "proxy"})),
        &p,
    ));
    let spec = |o: &Value| o["spec"]["template"]["spec"].clone();
    let edits: [(&str, Value); 4] = [
        ("/containers/1/image", json!("fluent/fluent-bit:evil")),
        ("/containers/2/command", json!(["sh", "-c", "sleep inf"])),
        ("/containers/1/env/0/value", json!("edited")),
        ("/volumes/0/emptyDir", json!({"medium": "Memory"})),
    ];
    for (pointer, value) in edits {
        let mut edited = first.clone();
        let at = format!("/spec/template/spec{pointer}");
        match edited.pointer_mut(&at) {
            Some(slot) => *slot = value,
            None => {
                let (parent, key) = at.rsplit_once('/').unwrap();
                edited.pointer_mut(parent).unwrap()[key] = value;
            }
        }
        let d = admit_over("UPDATE", edited, Some(first.clone()), &p);
        let back = out(&d);
        assert_eq!(spec(&back), spec(&first), "{pointer} is put back in place");
        assert_eq!(
            back["metadata"]["annotations"]["flyte.org/spec-sha"],
            first["metadata"]["annotations"]["flyte.org/spec-sha"]
        );
        assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
        assert!(
            d.warnings[0].contains("was edited in place: put back as the catalogue has it"),
            "{}",
            d.warnings[0]
        );
    }
}

#[test]
fn a_changed_template_replaces_its_old_copy_only() {
    let v1 = policy(catalogue());
    let mut obj = ksvc(json!({"sidecar.flyte.org/inject": "proxy"}));
    obj["spec"]["template"]["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    let injected = out(&admit("CREATE", obj, &v1));
    assert_eq!(
        names(&injected, "containers"),
        ["app", "log-shipper", "auth-proxy"]
    );
    let v2 =
        policy(Catalogue::parse(&CATALOGUE.replace("fluent-bit:3.1", "fluent-bit:3.2")).unwrap());
    let d = admit("UPDATE", injected.clone(), &v2);
    assert_eq!(
        d.warnings,
        ["sidecar template \"shipper\" changed in the catalogue: its containers were replaced"]
    );
    let upgraded = out(&d);
    assert_eq!(
        names(&upgraded, "containers"),
        ["app", "auth-proxy", "log-shipper"]
    );
    assert_eq!(names(&upgraded, "volumes"), ["data", "app-logs"]);
    let c = &upgraded["spec"]["template"]["spec"]["containers"];
    assert_eq!(c[2]["image"], "fluent/fluent-bit:3.2");
    assert_eq!(
        c[1], injected["spec"]["template"]["spec"]["containers"][2],
        "the unchanged template's copy stays"
    );
    assert_eq!(c[0], injected["spec"]["template"]["spec"]["containers"][0]);
    let s = status(&upgraded);
    assert_eq!(
        s.templates[0].hash,
        v2.sidecars.get("shipper").unwrap().hash
    );
    assert_ne!(
        s.templates[0].hash,
        v1.sidecars.get("shipper").unwrap().hash
    );
    assert!(admit("UPDATE", upgraded, &v2).patch.is_empty());
}

#[test]
fn removing_a_name_removes_that_sidecar_and_its_volumes() {
    let p = policy(catalogue());
    let mut obj = ksvc(json!({"sidecar.flyte.org/inject": "proxy"}));
    obj["spec"]["template"]["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    let injected = out(&admit("CREATE", obj.clone(), &p));
    let mut dropped = injected.clone();
    dropped["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("sidecar.flyte.org/inject");
    let d = admit("UPDATE", dropped, &p);
    assert_eq!(
        d.warnings,
        ["sidecar template \"proxy\" is no longer selected: its containers were removed"]
    );
    let o = out(&d);
    assert_eq!(names(&o, "containers"), ["app", "log-shipper"]);
    // Opting out removes the defaults too, and their volumes; the user's volume stays.
    let mut none = injected;
    none["metadata"]["annotations"]["sidecar.flyte.org/inject"] = json!("none");
    let o = out(&admit("UPDATE", none, &p));
    assert_eq!(names(&o, "containers"), ["app"]);
    assert_eq!(names(&o, "volumes"), ["data"]);
    assert!(
        o["metadata"]["annotations"]
            .get("sidecar.flyte.org/status")
            .is_none()
    );
    // A template dropped from the catalogue is removed on the next admission.
    let o = out(&admit(
        "UPDATE",
        out(&admit("CREATE", ksvc(Value::Null), &p)),
        &Policy::default(),
    ));
    assert_eq!(names(&o, "containers"), ["app"]);
    assert!(o["spec"]["template"]["spec"].get("volumes").is_none());
}

#[test]
fn sidecars_lost_to_a_list_replace_come_back() {
    // kubectl apply replaces a CRD's lists wholesale: the containers go, the status stays.
    let p = policy(catalogue());
    let injected = out(&admit("CREATE", ksvc(Value::Null), &p));
    let mut applied = injected.clone();
    applied["spec"]["template"]["spec"]["containers"] =
        ksvc(Value::Null)["spec"]["template"]["spec"]["containers"].clone();
    let o = out(&admit("UPDATE", applied, &p));
    assert_eq!(o, injected);
}

#[test]
fn a_generated_name_is_filled_in_once_known() {
    let p = policy(catalogue());
    let mut obj = ksvc(Value::Null);
    let meta = obj["metadata"].as_object_mut().unwrap();
    meta.remove("name");
    meta.insert("generateName".into(), json!("web-"));
    let created = out(&admit("CREATE", obj, &p));
    let tags =
        |o: &Value| o["spec"]["template"]["spec"]["containers"][1]["env"][0]["value"].clone();
    assert_eq!(tags(&created), "ns=apps,app=,ksvc=");
    // The API server then names it; the next admission fills the template in again, once.
    let mut named = created;
    named["metadata"]["name"] = json!("web-x7k2p");
    let d = admit("UPDATE", named, &p);
    assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    let updated = out(&d);
    assert_eq!(tags(&updated), "ns=apps,app=web-x7k2p,ksvc=web-x7k2p");
    assert!(admit("UPDATE", updated, &p).patch.is_empty());
}

#[test]
fn containers_the_webhook_did_not_inject_are_never_touched() {
    let p = policy(catalogue());
    let mut obj = ksvc(json!({"sidecar.flyte.org/inject": "proxy"}));
    let user_sidecar = json!({"name": "helper", "image": "helper:1", "futureField": {"x": 1}});
    obj["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(user_sidecar.clone());
    let injected = out(&admit("CREATE", obj, &p));
    assert_eq!(
        names(&injected, "containers"),
        ["app", "helper", "log-shipper", "auth-proxy"]
    );
    let mut none = injected;
    none["metadata"]["annotations"]["sidecar.flyte.org/inject"] = json!("none");
    let o = out(&admit("UPDATE", none, &p));
    assert_eq!(o["spec"]["template"]["spec"]["containers"][1], user_sidecar);
    assert_eq!(names(&o, "containers"), ["app", "helper"]);
}

#[test]
fn uninject_gives_back_the_original_object() {
    let p = policy(catalogue());
    let mut managed = ksvc(json!({"sidecar.flyte.org/inject": "proxy"}));
    managed["metadata"]["name"] = json!("shop-proj-dev");
    managed["metadata"]["labels"] = json!({"flyte.org/project": "proj", "flyte.org/domain": "dev", "flyte.org/app-name": "shop", "flyte.org/app-stopped": "true"});
    for original in [ksvc(Value::Null), managed] {
        let injected = out(&admit("CREATE", original.clone(), &p));
        assert_ne!(injected, original);
        assert_eq!(uninject(injected), original);
    }
}

#[test]
fn spec_sha_ignores_injected_sidecars() {
    let with = out(&admit("CREATE", ksvc(Value::Null), &policy(catalogue())));
    let without = out(&admit("CREATE", ksvc(Value::Null), &Policy::default()));
    let sha = |o: &Value| o["metadata"]["annotations"]["flyte.org/spec-sha"].clone();
    assert_eq!(sha(&with), sha(&without));
    assert_eq!(mutate::user_spec(&with), mutate::user_spec(&without));
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
