//! PURE: the decision on one admission request — validate, then edit (names, spec SHA,
//! endpoint, stop, sidecars) — into a [`Decision`]. Knative Services on CREATE and UPDATE are
//! decided on; everything else is allowed unchanged. Never decodes or encodes a review.

use super::decision::Decision;
use super::mutate::{self, Target};
use super::naming;
use super::policy::Policy;
use super::request::Request;
use super::sidecars;
use super::violation::{Operation, violation};
use super::{ksvc, stop, validate};
use crate::json::Node;
use crate::json::edit::Editor;

/// What the decision keeps of its edits.
enum Edits {
    /// The JSON Patch, for the response.
    Patch,
    /// How many there were.
    Counted,
}

/// Decide on one admission request.
pub fn decide<'a>(mut req: Request<'a>, policy: &Policy) -> Decision<'a> {
    let mut old_object = req.old_object.take();
    decided(req, old_object.as_mut(), policy, Edits::Patch)
}

/// [`decide`] as the drift report needs it, on an UPDATE whose old object is `stored`, lent
/// (`req.old_object` is not read) and left as it was, so the report compares the result with it
/// without copying it once more. The edits are counted, not written as a patch
/// ([`crate::json::edit::Patch::json`] is `None`).
pub fn decide_stored<'a>(req: Request<'a>, stored: &mut Node<'a>, policy: &Policy) -> Decision<'a> {
    decided(req, Some(stored), policy, Edits::Counted)
}

fn decided<'a>(
    mut req: Request<'a>,
    old_object: Option<&mut Node<'a>>,
    policy: &Policy,
    edits: Edits,
) -> Decision<'a> {
    let operation = match req.operation.as_str() {
        "CREATE" => Operation::Create,
        "UPDATE" => Operation::Update,
        _ => return Decision::allow(),
    };
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) || !is_kservice(&req) {
        return Decision::allow();
    }
    let Some(mut object) = req.object.take() else {
        return Decision::deny(vec![violation(
            "object",
            "request.object",
            format!("is missing on {}", req.operation),
            "send the object being admitted",
        )]);
    };
    let namespace = match ksvc::namespace(&object) {
        "" => req.namespace.clone().unwrap_or_default(),
        ns => ns.to_string(),
    };
    let mut violations = validate::validate(&validate::Input {
        operation,
        object: &object,
        old_object: old_object.as_deref(),
        namespace: &namespace,
        domain_template: &policy.domain_template,
    });
    let sidecar_plan =
        sidecars::plan(&object, &policy.sidecars, policy.knative).unwrap_or_else(|found| {
            violations.extend(found);
            sidecars::Plan::default()
        });
    if !violations.is_empty() {
        return Decision::deny(violations);
    }
    let identity = ksvc::identity(&object);
    let app_name = identity
        .as_ref()
        .map(|id| naming::app_name(&id.project, &id.domain, &id.name));
    let mut stored = match operation {
        Operation::Update => old_object,
        Operation::Create => None,
    };
    let zero_initial_scale = policy.mutate.allow_zero_initial_scale;
    let restore = stop::record_for(&object, stored.as_deref(), zero_initial_scale);
    let spec_sha = match policy.platform_writers.includes(&req.user_info) {
        true => mutate::SpecSha::AsWritten,
        false => mutate::SpecSha::Computed,
    };
    let mut ed = match edits {
        Edits::Patch => Editor::new(&mut object),
        Edits::Counted => Editor::counting(&mut object),
    };
    let target = Target {
        namespace: &namespace,
        identity: identity.as_ref(),
        app_name: app_name.as_ref(),
        restore,
        sidecars: sidecar_plan,
        spec_sha,
    };
    let mut warnings = match mutate::inject(&mut ed, target, &policy.mutate, stored.as_deref_mut())
    {
        Ok(warnings) => warnings,
        Err(err) => return Decision::failed(format!("cannot compute the spec SHA: {err}")),
    };
    let patch = ed.into_patch();
    let after = validate::after_edits(&validate::Input {
        operation,
        object: &object,
        old_object: stored.as_deref(),
        namespace: &namespace,
        domain_template: &policy.domain_template,
    });
    if !after.is_empty() {
        return Decision::deny(after);
    }
    if let Some(app) = app_name.as_ref().filter(|a| a.hashed) {
        warnings.push(format!(
            "name hashed to {:?} to fit 63 characters: {{app_fqdn}}-based calls will not resolve this app by its app name",
            app.name
        ));
    }
    Decision {
        allowed: true,
        violations: Vec::new(),
        patch,
        warnings,
        object: Some(object),
        failure: None,
    }
}

fn is_kservice(req: &Request) -> bool {
    match &req.kind {
        Some(gvk) => {
            gvk.group == "serving.knative.dev" && gvk.version == "v1" && gvk.kind == "Service"
        }
        None => req.object.as_ref().is_some_and(|o| {
            o.get("apiVersion").and_then(Node::as_str) == Some("serving.knative.dev/v1")
                && o.get("kind").and_then(Node::as_str) == Some("Service")
        }),
    }
}
