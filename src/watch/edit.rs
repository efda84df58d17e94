//! PURE: surgical edits of a raw Knative Service's JSON — the stop edits, the stop label, and a
//! partial update where every field is optional (seed 002's update configuration).
//!
//! Each edit converges (applying it twice is a no-op), creates missing parents, leaves every other
//! field alone, and returns whether it changed anything. Must never do I/O.

use serde_json::{Map, Value};

use crate::admission::stop;
use crate::json::Node;
use crate::json::edit::Editor;
use crate::keys;

/// Edit a raw Service in place as admission stops it (label `networking.knative.dev/visibility:
/// cluster-local`, template annotation `autoscaling.knative.dev/min-scale: "0"`, and the
/// `flyte.org/stop-restore` record a start needs), for when the webhook was bypassed. The loop
/// does not know whether the cluster allows zero initial scale, so it never sets `initial-scale`.
/// Returns whether anything changed.
pub fn apply_stop_edits(ksvc: &mut Value) -> bool {
    let mut node = Node::from_json(ksvc.take());
    let record = stop::restore_record(&node).ok().flatten();
    let mut ed = Editor::new(&mut node);
    stop::converge(&mut ed, true, record, false);
    let changed = !ed.into_ops().is_empty();
    *ksvc = node.to_json();
    changed
}

/// Set `path…/key = value` on a JSON object, creating (or replacing non-object) parents.
pub fn set_in(root: &mut Value, path: &[&str], key: &str, value: &str) -> bool {
    let mut node = root;
    for segment in path {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        let Value::Object(map) = node else {
            return false;
        };
        node = map
            .entry(*segment)
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !node.is_object() {
        *node = Value::Object(Map::new());
    }
    let Value::Object(map) = node else {
        return false;
    };
    let new = Value::String(value.to_owned());
    if map.get(key) == Some(&new) {
        return false;
    }
    map.insert(key.to_owned(), new);
    true
}

/// Remove `path…/key`; returns whether it was there.
pub fn remove_in(root: &mut Value, path: &[&str], key: &str) -> bool {
    let mut node = root;
    for segment in path {
        match node.get_mut(*segment) {
            Some(next) => node = next,
            None => return false,
        }
    }
    node.as_object_mut()
        .is_some_and(|m| m.remove(key).is_some())
}

/// Set (`true`) or remove (`false`) the stop label `flyte.org/app-stopped`.
pub fn set_stopped(ksvc: &mut Value, stopped: bool) -> bool {
    if stopped {
        set_in(
            ksvc,
            &["metadata", "labels"],
            keys::LABEL_APP_STOPPED,
            "true",
        )
    } else {
        remove_in(ksvc, &["metadata", "labels"], keys::LABEL_APP_STOPPED)
    }
}

/// A partial update of an app: `None` leaves a field unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppUpdate {
    /// The image of the first (serving) container.
    pub image: Option<String>,
    /// Template annotation `autoscaling.knative.dev/min-scale`.
    pub min_scale: Option<u32>,
    /// Template annotation `autoscaling.knative.dev/max-scale` (0 = unlimited in Knative).
    pub max_scale: Option<u32>,
}

/// Why an update cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("the service has no container at spec.template.spec.containers[0] to set the image on")]
    NoContainer,
    #[error("max-scale {max} is below min-scale {min}; raise --max-scale or use 0 for unlimited")]
    MaxBelowMin { min: u32, max: u32 },
}

impl AppUpdate {
    /// Whether no field is given.
    pub fn is_empty(&self) -> bool {
        self.image.is_none() && self.min_scale.is_none() && self.max_scale.is_none()
    }

    /// Apply the given fields to a raw Service; returns whether anything changed.
    pub fn apply(&self, ksvc: &mut Value) -> Result<bool, Error> {
        const ANN: [&str; 4] = ["spec", "template", "metadata", "annotations"];
        let current = |v: &Value, key: &str| {
            v.pointer(&format!(
                "/spec/template/metadata/annotations/{}",
                key.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<u32>().ok())
        };
        let min = self
            .min_scale
            .or_else(|| current(ksvc, keys::ANNOTATION_MIN_SCALE));
        let max = self
            .max_scale
            .or_else(|| current(ksvc, keys::ANNOTATION_MAX_SCALE));
        if let (Some(min), Some(max)) = (min, max)
            && max != 0
            && max < min
        {
            return Err(Error::MaxBelowMin { min, max });
        }
        let mut changed = false;
        if let Some(image) = &self.image {
            let container = ksvc
                .pointer_mut("/spec/template/spec/containers/0")
                .and_then(Value::as_object_mut)
                .ok_or(Error::NoContainer)?;
            if container.get("image").and_then(Value::as_str) != Some(image) {
                container.insert("image".into(), Value::String(image.clone()));
                changed = true;
            }
        }
        if let Some(min) = self.min_scale {
            changed |= set_in(ksvc, &ANN, keys::ANNOTATION_MIN_SCALE, &min.to_string());
        }
        if let Some(max) = self.max_scale {
            changed |= set_in(ksvc, &ANN, keys::ANNOTATION_MAX_SCALE, &max.to_string());
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn svc() -> Value {
        json!({"metadata": {"name": "app", "labels": {"keep": "me"}},
               "spec": {"template": {"metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1"}},
                                     "spec": {"containers": [{"image": "old", "futureField": 1}]}}}})
    }

    #[test]
    fn stop_label_round_trips() {
        let mut v = svc();
        assert!(set_stopped(&mut v, true));
        assert!(!set_stopped(&mut v, true));
        assert_eq!(v["metadata"]["labels"]["flyte.org/app-stopped"], "true");
        assert!(set_stopped(&mut v, false));
        assert!(!set_stopped(&mut v, false));
        assert_eq!(v, svc());
    }

    #[test]
    fn update_changes_only_given_fields() {
        let cases = [
            (AppUpdate::default(), false),
            (
                AppUpdate {
                    image: Some("new".into()),
                    ..Default::default()
                },
                true,
            ),
            (
                AppUpdate {
                    image: Some("old".into()),
                    ..Default::default()
                },
                false,
            ),
            (
                AppUpdate {
                    min_scale: Some(1),
                    ..Default::default()
                },
                false,
            ),
            (
                AppUpdate {
                    max_scale: Some(4),
                    ..Default::default()
                },
                true,
            ),
            (
                AppUpdate {
                    min_scale: Some(2),
                    max_scale: Some(0),
                    image: None,
                },
                true,
            ),
        ];
        for (update, want) in cases {
            let mut v = svc();
            assert_eq!(update.apply(&mut v).unwrap(), want, "{update:?}");
            assert_eq!(
                v["spec"]["template"]["spec"]["containers"][0]["futureField"],
                1
            );
            assert_eq!(v["metadata"]["labels"]["keep"], "me");
            let once = v.clone();
            assert!(!update.apply(&mut v).unwrap(), "idempotent: {update:?}");
            assert_eq!(v, once);
        }
    }

    #[test]
    fn update_rejects_max_below_min_and_missing_containers() {
        let mut v = svc();
        let bad = AppUpdate {
            max_scale: Some(0),
            min_scale: Some(3),
            image: None,
        };
        assert!(bad.apply(&mut v).is_ok(), "0 is unlimited");
        let bad = AppUpdate {
            max_scale: Some(2),
            min_scale: None,
            image: None,
        };
        assert!(bad.apply(&mut svc()).unwrap());
        let bad = AppUpdate {
            max_scale: Some(2),
            min_scale: Some(3),
            image: None,
        };
        assert_eq!(
            bad.apply(&mut svc()),
            Err(Error::MaxBelowMin { min: 3, max: 2 })
        );
        let mut empty = json!({"spec": {}});
        let image = AppUpdate {
            image: Some("x".into()),
            ..Default::default()
        };
        assert_eq!(image.apply(&mut empty), Err(Error::NoContainer));
    }
}
