//! PURE: the revision guard — whether a DELETE of a Knative Revision may go ahead.
//!
//! Another client (the Flyte platform's Stop) may delete the revision that still serves, right
//! after the write that moves traffic off it: requests in flight are lost and the Service reports
//! RevisionMissing. The guard refuses that delete while a route still sends the
//! revision traffic — Knative's `serving.knative.dev/routingState: active` label on the revision,
//! or the owning Service's `status.traffic` when the watch cache knows it — and says the revision
//! goes once traffic has left it (the watch loop deletes the old revisions of a stopped app then).
//! Always allowed: the garbage collector and the namespace controller, revisions whose Service is
//! gone or being deleted, revisions no route sends traffic to. Registered with
//! `failurePolicy: Ignore`, so an outage of the webhook never blocks a delete.
//!
//! Never reads the cluster: what the cache knows comes in as an [`Owner`].

use crate::admission::ksvc;
use crate::admission::validate::Violation;
use crate::admission::writers::UserInfo;
use crate::admission::{self, Decision, Request, ReviewError, Reviewed, Summary};
use crate::keys;

/// The path the guard's ValidatingWebhookConfiguration calls on the admission server.
pub const PATH: &str = "/validate-revision-delete";
/// The garbage collector: deletes the revisions of a deleted Service.
pub const GARBAGE_COLLECTOR: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
/// The namespace controller: deletes everything in a namespace being deleted.
pub const NAMESPACE_CONTROLLER: &str = "system:serviceaccount:kube-system:namespace-controller";
/// The rule id of a refusal (the `rule` label of the rejection metric).
pub const RULE: &str = "revision-in-traffic";

/// What the watch cache knows of the Service owning the revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// No cache (disabled or not synced yet), or the revision names no Service.
    Unknown,
    /// The Service is not in the synced cache.
    Gone,
    /// The Service has a deletion timestamp.
    Deleting,
    /// The Service exists; whether its `status.traffic` names the revision.
    Present { routes_to: bool },
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
    pub user: &'a UserInfo,
}

/// Why a delete may go ahead, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A controller that cleans up after deletions.
    SystemCleanup,
    /// The Service is gone or being deleted: its revisions go with it.
    OwnerGone,
    /// No route sends the revision traffic.
    NotRouted,
    /// A route still sends the revision traffic.
    Refused(Violation),
}

/// Decide on one revision DELETE.
pub fn decide(delete: &Delete, owner: Owner) -> Verdict {
    if matches!(
        delete.user.username.as_str(),
        GARBAGE_COLLECTOR | NAMESPACE_CONTROLLER
    ) {
        return Verdict::SystemCleanup;
    }
    let by_label = delete.routing_state == Some(keys::ROUTING_STATE_ACTIVE);
    let by_status = match owner {
        Owner::Gone | Owner::Deleting => return Verdict::OwnerGone,
        Owner::Present { routes_to } => routes_to,
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
    Verdict::Refused(Violation {
        rule: RULE,
        path: format!(
            "revision {:?} in namespace {:?}",
            delete.revision, delete.namespace
        ),
        problem: format!("is still serving: {evidence}, so deleting it now would lose requests"),
        fix: "it will be removed once traffic has left it (ksvc-webhook deletes the old \
              revisions of a stopped app then); nothing to do"
            .into(),
    })
}

/// Whether a request is a DELETE of a `serving.knative.dev/v1` Revision.
fn is_revision_delete(req: &Request) -> bool {
    req.operation == "DELETE"
        && req.kind.as_ref().is_some_and(|gvk| {
            gvk.group == "serving.knative.dev" && gvk.version == "v1" && gvk.kind == "Revision"
        })
}

/// Decide on one AdmissionReview for the guard: the bytes kube-apiserver sent in, the bytes to
/// answer with. `owner(namespace, service)` is what the watch cache knows of a Service.
pub fn review(body: &[u8], owner: impl Fn(&str, &str) -> Owner) -> Result<Reviewed, ReviewError> {
    let request = admission::decode(body)?;
    let summary = Summary {
        allowed: true,
        ..Summary::of(&request)
    };
    let verdict = match is_revision_delete(&request) {
        true => decide_request(&request, &owner),
        false => Verdict::NotRouted,
    };
    let decision = match verdict {
        Verdict::Refused(violation) => Decision {
            allowed: false,
            violations: vec![violation],
            ..Decision::default()
        },
        _ => Decision {
            allowed: true,
            ..Decision::default()
        },
    };
    let body = match admission::encode(&summary.uid, &decision) {
        Ok(body) => body,
        Err(err) => admission::failure_response(&summary.uid, &err.to_string()),
    };
    Ok(Reviewed {
        body,
        summary: Summary {
            allowed: decision.allowed,
            rejected_rules: decision.violations.iter().map(|v| v.rule).collect(),
            ..summary
        },
    })
}

fn decide_request(request: &Request, owner: &impl Fn(&str, &str) -> Owner) -> Verdict {
    let old = request.old_object.as_ref();
    let label = |key: &str| old.and_then(|o| ksvc::entry(o, ksvc::LABELS, key));
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
        user: &request.user_info,
    };
    let owner = service.map_or(Owner::Unknown, |s| owner(namespace, s));
    decide(&delete, owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> UserInfo {
        UserInfo {
            username: name.into(),
            groups: vec!["system:authenticated".into()],
        }
    }

    #[test]
    fn the_allow_list_and_the_refusals() {
        let platform = user("system:serviceaccount:flyte:flyteadmin");
        let gc = user(GARBAGE_COLLECTOR);
        let ns = user(NAMESPACE_CONTROLLER);
        let active = Some("active");
        let routed = Owner::Present { routes_to: true };
        let unrouted = Owner::Present { routes_to: false };
        #[rustfmt::skip]
        let cases: [(&str, &UserInfo, Option<&str>, Owner, bool); 12] = [
            ("garbage collector, routed", &gc, active, routed, true),
            ("namespace controller, routed", &ns, active, routed, true),
            ("Service gone", &platform, active, Owner::Gone, true),
            ("Service being deleted", &platform, active, Owner::Deleting, true),
            ("not routed, no cache", &platform, None, Owner::Unknown, true),
            ("reserve label, no cache", &platform, Some("reserve"), Owner::Unknown, true),
            ("not routed by label or status", &platform, Some("reserve"), unrouted, true),
            ("routed by label, no cache", &platform, active, Owner::Unknown, false),
            ("routed by label, status moved on", &platform, active, unrouted, false),
            ("routed by status, label lags", &platform, Some("pending"), routed, false),
            ("routed by both", &platform, active, routed, false),
            ("a person, routed", &user("alice"), active, routed, false),
        ];
        for (name, who, routing_state, owner, allowed) in cases {
            let delete = Delete {
                namespace: "flyte",
                revision: "app-00001",
                service: Some("app"),
                routing_state,
                user: who,
            };
            let verdict = decide(&delete, owner);
            assert_eq!(
                !matches!(verdict, Verdict::Refused(_)),
                allowed,
                "{name}: {verdict:?}"
            );
        }
    }

    #[test]
    fn a_refusal_names_the_revision_and_says_it_goes_once_traffic_has_left() {
        let who = user("system:serviceaccount:flyte:flyteadmin");
        let delete = Delete {
            namespace: "flyte",
            revision: "app-00001",
            service: Some("app"),
            routing_state: Some("active"),
            user: &who,
        };
        let Verdict::Refused(v) = decide(&delete, Owner::Present { routes_to: true }) else {
            panic!("allowed");
        };
        assert_eq!(v.rule, RULE);
        assert_eq!(
            v.to_string(),
            "revision \"app-00001\" in namespace \"flyte\": is still serving: \"app\" routes \
             traffic to it (status.traffic, label serving.knative.dev/routingState: active), so \
             deleting it now would lose requests; it will be removed once traffic has left it \
             (ksvc-webhook deletes the old revisions of a stopped app then); nothing to do"
        );
    }

    #[test]
    fn reviews_of_other_requests_are_allowed_and_refusals_are_encoded() {
        let body = |op: &str, kind: &str, user: &str| {
            serde_json::to_vec(&serde_json::json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "u1", "operation": op, "name": "app-00001", "namespace": "flyte",
                    "kind": {"group": "serving.knative.dev", "version": "v1", "kind": kind},
                    "userInfo": {"username": user},
                    "oldObject": {"metadata": {"name": "app-00001", "labels": {
                        "serving.knative.dev/service": "app",
                        "serving.knative.dev/routingState": "active"}}}}
            }))
            .unwrap()
        };
        let answer = |body: &[u8]| {
            let r = review(body, |_, _| Owner::Unknown).unwrap();
            let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            (r.summary, v)
        };
        let (s, v) = answer(&body("DELETE", "Revision", "alice"));
        assert!(!s.allowed);
        assert_eq!(s.rejected_rules, vec![RULE]);
        assert_eq!(v["response"]["uid"], "u1");
        assert_eq!(v["response"]["status"]["code"], 400);
        let message = v["response"]["status"]["message"].as_str().unwrap();
        assert!(message.contains("app-00001") && message.contains("once traffic has left it"));
        for (op, kind, user) in [
            ("DELETE", "Revision", GARBAGE_COLLECTOR),
            ("DELETE", "Service", "alice"),
            ("UPDATE", "Revision", "alice"),
        ] {
            let (s, v) = answer(&body(op, kind, user));
            assert!(s.allowed, "{op} {kind} {user}");
            assert_eq!(v["response"]["allowed"], true);
        }
    }
}
