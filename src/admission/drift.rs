//! PURE: drift — what admission would change in a KService that is already stored, were it
//! written again unchanged.
//!
//! [`drift`] runs the admission decision on an UPDATE whose object and stored object are both
//! the stored KService, sent by its last writer (Knative's `serving.knative.dev/lastModifier`
//! annotation, so a platform writer's spec SHA is honoured as on any of its writes), and sorts
//! what the decision would change into the closed set of [`Reason`]s. It also says whether
//! converging would change `spec.template`: then Knative makes a new Revision and new pods.
//! The watch loop keeps one for every cached KService; `ksvc-webhook drift` computes it from a
//! file or a cluster. Never writes, never reads a clock.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::sidecars::Status as SidecarStatus;
use super::writers::UserInfo;
use super::{Decision, GroupVersionKind, Policy, Request, decide, ksvc, skim};
use crate::json::{Map, Node, parse};
use crate::keys;

/// The namespaces the webhook's `namespaceSelector` never matches
/// (`manifests/base/mutatingwebhookconfiguration.yaml`; `tests/manifests.rs` holds the two
/// together): a KService there is never admitted.
pub const EXCLUDED_NAMESPACES: [&str; 3] = ["kube-system", "knative-serving", "ksvc-system"];

/// Why a stored KService is not what admission would make of it today. A closed set: each is a
/// label value of `ksvc_webhook_drift_apps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// No `flyte.org/spec-sha` annotation.
    MissingSpecSha,
    /// No `INTERNAL_APP_ENDPOINT_PATTERN` in the app's container.
    MissingEndpointEnv,
    /// An `INTERNAL_APP_ENDPOINT_PATTERN` other than the one admission writes today.
    StaleEndpointEnv,
    /// The catalogue would add, upgrade, put back or remove a sidecar.
    StaleSidecars,
    /// The old `flyte.org/app-managed` annotation instead of the label.
    ManagedAnnotation,
    /// Admission would change anything else; the detail names the paths.
    Other,
    /// Admission would refuse the object today; the detail holds the violations.
    WouldReject,
    /// A namespace the webhook does not serve.
    Excluded,
    /// Drifted in `spec.template`, whose `metadata.name` is set: Knative refuses a changed
    /// template under the same Revision name.
    BlockedRevisionName,
}

impl Reason {
    /// Every reason, in report order.
    pub const ALL: [Reason; 9] = [
        Reason::MissingSpecSha,
        Reason::MissingEndpointEnv,
        Reason::StaleEndpointEnv,
        Reason::StaleSidecars,
        Reason::ManagedAnnotation,
        Reason::Other,
        Reason::WouldReject,
        Reason::Excluded,
        Reason::BlockedRevisionName,
    ];

    /// The reason as the report and the metric label spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::MissingSpecSha => "missing-spec-sha",
            Reason::MissingEndpointEnv => "missing-endpoint-env",
            Reason::StaleEndpointEnv => "stale-endpoint-env",
            Reason::StaleSidecars => "stale-sidecars",
            Reason::ManagedAnnotation => "managed-annotation",
            Reason::Other => "other",
            Reason::WouldReject => "would-reject",
            Reason::Excluded => "excluded",
            Reason::BlockedRevisionName => "blocked-revision-name",
        }
    }

    /// Whether writing the KService again through admission would fix it.
    pub fn fixable(self) -> bool {
        !matches!(
            self,
            Reason::WouldReject | Reason::Excluded | Reason::BlockedRevisionName
        )
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One reason, and what exactly is behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub reason: Reason,
    pub detail: String,
}

/// The drift of one KService: every reason (none when admission would change nothing), and
/// whether converging it would change `spec.template`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drift {
    /// In [`Reason::ALL`] order, each reason at most once.
    pub findings: Vec<Finding>,
    /// Converging would change `spec.template`: a new Revision and new pods.
    pub new_revision: bool,
}

impl Drift {
    /// A drift of one reason.
    pub fn one(reason: Reason, detail: String) -> Self {
        Self {
            findings: vec![Finding { reason, detail }],
            new_revision: false,
        }
    }

    /// The reasons, in order.
    pub fn reasons(&self) -> impl Iterator<Item = Reason> + '_ {
        self.findings.iter().map(|f| f.reason)
    }

    /// Whether the KService is behind admission: any reason but [`Reason::Excluded`] (a
    /// namespace the webhook does not serve has nothing to catch up with).
    pub fn drifted(&self) -> bool {
        self.reasons().any(|r| r != Reason::Excluded)
    }
}

/// A stored object that cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("the stored KService is not JSON: {0}")]
    Unreadable(String),
    #[error("the stored KService is not a JSON object")]
    NotAnObject,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a KService in `namespace` is never admitted, if it is not: a namespace the selector
/// excludes by name, or one whose `ksvc-webhook.flyte.org/inject` label (`inject`, when the
/// namespace is known) opts it out.
pub fn excluded(namespace: &str, inject: Option<&str>) -> Option<String> {
    if EXCLUDED_NAMESPACES.contains(&namespace) {
        return Some(format!(
            "namespace {namespace:?} is never served: the webhook's namespaceSelector excludes {}",
            EXCLUDED_NAMESPACES.join(", ")
        ));
    }
    (inject == Some(keys::NAMESPACE_INJECT_DISABLED)).then(|| {
        format!(
            "namespace {namespace:?} is labelled {}={}",
            keys::LABEL_NAMESPACE_INJECT,
            keys::NAMESPACE_INJECT_DISABLED
        )
    })
}

/// The drift of `stored`, a KService's JSON text as the API server stores it, under `policy`.
/// `inject` is its namespace's `ksvc-webhook.flyte.org/inject` label, when known.
pub fn drift(stored: &str, inject: Option<&str>, policy: &Policy) -> Result<Drift> {
    let object = read(stored)?;
    let namespace = ksvc::namespace(&object).to_owned();
    if let Some(why) = excluded(&namespace, inject) {
        return Ok(Drift::one(Reason::Excluded, why));
    }
    let username = ksvc::entry(&object, ksvc::ANNOTATIONS, keys::ANNOTATION_LAST_MODIFIER)
        .unwrap_or_default()
        .to_owned();
    let before = object.clone();
    let request = Request {
        uid: "drift".into(),
        kind: Some(GroupVersionKind {
            group: "serving.knative.dev".into(),
            version: "v1".into(),
            kind: "Service".into(),
        }),
        sub_resource: None,
        operation: "UPDATE".into(),
        namespace: Some(namespace),
        name: Some(ksvc::name(&object).to_owned()),
        old_object: Some(object.clone()),
        object: Some(object),
        dry_run: None,
        user_info: UserInfo {
            username,
            groups: Vec::new(),
        },
    };
    Ok(classify(&before, &decide(request, policy)))
}

/// `text` as a review's object is read: the skimming parser with admission's table, or
/// `serde_json` for what that parser refuses. The stored object stands for both the object and
/// the old object of the review: this table builds everything the old object's does.
fn read(text: &str) -> Result<Node<'_>> {
    let node = match parse::parse(text, &skim::OBJECT, "stored") {
        Ok(node) => node,
        Err(parse::Refused) => serde_json::from_str::<serde_json::Value>(text)
            .map(Node::from_json)
            .map_err(|e| Error::Unreadable(e.to_string()))?,
    };
    match node {
        Node::Object(_) => Ok(node),
        _ => Err(Error::NotAnObject),
    }
}

/// Sort what `decision` would change in `before` into findings.
fn classify(before: &Node, decision: &Decision) -> Drift {
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
    let mut by_reason: BTreeMap<Reason, Vec<String>> = BTreeMap::new();
    for path in &changed {
        let reason = reason_of(path, before);
        by_reason.entry(reason).or_default().push(pointer(path));
    }
    let new_revision = changed
        .iter()
        .any(|p| p.starts_with(&TEMPLATE.map(String::from)));
    let mut findings: Vec<Finding> = by_reason
        .into_iter()
        .map(|(reason, paths)| Finding {
            reason,
            detail: detail(reason, paths, before, after),
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
fn detail(reason: Reason, paths: Vec<String>, before: &Node, after: &Node) -> String {
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
        _ => paths.join(", "),
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
/// that has no value).
fn endpoint_values(doc: &Node) -> Vec<String> {
    ksvc::containers(doc)
        .iter()
        .filter_map(|c| c.get("env").and_then(Node::as_array))
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

/// Append to `out` the paths where `a` and `b` differ: objects member by member (an absent
/// object as an empty one), containers and volumes by name, env lists as the webhook's own
/// variable and the rest; any other difference (a list, a value, text the parser kept) at its
/// own path.
fn diff(a: Option<&Node>, b: Option<&Node>, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    if a == b {
        return;
    }
    let tokens: Vec<&str> = path.iter().map(String::as_str).collect();
    let named_list = matches!(
        tokens.as_slice(),
        ["spec", "template", "spec", "containers" | "volumes"]
    );
    let env = matches!(
        tokens.as_slice(),
        ["spec", "template", "spec", "containers", _, "env"]
    );
    match (a, b) {
        (None | Some(Node::Object(_)), None | Some(Node::Object(_))) => {
            let keys = union(a.and_then(Node::as_object), b.and_then(Node::as_object));
            for key in keys {
                path.push(key.clone());
                diff(
                    a.and_then(|n| n.get(&key)),
                    b.and_then(|n| n.get(&key)),
                    path,
                    out,
                );
                path.pop();
            }
        }
        (None | Some(Node::Array(_)), None | Some(Node::Array(_))) if named_list => {
            let (a, b) = (by_name(a), by_name(b));
            let names = a.keys().chain(b.keys().filter(|k| !a.contains_key(*k)));
            for name in names.cloned().collect::<Vec<_>>() {
                path.push(name.clone());
                match (a.get(&name), b.get(&name)) {
                    (Some(x), Some(y)) => diff(Some(x), Some(y), path, out),
                    // Added or removed whole.
                    _ => out.push(path.clone()),
                }
                path.pop();
            }
        }
        (None | Some(Node::Array(_)), None | Some(Node::Array(_))) if env => {
            let (ours_a, rest_a) = split_env(a);
            let (ours_b, rest_b) = split_env(b);
            if ours_a != ours_b {
                out.push(
                    [
                        path.as_slice(),
                        &[keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN.to_owned()],
                    ]
                    .concat(),
                );
            }
            if rest_a != rest_b {
                out.push(path.clone());
            }
        }
        _ => out.push(path.clone()),
    }
}

/// The keys of two maps, `a`'s first, each once.
fn union(a: Option<&Map>, b: Option<&Map>) -> Vec<String> {
    let mut keys: Vec<String> = a
        .into_iter()
        .flat_map(|m| m.keys())
        .map(str::to_owned)
        .collect();
    for key in b.into_iter().flat_map(|m| m.keys()) {
        if !keys.iter().any(|k| k == key) {
            keys.push(key.to_owned());
        }
    }
    keys
}

/// The items of a list by their `name` (an item without one under its index).
fn by_name<'d, 'a>(list: Option<&'d Node<'a>>) -> BTreeMap<String, &'d Node<'a>> {
    let items = list.and_then(Node::as_array).map_or(&[][..], Vec::as_slice);
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let name = match item {
                Node::Object(m) => m.get("name").and_then(Node::as_str),
                _ => None,
            };
            (name.map_or_else(|| i.to_string(), str::to_owned), item)
        })
        .collect()
}

/// An env list split into the webhook's own variable and the other entries.
fn split_env<'d, 'a>(list: Option<&'d Node<'a>>) -> (Vec<&'d Node<'a>>, Vec<&'d Node<'a>>) {
    let items = list.and_then(Node::as_array).map_or(&[][..], Vec::as_slice);
    items.iter().partition(|e| match e {
        Node::Object(m) => {
            m.get("name").and_then(Node::as_str) == Some(keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN)
        }
        _ => false,
    })
}

/// A JSON Pointer (RFC 6901) of path tokens.
fn pointer(path: &[String]) -> String {
    path.iter()
        .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
        .collect()
}

#[cfg(test)]
#[path = "drift_tests.rs"]
mod tests;
