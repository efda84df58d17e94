//! PURE: surgical edits of a raw Knative Service's JSON — the stop edits, the stop label, and a
//! partial update where every field is optional, as the platform's update configuration is.
//!
//! Every edit goes through the admission [`Editor`], so the loop, the `app` CLI and admission
//! share one set of path rules. Each edit converges (applying it twice is a no-op), creates
//! missing parents, leaves every other field alone, and returns whether it changed anything.
//! Must never do I/O.

use serde_json::Value;

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
    edit(ksvc, |ed| {
        let record = stop::restore_record(ed.doc()).ok().flatten();
        stop::converge(ed, true, record, false);
        Ok::<(), std::convert::Infallible>(())
    })
    .unwrap_or(false)
}

/// Run `edits` through the admission [`Editor`] on a raw Service: the same path rules (JSON
/// pointer escaping, missing parents created, a parent of another type left alone) and the same
/// convergence as admission. Returns whether anything changed; on an error nothing is.
fn edit<E>(
    ksvc: &mut Value,
    edits: impl FnOnce(&mut Editor<'_, 'static>) -> Result<(), E>,
) -> Result<bool, E> {
    let mut node = Node::from_json(ksvc.take());
    let mut ed = Editor::new(&mut node);
    let outcome = edits(&mut ed);
    let changed = outcome.is_ok() && !ed.into_patch().is_empty();
    *ksvc = node.to_json();
    outcome.map(|()| changed)
}

/// The value at `path`: map keys, and indices in arrays.
fn at_path<'n>(doc: &'n Node<'_>, path: &[&str]) -> Option<&'n Node<'n>> {
    path.iter().try_fold(doc, |node, token| match node {
        Node::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => node.get(token),
    })
}

fn text(value: &str) -> Node<'static> {
    Node::String(value.to_owned().into())
}

/// Set (`true`) or remove (`false`) the stop label `flyte.org/app-stopped`.
pub fn set_stopped(ksvc: &mut Value, stopped: bool) -> bool {
    const AT: [&str; 3] = ["metadata", "labels", keys::LABEL_APP_STOPPED];
    let result: Result<bool, Error> = edit(ksvc, |ed| {
        match stopped {
            true => ed.set(&AT, text("true")),
            false => ed.remove(&AT),
        }
        Ok(())
    });
    result.unwrap_or(false)
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
        const CONTAINER: [&str; 5] = ["spec", "template", "spec", "containers", "0"];
        edit(ksvc, |ed| {
            let scale = |key: &str| {
                let at = [&ANN[..], &[key]].concat();
                at_path(ed.doc(), &at)
                    .and_then(Node::as_str)
                    .and_then(|s| s.parse::<u32>().ok())
            };
            let min = self.min_scale.or_else(|| scale(keys::ANNOTATION_MIN_SCALE));
            let max = self.max_scale.or_else(|| scale(keys::ANNOTATION_MAX_SCALE));
            if let (Some(min), Some(max)) = (min, max)
                && max != 0
                && max < min
            {
                return Err(Error::MaxBelowMin { min, max });
            }
            if let Some(image) = &self.image {
                if !at_path(ed.doc(), &CONTAINER).is_some_and(Node::is_object) {
                    return Err(Error::NoContainer);
                }
                ed.set(&[&CONTAINER[..], &["image"]].concat(), text(image));
            }
            for (key, value) in [
                (keys::ANNOTATION_MIN_SCALE, self.min_scale),
                (keys::ANNOTATION_MAX_SCALE, self.max_scale),
            ] {
                if let Some(n) = value {
                    ed.set(&[&ANN[..], &[key]].concat(), text(&n.to_string()));
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
#[path = "edit_tests.rs"]
mod tests;
