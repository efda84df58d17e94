//! PURE: the rules a KService must meet, as a list of violations a person can act on.
//!
//! Each violation says where (`path`), what is wrong (`problem`) and how to fix it (`fix`); one
//! response lists them all. Rules only read the object: no edits happen here.

use crate::json::Node;

use crate::admission::ksvc;
use crate::admission::naming::{self, DomainTemplate};
use crate::admission::stop;
use crate::admission::violation::{Operation, Violation, quoted, violation};
use crate::keys;

/// What the rules look at.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub operation: Operation,
    pub object: &'a Node<'a>,
    /// The stored object, on UPDATE.
    pub old_object: Option<&'a Node<'a>>,
    /// The namespace the object lives in (from the object, else from the request).
    pub namespace: &'a str,
    pub domain_template: &'a DomainTemplate,
}

/// Every rule the object breaks, in a stable order.
pub fn validate(input: &Input) -> Vec<Violation> {
    let mut out = Vec::new();
    shapes(input.object, &mut out);
    if !out.is_empty() {
        // Later rules read these fields; with the wrong shapes they would only add noise.
        return out;
    }
    identity(input, &mut out);
    names(input, &mut out);
    stopped_label(input.object, &mut out);
    stop::record_rules(input.operation, input.object, input.old_object, &mut out);
    containers(input.object, &mut out);
    out
}

/// The identity and stop rules on the object as it will be admitted, after every edit (`object`
/// is the edited object): whatever the edits did, they never produce an object these rules
/// refuse. A violation here names its rule and says it holds after the webhook's edits.
pub fn after_edits(input: &Input) -> Vec<Violation> {
    let mut out = Vec::new();
    identity(input, &mut out);
    stopped_label(input.object, &mut out);
    stop::admitted_record_rules(input.object, &mut out);
    for v in &mut out {
        v.problem = format!("after the webhook's edits: {}", v.problem);
    }
    out
}

/// Fields the webhook reads or edits must have the shape Kubernetes gives them.
fn shapes(doc: &Node, out: &mut Vec<Violation>) {
    let maps: [(&[&str], &str); 4] = [
        (&["metadata"], "metadata"),
        (ksvc::LABELS, "metadata.labels"),
        (ksvc::ANNOTATIONS, "metadata.annotations"),
        (
            ksvc::TEMPLATE_ANNOTATIONS,
            "spec.template.metadata.annotations",
        ),
    ];
    if !doc.is_object() {
        out.push(violation(
            "object",
            "object",
            "is not a JSON object",
            "send a serving.knative.dev/v1 Service",
        ));
        return;
    }
    for (path, shown) in maps {
        match ksvc::get(doc, path) {
            None | Some(Node::Null) => {}
            Some(Node::Object(map)) if path.len() > 1 => {
                if let Some((key, _)) = map.iter().find(|(_, v)| !v.is_string()) {
                    out.push(violation(
                        "object",
                        format!("{shown}[{key}]"),
                        "is not a string",
                        "quote the value",
                    ));
                }
            }
            Some(Node::Object(_)) => {}
            Some(_) => out.push(violation(
                "object",
                shown,
                "is not a map",
                "write it as key: value pairs",
            )),
        }
    }
    if !matches!(
        ksvc::get(doc, ksvc::CONTAINERS),
        None | Some(Node::Null) | Some(Node::Array(_))
    ) {
        out.push(violation(
            "object",
            "spec.template.spec.containers",
            "is not a list",
            "write it as a list of containers",
        ));
    }
    if let Err(err) = stop::restore_record(doc) {
        out.push(stop::unreadable(&err));
    }
    annotations_size(doc, out);
}

/// Kubernetes' own limit on an object's annotations, keys and values together: kube-apiserver
/// never stores more, so a review carrying more is not one it sends.
pub const MAX_ANNOTATIONS: usize = 256 * 1024;

fn annotations_size(doc: &Node, out: &mut Vec<Violation>) {
    let annotations = doc.get("metadata").and_then(|m| m.get("annotations"));
    let Some(annotations) = annotations.and_then(Node::as_object) else {
        return;
    };
    let size: usize = annotations
        .iter()
        .map(|(key, value)| key.len() + value.as_str().map_or(0, str::len))
        .sum();
    if size > MAX_ANNOTATIONS {
        out.push(violation(
            "object",
            "metadata.annotations",
            format!("hold {size} bytes, more than Kubernetes' limit of {MAX_ANNOTATIONS}"),
            "keep large data out of annotations (a ConfigMap, or the image)",
        ));
    }
}

fn names(input: &Input, out: &mut Vec<Violation>) {
    let doc = input.object;
    let name = ksvc::name(doc);
    let generate = ksvc::generate_name(doc);
    let managed = ksvc::identity(doc).is_some();
    if !name.is_empty() {
        if let Some(problem) = naming::dns1035_problem(name) {
            out.push(violation(
                "name",
                "metadata.name",
                format!("{} is not a DNS-1035 label: it {problem}", quoted(name)),
                "use at most 63 lower-case letters, digits and '-', starting with a letter",
            ));
            return;
        }
    } else if !generate.is_empty() && !managed {
        if let Some(problem) = naming::generate_name_problem(generate) {
            out.push(violation(
                "generate-name",
                "metadata.generateName",
                format!(
                    "{} is not a DNS-1035 prefix: it {problem}",
                    quoted(generate)
                ),
                "use at most 58 lower-case letters, digits and '-', starting with a letter",
            ));
            return;
        }
    } else if !managed {
        out.push(violation(
            "name",
            "metadata.name",
            "is required",
            "set metadata.name, or metadata.generateName for a generated name",
        ));
        return;
    }
    route_host(input, out);
}

/// Every DNS label of the route host must fit, with the name as it will be.
fn route_host(input: &Input, out: &mut Vec<Violation>) {
    let doc = input.object;
    let name = match (ksvc::name(doc), ksvc::identity(doc)) {
        ("", Some(id)) => naming::app_name(&id.project, &id.domain, &id.name).name,
        ("", None) => format!("{}xxxxx", ksvc::generate_name(doc)),
        (name, _) => name.to_string(),
    };
    if let Some(problem) = input.domain_template.host_problem(&name, input.namespace) {
        out.push(violation(
            "route-host",
            "metadata.name",
            format!("{} in namespace {} {problem}", quoted(&name), quoted(input.namespace)),
            "shorten the name (or the namespace) so every DNS label of the host has at most 63 characters",
        ));
    }
}

fn identity(input: &Input, out: &mut Vec<Violation>) {
    let doc = input.object;
    let labels = ksvc::identity_labels(doc);
    let present: Vec<&str> = labels
        .iter()
        .filter(|(_, v)| v.is_some())
        .map(|(k, _)| *k)
        .collect();
    let missing: Vec<&str> = labels
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| *k)
        .collect();
    if !present.is_empty() && !missing.is_empty() {
        out.push(violation(
            "identity-partial",
            "metadata.labels",
            format!("has {} but not {}", present.join(", "), missing.join(", ")),
            "set all three identity labels to make a managed app, or none of them",
        ));
    }
    for (key, value) in labels {
        let Some(value) = value else { continue };
        let problem = if value.is_empty() {
            Some("is empty".to_string())
        } else {
            naming::label_value_problem(value)
        };
        if let Some(problem) = problem {
            out.push(violation(
                "identity-value",
                format!("metadata.labels[{key}]"),
                format!("{} {problem}", quoted(value)),
                "use a valid label value: at most 63 letters, digits, '-', '_' or '.'",
            ));
        }
    }
    if let (Operation::Update, Some(old)) = (input.operation, input.old_object) {
        for ((key, new), (_, before)) in labels.iter().zip(ksvc::identity_labels(old)) {
            if *new != before {
                out.push(violation(
                    "identity-immutable",
                    format!("metadata.labels[{key}]"),
                    format!("changed from {} to {}", shown(before), shown(*new)),
                    "identity labels cannot change; create a new KService for a new identity",
                ));
            }
        }
    }
    if out.iter().any(|v| v.rule.starts_with("identity")) {
        return;
    }
    if let Some(id) = ksvc::identity(doc) {
        managed_name(input, &id, out);
    }
}

fn shown(value: Option<&str>) -> String {
    value.map_or_else(|| "absent".to_string(), quoted)
}

fn managed_name(input: &Input, id: &ksvc::Identity, out: &mut Vec<Violation>) {
    let want = naming::app_name(&id.project, &id.domain, &id.name);
    if let Some(problem) = naming::dns1035_problem(&want.name) {
        out.push(violation(
            "identity-name",
            format!("metadata.labels[{}]", keys::LABEL_APP_NAME),
            format!("app {} gives the name {:?}, which {problem}", id.app_id(), want.name),
            "use an app name, project and domain of lower-case letters, digits and '-', with a letter first",
        ));
        return;
    }
    let name = ksvc::name(input.object);
    if !name.is_empty() && name != want.name {
        out.push(violation(
            "identity-name",
            "metadata.name",
            format!(
                "is {} but app {} must be named {:?}",
                quoted(name),
                id.app_id(),
                want.name
            ),
            format!(
                "set metadata.name to {:?}, or leave it empty and the webhook sets it",
                want.name
            ),
        ));
    }
}

fn stopped_label(doc: &Node, out: &mut Vec<Violation>) {
    if let Some(value) = ksvc::entry(doc, ksvc::LABELS, keys::LABEL_APP_STOPPED)
        && value != "true"
        && value != "false"
    {
        out.push(violation(
            "stopped-value",
            format!("metadata.labels[{}]", keys::LABEL_APP_STOPPED),
            format!("is {}", quoted(value)),
            "use \"true\" to stop the app or \"false\" to run it",
        ));
    }
}

fn containers(doc: &Node, out: &mut Vec<Violation>) {
    let containers = ksvc::containers(doc);
    if containers.is_empty() {
        out.push(violation(
            "containers",
            "spec.template.spec.containers",
            "has no container",
            "add a container with at least an image",
        ));
    }
    for (i, c) in containers.iter().enumerate() {
        if !c.is_object() {
            out.push(violation(
                "containers",
                format!("spec.template.spec.containers[{i}]"),
                "is not a map",
                "write the container as key: value pairs",
            ));
        } else if !matches!(c.get("env"), None | Some(Node::Null) | Some(Node::Array(_))) {
            out.push(violation(
                "containers",
                format!("spec.template.spec.containers[{i}].env"),
                "is not a list",
                "write env as a list of name/value entries",
            ));
        }
    }
}
