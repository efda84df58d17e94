//! PURE: stop and start through the `flyte.org/app-stopped` label.
//!
//! Stopping sets the Service label `networking.knative.dev/visibility: cluster-local` and the
//! template annotation `autoscaling.knative.dev/min-scale: "0"` (plus `initial-scale: "0"` when
//! the cluster allows zero initial scale). What each key held before — a value, or nothing — is
//! recorded in the `flyte.org/stop-restore` annotation, so starting again restores exactly what
//! the user had. Where the cluster refuses `initial-scale: "0"`, a stopping write's zero initial
//! scale is undone with a warning ([`drop_zero_initial_scale`]). Edits go through [`Editor`], so
//! an object already in the right state yields no operation and the template (hence the Knative
//! revision) changes only when it must.
//!
//! Which record a write converges with, and the rules of a record a write brings, are
//! `trust.rs`'s: the record is trusted only where it came from the webhook.

use std::collections::BTreeMap;

use crate::json::Node;
use serde::{Deserialize, Serialize};

use crate::admission::ksvc;
use crate::json::edit::Editor;
use crate::keys;

mod trust;

pub use trust::{
    RULE_KEYS, RULE_UNTRUSTED, admitted_record_rules, record_for, record_rules, unreadable,
};

/// Where a stop-controlled key lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// `metadata.labels` of the Service.
    ServiceLabel,
    /// `spec.template.metadata.annotations`.
    TemplateAnnotation,
}

/// The previous values of the keys a stop changed; `None` means the key was absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restore {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, Option<String>>,
    #[serde(
        default,
        rename = "templateAnnotations",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub template_annotations: BTreeMap<String, Option<String>>,
}

impl Restore {
    fn slot(&mut self, place: Place) -> &mut BTreeMap<String, Option<String>> {
        match place {
            Place::ServiceLabel => &mut self.labels,
            Place::TemplateAnnotation => &mut self.template_annotations,
        }
    }
}

/// The largest record read: the webhook's names a few keys in well under this, so a larger one
/// is refused before it is parsed (a forged record of many keys costs a parse per review).
pub const MAX_RECORD: usize = 1024;

/// The restore record of `doc`: `Ok(None)` when there is none, `Err` when it is not ours to read
/// (over [`MAX_RECORD`] bytes, or not a record).
pub fn restore_record(doc: &Node) -> Result<Option<Restore>, serde_json::Error> {
    let Some(text) = ksvc::entry(doc, ksvc::ANNOTATIONS, keys::ANNOTATION_STOP_RESTORE) else {
        return Ok(None);
    };
    if text.len() > MAX_RECORD {
        return Err(serde::de::Error::custom(format_args!(
            "it is {} bytes; the webhook writes at most {MAX_RECORD}",
            text.len()
        )));
    }
    serde_json::from_str(text).map(Some)
}

/// Where the cluster refuses `initial-scale: "0"` (no `--allow-zero-initial-scale`): on a stopped
/// app, undo a zero initial scale this write set — put back what the stored object had, or remove
/// the key — rather than let Knative refuse the whole write. Returns the warning saying why.
pub fn drop_zero_initial_scale(ed: &mut Editor, stored: Option<&Node>) -> Option<String> {
    let path = path_of(Place::TemplateAnnotation, keys::ANNOTATION_INITIAL_SCALE);
    let before = stored.and_then(|old| ksvc::get_str(old, &path));
    if !ksvc::stopped(ed.doc())
        || ksvc::get_str(ed.doc(), &path) != Some("0")
        || before == Some("0")
    {
        return None;
    }
    match before {
        Some(value) => ed.set(&path, Node::from(value.to_string())),
        None => ed.remove(&path),
    }
    drop_empty_map(ed, ksvc::TEMPLATE_ANNOTATIONS);
    drop_empty_map(ed, &ksvc::TEMPLATE_ANNOTATIONS[..3]);
    Some(format!(
        "spec.template.metadata.annotations[{key}]: dropped the \"0\" this stop set, because \
         Knative refuses an initial scale of 0 unless config-autoscaler sets \
         allow-zero-initial-scale: \"true\"; min-scale \"0\" still scales the stopped app to \
         zero. Where the cluster allows it, run the webhook with --allow-zero-initial-scale",
        key = keys::ANNOTATION_INITIAL_SCALE
    ))
}

/// The keys a stop sets, with their stopped values.
fn stop_keys(zero_initial_scale: bool) -> Vec<(Place, &'static str, &'static str)> {
    let mut keys = vec![
        (
            Place::ServiceLabel,
            keys::LABEL_VISIBILITY,
            keys::VISIBILITY_CLUSTER_LOCAL,
        ),
        (Place::TemplateAnnotation, keys::ANNOTATION_MIN_SCALE, "0"),
    ];
    if zero_initial_scale {
        keys.push((
            Place::TemplateAnnotation,
            keys::ANNOTATION_INITIAL_SCALE,
            "0",
        ));
    }
    keys
}

/// Whether a stop sets `key` at `place` (whatever the cluster allows).
fn is_stop_key(place: Place, key: &str) -> bool {
    stop_keys(true)
        .iter()
        .any(|(p, k, _)| *p == place && *k == key)
}

fn path_of(place: Place, key: &str) -> Vec<&str> {
    let base = match place {
        Place::ServiceLabel => ksvc::LABELS,
        Place::TemplateAnnotation => ksvc::TEMPLATE_ANNOTATIONS,
    };
    base.iter().copied().chain([key]).collect()
}

/// Bring the object to the state its stop label asks for. `record` is the parsed restore record.
pub fn converge(ed: &mut Editor, stopped: bool, record: Option<Restore>, zero_initial_scale: bool) {
    if stopped {
        stop(ed, record.unwrap_or_default(), zero_initial_scale);
    } else if let Some(record) = record {
        start(ed, &record);
    }
}

fn stop(ed: &mut Editor, mut record: Restore, zero_initial_scale: bool) {
    for (place, key, stopped_value) in stop_keys(zero_initial_scale) {
        let path = path_of(place, key);
        let current = ksvc::get_str(ed.doc(), &path).map(str::to_string);
        if current.as_deref() != Some(stopped_value) {
            // The user set this key (or it predates the stop): it is what a start restores.
            record.slot(place).insert(key.to_string(), current);
            ed.set(&path, Node::from(stopped_value));
        } else {
            record.slot(place).entry(key.to_string()).or_insert(current);
        }
    }
    let encoded = serde_json::to_string(&record).unwrap_or_default();
    ed.set(
        &[ksvc::ANNOTATIONS, &[keys::ANNOTATION_STOP_RESTORE]].concat(),
        Node::from(encoded),
    );
}

/// Put back what a stop changed and drop the record.
pub fn start(ed: &mut Editor, record: &Restore) {
    let entries = [
        (Place::ServiceLabel, &record.labels),
        (Place::TemplateAnnotation, &record.template_annotations),
    ];
    for (place, saved) in entries {
        for (key, previous) in saved {
            let path = path_of(place, key);
            match previous {
                Some(value) => ed.set(&path, Node::from(value.clone())),
                None => ed.remove(&path),
            }
        }
    }
    // A stop may have created the annotation map (and its parent); empty ones mean "absent".
    drop_empty_map(ed, ksvc::TEMPLATE_ANNOTATIONS);
    drop_empty_map(ed, &ksvc::TEMPLATE_ANNOTATIONS[..3]);
    ed.remove(&[ksvc::ANNOTATIONS, &[keys::ANNOTATION_STOP_RESTORE]].concat());
}

/// Remove the map at `path` when an edit left it empty, so a start gives back the exact object.
pub fn drop_empty_map(ed: &mut Editor, path: &[&str]) {
    if ksvc::map(ed.doc(), path).is_some_and(|m| m.is_empty()) {
        ed.remove(path);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn app(labels: serde_json::Value, template: serde_json::Value) -> Node<'static> {
        Node::from_json(json!({"metadata": {"labels": labels},
            "spec": {"template": {"metadata": {"annotations": template}}}}))
    }

    #[test]
    fn a_record_larger_than_the_webhook_writes_is_refused_unparsed() {
        let keys: serde_json::Map<_, _> = (0..200).map(|i| (format!("k{i}"), json!("v"))).collect();
        let record = json!({"labels": keys}).to_string();
        let doc = Node::from_json(json!({"metadata": {"annotations": {
            keys::ANNOTATION_STOP_RESTORE: record}}}));
        let err = restore_record(&doc).unwrap_err().to_string();
        assert!(err.contains("the webhook writes at most 1024"), "{err}");
    }

    #[test]
    fn a_stopping_update_records_the_stored_running_state() {
        let running = app(json!({}), json!({"autoscaling.knative.dev/min-scale": "2"}));
        let one_write_stop = app(
            json!({"flyte.org/app-stopped": "true",
                   "networking.knative.dev/visibility": "cluster-local"}),
            json!({"autoscaling.knative.dev/min-scale": "0",
                   "autoscaling.knative.dev/initial-scale": "0"}),
        );
        for zero in [false, true] {
            let record = record_for(&one_write_stop, Some(&running), zero).unwrap();
            assert_eq!(
                record.labels,
                BTreeMap::from([(keys::LABEL_VISIBILITY.to_string(), None)])
            );
            let mut want =
                BTreeMap::from([(keys::ANNOTATION_MIN_SCALE.to_string(), Some("2".into()))]);
            if zero {
                want.insert(keys::ANNOTATION_INITIAL_SCALE.to_string(), None);
            }
            assert_eq!(record.template_annotations, want, "zero={zero}");
        }
        // Kept stopped, with no stored record (stopped past the webhook): what the stored
        // object has; a CREATE: the object's own (none here).
        let stored = record_for(&one_write_stop, Some(&one_write_stop), false).unwrap();
        assert_eq!(
            stored.template_annotations,
            BTreeMap::from([(keys::ANNOTATION_MIN_SCALE.to_string(), Some("0".into()))])
        );
        assert_eq!(record_for(&one_write_stop, None, false), None);
    }

    #[test]
    fn only_a_zero_initial_scale_this_write_set_on_a_stopped_app_is_dropped() {
        let zero = json!({"autoscaling.knative.dev/initial-scale": "0"});
        let stopped = json!({"flyte.org/app-stopped": "true"});
        #[rustfmt::skip]
        let cases = [
            // (labels, template, stored template, dropped, initial scale after)
            (stopped.clone(), zero.clone(), Some(json!({})), true, None),
            (stopped.clone(), zero.clone(), None, true, None),
            (stopped.clone(), zero.clone(), Some(json!({"autoscaling.knative.dev/initial-scale": "3"})), true, Some("3")),
            (stopped.clone(), zero.clone(), Some(zero.clone()), false, Some("0")),
            (json!({}), zero.clone(), Some(json!({})), false, Some("0")),
            (stopped.clone(), json!({}), Some(json!({})), false, None),
        ];
        for (labels, template, stored, dropped, after) in cases {
            let mut doc = app(labels, template);
            let stored = stored.map(|t| app(json!({}), t));
            let mut ed = Editor::new(&mut doc);
            let warning = drop_zero_initial_scale(&mut ed, stored.as_ref());
            assert_eq!(warning.is_some(), dropped, "{stored:?}");
            let path = path_of(Place::TemplateAnnotation, keys::ANNOTATION_INITIAL_SCALE);
            assert_eq!(ksvc::get_str(&doc, &path), after);
        }
    }
}
