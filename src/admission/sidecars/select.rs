//! PURE: which sidecars a KService gets, checked against it before any edit.
//!
//! The catalogue's `default` templates apply to every KService; the `sidecar.flyte.org/inject`
//! annotation adds more by name, and `"none"` in it opts out of the defaults (`"none"` alone:
//! no sidecar at all; `"none,auth-proxy"`: only the auth proxy). An unknown name, a
//! sidecar container or volume name that the user's own already uses, or a user container
//! without the port Knative needs once sidecars join it, is a [`Violation`].

use crate::json::Node;

use super::inject::{Kind, Plan, Status};
use super::{Catalogue, Template};
use crate::admission::ksvc;
use crate::admission::validate::Violation;
use crate::keys;

fn violation(rule: &'static str, path: String, problem: String, fix: String) -> Violation {
    Violation {
        rule,
        path,
        problem,
        fix,
    }
}

fn inject_path() -> String {
    format!("metadata.annotations[{}]", keys::ANNOTATION_SIDECAR_INJECT)
}

/// Select the templates for `doc` and check them against it; every violation is listed.
pub fn plan<'c>(doc: &Node, catalogue: &'c Catalogue) -> Result<Plan<'c>, Vec<Violation>> {
    let mut out = Vec::new();
    let previous = Status::read(doc).unwrap_or_else(|err| {
        out.push(violation(
            "sidecar-status",
            format!("metadata.annotations[{}]", keys::ANNOTATION_SIDECAR_STATUS),
            format!("cannot be read ({err})"),
            "remove it together with the sidecar containers and volumes it listed; \
             the webhook writes it"
                .into(),
        ));
        Status::default()
    });
    let selected = select(doc, catalogue, &mut out);
    clashes(doc, catalogue, &selected, &previous, &mut out);
    serving_port(doc, &selected, &previous, &mut out);
    if out.is_empty() {
        Ok(Plan { selected, previous })
    } else {
        Err(out)
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
            "use names from the catalogue; \"none\" opts out of the defaults".into(),
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
    if !selected.is_empty() && !user.is_empty() && !user.iter().any(|c| declares_port(c)) {
        out.push(violation(
            "sidecar-port",
            "spec.template.spec.containers".into(),
            "declares no port; with sidecars Knative needs the serving container's port".into(),
            format!(
                "add ports: [{{containerPort: 8080}}] (your app's port) to your container, or opt \
                 out of sidecars with {}: \"none\"",
                keys::ANNOTATION_SIDECAR_INJECT
            ),
        ));
    }
}
