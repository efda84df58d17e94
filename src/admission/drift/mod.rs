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

mod classify;
mod paths;

use std::fmt;

use serde::{Deserialize, Serialize};

use super::decide::decide_stored;
use super::writers::UserInfo;
use super::{GroupVersionKind, Policy, Request, ksvc, skim};
use crate::json::{Node, parse};
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
    let mut before = read(stored)?;
    let namespace = ksvc::namespace(&before).to_owned();
    if let Some(why) = excluded(&namespace, inject) {
        return Ok(Drift::one(Reason::Excluded, why));
    }
    let username = ksvc::entry(&before, ksvc::ANNOTATIONS, keys::ANNOTATION_LAST_MODIFIER)
        .unwrap_or_default()
        .to_owned();
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
        name: Some(ksvc::name(&before).to_owned()),
        // Lent below: the decision leaves it as it was, for the result to be compared with.
        old_object: None,
        object: Some(before.clone()),
        dry_run: None,
        user_info: UserInfo {
            username,
            groups: Vec::new(),
        },
    };
    let decision = decide_stored(request, &mut before, policy);
    Ok(classify::classify(&before, &decision))
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

#[cfg(test)]
mod tests;
