//! Admission in the fake's write path (issue 13): with [`FakeApi::admit_with`], KService writes
//! (create, replace, merge patch) go through the webhook's decision and Revision deletes through
//! the revision guard, in-process, as kube-apiserver would call them. The writer is taken from the
//! `Impersonate-User` / `Impersonate-Group` headers a kube client sends when configured to
//! impersonate. Self-contained: the routes call [`service_write`] and [`revision_delete`].

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use ksvc_webhook::admission::guard::{self, Lookup};
use ksvc_webhook::admission::writers::UserInfo;
use ksvc_webhook::admission::{self, Policy, Request};
use ksvc_webhook::watch::owners;
use ksvc_webhook::watch::view::KService;
use serde_json::{Value, json};

use super::FakeApi;

/// The admission settings and what the guard saw.
#[derive(Default)]
pub(super) struct Admission {
    policy: Option<Arc<Policy>>,
    /// Messages of refused revision deletes.
    refused: Vec<String>,
    /// Revisions deleted while their Service's `status.traffic` named them.
    deleted_in_traffic: Vec<String>,
}

impl FakeApi {
    /// Run admission (the webhook's decision and the revision guard) in the write path.
    pub fn admit_with(&self, policy: Policy) {
        self.inner.lock().unwrap().admission.policy = Some(Arc::new(policy));
    }

    /// The messages of the revision deletes the guard refused.
    pub fn refused_deletes(&self) -> Vec<String> {
        self.inner.lock().unwrap().admission.refused.clone()
    }

    /// The revisions deleted while traffic named them (must stay empty).
    pub fn deleted_in_traffic(&self) -> Vec<String> {
        self.inner
            .lock()
            .unwrap()
            .admission
            .deleted_in_traffic
            .clone()
    }

    fn policy(&self) -> Option<Arc<Policy>> {
        self.inner.lock().unwrap().admission.policy.clone()
    }
}

/// The writer of a request.
pub(super) fn user(headers: &HeaderMap) -> UserInfo {
    UserInfo {
        username: headers
            .get("impersonate-user")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
        groups: headers
            .get_all("impersonate-group")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect(),
    }
}

/// kube-apiserver's answer to a write a webhook refused: the webhook's own `status` (its code,
/// at least 400; its reason; its details with the causes), the message prefixed with the
/// webhook's name.
fn denied(webhook: &str, status: &Value) -> Response {
    let code = status["code"].as_u64().unwrap_or(0).max(400);
    let mut body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("admission webhook \"{webhook}\" denied the request: {}",
                           status["message"].as_str().unwrap_or_default()),
        "code": code});
    for field in ["reason", "details"] {
        if let Some(value) = status.get(field) {
            body[field] = value.clone();
        }
    }
    let code = StatusCode::from_u16(u16::try_from(code).unwrap()).unwrap();
    (code, axum::Json(body)).into_response()
}

/// The `status` of an AdmissionReview answer on the wire.
fn answered_status(review: &[u8]) -> Value {
    let answer: Value = serde_json::from_slice(review).unwrap();
    answer["response"]["status"].clone()
}

/// A KService write: the object as admitted (the webhook's edits applied), or its refusal.
pub(super) fn service_write(
    fake: &FakeApi,
    operation: &str,
    namespace: &str,
    object: Value,
    old: Option<Value>,
    user: &UserInfo,
) -> Result<Value, Box<Response>> {
    let Some(policy) = fake.policy() else {
        return Ok(object);
    };
    let request = Request {
        user_info: user.clone(),
        ..Request::kservice("fake", operation, namespace, object, old)
    };
    let decision = admission::decide(request, &policy);
    match decision.allowed {
        true => Ok(decision.object_json().unwrap()),
        false => {
            let review = admission::encode("fake", &decision).unwrap();
            Err(Box::new(denied(
                "zz-ksvc-webhook.flyte.org",
                &answered_status(&review),
            )))
        }
    }
}

/// A Revision delete: the guard's refusal, if any. The review goes over the guard's wire format
/// (an AdmissionReview body), with what the stored Service says as the watch cache would.
pub(super) fn revision_delete(
    fake: &FakeApi,
    namespace: &str,
    name: &str,
    user: &UserInfo,
) -> Option<Response> {
    let policy = fake.policy()?;
    let revision = fake.get("revisions", namespace, name)?;
    let service = revision["metadata"]["labels"]["serving.knative.dev/service"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // The watch cache's view, over the stored Service.
    let owner = |lookup: &Lookup| {
        let stored = fake.get("services", lookup.namespace, lookup.service);
        let ksvc: Option<KService> = stored.map(|k| serde_json::from_value(k).unwrap());
        owners::owner(ksvc.as_ref(), lookup.revision)
    };
    let body = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "fake", "operation": "DELETE", "name": name, "namespace": namespace,
            "kind": {"group": "serving.knative.dev", "version": "v1", "kind": "Revision"},
            "userInfo": {"username": user.username, "groups": user.groups},
            "oldObject": revision}
    }))
    .unwrap();
    let reviewed = guard::review(&body, &policy.revision_guard, owner).unwrap();
    let routed = fake
        .get("services", namespace, &service)
        .is_some_and(|k| routes_to(&k, name));
    let mut inner = fake.inner.lock().unwrap();
    if reviewed.summary.allowed {
        if routed {
            inner.admission.deleted_in_traffic.push(name.to_owned());
        }
        return None;
    }
    let status = answered_status(&reviewed.body);
    let message = status["message"].as_str().unwrap_or_default().to_owned();
    inner.admission.refused.push(message);
    Some(denied("revision-guard.ksvc-webhook.flyte.org", &status))
}

fn routes_to(ksvc: &Value, revision: &str) -> bool {
    ksvc["status"]["traffic"]
        .as_array()
        .is_some_and(|t| t.iter().any(|e| e["revisionName"] == revision))
}
