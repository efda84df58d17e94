//! PURE: stop and start through the `flyte.org/app-stopped` label.
//!
//! Stopping sets the Service label `networking.knative.dev/visibility: cluster-local` and the
//! template annotation `autoscaling.knative.dev/min-scale: "0"` (plus `initial-scale: "0"` when
//! the cluster allows zero initial scale). What each key held before — a value, or nothing — is
//! recorded in the `flyte.org/stop-restore` annotation, so starting again restores exactly what
//! the user had. Edits go through [`Editor`], so an object already in the right state yields no
//! operation and the template (hence the Knative revision) changes only when it must.

use std::collections::BTreeMap;

use crate::json::Node;
use serde::{Deserialize, Serialize};

use crate::admission::ksvc;
use crate::json::edit::Editor;
use crate::keys;

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

/// The restore record of `doc`: `Ok(None)` when there is none, `Err` when it is not ours to read.
pub fn restore_record(doc: &Node) -> Result<Option<Restore>, serde_json::Error> {
    ksvc::entry(doc, ksvc::ANNOTATIONS, keys::ANNOTATION_STOP_RESTORE)
        .map(serde_json::from_str)
        .transpose()
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
