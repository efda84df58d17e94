//! PURE: an injected copy edited in place — found, and put back.
//!
//! A copy is as injected when it equals its template as filled in now, but for the fields
//! Knative's defaulting writes into every container ([`DEFAULTED`]), which it may hold beside or
//! within what the template sets. Anything else differing is an edit the spec SHA cannot see (it
//! covers the user's containers only), so [`put_back_if_edited`] puts the template's copy back in
//! place, keeping Knative's fields. Never decides which templates apply (`select.rs`) or records
//! them (`inject.rs`).

use serde_json::Value;

use super::inject::Kind;
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
    let copy = ksvc::get(ed.doc(), kind.path())
        .and_then(Node::as_array)
        .and_then(|list| list.get(at))
        .map(Node::to_json);
    let Some(copy) = copy.filter(|c| !as_injected(kind, c, &filled.to_json())) else {
        return false;
    };
    if let (Kind::Container, Some(map)) = (kind, filled.as_object_mut()) {
        for key in DEFAULTED {
            if let Some(value) = copy.get(key).filter(|_| map.get(key).is_none()) {
                map.insert(key, Node::from_json(value.clone()));
            }
        }
    }
    let at = at.to_string();
    ed.set(&[kind.path(), &[at.as_str()]].concat(), filled);
    true
}

/// Whether `copy` is `fresh` (the template filled in now) as injected: equal, but for the
/// [`DEFAULTED`] fields of a container, which it may hold or hold more of.
fn as_injected(kind: Kind, copy: &Value, fresh: &Value) -> bool {
    let (Some(copy), Some(fresh)) = (copy.as_object(), fresh.as_object()) else {
        return copy == fresh;
    };
    let defaulted = |key: &str| kind == Kind::Container && DEFAULTED.contains(&key);
    copy.keys().all(|k| fresh.contains_key(k) || defaulted(k))
        && fresh.iter().all(|(k, want)| match copy.get(k) {
            Some(have) if defaulted(k) => holds(have, want),
            Some(have) => have == want,
            None => false,
        })
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
        for (copy, want) in cases {
            assert_eq!(as_injected(Kind::Container, &copy, &fresh), want, "{copy}");
        }
        // A volume has no defaulted fields.
        let volume = json!({"name": "logs", "emptyDir": {}});
        let resized = json!({"name": "logs", "emptyDir": {}, "resources": {}});
        assert!(as_injected(Kind::Volume, &volume, &volume));
        assert!(!as_injected(Kind::Volume, &resized, &volume));
    }
}
