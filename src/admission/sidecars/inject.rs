//! PURE: converging a KService's containers and volumes on the selected sidecars, and taking
//! them away again.
//!
//! What the webhook injected is recorded in the `sidecar.flyte.org/status` annotation (like
//! Istio's `sidecar.istio.io/status`): per template its name, hash, container and volume names.
//! Only what that record lists is ever replaced or removed; the user's containers and volumes are
//! never touched. An injected copy whose template hash is unchanged is left exactly as it is (so
//! fields Knative defaulted into it stay, and the revision template does not change) unless it
//! was edited in place: then it is put back where it stands, as the template fills in now (the
//! spec SHA covers only the user's containers, so an edit kept would be invisible to it). A
//! changed template's copy is removed and the new one appended after the user's containers. A fronting
//! template's serving port is handed over (and back) by `handover.rs`, and recorded beside.

use super::edited::{edited, put_back_if_edited};
use super::handover::{self, Handover};
use super::kind::Kind;
use super::record::{Injected, Status};
use super::{Params, Template};
use crate::admission::ksvc;
use crate::json::Node;
use crate::json::edit::Editor;
use crate::keys;

/// What [`converge`] will do: the templates selected for a KService and what it carries now.
#[derive(Debug, Clone, Default)]
pub struct Plan<'c> {
    /// The selected templates, defaults first, then the annotation's extra names in its order.
    pub selected: Vec<&'c Template>,
    /// The status record the object carries.
    pub previous: Status,
    /// The serving port's handover to the selected fronting template, if one is selected.
    pub handover: Option<Handover>,
}

/// Converge `ed`'s object on `plan`: drop stale or deselected injected copies, append missing
/// ones after the user's containers and volumes, and record the result. Returns a warning for
/// each template replaced or removed, so the user knows why the revision changed.
pub fn converge(ed: &mut Editor, plan: &Plan, namespace: &str) -> Vec<String> {
    let mut params = Params::of(ed.doc(), namespace);
    if let Some(h) = &plan.handover {
        params.app_port = h.app_port.to_string();
    }
    let digest = if plan.selected.iter().any(|t| t.parameterised()) {
        params.digest()
    } else {
        String::new()
    };
    let wanted: Vec<Injected> = plan
        .selected
        .iter()
        .map(|t| Injected::of(t, &digest))
        .collect();
    // A template recorded exactly as it would be injected now is current: its copy stays as is.
    // A fronting template's copy also carries the handed-over port: a new handover refills it.
    let handed_again = plan.previous.handover != plan.handover;
    let fronting = |name: &str| {
        [&plan.previous.handover, &plan.handover]
            .iter()
            .any(|h| h.as_ref().is_some_and(|h| h.template == name))
    };
    let current: Vec<&Injected> = wanted
        .iter()
        .filter(|w| plan.previous.templates.contains(w) && !(handed_again && fronting(&w.name)))
        .collect();
    let mut removed_volume = false;
    for kind in Kind::ALL {
        let stale: Vec<&str> = plan
            .previous
            .templates
            .iter()
            .flat_map(|r| kind.of_record(r))
            .map(String::as_str)
            .filter(|n| {
                !current
                    .iter()
                    .any(|w| kind.of_record(w).iter().any(|c| c == n))
            })
            .collect();
        let removed = remove_named(ed, kind.path(), &stale);
        removed_volume |= removed && kind == Kind::Volume;
    }
    if let Some(previous) = plan.previous.handover.as_ref().filter(|_| handed_again) {
        handover::undo(ed, previous);
    }
    if let Some(h) = &plan.handover {
        handover::apply(ed, h);
    }
    let mut warnings = Vec::new();
    for t in &plan.selected {
        let kept = current.iter().any(|w| w.name == t.name);
        for kind in Kind::ALL {
            let put_back = add_or_put_back(ed, kind, t, &params, plan.handover.as_ref(), kept);
            warnings.extend(put_back.into_iter().map(|name| edited(kind, name, &t.name)));
        }
    }
    if removed_volume {
        drop_empty_list(ed, ksvc::VOLUMES);
    }
    warnings.extend(changes(&plan.previous, &wanted));
    warnings.extend(handed(&plan.previous, plan.handover.as_ref()));
    write_status(
        ed,
        &Status {
            templates: wanted,
            handover: plan.handover.clone(),
        },
    );
    warnings
}

/// A warning when the serving port moved on a KService that had been fronted.
fn handed(previous: &Status, now: Option<&Handover>) -> Option<String> {
    let before = previous.handover.as_ref()?;
    match now {
        None => Some(format!(
            "sidecar template {:?} no longer fronts your app: the serving port went back to \
             container {:?}",
            before.template, before.from
        )),
        Some(h) if h != before => Some(format!(
            "the serving port was handed over again, to container {:?} of sidecar template {:?} \
             (your port, probes or the fronting template changed)",
            h.container, h.template
        )),
        Some(_) => None,
    }
}

fn changes(previous: &Status, wanted: &[Injected]) -> Vec<String> {
    previous
        .templates
        .iter()
        .filter_map(|r| match wanted.iter().find(|w| w.name == r.name) {
            Some(w) if w.hash != r.hash => Some(format!(
                "sidecar template {:?} changed in the catalogue: its containers were replaced",
                r.name
            )),
            Some(w) if w != r => Some(format!(
                "sidecar template {:?} was filled in again with the KService's current name",
                r.name
            )),
            Some(_) => None,
            None => Some(format!(
                "sidecar template {:?} is no longer selected: its containers were removed",
                r.name
            )),
        })
        .collect()
}

/// Append each of `t`'s items of `kind` that the object does not hold yet, filled from `params`;
/// the container a handover names gets the serving port. When `kept` (the template's copy is
/// current), a copy that is no longer as injected — edited in place — is put back where it is.
/// Returns the names put back.
fn add_or_put_back<'t>(
    ed: &mut Editor,
    kind: Kind,
    t: &'t Template,
    params: &Params,
    handover: Option<&Handover>,
    kept: bool,
) -> Vec<&'t str> {
    let (names, items) = match kind {
        Kind::Container => (&t.container_names, &t.container_items),
        Kind::Volume => (&t.volume_names, &t.volume_items),
    };
    let mut put_back = Vec::new();
    for (name, item) in names.iter().zip(items) {
        let mut filled = item.fill(params);
        if let Some(h) = handover
            .filter(|h| kind == Kind::Container && h.template == t.name && h.container == *name)
            && let Some(container) = filled.as_object_mut()
        {
            container.insert("ports", h.serving_ports());
        }
        match ksvc::position(ed.doc(), kind.path(), name) {
            None => ed.push(kind.path(), filled),
            Some(at) if kept && put_back_if_edited(ed, kind, at, filled) => {
                put_back.push(name.as_str());
            }
            Some(_) => {}
        }
    }
    put_back
}

/// Remove every item of the list at `path` named in `names`; whether any was removed.
fn remove_named(ed: &mut Editor, path: &[&str], names: &[&str]) -> bool {
    let Some(items) = ksvc::get(ed.doc(), path).and_then(Node::as_array) else {
        return false;
    };
    let doomed: Vec<usize> = items
        .iter()
        .enumerate()
        .filter(|(_, v)| {
            v.get("name")
                .and_then(Node::as_str)
                .is_some_and(|n| names.contains(&n))
        })
        .map(|(i, _)| i)
        .collect();
    // Later indexes first, so the earlier ones stay valid.
    for i in doomed.iter().rev() {
        let at = i.to_string();
        ed.remove(&[path, &[at.as_str()]].concat());
    }
    !doomed.is_empty()
}

/// A list the webhook emptied was created by it: empty means absent.
fn drop_empty_list(ed: &mut Editor, path: &[&str]) {
    if ksvc::get(ed.doc(), path)
        .and_then(Node::as_array)
        .is_some_and(Vec::is_empty)
    {
        ed.remove(path);
    }
}

fn write_status(ed: &mut Editor, status: &Status) {
    let path = [ksvc::ANNOTATIONS, &[keys::ANNOTATION_SIDECAR_STATUS]].concat();
    if status.templates.is_empty() && status.handover.is_none() {
        ed.remove(&path);
    } else {
        let text = serde_json::to_string(status).unwrap_or_default();
        ed.set(&path, Node::from(text));
    }
}

/// Remove everything the status record lists, and the record. Returns `false` (and changes
/// nothing) when the record cannot be read.
pub fn strip(ed: &mut Editor) -> bool {
    let Ok(status) = Status::read(ed.doc()) else {
        return false;
    };
    strip_recorded(ed, &status);
    true
}

/// [`strip`] with `status`, the record the object carries, already read.
pub fn strip_recorded(ed: &mut Editor, status: &Status) {
    if let Some(h) = &status.handover {
        handover::undo(ed, h);
    }
    for kind in Kind::ALL {
        let names: Vec<&str> = status
            .templates
            .iter()
            .flat_map(|r| kind.of_record(r))
            .map(String::as_str)
            .collect();
        if remove_named(ed, kind.path(), &names) && kind == Kind::Volume {
            drop_empty_list(ed, ksvc::VOLUMES);
        }
    }
    ed.remove(&[ksvc::ANNOTATIONS, &[keys::ANNOTATION_SIDECAR_STATUS]].concat());
}
