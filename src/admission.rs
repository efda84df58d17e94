//! PURE: AdmissionReview bytes in, AdmissionReview bytes out.
//!
//! [`review`] decodes an `admission.k8s.io/v1` AdmissionReview, [`decide`]s on its request, and
//! encodes the response kube-apiserver expects: the uid echoed, `allowed`, a base64 JSONPatch
//! (absent when nothing changes), a `status` listing every violation on rejection, and warnings.
//! Knative Services on CREATE and UPDATE are decided on; everything else is allowed unchanged.

use std::sync::Arc;

use base64::Engine as _;
use json_patch::PatchOperation;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::edit::Editor;
use crate::ksvc;
use crate::mutate::{self, Settings, Target};
use crate::naming::{self, DomainTemplate};
use crate::node::{self, Map, Node};
use crate::sidecars::{self, Catalogue};
use crate::stop;
use crate::validate::{self, Operation, Violation};

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
}

/// The request part of an AdmissionReview: the fields the decision reads. Decoded from a review,
/// the objects borrow from its bytes.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request<'a> {
    pub uid: String,
    #[serde(default)]
    pub kind: Option<GroupVersionKind>,
    #[serde(default)]
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub operation: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// The object admitted; decoded from a review, skimmed as [`node::parse_object`] says.
    #[serde(default, borrow, deserialize_with = "skimmed")]
    pub object: Option<Node<'a>>,
    /// The stored object, on UPDATE. Decoded from a review, only its labels are kept: they are
    /// all the rules read (identity labels are immutable), and skipping the rest halves the cost
    /// of an UPDATE.
    #[serde(default, borrow, deserialize_with = "labels_only")]
    pub old_object: Option<Node<'a>>,
    #[serde(default)]
    pub dry_run: Option<bool>,
}

fn skimmed<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<Node<'de>>, D::Error> {
    node::parse_object(de).map(|object| (!object.is_null()).then_some(object))
}

fn labels_only<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<Node<'de>>, D::Error> {
    #[derive(Deserialize)]
    struct Stored<'a> {
        #[serde(default, borrow)]
        metadata: StoredMeta<'a>,
    }
    #[derive(Default, Deserialize)]
    struct StoredMeta<'a> {
        #[serde(default, borrow)]
        labels: Node<'a>,
    }
    let stored = Option::<Stored>::deserialize(de)?;
    Ok(stored.map(|s| {
        let mut metadata = Map::new();
        metadata.insert("labels", s.metadata.labels);
        let mut object = Map::new();
        object.insert("metadata", Node::Object(metadata));
        Node::Object(object)
    }))
}

impl Request<'static> {
    /// A request to admit `object`, a Knative Service, by `operation` (`CREATE`, `UPDATE`) in
    /// `namespace`, as kube-apiserver would send it: what the offline CLI and the tests decide on.
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
            object: Some(Node::from_json(object)),
            old_object: old_object.map(Node::from_json),
            ..Self::default()
        }
    }
}

/// `request.kind` of a review.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, Default)]
pub struct Decision<'a> {
    pub allowed: bool,
    /// Why the request was rejected (empty when allowed).
    pub violations: Vec<Violation>,
    /// The edits, as JSON Patch operations (empty when nothing changes).
    pub ops: Vec<PatchOperation>,
    pub warnings: Vec<String>,
    /// The object after the edits, when the request carried a KService that was allowed.
    pub object: Option<Node<'a>>,
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
    let sidecar_plan = sidecars::plan(&object, &policy.sidecars).unwrap_or_else(|found| {
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
    let restore = stop::restore_record(&object).ok().flatten();
    let mut ed = Editor::new(&mut object);
    let target = Target {
        namespace: &namespace,
        identity: identity.as_ref(),
        app_name: app_name.as_ref(),
        restore,
        sidecars: sidecar_plan,
    };
    let mut warnings = mutate::inject(&mut ed, target, &policy.mutate);
    let ops = ed.into_ops();
    if let Some(app) = app_name.as_ref().filter(|a| a.hashed) {
        warnings.push(format!(
            "name hashed to {:?} to fit 63 characters: {{app_fqdn}}-based calls will not resolve this app by its app name",
            app.name
        ));
    }
    Decision {
        allowed: true,
        violations: Vec::new(),
        ops,
        warnings,
        object: Some(object),
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
}

/// A body that is not an AdmissionReview: the server answers 400.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("body is not an admission.k8s.io/v1 AdmissionReview: {0}")]
    Decode(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn<'a> {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(borrow)]
    request: Option<Request<'a>>,
}

/// Decode an AdmissionReview and check it is one this webhook answers.
pub fn decode(body: &[u8]) -> Result<Request<'_>, ReviewError> {
    // sonic-rs follows its message with lines that point into the body: keep the first.
    let review: ReviewIn = sonic_rs::from_slice(body).map_err(|e| {
        let message = e.to_string();
        ReviewError::Decode(message.lines().next().unwrap_or_default().to_string())
    })?;
    if review.api_version != REVIEW_API_VERSION || review.kind != "AdmissionReview" {
        return Err(ReviewError::Decode(format!(
            "apiVersion {:?} and kind {:?} (want {REVIEW_API_VERSION:?} and \"AdmissionReview\")",
            review.api_version, review.kind
        )));
    }
    let request = review
        .request
        .ok_or_else(|| ReviewError::Decode("request is missing".into()))?;
    if request.uid.is_empty() {
        return Err(ReviewError::Decode("request.uid is missing".into()));
    }
    Ok(request)
}

/// Decide on one AdmissionReview: the bytes kube-apiserver sent in, the bytes to answer with.
pub fn review(body: &[u8], policy: &Policy) -> Result<Reviewed, ReviewError> {
    let request = decode(body)?;
    let summary_base = Summary {
        uid: request.uid.clone(),
        operation: request.operation.clone(),
        namespace: request.namespace.clone().unwrap_or_default(),
        name: request.name.clone().unwrap_or_default(),
        dry_run: request.dry_run.unwrap_or(false),
        ..Summary::default()
    };
    let decision = decide(request, policy);
    let body = encode(&summary_base.uid, &decision);
    let name = match (&summary_base.name, &decision.object) {
        (n, Some(obj)) if n.is_empty() => ksvc::name(obj).to_string(),
        (n, _) => n.clone(),
    };
    Ok(Reviewed {
        body,
        summary: Summary {
            name,
            allowed: decision.allowed,
            patch_ops: decision.ops.len(),
            rejected_rules: decision.violations.iter().map(|v| v.rule).collect(),
            ..summary_base
        },
    })
}

/// The AdmissionReview response for `decision`, echoing `uid`.
///
/// Written straight into one buffer, the patch base64-encoded in place: a derived serializer
/// would copy the patch once more and scan every base64 byte for characters to escape. The
/// members come in the order the derived form had: `uid`, `allowed`, `status`, `patch`,
/// `patchType`, `warnings`.
pub fn encode(uid: &str, decision: &Decision) -> Vec<u8> {
    let patch =
        (!decision.ops.is_empty()).then(|| serde_json::to_vec(&decision.ops).unwrap_or_default());
    let mut out = Vec::with_capacity(160 + patch.as_ref().map_or(0, |p| p.len() * 4 / 3 + 4));
    out.extend_from_slice(b"{\"apiVersion\":\"");
    out.extend_from_slice(REVIEW_API_VERSION.as_bytes());
    out.extend_from_slice(b"\",\"kind\":\"AdmissionReview\",\"response\":{\"uid\":");
    json_into(&mut out, uid);
    out.extend_from_slice(match decision.allowed {
        true => b",\"allowed\":true",
        false => b",\"allowed\":false",
    });
    if !decision.allowed {
        out.extend_from_slice(b",\"status\":");
        json_into(&mut out, &rejection_status(decision));
    }
    if let Some(patch) = patch {
        out.extend_from_slice(b",\"patch\":\"");
        let engine = &base64::engine::general_purpose::STANDARD;
        let start = out.len();
        out.resize(
            start + base64::encoded_len(patch.len(), true).unwrap_or(0),
            0,
        );
        let written = engine.encode_slice(&patch, &mut out[start..]).unwrap_or(0);
        out.truncate(start + written);
        out.extend_from_slice(b"\",\"patchType\":\"JSONPatch\"");
    }
    if !decision.warnings.is_empty() {
        out.extend_from_slice(b",\"warnings\":");
        json_into(&mut out, &decision.warnings);
    }
    out.extend_from_slice(b"}}");
    out
}

/// Append `value` as JSON; the values written here (strings, `Value`s) always serialize.
fn json_into(out: &mut Vec<u8>, value: &(impl Serialize + ?Sized)) {
    let _ = serde_json::to_writer(out, value);
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
