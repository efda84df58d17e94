//! The two API calls of the status API's access checks, each bounded by a timeout: a
//! TokenReview (who is this token, for which audiences?) and a SubjectAccessReview (may this
//! user do that?), with their answers mapped to [`Identity`] and [`Access`]. Decides nothing
//! itself and caches nothing (that is [`super::flight`]'s); counts every call in
//! [`StatusMetrics`]; logs the API server's reasons at debug, and never passes them on.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

use super::flight::Answer;
use crate::admission::naming::floor_char_boundary;
use crate::apps::auth::access::{Access, Attributes, GROUP, Identity, RESOURCE, User};
use crate::apps::metrics::StatusMetrics;
use crate::cluster::rbac::ApiCall;
use crate::report::error_chain;

/// The API calls of this module (the RBAC test compares them with the manifests: the built-in
/// ClusterRole `system:auth-delegator` grants exactly these).
pub const API_CALLS: &[ApiCall] = &[
    ApiCall::new("authentication.k8s.io", "tokenreviews", "create"),
    ApiCall::new("authorization.k8s.io", "subjectaccessreviews", "create"),
];

/// The longest authorizer's reason kept with a denial (it is logged, never sent on).
const MAX_REASON_BYTES: usize = 256;

/// What every call needs: a client, its timeout, and where it is counted.
#[derive(Clone)]
pub(super) struct Call {
    pub client: Client,
    pub timeout: Duration,
    pub metrics: StatusMetrics,
}

/// Who `token` belongs to, as the API server says. With `audiences`, the token must be valid
/// for one of them, and the answer must say so (an authenticator that ignores audiences
/// answers none, and the token is refused).
pub(super) async fn token_review(
    call: Call,
    token: String,
    audiences: Arc<[String]>,
) -> Answer<Identity> {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token,
            audiences: (!audiences.is_empty()).then(|| audiences.to_vec()),
        },
        ..TokenReview::default()
    };
    let api: Api<TokenReview> = Api::all(call.client);
    let metrics = call.metrics;
    let sent = crate::cluster::call::timed("create a TokenReview", call.timeout, async {
        api.create(&PostParams::default(), &review).await
    });
    match sent.await {
        Ok(done) => {
            let identity = identity_of(done.status.unwrap_or_default(), &audiences);
            let result = match identity {
                Identity::User(_) => "allowed",
                Identity::Rejected => "denied",
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

fn identity_of(status: TokenReviewStatus, audiences: &[String]) -> Identity {
    let answered = status.audiences.unwrap_or_default();
    let for_us = audiences.is_empty() || answered.iter().any(|a| audiences.contains(a));
    match (status.authenticated, status.user) {
        (Some(true), _) if !for_us => {
            tracing::debug!(answered = ?answered, accepted = ?audiences, "TokenReview: the token is for none of the accepted audiences");
            Identity::Rejected
        }
        (Some(true), Some(user)) => match user.username {
            Some(username) if !username.is_empty() => Identity::User(User {
                username,
                uid: user.uid,
                groups: user.groups.unwrap_or_default(),
                extra: user.extra.unwrap_or_default(),
            }),
            _ => {
                tracing::debug!("TokenReview: the token names no user");
                Identity::Rejected
            }
        },
        _ => {
            tracing::debug!(error = ?status.error, "TokenReview: the token is not accepted");
            Identity::Rejected
        }
    }
}

/// The authorizer's reason, cut to [`MAX_REASON_BYTES`].
fn reason_of(reason: Option<String>) -> Option<String> {
    let mut reason = reason.filter(|r| !r.is_empty())?;
    reason.truncate(floor_char_boundary(&reason, MAX_REASON_BYTES));
    Some(reason)
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
pub(super) async fn access_review(call: Call, review: SubjectAccessReview) -> Answer<Access> {
    let api: Api<SubjectAccessReview> = Api::all(call.client);
    let metrics = call.metrics;
    let sent = crate::cluster::call::timed("create a SubjectAccessReview", call.timeout, async {
        api.create(&PostParams::default(), &review).await
    });
    match sent.await {
        Ok(done) => {
            let status = done.status.unwrap_or_default();
            let access = match status.allowed && status.denied != Some(true) {
                true => Access::Allowed,
                false => Access::Denied(reason_of(status.reason)),
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
