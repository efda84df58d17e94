//! `check`'s one read through the API server's service proxy: `GET` a path of the server behind
//! its Service (`/api/v1/namespaces/NS/services/https:SERVICE:443/proxy/…`) with the user's
//! credentials, within a limit. kube-apiserver passes no `Authorization` on, so the status API's
//! 401 is an answer of the server itself: enough to tell that it is there, never a read of its
//! report (`drift` reads that through a port-forward, [`crate::cli::status`]).

use std::time::Duration;

use axum::http::Request;
use kube::Client;

/// The proxy path of the server behind `service` in `namespace`.
pub fn proxy_path(namespace: &str, service: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/services/https:{service}:443/proxy")
}

/// Why a [`get`] has no answer.
pub enum Unanswered {
    /// The path makes no request.
    Request(String),
    /// The call failed: the API server refused it or could not be reached.
    Call(kube::Error),
    /// Nothing came within the limit.
    Timeout(Duration),
}

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Request(why) => f.write_str(why),
            Self::Call(err) => write!(f, "{err}"),
            Self::Timeout(limit) => write!(f, "no answer within {}s", limit.as_secs()),
        }
    }
}

/// `GET path` on the API server within `limit`: the answer's head and its whole body.
pub async fn get(
    client: &Client,
    path: String,
    limit: Duration,
) -> Result<(axum::http::response::Parts, bytes::Bytes), Unanswered> {
    let request = Request::get(path)
        .body(kube::client::Body::empty())
        .map_err(|e| Unanswered::Request(e.to_string()))?;
    let send = async {
        let response = client.send(request).await?;
        let (parts, body) = response.into_parts();
        let bytes = http_body_util::BodyExt::collect(body).await?.to_bytes();
        Ok::<_, kube::Error>((parts, bytes))
    };
    match tokio::time::timeout(limit, send).await {
        Ok(answer) => answer.map_err(Unanswered::Call),
        Err(_) => Err(Unanswered::Timeout(limit)),
    }
}
