//! PURE: what admission may read of a review — the skim table the review parser is given.
//!
//! Every field a rule, an edit or the decoder reads must be built by this table; everything else
//! stays JSON text ([`Node::Raw`](crate::json::Node::Raw)), checked and passed through untouched:
//! the annotations of other owners (a `kubectl.kubernetes.io/last-applied-configuration` can be
//! half of a review), `metadata.managedFields`, `status`, the parts of `spec` no edit touches,
//! each env entry but the webhook's own, and of the stored object all but its labels, the
//! webhook's own annotations and its spec.
//!
//! A rule that reads a field this table leaves as text finds nothing in production; in a debug
//! build (every test) it panics instead, naming the path to add here. To read more, add an entry
//! (a `(name, Skim)` pair under the object that holds the field, `Skim::Full` to build all of it).

use crate::json::parse::{Others, Skim};
use crate::keys;

/// The AdmissionReview.
pub static REVIEW: Skim = Skim::Object {
    fields: &[("request", REQUEST)],
    others: Others::Full,
};

/// `request`: `userInfo` and `options` stay text (`userInfo`, small, is read from its text with
/// serde to recognise platform writers).
const REQUEST: Skim = Skim::Object {
    fields: &[
        ("object", OBJECT),
        ("oldObject", OLD_OBJECT),
        ("userInfo", Skim::Raw),
        ("options", Skim::Raw),
    ],
    others: Others::Full,
};

/// `request.object`, the KService being admitted: `status` stays text.
pub(crate) const OBJECT: Skim = Skim::Object {
    fields: &[
        ("metadata", METADATA),
        ("spec", SPEC),
        ("status", Skim::Raw),
    ],
    others: Others::Full,
};

/// `request.object.metadata`: `managedFields` stays text, and the annotations of other owners.
const METADATA: Skim = Skim::Object {
    fields: &[
        ("managedFields", Skim::Raw),
        ("annotations", OWN_ANNOTATIONS),
    ],
    others: Others::Full,
};

/// Annotations: only the webhook's own keys are built.
const OWN_ANNOTATIONS: Skim = Skim::Object {
    fields: &[],
    others: Others::FullIf(keys::is_own_annotation),
};

/// `request.object.spec`: only the template is built.
const SPEC: Skim = Skim::Object {
    fields: &[("template", TEMPLATE)],
    others: Others::Raw,
};

/// `spec.template`: its metadata in full, and what the edits touch of its spec.
const TEMPLATE: Skim = Skim::Object {
    fields: &[("metadata", Skim::Full), ("spec", POD_SPEC)],
    others: Others::Raw,
};

/// `spec.template.spec`: the containers and volumes.
const POD_SPEC: Skim = Skim::Object {
    fields: &[
        ("containers", Skim::List(&CONTAINER)),
        ("volumes", Skim::List(&VOLUME)),
    ],
    others: Others::Raw,
};

/// A container: its name and ports, and of its env list only the webhook's own variable.
const CONTAINER: Skim = Skim::Object {
    fields: &[
        ("name", Skim::Full),
        ("ports", Skim::Full),
        ("env", Skim::Sift(keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN)),
    ],
    others: Others::Raw,
};

/// A volume: its name.
const VOLUME: Skim = Skim::Object {
    fields: &[("name", Skim::Full)],
    others: Others::Raw,
};

/// `request.oldObject`, the stored object on UPDATE: its labels (identity labels are
/// immutable), the webhook's own annotations (the stored spec SHA), and `spec` as the object's
/// (a stop records the stored template; an unchanged user spec keeps the stored SHA).
pub(crate) const OLD_OBJECT: Skim = Skim::Object {
    fields: &[
        (
            "metadata",
            Skim::Object {
                fields: &[("labels", Skim::Full), ("annotations", OWN_ANNOTATIONS)],
                others: Others::Raw,
            },
        ),
        ("spec", SPEC),
    ],
    others: Others::Raw,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::Node;
    use crate::json::parse::parse_bytes;
    use serde_json::Value;

    #[test]
    fn reviews_keep_what_admission_never_reads_as_text() {
        let text = r#"{"request":{"uid":"u","userInfo":{"username":"me"},
            "object":{"metadata":{"name":"a","managedFields":[{"manager":"kubectl"}],
              "annotations":{"flyte.org/spec-sha":"abc","kubectl.kubernetes.io/last-applied-configuration":"{\"x\":1}"}},
              "spec":{"k":"v"},"status":{"conditions":[]}},
            "oldObject":{"metadata":{"labels":{"l":"v"},"name":"a"},"spec":{"k":"v"}}}}"#;
        let node = parse_bytes(text.as_bytes(), &REVIEW).unwrap();
        let request = node.get("request").unwrap();
        assert!(matches!(request.get("userInfo"), Some(Node::Raw { .. })));
        let object = request.get("object").unwrap();
        let annotations = object
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .unwrap();
        assert!(matches!(
            annotations.get("flyte.org/spec-sha"),
            Some(Node::String(_))
        ));
        let applied = annotations.get("kubectl.kubernetes.io/last-applied-configuration");
        assert!(matches!(applied, Some(Node::Raw { .. })));
        assert!(matches!(object.get("status"), Some(Node::Raw { .. })));
        assert!(matches!(object.get("spec"), Some(Node::Object(_))));
        let old = request.get("oldObject").unwrap();
        assert!(matches!(old.get("spec"), Some(Node::Object(_))));
        assert!(matches!(
            old.get("metadata").and_then(|m| m.get("labels")),
            Some(Node::Object(_))
        ));
        let full: Value = serde_json::from_str(text).unwrap();
        assert_eq!(node.to_json(), full, "nothing is lost");
        assert_eq!(serde_json::json!(node), full);
    }

    #[test]
    fn env_entries_stay_raw_unless_one_may_be_the_webhooks_own() {
        let env_of = |list: &str| {
            let text = format!(
                r#"{{"request":{{"object":{{"spec":{{"template":{{"spec":{{"containers":[{{"name":"app","env":{list}}}]}}}}}}}}}}}}"#
            );
            let node = parse_bytes(text.as_bytes(), &REVIEW).unwrap();
            let want: Value = serde_json::from_str(list).unwrap();
            let env = [
                "request",
                "object",
                "spec",
                "template",
                "spec",
                "containers",
            ]
            .iter()
            .try_fold(&node, |n, k| n.get(k))
            .and_then(|c| c.as_array()?.first()?.get("env").cloned())
            .unwrap();
            assert_eq!(env.to_json(), want, "{list}");
            env.as_array()
                .unwrap()
                .iter()
                .map(|e| matches!(e, Node::Raw { .. }))
                .collect::<Vec<bool>>()
        };
        assert_eq!(
            env_of(r#"[{"name":"A","value":"1"}, {"name":"B","value":"q\"t"}]"#),
            [true, true]
        );
        // An entry with the name itself, or any `\u` escape (which could spell it), is built.
        assert_eq!(
            env_of(r#"[{"name":"A"}, {"name":"INTERNAL_APP_ENDPOINT_PATTERN","value":"x"}]"#),
            [true, false]
        );
        assert_eq!(
            env_of(r#"[{"name":"\u0049NTERNAL_APP_ENDPOINT_PATTERN","value":"x"}, {"name":"B"}]"#),
            [false, true]
        );
        assert_eq!(
            env_of(
                r#"[{"name":"A","value":"\u00e9"}, {"name":"B","value":"INTERNAL_APP_ENDPOINT_PATTERN"}]"#
            ),
            [false, false]
        );
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "request.object.spec.template.spec.nodeSelector")]
    fn a_read_into_a_skimmed_value_names_its_path() {
        let text = r#"{"request":{"object":{"spec":{"template":{"spec":{"nodeSelector":{"disk":"ssd"}}}}}}}"#;
        let node = parse_bytes(text.as_bytes(), &REVIEW).unwrap();
        let pod = ["request", "object", "spec", "template", "spec"]
            .iter()
            .try_fold(&node, |n, k| n.get(k))
            .unwrap();
        let _ = pod.get("nodeSelector").and_then(|s| s.get("disk"));
    }
}
