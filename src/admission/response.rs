//! PURE: the response side of a review — a [`Decision`] encoded as the AdmissionReview
//! kube-apiserver expects (the uid echoed, `allowed`, a base64 JSONPatch absent when nothing
//! changes, a `status` listing every violation on rejection, warnings), and the [`Summary`] the
//! server logs and counts. [`answer`] is the one answer builder of both review routes.
//!
//! When the webhook fails inside (the spec SHA cannot be computed, the patch cannot be
//! serialized) it never answers a wrong value: it denies the request with `allowed: false` and
//! a status of code 500, `InternalError`, that says what failed, and [`Summary::failure`]
//! carries the same words for the server's error log. Never decodes or decides.

use base64::Engine as _;
use serde::Serialize;
use serde_json::Value;

use super::decision::Decision;
use super::request::{REVIEW_API_VERSION, Request};
use crate::json;

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
    /// The kind of the object under review (`Service`, `Revision`), empty when not given.
    pub kind: String,
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
            kind: request
                .kind
                .as_ref()
                .map(|k| k.kind.clone())
                .unwrap_or_default(),
            namespace: request.namespace.clone().unwrap_or_default(),
            name: request.name.clone().unwrap_or_default(),
            dry_run: request.dry_run.unwrap_or(false),
            ..Self::default()
        }
    }
}

/// The answer for `decision` on the request `summary` describes, and the summary completed
/// with what was decided. A response that cannot be written is answered by
/// [`failure_response`] and summarized as that failure.
pub fn answer(summary: Summary, decision: &Decision) -> Reviewed {
    match encode(&summary.uid, decision) {
        Ok(body) => Reviewed {
            body,
            summary: Summary {
                allowed: decision.allowed,
                patch_ops: decision.patch.len(),
                rejected_rules: decision.violations.iter().map(|v| v.rule).collect(),
                failure: decision.failure.clone(),
                ..summary
            },
        },
        Err(err) => {
            let failure = err.to_string();
            Reviewed {
                body: failure_response(&summary.uid, &failure),
                summary: Summary {
                    allowed: false,
                    failure: Some(failure),
                    ..summary
                },
            }
        }
    }
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
    let patch = decision.patch.json().filter(|_| !decision.patch.is_empty());
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
