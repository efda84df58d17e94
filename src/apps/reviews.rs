//! The two API calls of the status API's access checks, each bounded by a timeout: a
//! TokenReview (who is this token?) and a SubjectAccessReview (may this user do that?), with
//! their answers mapped to [`Identity`] and [`Access`]. Decides nothing itself and caches
//! nothing (that is [`super::auth`]'s); counts every call in [`StatusMetrics`].

use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

use super::access::{Access, Attributes, GROUP, Identity, RESOURCE, User};
use super::auth::{Answer, StatusMetrics};
use crate::cluster::rbac::ApiCall;
use crate::report::error_chain;

/// The API calls of this module (the RBAC test compares them with the manifests: the built-in
/// ClusterRole `system:auth-delegator` grants exactly these).
pub const API_CALLS: &[ApiCall] = &[
    ApiCall::new("authentication.k8s.io", "tokenreviews", "create"),
    ApiCall::new("authorization.k8s.io", "subjectaccessreviews", "create"),
];

/// Who `token` belongs to, as the API server says.
pub(super) async fn token_review(
    client: Client,
    token: String,
    timeout: Duration,
    metrics: StatusMetrics,
) -> Answer<Identity> {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token,
            audiences: None,
        },
        ..TokenReview::default()
    };
    let api: Api<TokenReview> = Api::all(client);
    let call = crate::cluster::call::timed("create a TokenReview", timeout, async {
        api.create(&PostParams::default(), &review).await
    });
    match call.await {
        Ok(done) => {
            let identity = identity_of(done.status.unwrap_or_default());
            let result = match identity {
                Identity::User(_) => "allowed",
                Identity::Rejected(_) => "denied",
            };
            metrics.review("token", result);
            Ok(identity)
        }
        Err(error) => {
            metrics.review("token", "unavailable");
            tracing::warn!(error = %error_chain(&error), "TokenReview failed");
            Err(error_chain(&error))
        }
    }
}

fn identity_of(status: TokenReviewStatus) -> Identity {
    match (status.authenticated, status.user) {
        (Some(true), Some(user)) => match user.username {
            Some(username) if !username.is_empty() => Identity::User(User {
                username,
                uid: user.uid,
                groups: user.groups.unwrap_or_default(),
                extra: user.extra.unwrap_or_default(),
            }),
            _ => Identity::Rejected(Some("the token names no user".into())),
        },
        _ => Identity::Rejected(status.error),
    }
}

/// The SubjectAccessReview asking whether `user` has `needs`.
pub(super) fn review_of(user: &User, needs: &Attributes) -> SubjectAccessReview {
    let (resource_attributes, non_resource_attributes) = match needs {
        Attributes::Apps {
            verb,
            namespace,
            name,
        } => {
            let attrs = ResourceAttributes {
                group: Some(GROUP.into()),
                resource: Some(RESOURCE.into()),
                verb: Some(verb.as_str().into()),
                namespace: namespace.clone(),
                name: name.clone(),
                ..ResourceAttributes::default()
            };
            (Some(attrs), None)
        }
        Attributes::Path(path) => {
            let attrs = NonResourceAttributes {
                path: Some(path.clone()),
                verb: Some("get".into()),
            };
            (None, Some(attrs))
        }
    };
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.username.clone()),
            uid: user.uid.clone(),
            groups: Some(user.groups.clone()),
            extra: Some(user.extra.clone()).filter(|e| !e.is_empty()),
            resource_attributes,
            non_resource_attributes,
        },
        ..SubjectAccessReview::default()
    }
}

/// Whether `user` has `needs`, as the API server says.
pub(super) async fn access_review(
    client: Client,
    review: SubjectAccessReview,
    timeout: Duration,
    metrics: StatusMetrics,
) -> Answer<Access> {
    let api: Api<SubjectAccessReview> = Api::all(client);
    let call = crate::cluster::call::timed("create a SubjectAccessReview", timeout, async {
        api.create(&PostParams::default(), &review).await
    });
    match call.await {
        Ok(done) => {
            let status = done.status.unwrap_or_default();
            let access = match status.allowed && status.denied != Some(true) {
                true => Access::Allowed,
                false => Access::Denied(status.reason.filter(|r| !r.is_empty())),
            };
            let result = match access {
                Access::Allowed => "allowed",
                Access::Denied(_) => "denied",
            };
            metrics.review("access", result);
            Ok(access)
        }
        Err(error) => {
            metrics.review("access", "unavailable");
            tracing::warn!(error = %error_chain(&error), "SubjectAccessReview failed");
            Err(error_chain(&error))
        }
    }
}
