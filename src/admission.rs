//! PURE: AdmissionReview bytes in, AdmissionReview bytes out.
//!
//! (skeleton: the decision is filled in by the admission core)

use serde::{Deserialize, Serialize};

/// Cluster-wide settings the decision depends on.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub allow_zero_initial_scale: bool,
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
struct Envelope {
    request: Option<Request>,
}

#[derive(Deserialize)]
struct Request {
    uid: String,
}

/// Decide on one AdmissionReview.
pub fn review(body: &[u8], _policy: &Policy) -> Result<Reviewed, ReviewError> {
    let env: Envelope =
        serde_json::from_slice(body).map_err(|e| ReviewError::Decode(e.to_string()))?;
    let req = env
        .request
        .ok_or_else(|| ReviewError::Decode("missing request".into()))?;
    let body = serde_json::to_vec(&serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": req.uid, "allowed": true}
    }))
    .map_err(|e| ReviewError::Decode(e.to_string()))?;
    Ok(Reviewed {
        body,
        summary: Summary {
            uid: req.uid,
            allowed: true,
            ..Summary::default()
        },
    })
}
