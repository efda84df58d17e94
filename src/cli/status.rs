//! The server's status API read from the command line, through the API server's service proxy
//! (`/api/v1/namespaces/NS/services/https:SERVICE:443/proxy/…`), with the user's credentials:
//! `GET /apps`, page by page.
//!
//! Paging: with `limit`, the server answers one page in (namespace, name) order and, when more
//! remain, the header `x-ksvc-webhook-continue: TOKEN`, passed back as `continue=TOKEN` with the
//! same filters. No header: that was the last page (a server that does not page answers
//! everything at once, without the header). Thin: builds requests, follows pages, words
//! failures; never writes.

use std::time::Duration;

use axum::http::{Request, StatusCode};
use clap::Args;
use kube::Client;
use serde_json::Value;

use crate::cluster::errors;
use crate::flags;
use crate::watch::hub::AppRecord;

/// The header that carries the token of the next page.
pub const CONTINUE_HEADER: &str = "x-ksvc-webhook-continue";

/// How long one page may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Where the server's Service is, and how many apps a page holds.
#[derive(Debug, Clone, Args)]
pub struct StatusApiArgs {
    /// The namespace the webhook is installed in (its Service).
    #[arg(long = "webhook-namespace", env = "KSVC_WEBHOOK_NAMESPACE",
          default_value = "ksvc-system", value_parser = flags::parse_dns_label)]
    pub webhook_namespace: String,
    /// The Service of the status API, which answers `/apps` (the controller part's; the
    /// admission Service `ksvc-webhook` of an all-in-one install).
    #[arg(long = "webhook-service", env = "KSVC_WEBHOOK_SERVICE", default_value = "ksvc-webhook-controller",
          value_parser = super::parse_service_name)]
    pub webhook_service: String,
    /// Read `/apps` in pages of this many apps (as kubectl's `--chunk-size`).
    #[arg(long, env = "KSVC_WEBHOOK_CHUNK_SIZE", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub chunk_size: u32,
}

/// The proxy path of the status API behind `service` in `namespace`.
pub fn proxy_path(namespace: &str, service: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/services/https:{service}:443/proxy")
}

/// Why `/apps` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server answered for itself (no such Service, no endpoints, may not proxy).
    #[error("cannot read the server's report through Service {at}: {source}")]
    ApiServer {
        at: String,
        #[source]
        source: errors::Error,
    },
    /// The status API asked for a token, which the API server's proxy does not pass on.
    #[error(
        "the status API behind Service {at} asks for a token, and the API server's service proxy \
         passes none on, so its report cannot be read from here; judge offline with the \
         server's catalogue and policy flags instead: kubectl get ksvc -A -o yaml | \
         ksvc-webhook drift -f - --sidecars-from-cluster (or read the ksvc_webhook_drift_apps \
         gauge)"
    )]
    NeedsToken { at: String },
    /// The status API refused, in its own words.
    #[error("the status API behind Service {at} answers {code}: {message}")]
    Refused {
        at: String,
        code: u16,
        message: String,
    },
    /// No answer, or one that is not a list of apps.
    #[error("cannot read the server's report through Service {at}: {why}")]
    Unreadable { at: String, why: String },
}

/// Every app of `/apps` (of `namespace`, when given), following the pages.
pub async fn apps(
    client: &Client,
    server: &str,
    args: &StatusApiArgs,
    namespace: Option<&str>,
) -> Result<Vec<AppRecord>, Error> {
    let mut all = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let (page, token) = page(client, server, args, namespace, next.as_deref()).await?;
        all.extend(page);
        match token {
            Some(token) => next = Some(token),
            None => return Ok(all),
        }
    }
}

/// One page of `/apps`, and the token of the next when there is one.
async fn page(
    client: &Client,
    server: &str,
    args: &StatusApiArgs,
    namespace: Option<&str>,
    from: Option<&str>,
) -> Result<(Vec<AppRecord>, Option<String>), Error> {
    let at = format!("{}/{}", args.webhook_namespace, args.webhook_service);
    let unreadable = |why: String| Error::Unreadable {
        at: at.clone(),
        why,
    };
    let mut query = form_urlencoded::Serializer::new(String::new());
    query.append_pair("limit", &args.chunk_size.to_string());
    if let Some(ns) = namespace {
        query.append_pair("namespace", ns);
    }
    if let Some(token) = from {
        query.append_pair("continue", token);
    }
    let path = format!(
        "{}/apps?{}",
        proxy_path(&args.webhook_namespace, &args.webhook_service),
        query.finish()
    );
    let (parts, bytes) = match get(client, path, TIMEOUT).await {
        Ok(answer) => answer,
        Err(Unanswered::Call(err)) => {
            return Err(Error::ApiServer {
                at,
                source: errors::Error::from_kube(&err, server),
            });
        }
        Err(other) => return Err(unreadable(other.to_string())),
    };
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let code = parts.status;
    if body["kind"] == "Status" {
        let status: kube::core::Status = serde_json::from_value(body).map_err(|e| {
            unreadable(format!("the API server's answer {code} does not read: {e}"))
        })?;
        let source = errors::Error::from_kube(&kube::Error::Api(status.boxed()), server);
        return Err(Error::ApiServer { at, source });
    }
    match code {
        StatusCode::OK => {}
        StatusCode::UNAUTHORIZED => return Err(Error::NeedsToken { at }),
        code => {
            return Err(Error::Refused {
                at,
                code: code.as_u16(),
                message: body["error"].as_str().map_or_else(
                    || String::from_utf8_lossy(&bytes).into_owned(),
                    str::to_owned,
                ),
            });
        }
    }
    let records: Vec<AppRecord> = serde_json::from_value(body)
        .map_err(|e| unreadable(format!("its answer is not a list of apps: {e}")))?;
    let token = parts
        .headers
        .get(CONTINUE_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    Ok((records, token))
}

/// Why a [`get`] has no answer.
pub(crate) enum Unanswered {
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

/// `GET path` on the API server (a service proxy path, for `app`, `drift` and `check`) within
/// `limit`: the answer's head and its whole body.
pub(crate) async fn get(
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
