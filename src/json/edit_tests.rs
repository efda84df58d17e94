//! The editor's edits, each replayed from its recorded patch, and its reversible and counting
//! modes.

use super::*;
use serde_json::{Value, json};

fn n(value: Value) -> Node<'static> {
    Node::from_json(value)
}

fn edited(doc: Value, f: impl FnOnce(&mut Editor)) -> (Value, Value, Value) {
    let mut replayed = doc.clone();
    let mut node = Node::from_json(doc);
    let mut ed = Editor::new(&mut node);
    f(&mut ed);
    let ops: Value = serde_json::from_slice(ed.into_patch().json().unwrap()).unwrap();
    let patch: json_patch::Patch = serde_json::from_value(ops.clone()).unwrap();
    json_patch::patch(&mut replayed, &patch).unwrap();
    let doc = node.to_json();
    assert_eq!(replayed, doc, "the recorded patch reproduces the edit");
    (doc, ops, replayed)
}

#[test]
fn a_counting_editor_makes_the_same_edits_and_counts_them_without_a_patch() {
    let doc = json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "list": [1]});
    let edits = |ed: &mut Editor| {
        ed.set(&["metadata", "name"], n(json!("a")));
        ed.set(&["metadata", "annotations", "k"], n(json!("v")));
        ed.remove(&["metadata", "labels", "x"]);
        ed.push(&["list"], n(json!(2)));
    };
    let (recorded, ops, _) = edited(doc.clone(), edits);
    let mut node = Node::from_json(doc);
    let mut ed = Editor::counting(&mut node);
    edits(&mut ed);
    assert!(ed.recorded());
    let patch = ed.into_patch();
    assert_eq!(patch.json(), None);
    assert_eq!(patch.len(), ops.as_array().unwrap().len());
    assert_eq!(node.to_json(), recorded);
}

#[test]
fn set_creates_missing_parents_in_one_operation() {
    let (doc, ops, _) = edited(json!({"metadata": {"name": "a"}}), |ed| {
        ed.set(
            &["metadata", "annotations", "flyte.org/spec-sha"],
            n(json!("x")),
        );
    });
    assert_eq!(doc["metadata"]["annotations"]["flyte.org/spec-sha"], "x");
    assert_eq!(
        ops,
        json!([{"op": "add", "path": "/metadata/annotations", "value": {"flyte.org/spec-sha": "x"}}])
    );
}

#[test]
fn set_escapes_slashes_and_skips_no_ops() {
    let (_, ops, _) = edited(json!({"metadata": {"labels": {"a/b": "1"}}}), |ed| {
        ed.set(&["metadata", "labels", "a/b"], n(json!("1")));
        ed.set(&["metadata", "labels", "a~c/d"], n(json!("2")));
    });
    assert_eq!(
        ops,
        json!([{"op": "add", "path": "/metadata/labels/a~0c~1d", "value": "2"}])
    );
}

#[test]
fn null_parents_are_replaced() {
    let (doc, _, _) = edited(json!({"metadata": {"labels": null}}), |ed| {
        ed.set(&["metadata", "labels", "k"], n(json!("v")));
    });
    assert_eq!(doc, json!({"metadata": {"labels": {"k": "v"}}}));
}

#[test]
fn undo_puts_the_document_back() {
    let original = json!({"a": {"b": [1, 2, 3], "c": "x"}, "d": null});
    let mut doc = n(original.clone());
    let mut ed = Editor::reversible(&mut doc);
    ed.remove(&["a", "b", "1"]);
    ed.push(&["a", "b"], n(json!(9)));
    ed.set(&["a", "b", "0"], n(json!(0)));
    ed.set(&["a", "c"], n(json!("y")));
    ed.remove(&["a", "c"]);
    ed.set(&["d", "e", "f"], n(json!(1)));
    ed.push(&["g"], n(json!([])));
    assert_ne!(ed.doc().to_json(), original);
    ed.undo();
    assert_eq!(doc.to_json(), original);
    assert_eq!(
        serde_json::to_string(&doc).unwrap(),
        original.to_string(),
        "in order"
    );
}

#[test]
fn push_and_remove_in_arrays() {
    let (doc, _, _) = edited(json!({"env": [{"name": "A"}, {"name": "B"}]}), |ed| {
        ed.remove(&["env", "0"]);
        ed.push(&["env"], n(json!({"name": "C"})));
        ed.push(&["missing"], n(json!(1)));
        ed.set(&["env", "0", "value"], n(json!("b")));
        ed.remove(&["nothing", "here"]);
    });
    assert_eq!(
        doc,
        json!({"env": [{"name": "B", "value": "b"}, {"name": "C"}], "missing": [1]})
    );
}
