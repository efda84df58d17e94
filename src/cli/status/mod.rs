//! The server's report read from the command line: `GET /apps`, page by page, from the status
//! listener on the loopback of a Ready pod of the status API's Service (`serve
//! --local-status-listen`), through a port-forward with the user's credentials ([`forward`]), or
//! from `--status-url` (the user's own `kubectl port-forward`, or a server run locally).
//!
//! Not through the API server's service proxy: kube-apiserver drops the user's `Authorization`
//! there once it has authenticated the request, so the status API could only answer 401. The
//! loopback listener asks no token: reaching it takes `create pods/portforward` in the webhook's
//! namespace, which yields the pod's own ServiceAccount already (docs/status-api.md).
//!
//! Paging: with `limit`, the server answers one page in (namespace, name) order and, when more
//! remain, the header `x-ksvc-webhook-continue: TOKEN`, passed back as `continue=TOKEN` with the
//! same filters. No header: that was the last page (a server that does not page answers
//! everything at once, without the header). Every page goes over the one HTTP/1.1 connection.
//! Thin: finds the pod, builds requests, follows pages, words failures; never writes.

mod forward;

use std::time::Duration;

use axum::http::{Request, StatusCode};
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Empty, LengthLimitError, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::cluster::client::ClientArgs;
use crate::cluster::errors;
use crate::flags;
use crate::watch::hub::AppRecord;

/// The header that carries the token of the next page.
pub const CONTINUE_HEADER: &str = "x-ksvc-webhook-continue";

/// How long one page may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes one page may hold: 5,000 apps (the largest `--chunk-size`) of a few KiB each,
/// with room; a larger answer is not the status API's.
const MAX_PAGE_BYTES: usize = 64 << 20;

/// The most bytes of a refusal's text quoted in an error.
const MAX_QUOTED: usize = 256;

/// Where the server's status listener is, and how many apps a page holds.
#[derive(Debug, Clone, Args)]
pub struct StatusApiArgs {
    /// The namespace the webhook is installed in (its Service and pods).
    #[arg(long = "webhook-namespace", env = "KSVC_WEBHOOK_NAMESPACE",
          default_value = "ksvc-system", value_parser = flags::parse_dns_label)]
    pub webhook_namespace: String,
    /// The Service of the status API, whose Ready pods answer `/apps` (the controller part's;
    /// the admission Service `ksvc-webhook` of an all-in-one install).
    #[arg(long = "webhook-service", env = "KSVC_WEBHOOK_SERVICE", default_value = "ksvc-webhook-controller",
          value_parser = super::parse_service_name)]
    pub webhook_service: String,
    /// Read `/apps` in pages of this many apps (as kubectl's `--chunk-size`).
    #[arg(long, env = "KSVC_WEBHOOK_CHUNK_SIZE", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub chunk_size: u32,
    /// Read the report from this status listener instead of port-forwarding to a pod:
    /// `http://HOST:PORT`, e.g. after your own `kubectl -n ksvc-system port-forward
    /// deploy/ksvc-webhook-controller 8444`, or of a server run locally.
    #[arg(long, env = "KSVC_WEBHOOK_STATUS_URL", value_name = "URL", value_parser = parse_status_url)]
    pub status_url: Option<StatusUrl>,
}

/// A status listener's address, `http://HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusUrl {
    /// `HOST:PORT`, to connect to and to send as `Host`.
    pub authority: String,
}

impl std::fmt::Display for StatusUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}", self.authority)
    }
}

/// `http://HOST:PORT` (a trailing `/` allowed), or why not.
fn parse_status_url(text: &str) -> Result<StatusUrl, String> {
    let bad = |why: &str| {
        format!(
            "{text:?} is not a status listener's URL: {why}; write http://HOST:PORT, e.g. http://127.0.0.1:8444"
        )
    };
    let uri: axum::http::Uri = text.parse().map_err(|_| bad("it does not parse"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => return Err(bad(&format!("the listener speaks plain http, not {other}"))),
        None => return Err(bad("it has no scheme")),
    }
    let authority = uri.authority().ok_or_else(|| bad("it has no host"))?;
    if authority.port_u16().is_none() {
        return Err(bad("it has no port"));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(bad("it has a path; the routes are the listener's own"));
    }
    Ok(StatusUrl {
        authority: authority.as_str().to_owned(),
    })
}

/// Why the report could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server answered for itself (no such Service, may not list pods).
    #[error("cannot read the server's report through Service {at}: {source}")]
    ApiServer {
        at: String,
        #[source]
        source: errors::Error,
    },
    /// The Service selects no pods (it has no selector).
    #[error(
        "Service {at} has no selector, so no pod of it can be found; name the status API's \
         Service with --webhook-service, or port-forward yourself and pass --status-url"
    )]
    NoSelector { at: String },
    /// No pod of the Service is Ready.
    #[error(
        "no Ready pod of Service {at} (selector {selector}) to read the report from; see them \
         with: kubectl -n {namespace} get pods -l {selector}"
    )]
    NoReadyPod {
        at: String,
        namespace: String,
        selector: String,
    },
    /// The user may not port-forward.
    #[error(
        "you may not port-forward to pod {namespace}/{pod}: reading the server's report needs \
         create on pods/portforward in {namespace} (kubectl auth can-i create pods/portforward \
         -n {namespace}), or judge offline: kubectl get ksvc -A -o yaml | ksvc-webhook drift -f \
         - --sidecars-from-cluster ({message})"
    )]
    Forbidden {
        namespace: String,
        pod: String,
        message: String,
    },
    /// The port-forward could not be opened otherwise.
    #[error("cannot port-forward to pod {namespace}/{pod}: {source}")]
    PortForward {
        namespace: String,
        pod: String,
        #[source]
        source: errors::Error,
    },
    /// Nothing listens at the port in the pod.
    #[error(
        "nothing answers on port {port} of pod {namespace}/{pod}: the server is older than this \
         command, or runs with --local-status-listen=off or on another port (forward that one \
         yourself: kubectl -n {namespace} port-forward pod/{pod} PORT, then pass --status-url \
         http://127.0.0.1:PORT) ({why})"
    )]
    Closed {
        namespace: String,
        pod: String,
        port: u16,
        why: String,
    },
    /// Nothing answers at `--status-url`.
    #[error("cannot reach the status listener at {url}: {why}")]
    Unreachable { url: String, why: String },
    /// The status API refused, in its own words.
    #[error("the status listener {at} answers {code}: {message}")]
    Refused {
        at: String,
        code: u16,
        message: String,
    },
    /// The connection ended before the answer did.
    #[error("the status listener {at} closed the connection before it answered: {why}")]
    Dropped { at: String, why: String },
    /// No answer in time, or one that is not a list of apps.
    #[error("cannot read the server's report from the status listener {at}: {why}")]
    Unreadable { at: String, why: String },
}

/// Every app of `/apps` (of `namespace`, when given), following the pages: from `--status-url`
/// when given, else through a port-forward to a Ready pod of the status API's Service.
pub async fn apps(
    args: &StatusApiArgs,
    cluster: &ClientArgs,
    namespace: Option<&str>,
) -> Result<Vec<AppRecord>, Error> {
    match &args.status_url {
        Some(url) => {
            let at = url.to_string();
            let tcp = tokio::net::TcpStream::connect(&url.authority)
                .await
                .map_err(|e| Error::Unreachable {
                    url: at.clone(),
                    why: e.to_string(),
                })?;
            let mut reader = Reader::open(tcp, &url.authority, at).await?;
            reader.all(args, namespace).await
        }
        None => forward::apps(args, cluster, namespace).await,
    }
}

/// An HTTP/1.1 connection to a status listener.
struct Reader {
    sender: SendRequest<Empty<Bytes>>,
    host: String,
    /// The listener as messages name it.
    at: String,
}

impl Reader {
    /// Speak HTTP/1.1 over `io`, sending `host` as `Host`.
    async fn open<T>(io: T, host: &str, at: String) -> Result<Self, Error>
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| Error::Unreadable {
                at: at.clone(),
                why: e.to_string(),
            })?;
        // Ends when the reader is dropped or the stream closes; a failure shows on the request.
        tokio::spawn(connection);
        Ok(Self {
            sender,
            host: host.to_owned(),
            at,
        })
    }

    fn unreadable(&self, why: String) -> Error {
        Error::Unreadable {
            at: self.at.clone(),
            why,
        }
    }

    /// Every page, in order.
    async fn all(
        &mut self,
        args: &StatusApiArgs,
        namespace: Option<&str>,
    ) -> Result<Vec<AppRecord>, Error> {
        let mut all = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let (page, token) = self.page(args, namespace, next.as_deref()).await?;
            all.extend(page);
            match token {
                Some(token) => next = Some(token),
                None => return Ok(all),
            }
        }
    }

    /// One page of `/apps`, and the token of the next when there is one.
    async fn page(
        &mut self,
        args: &StatusApiArgs,
        namespace: Option<&str>,
        from: Option<&str>,
    ) -> Result<(Vec<AppRecord>, Option<String>), Error> {
        let mut query = form_urlencoded::Serializer::new(String::new());
        query.append_pair("limit", &args.chunk_size.to_string());
        if let Some(ns) = namespace {
            query.append_pair("namespace", ns);
        }
        if let Some(token) = from {
            query.append_pair("continue", token);
        }
        let request = Request::get(format!("/apps?{}", query.finish()))
            .header(axum::http::header::HOST, &self.host)
            .body(Empty::<Bytes>::new())
            .map_err(|e| self.unreadable(e.to_string()))?;
        let send = async {
            self.sender.ready().await?;
            let response = self.sender.send_request(request).await?;
            let (parts, body) = response.into_parts();
            let bytes = Limited::new(body, MAX_PAGE_BYTES).collect().await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((parts, bytes.to_bytes()))
        };
        let (parts, bytes) = match tokio::time::timeout(TIMEOUT, send).await {
            Ok(Err(e)) if e.is::<LengthLimitError>() => {
                let why = format!("a page of more than {} MiB", MAX_PAGE_BYTES >> 20);
                return Err(self.unreadable(why));
            }
            Ok(answer) => answer.map_err(|e| Error::Dropped {
                at: self.at.clone(),
                why: crate::report::error_chain(&*e),
            })?,
            Err(_) => {
                let why = format!("no answer within {}s", TIMEOUT.as_secs());
                return Err(self.unreadable(why));
            }
        };
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if parts.status != StatusCode::OK {
            return Err(Error::Refused {
                at: self.at.clone(),
                code: parts.status.as_u16(),
                message: body["error"].as_str().map_or_else(
                    || String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_QUOTED)]).into_owned(),
                    str::to_owned,
                ),
            });
        }
        let records: Vec<AppRecord> = serde_json::from_value(body)
            .map_err(|e| self.unreadable(format!("its answer is not a list of apps: {e}")))?;
        let token = parts
            .headers
            .get(CONTINUE_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        Ok((records, token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_url_is_plain_http_with_a_port_and_no_path() {
        for (text, want) in [
            ("http://127.0.0.1:8444", "127.0.0.1:8444"),
            ("http://127.0.0.1:8444/", "127.0.0.1:8444"),
            ("http://[::1]:9000", "[::1]:9000"),
            ("http://localhost:8444", "localhost:8444"),
        ] {
            assert_eq!(parse_status_url(text).unwrap().authority, want, "{text}");
        }
        for (text, want) in [
            ("https://127.0.0.1:8444", "plain http, not https"),
            ("127.0.0.1:8444", "it has no scheme"),
            ("http://127.0.0.1", "it has no port"),
            ("http://127.0.0.1:8444/apps", "it has a path"),
            ("http://127.0.0.1:8444/?limit=1", "it has a path"),
            ("http://", "it does not parse"),
        ] {
            let error = parse_status_url(text).unwrap_err();
            assert!(error.contains(want), "{text}: {error}");
            assert!(error.contains("write http://HOST:PORT"), "{text}: {error}");
        }
    }
}
