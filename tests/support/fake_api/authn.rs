//! The fake's delegated authentication and authorization: `POST tokenreviews` and
//! `POST subjectaccessreviews` answered from the tokens and grants a test sets with
//! [`FakeApi::add_token`] and [`FakeApi::grant`], and `POST selfsubjectaccessreviews` for the
//! impersonated user (`Impersonate-User`) from [`FakeApi::allow`] (kept as `fake-tokens` /
//! `fake-grants` / `fake-rbac` objects in the fake's store, so the requests are recorded and
//! counted like any other). Tokens carry audiences as the API server checks them: a
//! TokenReview's `spec.audiences` (or, without it, the API server's own [`API_AUDIENCE`]) must
//! meet the token's, and the answer names the audiences both have;
//! [`FakeApi::add_audience_unaware_token`] plays an authenticator that ignores audiences.

use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::FakeApi;

const TOKENS: &str = "fake-tokens";
const GRANTS: &str = "fake-grants";
const RBAC: &str = "fake-rbac";

/// The API server's own audience: that of every token [`FakeApi::add_token`] adds.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// The fake authenticator's words for a token it rejects (a test checks they are not relayed).
pub const REJECTION: &str = "invalid bearer token: fake authenticator has no such token";

impl FakeApi {
    /// Accept `token` as `user` (member of `groups`) in TokenReviews, for the API server's
    /// audience.
    pub fn add_token(&self, token: &str, user: &str, groups: &[&str]) {
        self.add_token_for(token, user, groups, &[API_AUDIENCE]);
    }

    /// Accept `token` as `user` in TokenReviews for `audiences` (as `kubectl create token
    /// --audience` mints them).
    pub fn add_token_for(&self, token: &str, user: &str, groups: &[&str], audiences: &[&str]) {
        self.put(
            TOKENS,
            json!({"metadata": {"name": token}, "user": user, "groups": groups, "audiences": audiences}),
        );
    }

    /// Accept `token` as `user` whatever audience is asked, answering none (an authenticator
    /// that does not know about audiences, such as some webhook token authenticators).
    pub fn add_audience_unaware_token(&self, token: &str, user: &str) {
        self.put(
            TOKENS,
            json!({"metadata": {"name": token}, "user": user, "groups": [], "unaware": true}),
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
    // As kube-apiserver answers a token it rejects: `authenticated` left out (false), an
    // empty `user`, the reason in `error`.
    let Some(known) = fake.get(TOKENS, "", token) else {
        return json!({"user": {}, "error": REJECTION});
    };
    let user = json!({"username": known["user"], "uid": format!("uid-{}", known["user"].as_str().unwrap()),
                      "groups": known["groups"]});
    if known["unaware"] == true {
        return json!({"authenticated": true, "user": user});
    }
    let asked: Vec<Value> = match body["spec"]["audiences"].as_array() {
        Some(asked) if !asked.is_empty() => asked.clone(),
        _ => vec![json!(API_AUDIENCE)],
    };
    let mine = known["audiences"].as_array().cloned().unwrap_or_default();
    let both: Vec<&Value> = asked.iter().filter(|a| mine.contains(a)).collect();
    match both.is_empty() {
        true => json!({"user": {},
                       "error": format!("[{REJECTION}, token audiences {mine:?} is invalid for the target audiences {asked:?}]")}),
        false => json!({"authenticated": true, "user": user, "audiences": both}),
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
