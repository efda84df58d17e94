//! The fake's delegated authentication and authorization: `POST tokenreviews` and
//! `POST subjectaccessreviews` answered from the tokens and grants a test sets with
//! [`FakeApi::add_token`] and [`FakeApi::grant`], and `POST selfsubjectaccessreviews` for the
//! impersonated user (`Impersonate-User`) from [`FakeApi::allow`] (kept as `fake-tokens` /
//! `fake-grants` / `fake-rbac` objects in the fake's store, so the requests are recorded and
//! counted like any other).

use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::FakeApi;

const TOKENS: &str = "fake-tokens";
const GRANTS: &str = "fake-grants";
const RBAC: &str = "fake-rbac";

impl FakeApi {
    /// Accept `token` as `user` (member of `groups`) in TokenReviews.
    pub fn add_token(&self, token: &str, user: &str, groups: &[&str]) {
        self.put(
            TOKENS,
            json!({"metadata": {"name": token}, "user": user, "groups": groups}),
        );
    }

    /// Let `user` `verb` Knative Services in `namespace` (`None`: every namespace).
    pub fn grant(&self, user: &str, verb: &str, namespace: Option<&str>) {
        self.put(
            GRANTS,
            json!({"metadata": {"name": grant_name(user, verb, namespace)},
                   "user": user, "verb": verb, "namespace": namespace}),
        );
    }

    /// Take back a [`grant`](Self::grant).
    pub fn revoke(&self, user: &str, verb: &str, namespace: Option<&str>) {
        self.remove(GRANTS, "", &grant_name(user, verb, namespace));
    }

    /// Let `user` `verb` `resource` of API group `group` (`""`: core), any name, any namespace,
    /// in SelfSubjectAccessReviews.
    pub fn allow(&self, user: &str, group: &str, resource: &str, verb: &str) {
        self.put(
            RBAC,
            json!({"metadata": {"name": format!("{user}.{verb}.{resource}.{group}")},
                   "user": user, "group": group, "resource": resource, "verb": verb}),
        );
    }

    /// Let `user` `get` the non-resource URL `path`.
    pub fn grant_path(&self, user: &str, path: &str) {
        self.put(
            GRANTS,
            json!({"metadata": {"name": format!("{user}.get.{path}")},
                   "user": user, "verb": "get", "path": path}),
        );
    }
}

fn grant_name(user: &str, verb: &str, namespace: Option<&str>) -> String {
    format!("{user}.{verb}.{}", namespace.unwrap_or("*"))
}

/// The answer to a review request, `None` for any other request.
pub(super) fn answer(
    fake: &FakeApi,
    method: &Method,
    resource: &str,
    headers: &HeaderMap,
    body: &Value,
) -> Option<Response> {
    let status = match (method, resource) {
        (&Method::POST, "tokenreviews") => token_review(fake, body),
        (&Method::POST, "subjectaccessreviews") => access_review(fake, body),
        (&Method::POST, "selfsubjectaccessreviews") => self_access_review(fake, headers, body),
        _ => return None,
    };
    let mut review = body.clone();
    review["status"] = status;
    Some(axum::Json(review).into_response())
}

fn token_review(fake: &FakeApi, body: &Value) -> Value {
    let token = body["spec"]["token"].as_str().unwrap_or_default();
    match fake.get(TOKENS, "", token) {
        Some(known) => json!({"authenticated": true,
            "user": {"username": known["user"], "uid": format!("uid-{}", known["user"].as_str().unwrap()),
                     "groups": known["groups"]}}),
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    }
}

fn access_review(fake: &FakeApi, body: &Value) -> Value {
    let spec = &body["spec"];
    let resource = &spec["resourceAttributes"];
    let wanted_path = spec["nonResourceAttributes"]["path"].as_str();
    let allowed = fake.all(GRANTS).iter().any(|g| {
        g["user"] == spec["user"]
            && match wanted_path {
                Some(path) => g["path"] == path && spec["nonResourceAttributes"]["verb"] == "get",
                None => {
                    resource["group"] == "serving.knative.dev"
                        && resource["resource"] == "services"
                        && g["verb"] == resource["verb"]
                        && g["path"].is_null()
                        && (g["namespace"].is_null() || g["namespace"] == resource["namespace"])
                }
            }
    });
    match allowed {
        true => json!({"allowed": true, "reason": "granted by the test"}),
        false => json!({"allowed": false}),
    }
}

fn self_access_review(fake: &FakeApi, headers: &HeaderMap, body: &Value) -> Value {
    let user = super::admit::user(headers).username;
    let wanted = &body["spec"]["resourceAttributes"];
    let allowed = fake.all(RBAC).iter().any(|g| {
        g["user"] == user.as_str()
            && g["group"] == wanted["group"]
            && g["resource"] == wanted["resource"]
            && g["verb"] == wanted["verb"]
    });
    json!({"allowed": allowed})
}
