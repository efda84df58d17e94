//! PURE: AdmissionReview bytes in, AdmissionReview bytes out.
//!
//! [`review`] decodes an `admission.k8s.io/v1` AdmissionReview, [`decide`]s on its request, and
//! encodes the response kube-apiserver expects: the uid echoed, `allowed`, a base64 JSONPatch
//! (absent when nothing changes), a `status` listing every violation on rejection, and warnings.
//! Knative Services on CREATE and UPDATE are decided on; everything else is allowed unchanged.
//!
//! The body is read by the skimming parser with the table in [`skim`] (what admission may read),
//! or by `serde_json` when that parser refuses it. When the webhook fails inside (the spec SHA
//! cannot be computed, the patch cannot be serialized) it never answers a wrong value: it denies
//! the request with `allowed: false` and a status of code 500, `InternalError`, that says what
//! failed, and [`Summary::failure`] carries the same words for the server's error log.

pub mod skim;

pub mod drift;
pub mod guard;
pub mod ksvc;
pub mod mutate;
pub mod naming;
pub mod sidecars;
pub mod spec_sha;
pub mod stop;
pub mod validate;
pub mod writers;

use std::sync::Arc;

use base64::Engine as _;
use serde::Serialize;
use serde_json::Value;

use crate::json::edit::{Editor, Patch};
use crate::json::parse::{self, Skim};
use crate::json::{self, Node};
use mutate::{Settings, Target};
use naming::DomainTemplate;
use sidecars::Catalogue;
use validate::{Operation, Violation};
use writers::{Principals, UserInfo};

/// The API version of every review this webhook reads and writes.
pub const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

/// Cluster-wide settings the decision depends on.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// The route-host template and domain (Knative's `config-network` / `config-domain`).
    pub domain_template: DomainTemplate,
    /// Settings of the edits.
    pub mutate: Settings,
    /// The sidecar catalogue (empty: no sidecars); shared, so a reload swaps it cheaply.
    pub sidecars: Arc<Catalogue>,
    /// What the cluster's Knative allows that fronting sidecars depend on.
    pub knative: sidecars::Knative,
    /// Writers whose `flyte.org/spec-sha` is kept as written.
    pub platform_writers: Principals,
    /// How the revision guard decides.
    pub revision_guard: guard::Settings,
}

/// The request part of an AdmissionReview: the fields the decision reads. Decoded from a review,
/// the objects borrow from its bytes and are skimmed as the [`skim`] table says.
#[derive(Debug, Clone, Default)]
pub struct Request<'a> {
    pub uid: String,
    pub kind: Option<GroupVersionKind>,
    pub sub_resource: Option<String>,
    pub operation: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub object: Option<Node<'a>>,
    /// The stored object, on UPDATE (and DELETE). Decoded from a review, its labels, the
    /// webhook's own annotations and its spec are parsed as `object`'s are: the rules read the
    /// labels, a stop the running state, an unchanged spec keeps its SHA.
    pub old_object: Option<Node<'a>>,
    pub dry_run: Option<bool>,
    /// Who sent the request (`request.userInfo`; empty when absent).
    pub user_info: UserInfo,
}

impl Request<'static> {
    /// A request to admit `object`, a Knative Service, by `operation` (`CREATE`, `UPDATE`) in
    /// `namespace`, as kube-apiserver would send it: what the offline CLI and the tests decide on.
    /// The objects are read from their JSON text by the server's parser and [`skim`] table, so
    /// a rule decides here on exactly what it would see in a review.
    pub fn kservice(
        uid: &str,
        operation: &str,
        namespace: &str,
        object: Value,
        old_object: Option<Value>,
    ) -> Self {
        Self {
            uid: uid.to_string(),
            kind: Some(GroupVersionKind {
                group: "serving.knative.dev".into(),
                version: "v1".into(),
                kind: "Service".into(),
            }),
            operation: operation.to_string(),
            namespace: Some(namespace.to_string()),
            object: Some(skimmed(object, &skim::OBJECT, "request.object")),
            old_object: old_object
                .filter(|o| !o.is_null())
                .map(|o| skimmed(o, &skim::OLD_OBJECT, "request.oldObject")),
            ..Self::default()
        }
    }
}

impl Request<'_> {
    /// The same request owning its objects' strings and text.
    pub fn into_owned(self) -> Request<'static> {
        Request {
            object: self.object.map(Node::into_owned),
            old_object: self.old_object.map(Node::into_owned),
            uid: self.uid,
            kind: self.kind,
            sub_resource: self.sub_resource,
            operation: self.operation,
            namespace: self.namespace,
            name: self.name,
            dry_run: self.dry_run,
            user_info: self.user_info,
        }
    }
}

/// `value` as the review parser reads it at `at` with `skim`, owning its text; what that parser
/// refuses is read by `serde_json`, as [`decode`] does.
fn skimmed(value: Value, skim: &Skim, at: &str) -> Node<'static> {
    let text = value.to_string();
    match parse::parse(&text, skim, at) {
        Ok(node) => node.into_owned(),
        Err(parse::Refused) => Node::from_json(value),
    }
}

/// `request.kind` of a review.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupVersionKind {
    pub group: String,
    pub version: String,
    pub kind: String,
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, Default)]
pub struct Decision<'a> {
    pub allowed: bool,
    /// Why the request was rejected (empty when allowed).
    pub violations: Vec<Violation>,
    /// The edits (empty when nothing changes).
    pub patch: Patch,
    pub warnings: Vec<String>,
    /// The object after the edits, when the request carried a KService that was allowed.
    pub object: Option<Node<'a>>,
    /// What failed inside the webhook, when it could not decide (then `allowed` is false).
    pub failure: Option<String>,
}

impl Decision<'_> {
    /// The edited object as a `serde_json::Value`, when there is one.
    pub fn object_json(&self) -> Option<Value> {
        self.object.as_ref().map(Node::to_json)
    }

    fn allow() -> Self {
        Self {
            allowed: true,
            ..Self::default()
        }
    }

    fn deny(violations: Vec<Violation>) -> Self {
        Self {
            violations,
            ..Self::default()
        }
    }

    /// The webhook failed inside: refuse rather than admit a wrong object.
    fn failed(what: String) -> Self {
        Self {
            failure: Some(what),
            ..Self::default()
        }
    }

    /// The rejection message: every violation as `path: problem; fix`.
    pub fn message(&self) -> String {
        match self.violations.as_slice() {
            [one] => one.to_string(),
            many => {
                let lines: Vec<String> = many.iter().map(|v| format!("- {v}")).collect();
                format!("{} problems:\n{}", many.len(), lines.join("\n"))
            }
        }
    }
}

/// Decide on one admission request.
pub fn decide<'a>(mut req: Request<'a>, policy: &Policy) -> Decision<'a> {
    let operation = match req.operation.as_str() {
        "CREATE" => Operation::Create,
        "UPDATE" => Operation::Update,
        _ => return Decision::allow(),
    };
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) || !is_kservice(&req) {
        return Decision::allow();
    }
    let Some(mut object) = req.object.take() else {
        return Decision::deny(vec![Violation {
            rule: "object",
            path: "request.object".into(),
            problem: format!("is missing on {}", req.operation),
            fix: "send the object being admitted".into(),
        }]);
    };
    let namespace = match ksvc::namespace(&object) {
        "" => req.namespace.clone().unwrap_or_default(),
        ns => ns.to_string(),
    };
    let mut violations = validate::validate(&validate::Input {
        operation,
        object: &object,
        old_object: req.old_object.as_ref(),
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
        Operation::Update => req.old_object.take(),
        Operation::Create => None,
    };
    let zero_initial_scale = policy.mutate.allow_zero_initial_scale;
    let restore = stop::record_for(&object, stored.as_ref(), zero_initial_scale);
    let spec_sha = match policy.platform_writers.includes(&req.user_info) {
        true => mutate::SpecSha::AsWritten,
        false => mutate::SpecSha::Computed,
    };
    let mut ed = Editor::new(&mut object);
    let target = Target {
        namespace: &namespace,
        identity: identity.as_ref(),
        app_name: app_name.as_ref(),
        restore,
        sidecars: sidecar_plan,
        spec_sha,
    };
    let mut warnings = match mutate::inject(&mut ed, target, &policy.mutate, stored.as_mut()) {
        Ok(warnings) => warnings,
        Err(err) => return Decision::failed(format!("cannot compute the spec SHA: {err}")),
    };
    let patch = ed.into_patch();
    let after = validate::after_edits(&validate::Input {
        operation,
        object: &object,
        old_object: stored.as_ref(),
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

/// The response to send and a summary for logs and metrics.
#[derive(Debug, Clone)]
pub struct Reviewed {
    pub body: Vec<u8>,
    pub summary: Summary,
}

/// What a decision was, without the object: safe to log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub uid: String,
    pub operation: String,
    pub namespace: String,
    pub name: String,
    pub dry_run: bool,
    pub allowed: bool,
    pub patch_ops: usize,
    /// The rules a rejection broke (e.g. `name`, `identity-immutable`), for the metrics label.
    pub rejected_rules: Vec<&'static str>,
    /// What failed inside the webhook, when it refused the request for that (log it as an error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

impl Summary {
    /// What `request` says of itself, before any decision.
    pub fn of(request: &Request) -> Self {
        Self {
            uid: request.uid.clone(),
            operation: request.operation.clone(),
            namespace: request.namespace.clone().unwrap_or_default(),
            name: request.name.clone().unwrap_or_default(),
            dry_run: request.dry_run.unwrap_or(false),
            ..Self::default()
        }
    }
}

/// A body that is not an AdmissionReview: the server answers 400.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("body is not an admission.k8s.io/v1 AdmissionReview: {0}")]
    Decode(String),
}

/// Which JSON reader decodes a review body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// The skimming parser with the [`skim`] table, and `serde_json` for what it refuses: the
    /// server's.
    Skim,
    /// `serde_json` alone, into a full tree: the reference the fuzz target and the properties
    /// hold the server's reader to.
    SerdeJson,
}

/// Decode an AdmissionReview and check it is one this webhook answers.
pub fn decode(body: &[u8]) -> Result<Request<'_>, ReviewError> {
    decode_with(body, Reader::Skim)
}

/// [`decode`] with the reader given.
pub fn decode_with(body: &[u8], reader: Reader) -> Result<Request<'_>, ReviewError> {
    // The fast parser refuses what it does not take; serde_json then reads it or says why not.
    let fast = match reader {
        Reader::Skim => parse::review(body, &skim::REVIEW).ok(),
        Reader::SerdeJson => None,
    };
    let mut review = match fast {
        Some(review) => review,
        None => {
            serde_json::from_slice::<Node>(body).map_err(|e| ReviewError::Decode(e.to_string()))?
        }
    };
    let api_version = review.get("apiVersion").and_then(Node::as_str);
    let kind = review.get("kind").and_then(Node::as_str);
    if api_version != Some(REVIEW_API_VERSION) || kind != Some("AdmissionReview") {
        return Err(ReviewError::Decode(format!(
            "apiVersion {:?} and kind {:?} (want {REVIEW_API_VERSION:?} and \"AdmissionReview\")",
            api_version.unwrap_or_default(),
            kind.unwrap_or_default()
        )));
    }
    let Some(mut request) = review.get_mut("request").map(std::mem::take) else {
        return Err(ReviewError::Decode("request is missing".into()));
    };
    // A string field of the map at `path`: absent, or a string.
    let text = |node: &Node, path: &str, key: &str| -> Result<Option<String>, ReviewError> {
        match node.get(key) {
            None | Some(Node::Null) => Ok(None),
            Some(value) => value
                .as_str()
                .map(|s| Some(s.to_string()))
                .ok_or_else(|| ReviewError::Decode(format!("{path}.{key} is not a string"))),
        }
    };
    let kind = match request.get("kind") {
        None | Some(Node::Null) => None,
        Some(gvk) if gvk.is_object() => Some(GroupVersionKind {
            group: text(gvk, "request.kind", "group")?.unwrap_or_default(),
            version: text(gvk, "request.kind", "version")?.unwrap_or_default(),
            kind: text(gvk, "request.kind", "kind")?.unwrap_or_default(),
        }),
        Some(_) => return Err(ReviewError::Decode("request.kind is not an object".into())),
    };
    let dry_run = match request.get("dryRun") {
        None | Some(Node::Null) => None,
        Some(Node::Bool(b)) => Some(*b),
        Some(_) => {
            return Err(ReviewError::Decode(
                "request.dryRun is not a boolean".into(),
            ));
        }
    };
    let uid = text(&request, "request", "uid")?.unwrap_or_default();
    if uid.is_empty() {
        return Err(ReviewError::Decode("request.uid is missing".into()));
    }
    let mut object_at = |key: &str| {
        request
            .get_mut(key)
            .map(std::mem::take)
            .filter(|o| !o.is_null())
    };
    let (object, old_object) = (object_at("object"), object_at("oldObject"));
    let user_info = user_info(request.get("userInfo"))?;
    Ok(Request {
        uid,
        kind,
        sub_resource: text(&request, "request", "subResource")?,
        operation: text(&request, "request", "operation")?.unwrap_or_default(),
        namespace: text(&request, "request", "namespace")?,
        name: text(&request, "request", "name")?,
        object,
        old_object,
        dry_run,
        user_info,
    })
}

/// `request.userInfo`: small, so read with serde from the text the parser left raw. A value
/// that does not fit is described as `serde_json` describes it as a tree, with no line and
/// column (they would count from the start of `userInfo`, not of the body), so both readers
/// refuse it in the same words.
fn user_info(node: Option<&Node>) -> Result<UserInfo, ReviewError> {
    let read = match node {
        None | Some(Node::Null) => return Ok(UserInfo::default()),
        Some(Node::Raw { text, .. }) => serde_json::from_str(text)
            .or_else(|_| serde_json::from_value(serde_json::from_str::<Value>(text)?)),
        Some(node) => serde_json::from_value(node.to_json()),
    };
    read.map_err(|e| ReviewError::Decode(format!("request.userInfo: {e}")))
}

/// Decide on one AdmissionReview: the bytes kube-apiserver sent in, the bytes to answer with.
pub fn review(body: &[u8], policy: &Policy) -> Result<Reviewed, ReviewError> {
    review_with(body, policy, Reader::Skim)
}

/// [`review`] with the reader given.
pub fn review_with(body: &[u8], policy: &Policy, reader: Reader) -> Result<Reviewed, ReviewError> {
    let request = decode_with(body, reader)?;
    let summary_base = Summary::of(&request);
    let mut decision = decide(request, policy);
    let body = match encode(&summary_base.uid, &decision) {
        Ok(body) => body,
        Err(err) => {
            decision = Decision::failed(err.to_string());
            failure_response(&summary_base.uid, &err.to_string())
        }
    };
    let name = match (&summary_base.name, &decision.object) {
        (n, Some(obj)) if n.is_empty() => ksvc::name(obj).to_string(),
        (n, _) => n.clone(),
    };
    Ok(Reviewed {
        body,
        summary: Summary {
            name,
            allowed: decision.allowed,
            patch_ops: decision.patch.len(),
            rejected_rules: decision.violations.iter().map(|v| v.rule).collect(),
            failure: decision.failure,
            ..summary_base
        },
    })
}

/// A response the webhook could not write.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("cannot serialize the admission response")]
    Json(#[from] serde_json::Error),
    #[error("cannot base64-encode the patch")]
    Base64(#[from] base64::EncodeSliceError),
}

/// The AdmissionReview response for `decision`, echoing `uid`.
///
/// Written straight into one buffer, the patch base64-encoded in place: a derived serializer
/// would copy the patch once more and scan every base64 byte for characters to escape. The
/// members come in the order the derived form had: `uid`, `allowed`, `status`, `patch`,
/// `patchType`, `warnings`. A decision the webhook failed on is answered by
/// [`failure_response`].
pub fn encode(uid: &str, decision: &Decision) -> Result<Vec<u8>, EncodeError> {
    if let Some(failure) = &decision.failure {
        return Ok(failure_response(uid, failure));
    }
    let patch = (!decision.patch.is_empty()).then(|| decision.patch.json());
    let mut out = Vec::with_capacity(160 + patch.as_ref().map_or(0, |p| p.len() * 4 / 3 + 4));
    response_head(&mut out, uid, decision.allowed);
    if !decision.allowed {
        out.extend_from_slice(b",\"status\":");
        serde_json::to_writer(&mut out, &rejection_status(decision))?;
    }
    if let Some(patch) = patch {
        out.extend_from_slice(b",\"patch\":\"");
        let engine = &base64::engine::general_purpose::STANDARD;
        let start = out.len();
        out.resize(start + patch.len().div_ceil(3) * 4, 0);
        let written = engine.encode_slice(patch, &mut out[start..])?;
        out.truncate(start + written);
        out.extend_from_slice(b"\",\"patchType\":\"JSONPatch\"");
    }
    if !decision.warnings.is_empty() {
        out.extend_from_slice(b",\"warnings\":");
        serde_json::to_writer(&mut out, &decision.warnings)?;
    }
    out.extend_from_slice(b"}}");
    Ok(out)
}

/// `{"apiVersion":…,"kind":"AdmissionReview","response":{"uid":…,"allowed":…` (left open).
fn response_head(out: &mut Vec<u8>, uid: &str, allowed: bool) {
    out.extend_from_slice(b"{\"apiVersion\":\"");
    out.extend_from_slice(REVIEW_API_VERSION.as_bytes());
    out.extend_from_slice(b"\",\"kind\":\"AdmissionReview\",\"response\":{\"uid\":");
    json::canonical::write_string(uid, out);
    out.extend_from_slice(match allowed {
        true => b",\"allowed\":true",
        false => b",\"allowed\":false",
    });
}

/// The answer when the webhook failed inside: a denial whose `metav1.Status` (code 500,
/// `InternalError`) says what failed, written with nothing that can fail in turn.
pub fn failure_response(uid: &str, failure: &str) -> Vec<u8> {
    let message = format!(
        "ksvc-webhook failed inside and refuses the request rather than admit it wrongly: \
         {failure}; nothing in the request is at fault: report this bug with the object"
    );
    let mut out = Vec::with_capacity(256 + message.len());
    response_head(&mut out, uid, false);
    out.extend_from_slice(
        b",\"status\":{\"status\":\"Failure\",\"code\":500,\"reason\":\"InternalError\",\"message\":",
    );
    json::canonical::write_string(&message, &mut out);
    out.extend_from_slice(b"}}}");
    out
}

/// A `metav1.Status` for a rejection: 400 BadRequest, the message, and one cause per violation.
fn rejection_status(decision: &Decision) -> Value {
    let causes: Vec<Value> = decision
        .violations
        .iter()
        .map(|v| {
            serde_json::json!({
                "reason": "FieldValueInvalid",
                "field": v.path,
                "message": format!("{}; {}", v.problem, v.fix),
            })
        })
        .collect();
    serde_json::json!({
        "status": "Failure",
        "code": 400,
        "reason": "BadRequest",
        "message": decision.message(),
        "details": {"causes": causes},
    })
}
