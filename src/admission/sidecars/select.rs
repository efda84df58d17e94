//! PURE: which sidecars a KService gets, checked against it before any edit.
//!
//! The catalogue's `default` templates apply to every KService; the `sidecar.flyte.org/inject`
//! annotation adds more by name, and `"none"` in it opts out of the defaults (`"none"` alone:
//! no sidecar at all; `"none,auth-proxy"`: only the auth proxy). An unknown name, a
//! sidecar container or volume name that the user's own already uses, a user container
//! without the port Knative needs once sidecars join it, two fronting templates, or a KService
//! that cannot be fronted safely, is a [`Violation`]. While the catalogue cannot be loaded,
//! every KService that does not opt out is one: it may need a fronting sidecar (fail closed).

use crate::json::Node;

use super::fronting;
use super::handover::{Handover, Knative};
use super::inject::Plan;
use super::kind::Kind;
use super::record::Status;
use super::{Catalogue, Template};
use crate::admission::ksvc;
use crate::admission::violation::{Violation, violation};
use crate::keys;

fn inject_path() -> String {
    format!("metadata.annotations[{}]", keys::ANNOTATION_SIDECAR_INJECT)
}

/// Select the templates for `doc` and check them against it and against what the cluster's
/// Knative allows; every violation is listed.
pub fn plan<'c>(
    doc: &Node,
    catalogue: &'c Catalogue,
    knative: Knative,
) -> Result<Plan<'c>, Vec<Violation>> {
    let mut out = Vec::new();
    let previous = Status::read(doc).unwrap_or_else(|err| {
        out.push(violation(
            "sidecar-status",
            format!("metadata.annotations[{}]", keys::ANNOTATION_SIDECAR_STATUS),
            format!("cannot be read ({err})"),
            "remove it together with the sidecar containers and volumes it listed; \
             the webhook writes it",
        ));
        Status::default()
    });
    if let Some(reason) = catalogue.unavailable_reason()
        && let Some(refused) = unavailable(doc, reason)
    {
        out.push(refused);
        return Err(out);
    }
    let selected = select(doc, catalogue, &mut out);
    clashes(doc, catalogue, &selected, &previous, &mut out);
    let handover = match fronting(&selected, &mut out) {
        Some(t) => front(doc, t, &previous, knative, &mut out),
        None => {
            serving_port(doc, &selected, &previous, &mut out);
            None
        }
    };
    if out.is_empty() {
        Ok(Plan {
            selected,
            previous,
            handover,
        })
    } else {
        Err(out)
    }
}

/// Fail closed without a catalogue: only a KService that opts out of every sidecar passes (its
/// injected ones, and a handover, are then taken back as recorded).
fn unavailable(doc: &Node, reason: &str) -> Option<Violation> {
    let requested = ksvc::entry(doc, ksvc::ANNOTATIONS, keys::ANNOTATION_SIDECAR_INJECT);
    let only_none = requested.is_some_and(|r| {
        r.split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .all(|t| t.eq_ignore_ascii_case(keys::SIDECAR_INJECT_NONE))
            && !r.trim().is_empty()
    });
    (!only_none).then(|| {
        violation(
            "sidecar-catalogue",
            inject_path(),
            format!(
                "cannot be honoured: the webhook cannot load its sidecar catalogue ({reason}), \
                 so it cannot tell which sidecars this KService gets, and one of them may be a \
                 proxy that fronts your app (an auth proxy); it refuses the KService rather \
                 than admit it unprotected"
            ),
            format!(
                "ask the platform team to fix the sidecar catalogue (the webhook re-reads it \
                 and recovers by itself), or opt out of sidecars with {}: \"none\"",
                keys::ANNOTATION_SIDECAR_INJECT
            ),
        )
    })
}

/// The one fronting template among `selected`; two or more are a violation naming them all.
fn fronting<'c>(selected: &[&'c Template], out: &mut Vec<Violation>) -> Option<&'c Template> {
    let fronting: Vec<&Template> = selected
        .iter()
        .copied()
        .filter(|t| t.fronts.is_some())
        .collect();
    match fronting.as_slice() {
        [] => None,
        [one] => Some(one),
        many => {
            let names: Vec<String> = many.iter().map(|t| format!("{:?}", t.name)).collect();
            out.push(violation(
                "sidecar-fronting-twice",
                inject_path(),
                format!(
                    "selects the fronting sidecar templates {}; only one container can hold \
                     your app's serving port",
                    names.join(" and ")
                ),
                "select at most one fronting template (\"none\" drops the defaults)",
            ));
            None
        }
    }
}

/// The handover `t` needs, checked against the user's container and Knative's rules.
fn front(
    doc: &Node,
    t: &Template,
    previous: &Status,
    knative: Knative,
    out: &mut Vec<Violation>,
) -> Option<Handover> {
    let fronts = t.fronts.as_ref()?;
    match fronting::user_view(doc, previous) {
        Ok(view) => fronting::wanted(t, fronts, &view, knative, out),
        Err(v) => {
            out.push(v);
            None
        }
    }
}

/// The defaults (unless the annotation says `none`) plus the annotation's names.
fn select<'c>(doc: &Node, catalogue: &'c Catalogue, out: &mut Vec<Violation>) -> Vec<&'c Template> {
    let requested = ksvc::entry(doc, ksvc::ANNOTATIONS, keys::ANNOTATION_SIDECAR_INJECT);
    let tokens: Vec<&str> = requested
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect();
    // "none" drops the defaults; names listed with it are still injected.
    let (opt_out, tokens): (Vec<&str>, Vec<&str>) = tokens
        .into_iter()
        .partition(|t| t.eq_ignore_ascii_case(keys::SIDECAR_INJECT_NONE));
    let mut names: Vec<&str> = if opt_out.is_empty() {
        catalogue
            .default_names()
            .iter()
            .map(String::as_str)
            .collect()
    } else {
        Vec::new()
    };
    let mut unknown = Vec::new();
    for token in tokens {
        match catalogue.get(token) {
            None => unknown.push(format!("{token:?}")),
            Some(_) if !names.contains(&token) => names.push(token),
            Some(_) => {}
        }
    }
    if !unknown.is_empty() {
        let known: Vec<String> = catalogue.names().map(|n| format!("{n:?}")).collect();
        let have = if known.is_empty() {
            "the sidecar catalogue is empty".to_string()
        } else {
            format!("the sidecar catalogue has {}", known.join(", "))
        };
        out.push(violation(
            "sidecar-unknown",
            inject_path(),
            format!(
                "names unknown sidecar template(s) {}; {have}",
                unknown.join(", ")
            ),
            "use names from the catalogue; \"none\" opts out of the defaults",
        ));
    }
    names.iter().filter_map(|n| catalogue.get(n)).collect()
}

/// A sidecar's container or volume name that one of the user's own already uses.
fn clashes(
    doc: &Node,
    catalogue: &Catalogue,
    selected: &[&Template],
    previous: &Status,
    out: &mut Vec<Violation>,
) {
    for kind in Kind::ALL {
        let items = ksvc::get(doc, kind.path()).and_then(Node::as_array);
        for (i, item) in items.into_iter().flatten().enumerate() {
            let name = item.get("name").and_then(Node::as_str).unwrap_or_default();
            if name.is_empty() || kind.listed(previous, name) {
                continue;
            }
            for t in selected {
                if kind.of_template(t).iter().any(|n| n == name) {
                    out.push(clash(kind, i, name, t, catalogue));
                }
            }
        }
    }
}

fn clash(
    kind: Kind,
    index: usize,
    name: &str,
    template: &Template,
    catalogue: &Catalogue,
) -> Violation {
    let opt_out = if catalogue.default_names().contains(&template.name) {
        format!(
            "opt out of the default sidecars with {}: \"none\"",
            keys::ANNOTATION_SIDECAR_INJECT
        )
    } else {
        format!(
            "leave {:?} out of {}",
            template.name,
            keys::ANNOTATION_SIDECAR_INJECT
        )
    };
    violation(
        "sidecar-clash",
        format!("{}[{index}].name", kind.path().join(".")),
        format!(
            "your {kind} {name:?} clashes with {kind} {name:?} of sidecar template {:?}",
            template.name,
            kind = kind.label(),
        ),
        format!("rename your {}, or {opt_out}", kind.label()),
    )
}

/// With sidecars, Knative needs the user's container to declare the revision's one port.
fn serving_port(doc: &Node, selected: &[&Template], previous: &Status, out: &mut Vec<Violation>) {
    let declares_port = |c: &Node| {
        c.get("ports")
            .and_then(Node::as_array)
            .is_some_and(|p| !p.is_empty())
    };
    let user: Vec<&Node> = ksvc::containers(doc)
        .iter()
        .filter(|c| !Kind::Container.listed(previous, ksvc::container_name(c)))
        .collect();
    // A port handed over to a fronting sidecar that no longer fronts comes back.
    let handed_back = previous.handover.as_ref().is_some_and(|h| {
        h.ports.is_some() && user.iter().any(|c| ksvc::container_name(c) == h.from)
    });
    if !selected.is_empty()
        && !user.is_empty()
        && !handed_back
        && !user.iter().any(|c| declares_port(c))
    {
        out.push(violation(
            "sidecar-port",
            "spec.template.spec.containers",
            "declares no port; with sidecars Knative needs the serving container's port",
            format!(
                "add ports: [{{containerPort: 8080}}] (your app's port) to your container, or opt \
                 out of sidecars with {}: \"none\"",
                keys::ANNOTATION_SIDECAR_INJECT
            ),
        ));
    }
}
