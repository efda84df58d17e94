//! Why a status request is not served, and the HTTP answer that says so: 401, 403, 429 or 503,
//! each with a JSON `{"error": …}` body in this server's own words (never the authenticator's)
//! and `WWW-Authenticate` or `Retry-After` where HTTP asks for them.
//!
//! Decides nothing; the reviewer and the routes pick the refusal.

use std::time::Duration;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::apps::auth::access::Attributes;

/// Seconds a client is told to wait after a 503 (the API server could not be asked, or too
/// many reviews are in flight) or a 429 of the stream limits.
pub const RETRY_AFTER_SECS: u64 = 5;

/// Which review budget a rate-limited request ran out of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// TokenReviews of tokens this server has not seen (one budget for everyone).
    NewTokens,
    /// TokenReviews of tokens this server has not seen, sent from one address (its share of
    /// [`Budget::NewTokens`]).
    Address,
    /// The reviews of one caller.
    Caller,
}

impl Budget {
    /// The metric label of the budget.
    pub fn label(self) -> &'static str {
        match self {
            Budget::NewTokens => "new_tokens",
            Budget::Address => "address",
            Budget::Caller => "caller",
        }
    }
}

/// Why a request is not served.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refusal {
    /// 401: no token, or one the API server does not accept (in this server's words).
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// 403: the caller lacks the access the request needs.
    #[error(
        "forbidden: {user} may not read this; it needs {needs} (a ClusterRole and RoleBinding that grant it are in examples/status-reader-clusterrole.yaml, explained in docs/status-api.md)"
    )]
    Forbidden { user: String, needs: Attributes },
    /// 429: the request would send more reviews than its budget allows now.
    #[error("{} right now; retry in {}s", budget_text(*.budget), retry_secs(*.retry_after))]
    RateLimited {
        budget: Budget,
        retry_after: Duration,
    },
    /// 503: as many reviews as allowed are in flight already.
    #[error("too many access reviews are in flight right now; retry shortly")]
    Overloaded,
    /// 503: the API server could not be asked (why is logged, not told to an unknown caller).
    #[error("cannot check access with the API server right now; retry shortly")]
    Unavailable(String),
}

fn budget_text(budget: Budget) -> &'static str {
    match budget {
        Budget::NewTokens => "too many new tokens are being checked",
        Budget::Address => "too many new tokens from your address are being checked",
        Budget::Caller => "you are sending too many requests that need an access review",
    }
}

/// Whole seconds to wait, at least one.
fn retry_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

impl Refusal {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Refusal::Forbidden { .. } => StatusCode::FORBIDDEN,
            Refusal::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Refusal::Overloaded | Refusal::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The `Retry-After` seconds of the refusal, `None` when retrying cannot help.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Refusal::RateLimited { retry_after, .. } => Some(retry_secs(*retry_after)),
            Refusal::Overloaded | Refusal::Unavailable(_) => Some(RETRY_AFTER_SECS),
            Refusal::Unauthenticated(_) | Refusal::Forbidden { .. } => None,
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = Json(json!({ "error": self.to_string() }));
        let mut response = (self.status(), body).into_response();
        let headers = response.headers_mut();
        if let Refusal::Unauthenticated(_) = self {
            let realm = HeaderValue::from_static(r#"Bearer realm="ksvc-webhook""#);
            headers.insert(header::WWW_AUTHENTICATE, realm);
        }
        if let Some(secs) = self.retry_after() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_round_up_to_whole_seconds() {
        let cases = [(0, 1), (1, 1), (999, 1), (1_000, 1), (1_001, 2), (4_500, 5)];
        for (millis, secs) in cases {
            assert_eq!(retry_secs(Duration::from_millis(millis)), secs, "{millis}");
        }
    }

    #[test]
    fn every_refusal_says_how_to_go_on() {
        let limited = Refusal::RateLimited {
            budget: Budget::Caller,
            retry_after: Duration::from_millis(1_500),
        };
        assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(limited.retry_after(), Some(2));
        assert!(limited.to_string().ends_with("retry in 2s"), "{limited}");
        assert_eq!(Refusal::Overloaded.retry_after(), Some(RETRY_AFTER_SECS));
        assert_eq!(
            Refusal::Overloaded.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(Refusal::Unauthenticated("x".into()).retry_after(), None);
    }

    #[test]
    fn the_forbidden_message_cites_files_that_exist() {
        let refusal = Refusal::Forbidden {
            user: "u".into(),
            needs: Attributes::Path("/metrics".into()),
        };
        let text = refusal.to_string();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let cited: Vec<&str> = text
            .split([' ', ',', '(', ')'])
            .filter(|w| w.ends_with(".yaml") || w.ends_with(".md"))
            .collect();
        assert_eq!(cited.len(), 2, "{text}");
        for path in cited {
            assert!(root.join(path).is_file(), "{path} is cited but missing");
        }
    }
}
