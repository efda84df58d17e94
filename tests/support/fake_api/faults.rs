//! The faults the fake serves instead of an answer: one [`Fault`] injected into the next calls
//! of one verb on one resource ([`FakeApi::inject`]), or every call lost while the API server is
//! [`FakeApi::unreachable`]; and the RBAC verb each request is counted under.

use std::collections::HashMap;

use axum::http::Method;
use serde_json::json;

use super::FakeApi;

/// A transient failure the fake answers a call with instead of serving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// An error `Status` with this code (403, 404, 409, 500 …). A 409 on a named object also
    /// changes it first, as the concurrent writer behind a real conflict would.
    Status(u16),
    /// An error `Status` with this code, reason and message, as a real refusal words it.
    Refusal(u16, &'static str, &'static str),
    /// 429 Too Many Requests with `Retry-After: 1`.
    Throttled,
    /// Never answer: the client's timeout ends the call.
    Hang,
    /// Send the headers, then drop the connection before the body ends.
    Drop,
}

impl Fault {
    /// Every fault the fault table covers, in its column order.
    pub const ALL: [Fault; 7] = [
        Fault::Status(403),
        Fault::Status(404),
        Fault::Status(409),
        Fault::Throttled,
        Fault::Status(500),
        Fault::Hang,
        Fault::Drop,
    ];

    /// The short name used in the fault table.
    pub fn label(self) -> String {
        match self {
            Fault::Status(code) | Fault::Refusal(code, ..) => code.to_string(),
            Fault::Throttled => "429+Retry-After".into(),
            Fault::Hang => "timeout".into(),
            Fault::Drop => "dropped".into(),
        }
    }

    pub(super) async fn answer(self) -> axum::response::Response {
        use axum::response::IntoResponse;
        let status = |code: u16, reason: &str| {
            let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": format!("{reason}: injected by the test"), "reason": reason, "code": code});
            let code = axum::http::StatusCode::from_u16(code).unwrap();
            (code, axum::Json(body)).into_response()
        };
        match self {
            Fault::Refusal(code, reason, message) => {
                let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": message, "reason": reason, "code": code});
                let code = axum::http::StatusCode::from_u16(code).unwrap();
                (code, axum::Json(body)).into_response()
            }
            Fault::Status(403) => status(403, "Forbidden"),
            Fault::Status(404) => status(404, "NotFound"),
            Fault::Status(409) => status(409, "Conflict"),
            Fault::Status(code) => status(code, "InternalError"),
            Fault::Throttled => {
                let mut response = status(429, "TooManyRequests");
                response
                    .headers_mut()
                    .insert("retry-after", axum::http::HeaderValue::from_static("1"));
                response
            }
            Fault::Hang => std::future::pending().await,
            Fault::Drop => {
                let cut = futures::stream::once(async {
                    Err::<axum::body::Bytes, _>(std::io::Error::other("connection dropped"))
                });
                axum::response::Response::builder()
                    .header("content-type", "application/json")
                    .body(axum::body::Body::from_stream(cut))
                    .unwrap()
            }
        }
    }
}

/// A fault waiting for its calls.
#[derive(Debug, Clone)]
pub(super) struct Injected {
    verb: &'static str,
    resource: String,
    name: Option<String>,
    fault: Fault,
    left: u32,
}

/// The RBAC verb of a request.
pub fn verb(method: &Method, name: Option<&str>, query: &HashMap<String, String>) -> &'static str {
    let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    match (method, name) {
        (&Method::GET, Some(_)) => "get",
        (&Method::GET, None) if watch => "watch",
        (&Method::GET, None) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, _) => "delete",
        _ => "other",
    }
}

impl FakeApi {
    /// Answer the next `times` calls of `verb` (`get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete`) on `resource` (named `name`, if given) with `fault`.
    pub fn inject(
        &self,
        verb: &'static str,
        resource: &str,
        name: Option<&str>,
        fault: Fault,
        times: u32,
    ) {
        self.inner.lock().unwrap().faults.push(Injected {
            verb,
            resource: resource.to_owned(),
            name: name.map(str::to_owned),
            fault,
            left: times,
        });
    }

    /// How many injected faults are still to be served.
    pub fn faults_left(&self) -> u32 {
        self.inner
            .lock()
            .unwrap()
            .faults
            .iter()
            .map(|f| f.left)
            .sum()
    }

    /// When the last injected fault was served: the moment the fault stopped.
    pub fn last_fault_at(&self) -> Option<std::time::Instant> {
        self.inner.lock().unwrap().last_fault
    }

    /// The fault this call gets, if one is injected for it (and counts it as served).
    pub(super) fn take_fault(
        &self,
        method: &Method,
        resource: &str,
        ns: Option<&str>,
        name: Option<&str>,
        query: &HashMap<String, String>,
    ) -> Option<Fault> {
        let verb = verb(method, name, query);
        let mut inner = self.inner.lock().unwrap();
        let injected = inner.faults.iter_mut().find(|f| {
            f.left > 0
                && f.verb == verb
                && f.resource == resource
                && f.name.as_deref().is_none_or(|n| Some(n) == name)
        })?;
        injected.left -= 1;
        let fault = injected.fault;
        inner.last_fault = Some(std::time::Instant::now());
        let key = (
            resource.to_owned(),
            ns.unwrap_or_default().to_owned(),
            name.unwrap_or_default().to_owned(),
        );
        if let (Fault::Status(409), Some(stored)) = (fault, inner.objects.get(&key).cloned()) {
            let raced = super::concurrent_write(stored);
            self.commit(&mut inner, key, "MODIFIED", raced);
        }
        Some(fault)
    }

    /// Make the API server unreachable (`true`) or reachable again: while it is, the open watches
    /// end and every request (recorded all the same) loses its connection before an answer.
    pub fn unreachable(&self, down: bool) {
        self.inner.lock().unwrap().unreachable = down;
        if down {
            self.disconnect_watches();
        }
    }

    /// Whether requests lose their connection ([`FakeApi::unreachable`]).
    pub(super) fn is_unreachable(&self) -> bool {
        self.inner.lock().unwrap().unreachable
    }
}
