//! PURE: the revision guard — whether a DELETE of a Knative Revision may go ahead.
//!
//! Another client (the Flyte platform's Stop) may delete the revision that still serves, right
//! after the write that moves traffic off it: requests in flight are lost and the Service reports
//! RevisionMissing. The guard refuses that delete while a route still sends the revision traffic —
//! Knative's `serving.knative.dev/routingState: active` label on the revision, or the owning
//! Service's `status.traffic` as the watch cache knows it ([`Owner`]) — and words the refusal for
//! the case: a stopped app's revision goes once traffic has left it (the watch loop deletes the
//! old revisions of a stopped app then); a running app's needs its traffic or tag removed first.
//! Always allowed: the deleters [`Settings::allowed_deleters`] names (by default the garbage
//! collector, the namespace controller and kube-controller-manager), revisions whose Service is
//! gone or being deleted, revisions no route sends traffic to, and revisions an administrator
//! annotated `ksvc-webhook.flyte.org/allow-delete: "true"` before deleting them (the override;
//! only who may update revisions can set it). Registered with `failurePolicy: Ignore`, so an
//! outage of the webhook never blocks a delete.
//!
//! Never reads the cluster: what the cache knows comes in as an [`Owner`].

use std::sync::Arc;

use crate::admission::ksvc;
use crate::admission::violation::{Violation, violation};
use crate::admission::writers::{Principals, UserInfo};
use crate::admission::{self, Decision, Request, ReviewError, Reviewed, Summary};
use crate::keys;

/// The path the guard's ValidatingWebhookConfiguration calls on the admission server.
pub const PATH: &str = "/validate-revision-delete";
/// The garbage collector: deletes the revisions of a deleted Service.
pub const GARBAGE_COLLECTOR: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
/// The namespace controller: deletes everything in a namespace being deleted.
pub const NAMESPACE_CONTROLLER: &str = "system:serviceaccount:kube-system:namespace-controller";
/// kube-controller-manager's own identity: its controllers (the garbage collector and the
/// namespace controller among them) act as it when it runs without
/// `--use-service-account-credentials`.
pub const KUBE_CONTROLLER_MANAGER: &str = "system:kube-controller-manager";
/// Who may always delete a revision unless `--guard-allowed-deleters` says otherwise.
pub const DEFAULT_ALLOWED_DELETERS: [&str; 3] = [
    GARBAGE_COLLECTOR,
    NAMESPACE_CONTROLLER,
    KUBE_CONTROLLER_MANAGER,
];
/// The rule id of a refusal (the `rule` label of the rejection metric).
pub const RULE: &str = "revision-in-traffic";

/// How the guard decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Users and groups whose deletes are always allowed: controllers that clean up after
    /// deletions.
    pub allowed_deleters: Principals,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            allowed_deleters: Principals::users(DEFAULT_ALLOWED_DELETERS),
        }
    }
}

/// A revision whose owning Service the guard asks the watch cache about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookup<'a> {
    pub namespace: &'a str,
    /// The owning Service (label `serving.knative.dev/service`).
    pub service: &'a str,
    pub revision: &'a str,
}

/// What the watch cache knows of the Service owning a revision: the server's extension point,
/// filled by the watch loop.
#[derive(Clone)]
pub struct OwnerView(Arc<dyn Fn(&Lookup) -> Owner + Send + Sync>);

impl OwnerView {
    /// A view answering with `owner`.
    pub fn new(owner: impl Fn(&Lookup) -> Owner + Send + Sync + 'static) -> Self {
        Self(Arc::new(owner))
    }

    /// What the view knows of `lookup`'s Service.
    pub fn owner(&self, lookup: &Lookup) -> Owner {
        (self.0)(lookup)
    }
}

impl std::fmt::Debug for OwnerView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OwnerView")
    }
}

/// What the watch cache knows of the Service owning the revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// No cache (disabled, not synced yet, or not watching the namespace), or the revision names
    /// no Service.
    Unknown,
    /// The Service is not in the synced cache.
    Gone,
    /// The Service has a deletion timestamp.
    Deleting,
    /// The Service exists: whether its app is stopped, and the `status.traffic` entries that
    /// name the revision (none: it routes nothing to it).
    Present { stopped: bool, routes: Vec<Route> },
}

/// One `status.traffic` entry naming the revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Route {
    /// Its tag (the revision's own URL), if any.
    pub tag: Option<String>,
    /// Its share of the traffic, if set.
    pub percent: Option<i64>,
}

/// The revision a DELETE is about.
#[derive(Debug, Clone, Copy)]
pub struct Delete<'a> {
    pub namespace: &'a str,
    pub revision: &'a str,
    /// The owning Service (label `serving.knative.dev/service`).
    pub service: Option<&'a str>,
    /// Knative's `serving.knative.dev/routingState` label.
    pub routing_state: Option<&'a str>,
    /// The revision carries `ksvc-webhook.flyte.org/allow-delete: "true"`.
    pub allow_delete: bool,
    pub user: &'a UserInfo,
}

/// Why a delete may go ahead, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// An allowed deleter: a controller that cleans up after deletions.
    SystemCleanup,
    /// The Service is gone or being deleted: its revisions go with it.
    OwnerGone,
    /// No route sends the revision traffic.
    NotRouted,
    /// A route still sends the revision traffic, and the revision's override annotation lets
    /// the delete go ahead: the warning for the person deleting.
    Overridden(String),
    /// A route still sends the revision traffic.
    Refused(Violation),
}

/// Decide on one revision DELETE.
pub fn decide(delete: &Delete, owner: &Owner, settings: &Settings) -> Verdict {
    if settings.allowed_deleters.includes(delete.user) {
        return Verdict::SystemCleanup;
    }
    let by_label = delete.routing_state == Some(keys::ROUTING_STATE_ACTIVE);
    let by_status = match owner {
        Owner::Gone | Owner::Deleting => return Verdict::OwnerGone,
        Owner::Present { routes, .. } => !routes.is_empty(),
        Owner::Unknown => false,
    };
    if !by_label && !by_status {
        return Verdict::NotRouted;
    }
    let service = delete.service.unwrap_or("its Service");
    let evidence = match (by_label, by_status) {
        (true, true) => format!(
            "{service:?} routes traffic to it (status.traffic, label {}: {})",
            keys::LABEL_ROUTING_STATE,
            keys::ROUTING_STATE_ACTIVE
        ),
        (true, false) => format!(
            "a route sends it traffic (label {}: {})",
            keys::LABEL_ROUTING_STATE,
            keys::ROUTING_STATE_ACTIVE
        ),
        _ => format!("{service:?} routes traffic to it (status.traffic)"),
    };
    let path = format!(
        "revision {:?} in namespace {:?}",
        delete.revision, delete.namespace
    );
    if delete.allow_delete {
        return Verdict::Overridden(format!(
            "{path} is still serving: {evidence}; deleted anyway as its annotation {}: \"true\" \
             asks, so requests in flight may be lost",
            keys::ANNOTATION_ALLOW_DELETE
        ));
    }
    Verdict::Refused(violation(
        RULE,
        path,
        format!("is still serving: {evidence}, so deleting it now would lose requests"),
        format!(
            "{}; an administrator who must delete it now can annotate it {}=true first",
            fix(service, owner),
            keys::ANNOTATION_ALLOW_DELETE
        ),
    ))
}

/// What the person deleting can do, by what the cache knows of the app.
fn fix(service: &str, owner: &Owner) -> String {
    match owner {
        Owner::Present { stopped: true, .. } => "it will be removed once traffic has left it \
             (ksvc-webhook deletes the old revisions of a stopped app then); nothing to do"
            .into(),
        Owner::Present { routes, .. } => format!(
            "remove its traffic or tag first ({} in the spec.traffic of Service {service:?}; \
             traffic of the latest-revision entry moves on when a newer revision is ready), then \
             delete it",
            describe(routes)
        ),
        _ => format!(
            "remove its traffic or tag from the spec.traffic of Service {service:?} first, then \
             delete it; if its app is being stopped, ksvc-webhook removes it once traffic has \
             left it"
        ),
    }
}

/// The traffic entries naming a revision, for a person: `tag "canary" (0%), 100% of the traffic`.
fn describe(routes: &[Route]) -> String {
    let entries: Vec<String> = routes
        .iter()
        .map(|r| match (&r.tag, r.percent) {
            (Some(tag), Some(p)) => format!("tag {tag:?} ({p}%)"),
            (Some(tag), None) => format!("tag {tag:?}"),
            (None, Some(p)) => format!("{p}% of the traffic"),
            (None, None) => "a traffic entry".into(),
        })
        .collect();
    match entries.is_empty() {
        true => "its traffic entry".into(),
        false => entries.join(", "),
    }
}

/// Whether a request is a DELETE of a `serving.knative.dev/v1` Revision.
fn is_revision_delete(req: &Request) -> bool {
    req.operation == "DELETE"
        && req.kind.as_ref().is_some_and(|gvk| {
            gvk.group == "serving.knative.dev" && gvk.version == "v1" && gvk.kind == "Revision"
        })
}

/// Decide on one AdmissionReview for the guard: the bytes kube-apiserver sent in, the bytes to
/// answer with. `owner` is what the watch cache knows of a revision's Service.
pub fn review(
    body: &[u8],
    settings: &Settings,
    owner: impl Fn(&Lookup) -> Owner,
) -> Result<Reviewed, ReviewError> {
    let request = admission::decode(body)?;
    let summary = Summary::of(&request);
    let verdict = match is_revision_delete(&request) {
        true => decide_request(&request, settings, &owner),
        false => Verdict::NotRouted,
    };
    let decision = match verdict {
        Verdict::Refused(violation) => Decision {
            allowed: false,
            violations: vec![violation],
            ..Decision::default()
        },
        Verdict::Overridden(warning) => Decision {
            allowed: true,
            warnings: vec![warning],
            ..Decision::default()
        },
        Verdict::SystemCleanup | Verdict::OwnerGone | Verdict::NotRouted => Decision {
            allowed: true,
            ..Decision::default()
        },
    };
    Ok(admission::answer(summary, &decision))
}

fn decide_request(
    request: &Request,
    settings: &Settings,
    owner: &impl Fn(&Lookup) -> Owner,
) -> Verdict {
    let old = request.old_object.as_ref();
    let label = |key: &str| old.and_then(|o| ksvc::entry(o, ksvc::LABELS, key));
    let annotation = |key: &str| old.and_then(|o| ksvc::entry(o, ksvc::ANNOTATIONS, key));
    let namespace = match request.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns,
        _ => old.map(ksvc::namespace).unwrap_or_default(),
    };
    let revision = match request.name.as_deref() {
        Some(name) if !name.is_empty() => name,
        _ => old.map(ksvc::name).unwrap_or_default(),
    };
    let service = label(keys::LABEL_KNATIVE_SERVICE);
    let delete = Delete {
        namespace,
        revision,
        service,
        routing_state: label(keys::LABEL_ROUTING_STATE),
        allow_delete: annotation(keys::ANNOTATION_ALLOW_DELETE) == Some("true"),
        user: &request.user_info,
    };
    let owner = service.map_or(Owner::Unknown, |service| {
        owner(&Lookup {
            namespace,
            service,
            revision,
        })
    });
    decide(&delete, &owner, settings)
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
