//! Properties of admission over generated KServices: idempotence, patch fidelity, survival of
//! user fields, the spec SHA's invariances, and stop∘start = identity.

#![allow(clippy::unwrap_used)] // test helpers may panic

use ksvc_webhook::admission::mutate;
use ksvc_webhook::admission::{self, Decision, Policy, Request};
use ksvc_webhook::json::Node;
use ksvc_webhook::json::edit::Editor;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::{Map, Value, json};

fn dns_label() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,20}[a-z0-9]"
}

/// Leaf and nested JSON of the kinds Kubernetes objects carry, including fields no schema knows.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i32>().prop_map(Value::from),
        (-1.0e6f64..1.0e6).prop_map(Value::from),
        "[ -~]{0,12}".prop_map(Value::from),
        "\\PC{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..4).prop_map(Value::from),
            prop::collection::btree_map("[a-zA-Z][a-zA-Z0-9]{0,8}", inner, 1..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn string_map(keys: &'static str) -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(keys, "[a-z0-9]{0,8}", 0..4)
        .prop_map(|m| m.into_iter().map(|(k, v)| (k, Value::from(v))).collect())
}

fn container(with_port: bool) -> impl Strategy<Value = Value> {
    (
        dns_label(),
        "[a-z]{1,8}(:[0-9]\\.[0-9])?",
        prop::option::of(prop::collection::btree_map(
            "[A-Z][A-Z_]{0,8}",
            "[ -~]{0,10}",
            1..4,
        )),
        prop::option::of(any_json()),
    )
        .prop_map(move |(name, image, env, extra)| {
            let mut c = json!({"name": name, "image": image});
            if let Some(env) = env {
                let list: Vec<Value> = env
                    .into_iter()
                    .map(|(k, v)| json!({"name": k, "value": v}))
                    .collect();
                c["env"] = Value::from(list);
            }
            if with_port {
                c["ports"] = json!([{"containerPort": 8080}]);
            }
            if let Some(extra) = extra {
                c["futureContainerField"] = extra;
            }
            c
        })
}

/// A KService as a user writes it: no key the webhook owns.
fn kservice() -> impl Strategy<Value = Value> {
    let identity = prop::option::of((dns_label(), "[a-z][a-z0-9]{0,10}", "[a-z][a-z0-9]{0,6}"));
    (
        dns_label(),
        identity,
        string_map("(app|team|tier)"),
        string_map("example\\.com/[a-z]{1,6}"),
        prop::option::of(string_map("autoscaling\\.knative\\.dev/(min-scale|max-scale|target)")),
        prop::collection::vec(container(false), 0..3),
        any::<bool>(),
        prop::option::of(any_json()),
    )
        .prop_map(|(name, identity, labels, annotations, template_ann, sidecars, port, extra)| {
            let mut labels = labels;
            let mut meta = json!({"namespace": "ns1"});
            match identity {
                Some((app, project, domain)) => {
                    labels.insert("flyte.org/project".into(), Value::from(project));
                    labels.insert("flyte.org/domain".into(), Value::from(domain));
                    labels.insert("flyte.org/app-name".into(), Value::from(app));
                }
                None => meta["name"] = Value::from(name),
            }
            if !labels.is_empty() {
                meta["labels"] = Value::Object(labels);
            }
            if !annotations.is_empty() {
                meta["annotations"] = Value::Object(annotations);
            }
            let mut containers = vec![json!({"image": "app", "env": [{"name": "A", "value": "1"}]})];
            if port {
                containers[0]["ports"] = json!([{"containerPort": 8080}]);
            }
            containers.extend(sidecars);
            let mut template = json!({"spec": {"containers": containers}});
            if let Some(ann) = template_ann.filter(|a| !a.is_empty()) {
                template["metadata"] = json!({"annotations": ann});
            }
            let mut obj = json!({"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": meta, "spec": {"template": template}});
            if let Some(extra) = extra {
                obj["spec"]["futureSpecField"] = extra;
            }
            obj
        })
}

fn request(op: &str, object: Value, old: Option<Value>) -> Request<'static> {
    Request::kservice("u", op, "ns1", object, old)
}

fn admit(op: &str, object: &Value, old: Option<&Value>) -> Decision<'static> {
    let d = admission::decide(
        request(op, object.clone(), old.cloned()),
        &Policy::default(),
    );
    assert!(d.allowed, "{}", d.message());
    d
}

fn with_stop_label(obj: &Value, value: Option<&str>) -> Value {
    let mut o = obj.clone();
    if !o["metadata"]["labels"].is_object() {
        o["metadata"]["labels"] = json!({});
    }
    let labels = o["metadata"]["labels"].as_object_mut().unwrap();
    match value {
        Some(v) => labels.insert("flyte.org/app-stopped".into(), Value::from(v)),
        None => labels.remove("flyte.org/app-stopped"),
    };
    o
}

/// `doc` as JSON text with every object's keys in reverse order and loose whitespace.
fn reordered(doc: &Value) -> String {
    match doc {
        Value::Object(m) => {
            let members: Vec<String> = m
                .iter()
                .rev()
                .map(|(k, v)| {
                    format!(
                        "\n  {} :\t{}",
                        serde_json::to_string(k).unwrap(),
                        reordered(v)
                    )
                })
                .collect();
            format!("{{ {} }}", members.join(" ,"))
        }
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(reordered).collect();
            format!("[ {} ]", items.join(" , "))
        }
        leaf => serde_json::to_string(leaf).unwrap(),
    }
}

/// Every leaf of `doc` with its JSON Pointer.
fn leaves(doc: &Value, at: String, out: &mut Vec<(String, Value)>) {
    match doc {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                leaves(
                    v,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, v) in a.iter().enumerate() {
                leaves(v, format!("{at}/{i}"), out);
            }
        }
        leaf => out.push((at, leaf.clone())),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 200,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("proptest-regressions/properties.txt"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn mutating_twice_is_mutating_once(x in kservice(), stopped in prop::option::of(any::<bool>())) {
        let x = match stopped { Some(s) => with_stop_label(&x, Some(if s { "true" } else { "false" })), None => x };
        let once = admit("CREATE", &x, None).object_json().unwrap();
        let twice = admit("UPDATE", &once, Some(&once));
        prop_assert!(twice.ops.is_empty(), "second patch: {:?}", twice.ops);
        prop_assert_eq!(twice.object_json().unwrap(), once);
    }

    #[test]
    fn a_review_body_is_decided_as_the_request_it_carries(x in kservice(), stopped in any::<bool>(), pretty in any::<bool>()) {
        // The review parser skims what admission never reads; the answer must not change.
        let x = with_stop_label(&x, stopped.then_some("true"));
        let once = admit("CREATE", &x, None).object_json().unwrap();
        for (op, object, old) in [("CREATE", &x, None), ("UPDATE", &once, Some(&once)), ("UPDATE", &x, Some(&once))] {
            let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": "u", "kind": {"group": "serving.knative.dev", "version": "v1", "kind": "Service"},
                "operation": op, "namespace": "ns1", "object": object, "oldObject": old}});
            let body = match pretty {
                true => serde_json::to_vec_pretty(&review).unwrap(),
                false => serde_json::to_vec(&review).unwrap(),
            };
            let reviewed = admission::review(&body, &Policy::default()).unwrap();
            let decided = admission::decide(request(op, object.clone(), old.cloned()), &Policy::default());
            let want = admission::encode("u", &decided);
            prop_assert_eq!(String::from_utf8(reviewed.body).unwrap(), String::from_utf8(want).unwrap());
        }
    }

    #[test]
    fn the_patch_applied_to_the_input_is_the_output(x in kservice(), stopped in any::<bool>()) {
        let x = with_stop_label(&x, stopped.then_some("true"));
        let d = admit("CREATE", &x, None);
        let mut patched = x.clone();
        json_patch::patch(&mut patched, &d.ops).unwrap();
        prop_assert_eq!(patched, d.object_json().unwrap());
    }

    #[test]
    fn every_user_field_survives(x in kservice()) {
        let out = admit("CREATE", &x, None).object_json().unwrap();
        let mut user = Vec::new();
        leaves(&x, String::new(), &mut user);
        for (pointer, value) in user {
            prop_assert_eq!(out.pointer(&pointer), Some(&value), "{}", pointer);
        }
        let mut node = Node::from_json(out.clone());
        prop_assert!(mutate::strip(&mut Editor::new(&mut node)));
        let back = node.to_json();
        let mut want = x.clone();
        if want["metadata"]["name"].is_null() {
            want["metadata"]["name"] = out["metadata"]["name"].clone();
        }
        prop_assert_eq!(back, want, "uninject(mutate(x)) = x");
    }

    #[test]
    fn the_sha_ignores_formatting_and_sees_every_spec_change(x in kservice(), pick in any::<prop::sample::Index>()) {
        let sha = |o: &Value| admit("CREATE", o, None).object_json().unwrap()["metadata"]["annotations"]["flyte.org/spec-sha"].clone();
        let compact = serde_json::to_string(&x).unwrap();
        let reparsed: Value = serde_json::from_str(&reordered(&x)).unwrap();
        prop_assert_eq!(sha(&serde_json::from_str(&compact).unwrap()), sha(&reparsed));
        // Change one leaf of the spec: the SHA moves.
        let mut spec_leaves = Vec::new();
        leaves(&x["spec"], "/spec".into(), &mut spec_leaves);
        let (pointer, value) = pick.get(&spec_leaves).clone();
        let mut changed = x.clone();
        *changed.pointer_mut(&pointer).unwrap() = match value {
            Value::String(s) => Value::from(format!("{s}x")),
            _ => Value::from("changed"),
        };
        prop_assert_ne!(sha(&x), sha(&changed));
    }

    #[test]
    fn stop_then_start_restores_the_object(x in kservice(), zero_initial in any::<bool>(), by_false in any::<bool>()) {
        let mut policy = Policy::default();
        policy.mutate.allow_zero_initial_scale = zero_initial;
        let decide = |op: &str, o: &Value, old: Option<&Value>| {
            let d = admission::decide(request(op, o.clone(), old.cloned()), &policy);
            assert!(d.allowed, "{}", d.message());
            d.object_json().unwrap()
        };
        let running = decide("CREATE", &x, None);
        let stopped = decide("UPDATE", &with_stop_label(&running, Some("true")), Some(&running));
        prop_assert_eq!(&stopped["metadata"]["labels"]["networking.knative.dev/visibility"], "cluster-local");
        prop_assert_eq!(&stopped["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"], "0");
        prop_assert_eq!(&stopped["metadata"]["annotations"]["flyte.org/spec-sha"], &running["metadata"]["annotations"]["flyte.org/spec-sha"]);
        let label = by_false.then_some("false");
        let started = decide("UPDATE", &with_stop_label(&stopped, label), Some(&stopped));
        prop_assert_eq!(started, with_stop_label(&running, label));
    }
}
