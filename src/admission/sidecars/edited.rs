//! PURE: an injected copy edited in place — found, and put back.
//!
//! A copy is as injected when it equals its template as filled in now, but for the fields
//! Knative's defaulting writes into every container ([`DEFAULTED`]), which it may hold beside or
//! within what the template sets. Anything else differing is an edit the spec SHA cannot see (it
//! covers the user's containers only), so [`put_back_if_edited`] puts the template's copy back in
//! place, keeping Knative's fields. Never decides which templates apply (`select.rs`) or records
//! them (`inject.rs`).

use serde_json::Value;

use super::kind::Kind;
use crate::admission::ksvc;
use crate::json::Node;
use crate::json::edit::Editor;
use crate::keys;

/// The fields Knative's defaulting writes into every container: an injected copy may hold them
/// beside, or within, what its template sets and still be as injected.
const DEFAULTED: [&str; 3] = ["resources", "readinessProbe", "securityContext"];

/// Put `filled` in place of the copy at `at` when the copy is not it as injected (edited in place);
/// what Knative's defaulting wrote beside the template stays, as Knative would write it again.
pub(super) fn put_back_if_edited<'a>(
    ed: &mut Editor<'_, 'a>,
    kind: Kind,
    at: usize,
    mut filled: Node<'a>,
) -> bool {
    let list = ksvc::get(ed.doc(), kind.path()).and_then(Node::as_array);
    let Some(copy) = list.and_then(|l| l.get(at)) else {
        return false;
    };
    if as_injected(kind, copy, &filled) {
        return false;
    }
    let kept: Vec<(&str, Node<'a>)> = match (kind, copy.as_object(), filled.as_object()) {
        (Kind::Container, Some(copy), Some(fresh)) => DEFAULTED
            .iter()
            .filter(|key| fresh.get(key).is_none())
            .filter_map(|key| copy.get(key).map(|v| (*key, v.clone())))
            .collect(),
        _ => Vec::new(),
    };
    if let Some(map) = filled.as_object_mut() {
        for (key, value) in kept {
            map.insert(key, value);
        }
    }
    let at = at.to_string();
    ed.set(&[kind.path(), &[at.as_str()]].concat(), filled);
    true
}

/// Whether `copy` is `fresh` (the template filled in now) as injected: equal, but for the
/// [`DEFAULTED`] fields of a container, which it may hold or hold more of. Members kept as the
/// same text are equal without being parsed (the usual case: the API server writes back what the
/// webhook injected).
fn as_injected(kind: Kind, copy: &Node, fresh: &Node) -> bool {
    let (Some(copy), Some(fresh)) = (copy.as_object(), fresh.as_object()) else {
        return same(copy, fresh);
    };
    let defaulted = |key: &str| kind == Kind::Container && DEFAULTED.contains(&key);
    copy.keys().all(|k| fresh.get(k).is_some() || defaulted(k))
        && fresh.iter().all(|(k, want)| match copy.get(k) {
            Some(have) if defaulted(k) => holds(&have.to_json(), &want.to_json()),
            Some(have) => same(have, want),
            None => false,
        })
}

/// Equal as JSON values: as the same text or tree, else once both are parsed.
fn same(a: &Node, b: &Node) -> bool {
    a == b || a.to_json() == b.to_json()
}

/// Whether `have` holds all of `want`: maps may hold more members, everything else is equal.
fn holds(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(have), Value::Object(want)) => want
            .iter()
            .all(|(k, w)| have.get(k).is_some_and(|h| holds(h, w))),
        _ => have == want,
    }
}

/// The warning for a copy put back.
pub(super) fn edited(kind: Kind, name: &str, template: &str) -> String {
    format!(
        "sidecar {} {name:?} of template {template:?} was edited in place: put back as the \
         catalogue has it (the spec SHA covers only your containers); change the catalogue \
         instead, or opt out with {}: none",
        kind.label(),
        keys::ANNOTATION_SIDECAR_INJECT
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_copy_is_as_injected_but_for_knatives_defaulted_fields() {
        let fresh = json!({"name": "proxy", "image": "p:1", "args": ["-a"],
                           "resources": {"limits": {"cpu": "1"}}});
        #[rustfmt::skip]
        let cases = [
            (json!({"name": "proxy", "image": "p:1", "args": ["-a"], "resources": {"limits": {"cpu": "1"}}}), true),
            (json!({"name": "proxy", "image": "p:1", "args": ["-a"], "readinessProbe": {"tcpSocket": {}},
                    "resources": {"limits": {"cpu": "1"}, "requests": {"memory": "1Gi"}}}), true),
            (json!({"name": "proxy", "image": "p:2", "args": ["-a"], "resources": {"limits": {"cpu": "1"}}}), false),
            (json!({"name": "proxy", "image": "p:1", "args": ["-a", "-b"], "resources": {"limits": {"cpu": "1"}}}), false),
            (json!({"name": "proxy", "image": "p:1", "args": ["-a"], "command": ["sh"], "resources": {"limits": {"cpu": "1"}}}), false),
            (json!({"name": "proxy", "image": "p:1", "args": ["-a"], "resources": {"limits": {"cpu": "2"}}}), false),
            (json!({"name": "proxy", "image": "p:1", "args": ["-a"]}), false),
        ];
        let node = |v: &serde_json::Value| Node::from_json(v.clone());
        for (copy, want) in cases {
            assert_eq!(
                as_injected(Kind::Container, &node(&copy), &node(&fresh)),
                want,
                "{copy}"
            );
        }
        // Raw text is compared as text, and as values when the texts differ.
        let raw = |text: &str| Node::raw(text.into(), "test");
        assert!(same(&raw(r#"{"a":1,"b":2}"#), &raw(r#"{"b":2,"a":1}"#)));
        assert!(!same(&raw(r#"{"a":1}"#), &raw(r#"{"a":2}"#)));
        // A volume has no defaulted fields.
        let volume = json!({"name": "logs", "emptyDir": {}});
        let resized = json!({"name": "logs", "emptyDir": {}, "resources": {}});
        assert!(as_injected(Kind::Volume, &node(&volume), &node(&volume)));
        assert!(!as_injected(Kind::Volume, &node(&resized), &node(&volume)));
    }
}
