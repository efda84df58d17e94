//! Properties of admission over generated KServices: idempotence, patch fidelity, survival of
//! user fields, the spec SHA's invariances, stop∘start = identity, and the review reader: any
//! bytes are answered without a panic, and a body `serde_json` accepts (repeated member names,
//! escapes and whitespace included) is decided exactly as the `serde_json` path decides it (the
//! fuzz target in `fuzz/` checks the same on arbitrary bytes).

#![allow(clippy::unwrap_used)] // test helpers may panic

use ksvc_webhook::admission::mutate;
use ksvc_webhook::admission::{self, Decision, Policy, Reader, Request};
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

fn review_json(op: &str, object: &Value, old: Option<&Value>) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "serving.knative.dev", "version": "v1", "kind": "Service"},
        "operation": op, "namespace": "ns1", "object": object, "oldObject": old}})
}

/// A review of `object` decoded as the server decodes it (its parser and skim table).
fn request(op: &str, object: Value, old: Option<Value>) -> Request<'static> {
    let body = serde_json::to_vec(&review_json(op, &object, old.as_ref())).unwrap();
    admission::decode(&body).unwrap().into_owned()
}

/// `v` as JSON text written loosely, as `knobs` pick: a member name repeated with a decoy value
/// before the real one (the last one wins, as `serde_json`, Go and kube-apiserver read it),
/// characters spelled as `\u` escapes or `\/`, whitespace between tokens.
fn loosely(v: &Value, knobs: &[u8], at: &mut usize, out: &mut String) {
    let mut knob = || {
        *at += 1;
        knobs[*at % knobs.len()]
    };
    let picks: [u8; 4] = std::array::from_fn(|_| knob());
    let mut next = picks.into_iter().cycle();
    let mut knob = move || next.next().unwrap_or(0);
    match v {
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if knob().is_multiple_of(6) {
                    let decoys = [r#"null"#, r#""decoy""#, r#"{"decoy":["\u0041",1.50]}"#];
                    spell(k, knob(), out);
                    out.push_str(": ");
                    out.push_str(decoys[usize::from(knob()) % decoys.len()]);
                    out.push_str(" ,\n ");
                }
                spell(k, knob(), out);
                out.push(':');
                loosely(item, knobs, at, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push_str("[ ");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(" ,");
                }
                loosely(item, knobs, at, out);
            }
            out.push(']');
        }
        Value::String(text) => spell(text, knob(), out),
        leaf => out.push_str(&leaf.to_string()),
    }
}

/// A string literal: every `every`-th character (by its knob) as `\u` escapes.
fn spell(text: &str, knob: u8, out: &mut String) {
    let every = usize::from(knob % 5) + 1;
    out.push('"');
    for (i, c) in text.chars().enumerate() {
        match c {
            '/' if knob.is_multiple_of(2) => out.push_str("\\/"),
            c if i.is_multiple_of(every) && knob.is_multiple_of(3) => {
                for unit in c.encode_utf16(&mut [0u16; 2]) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => {
                let one = serde_json::to_string(&c.to_string()).unwrap();
                out.push_str(&one[1..one.len() - 1]);
            }
        }
    }
    out.push('"');
}

/// The server's answer to `body`, and `serde_json`'s: equal whenever serde_json reads the body.
fn server_and_reference(body: &[u8]) -> Result<(), TestCaseError> {
    let policy = Policy::default();
    let server = admission::review(body, &policy);
    if serde_json::from_slice::<Value>(body).is_err() {
        return Ok(());
    }
    let reference = admission::review_with(body, &policy, Reader::SerdeJson);
    match (server, reference) {
        (Ok(got), Ok(want)) => {
            prop_assert_eq!(
                String::from_utf8(got.body).unwrap(),
                String::from_utf8(want.body).unwrap()
            );
            prop_assert_eq!(got.summary, want.summary);
        }
        (Err(got), Err(want)) => prop_assert_eq!(got.to_string(), want.to_string()),
        (got, want) => prop_assert!(false, "server: {:?}\nserde_json: {:?}", got, want),
    }
    Ok(())
}

/// Found by the fuzz target: a `userInfo` of the wrong shape was refused by the fast reader
/// with a line and column counted from the start of `userInfo`.
#[test]
fn a_malformed_user_info_is_refused_in_the_same_words_by_both_readers() {
    let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1","operation":"UPDATE","userInfo":{   "username": {"a": 1}}}}"#;
    let server = admission::review(body, &Policy::default()).unwrap_err();
    assert_eq!(
        server.to_string(),
        "body is not an admission.k8s.io/v1 AdmissionReview: request.userInfo: invalid type: map, \
         expected a string"
    );
    server_and_reference(body).unwrap();
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
        prop_assert!(twice.patch.is_empty(), "second patch: {:?}", twice.patch);
        prop_assert_eq!(twice.object_json().unwrap(), once);
    }

    #[test]
    fn a_stored_object_lent_is_decided_on_as_a_copy_of_it_is(x in kservice(), stopped in any::<bool>()) {
        // The drift report's decision: an unchanged write of a stored object, the object lent
        // rather than copied, the edits counted rather than written, and an admitted object's
        // SHA kept without hashing. A review reads its old object with another table, so the
        // decision on the copy hashes.
        let x = with_stop_label(&x, stopped.then_some("true"));
        let once = admit("CREATE", &x, None).object_json().unwrap();
        for stored in [&x, &once] {
            let copied = admission::decide(request("UPDATE", stored.clone(), Some(stored.clone())), &Policy::default());
            let mut req = request("UPDATE", stored.clone(), Some(stored.clone()));
            // As the drift report lends it: read as the object is, so the two are equal.
            req.old_object = None;
            let mut lent = req.object.clone().unwrap();
            let counted = admission::decide::decide_stored(req, &mut lent, &Policy::default());
            prop_assert_eq!(counted.allowed, copied.allowed);
            prop_assert_eq!(counted.message(), copied.message());
            prop_assert_eq!(counted.object_json(), copied.object_json());
            prop_assert_eq!(&counted.warnings, &copied.warnings);
            prop_assert_eq!(counted.patch.len(), copied.patch.len());
            prop_assert_eq!(counted.patch.json(), None);
            prop_assert_eq!(&lent.to_json(), stored, "left as it was");
        }
    }

    #[test]
    fn a_review_body_is_decided_as_serde_json_reads_it(x in kservice(), stopped in any::<bool>(), knobs in prop::collection::vec(any::<u8>(), 1..16)) {
        // The review parser skims what admission never reads, and a repeated name keeps its last
        // value: the answer is the serde_json path's, and the answer to the plain body.
        let x = with_stop_label(&x, stopped.then_some("true"));
        let once = admit("CREATE", &x, None).object_json().unwrap();
        for (op, object, old) in [("CREATE", &x, None), ("UPDATE", &once, Some(&once)), ("UPDATE", &x, Some(&once))] {
            let review = review_json(op, object, old);
            let mut loose = String::new();
            loosely(&review, &knobs, &mut 0, &mut loose);
            server_and_reference(loose.as_bytes())?;
            let plain = admission::review(&serde_json::to_vec(&review).unwrap(), &Policy::default()).unwrap();
            let got = admission::review(loose.as_bytes(), &Policy::default()).unwrap();
            prop_assert_eq!(String::from_utf8(got.body).unwrap(), String::from_utf8(plain.body).unwrap());
        }
    }

    #[test]
    fn any_bytes_are_answered_without_a_panic(x in kservice(), cut in any::<prop::sample::Index>(), byte in any::<u8>(), noise in prop::collection::vec(any::<u8>(), 0..64)) {
        // Near misses of a real review (a byte changed, the body cut short) and plain noise.
        let body = serde_json::to_vec(&review_json("CREATE", &x, None)).unwrap();
        let at = cut.index(body.len());
        let mut changed = body.clone();
        changed[at] = byte;
        for bytes in [changed, body[..at].to_vec(), noise] {
            server_and_reference(&bytes)?;
        }
    }

    #[test]
    fn the_patch_applied_to_the_input_is_the_output(x in kservice(), stopped in any::<bool>()) {
        let x = with_stop_label(&x, stopped.then_some("true"));
        let d = admit("CREATE", &x, None);
        let mut patched = x.clone();
        let patch: json_patch::Patch =
            serde_json::from_slice(d.patch.json().unwrap()).unwrap();
        json_patch::patch(&mut patched, &patch).unwrap();
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
