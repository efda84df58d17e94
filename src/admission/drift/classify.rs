//! PURE: what a decision would change in a stored KService, sorted into findings: the changed
//! paths ([`super::paths`]) each belong to one reason, and each reason says in words what it is.

use super::paths::{diff, pointer};
use super::{Drift, Finding, Reason};
use crate::admission::sidecars::Status as SidecarStatus;
use crate::admission::{Decision, ksvc};
use crate::json::Node;
use crate::keys;

/// Sort what `decision` would change in `before` into findings.
pub(super) fn classify(before: &Node, decision: &Decision) -> Drift {
    if !decision.allowed {
        let detail = decision
            .failure
            .clone()
            .unwrap_or_else(|| decision.message());
        return Drift::one(Reason::WouldReject, detail);
    }
    let Some(after) = decision
        .object
        .as_ref()
        .filter(|_| !decision.patch.is_empty())
    else {
        return Drift::default();
    };
    let mut changed = Vec::new();
    diff(Some(before), Some(after), &mut Vec::new(), &mut changed);
    // Only `other` names its paths: the other reasons say in words what they are.
    let mut other = Vec::new();
    let mut reasons = Vec::new();
    for path in &changed {
        let reason = reason_of(path, before);
        if reason == Reason::Other {
            other.push(pointer(path));
        }
        if !reasons.contains(&reason) {
            reasons.push(reason);
        }
    }
    reasons.sort();
    let new_revision = changed.iter().any(|p| p.len() >= 2 && p[..2] == TEMPLATE);
    let mut findings: Vec<Finding> = reasons
        .into_iter()
        .map(|reason| Finding {
            reason,
            detail: detail(reason, &other, before, after),
        })
        .collect();
    let template_name = ksvc::get_str(before, &["spec", "template", "metadata", "name"]);
    if let Some(name) = template_name.filter(|_| new_revision) {
        findings.push(Finding {
            reason: Reason::BlockedRevisionName,
            detail: format!(
                "spec.template.metadata.name is {name:?}: Knative refuses a changed template \
                 under the same Revision name; remove the name, or change it with the template"
            ),
        });
    }
    Drift {
        findings,
        new_revision,
    }
}

const TEMPLATE: [&str; 2] = ["spec", "template"];

/// Which reason a changed path belongs to.
fn reason_of(path: &[String], before: &Node) -> Reason {
    let tokens: Vec<&str> = path.iter().map(String::as_str).collect();
    let annotated = |key| ksvc::entry(before, ksvc::ANNOTATIONS, key).is_some();
    match tokens.as_slice() {
        ["metadata", "annotations", keys::ANNOTATION_SPEC_SHA]
            if !annotated(keys::ANNOTATION_SPEC_SHA) =>
        {
            Reason::MissingSpecSha
        }
        ["metadata", "annotations", keys::ANNOTATION_APP_MANAGED] => Reason::ManagedAnnotation,
        ["metadata", "labels", keys::LABEL_APP_MANAGED]
            if annotated(keys::ANNOTATION_APP_MANAGED) =>
        {
            Reason::ManagedAnnotation
        }
        ["metadata", "annotations", keys::ANNOTATION_SIDECAR_STATUS] => Reason::StaleSidecars,
        [
            "spec",
            "template",
            "spec",
            "containers",
            _,
            "env",
            keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN,
        ] => match endpoint_values(before).is_empty() {
            true => Reason::MissingEndpointEnv,
            false => Reason::StaleEndpointEnv,
        },
        ["spec", "template", "spec", "containers" | "volumes", ..] => Reason::StaleSidecars,
        _ => Reason::Other,
    }
}

/// The words of a finding: what is there and what admission would make of it.
fn detail(reason: Reason, other: &[String], before: &Node, after: &Node) -> String {
    match reason {
        Reason::MissingSpecSha => {
            let sha = ksvc::entry(after, ksvc::ANNOTATIONS, keys::ANNOTATION_SPEC_SHA);
            format!(
                "admission adds {}={:?}",
                keys::ANNOTATION_SPEC_SHA,
                sha.unwrap_or_default()
            )
        }
        Reason::MissingEndpointEnv => format!(
            "admission adds {}={:?}",
            keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN,
            endpoint_values(after).join(", ")
        ),
        Reason::StaleEndpointEnv => format!(
            "{} is {:?}; admission writes {:?}",
            keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN,
            endpoint_values(before).join(", "),
            endpoint_values(after).join(", ")
        ),
        Reason::StaleSidecars => sidecar_changes(before, after),
        Reason::ManagedAnnotation => format!(
            "the annotation {} becomes the label",
            keys::ANNOTATION_APP_MANAGED
        ),
        _ => other.join(", "),
    }
}

/// What the catalogue would do, template by template.
fn sidecar_changes(before: &Node, after: &Node) -> String {
    let (old, new) = (
        SidecarStatus::read(before).unwrap_or_default(),
        SidecarStatus::read(after).unwrap_or_default(),
    );
    let mut changes = Vec::new();
    for t in &new.templates {
        match old.templates.iter().find(|o| o.name == t.name) {
            None => changes.push(format!("add {}", t.name)),
            Some(o) if o != t => changes.push(format!("upgrade {}", t.name)),
            Some(_) => {}
        }
    }
    for o in &old.templates {
        if !new.templates.iter().any(|t| t.name == o.name) {
            changes.push(format!("remove {}", o.name));
        }
    }
    if old.handover != new.handover {
        changes.push("hand the serving port over".into());
    }
    match changes.is_empty() {
        true => "put back injected containers edited in place".into(),
        false => changes.join(", "),
    }
}

/// The values of every `INTERNAL_APP_ENDPOINT_PATTERN` in the containers (`valueFrom` for one
/// that has no value). What the parser or a sidecar template kept as text (an injected
/// container's env) is none of the webhook's own variable, and is not read into.
fn endpoint_values(doc: &Node) -> Vec<String> {
    ksvc::containers(doc)
        .iter()
        .filter_map(|c| match c {
            Node::Object(container) => match container.get("env") {
                Some(Node::Array(env)) => Some(env),
                _ => None,
            },
            _ => None,
        })
        .flatten()
        .filter_map(|e| match e {
            Node::Object(entry) => Some(entry),
            _ => None,
        })
        .filter(|e| {
            e.get("name").and_then(Node::as_str) == Some(keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN)
        })
        .map(|e| {
            e.get("value")
                .and_then(Node::as_str)
                .unwrap_or("valueFrom")
                .to_owned()
        })
        .collect()
}
