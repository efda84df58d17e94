//! Injected sidecars over an app's life, through the same `decide` the server calls: edited in
//! place or lost and put back, upgraded to a changed template, removed with their volumes,
//! uninjected to the original object; containers the webhook did not inject are never touched.

#![allow(clippy::unwrap_used)] // test helpers may panic

use ksvc_webhook::admission::Policy;
use ksvc_webhook::admission::mutate;
use ksvc_webhook::admission::sidecars::Catalogue;
use serde_json::{Value, json};
use support::admit::{admit, admit_over, out, uninject};

use super::sidecars::{CATALOGUE, catalogue, ksvc, names, policy, status};

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
