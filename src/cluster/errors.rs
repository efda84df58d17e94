//! How a failed call to the cluster reads at the prompt: worded as kubectl words it, once.
//!
//! An answer of the API server is `Error from server (Reason): message`; a refused connection
//! names the server and asks whether it is the right one; a missing kubeconfig names the path
//! tried and the two ways to give another. Owns the wording only: never retries, never builds a
//! client, never prints.

use std::path::Path;

use kube::config::KubeconfigError;

use super::call;
use crate::report::error_chain;

/// A failed call to the cluster, worded for the person at the prompt.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server answered with a failure `Status` (a webhook's denial, a validation
    /// error, a 403 …).
    #[error("Error from server{}: {message}", in_parens(.reason))]
    Server {
        reason: String,
        code: u16,
        message: String,
    },
    /// Nothing listens at the server's address.
    #[error(
        "The connection to the server {server} was refused - did you specify the right host or port?"
    )]
    Refused { server: String },
    /// The server could not be reached or did not answer in time.
    #[error("Unable to connect to the server {server}: {why}")]
    Unreachable { server: String, why: String },
    /// No kubeconfig where one was looked for.
    #[error(
        "no kubeconfig at {path} ({origin}); name one with --kubeconfig FILE or the KUBECONFIG environment variable"
    )]
    NoKubeconfig { path: String, origin: Origin },
    /// The kubeconfig exists but cannot be used.
    #[error("cannot use the kubeconfig {path}: {why}")]
    Kubeconfig { path: String, why: String },
    /// Anything else (a conflict that never settled, an answer that does not decode).
    #[error("{0}")]
    Other(String),
}

/// Where the kubeconfig path came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `--kubeconfig`.
    Flag,
    /// The `KUBECONFIG` environment variable.
    Env,
    /// Neither: `~/.kube/config`, and no in-cluster service account either.
    Default,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Origin::Flag => "named by --kubeconfig",
            Origin::Env => "named by KUBECONFIG",
            Origin::Default => "the default, and not running in a cluster",
        })
    }
}

/// `Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn in_parens(reason: &str) -> String {
    match reason {
        "" => String::new(),
        reason => format!(" ({reason})"),
    }
}

impl Error {
    /// Whether kubectl prints this as it is (an answer of the server, a failed connection)
    /// rather than after `error: ` (its own complaints).
    pub fn is_verbatim(&self) -> bool {
        matches!(
            self,
            Error::Server { .. } | Error::Refused { .. } | Error::Unreachable { .. }
        )
    }

    /// A failed call or write loop against `server` (`HOST:PORT`).
    pub fn from_call(err: call::Error, server: &str) -> Self {
        match err {
            call::Error::Api { source, .. } => Self::from_kube(&source, server),
            timeout @ call::Error::Timeout { .. } => Error::Unreachable {
                server: server.to_owned(),
                why: timeout.to_string(),
            },
            other => Error::Other(error_chain(&other)),
        }
    }

    /// A failed request to `server` (`HOST:PORT`).
    pub fn from_kube(err: &kube::Error, server: &str) -> Self {
        let server = server.to_owned();
        match err {
            kube::Error::Api(status) => Error::Server {
                reason: reason_of(&status.reason, status.code).to_owned(),
                code: status.code,
                message: status.message.clone(),
            },
            _ if refused(err) => Error::Refused { server },
            // kube's own prefix ("ServiceError: ") says nothing to a person; its sources do.
            kube::Error::Service(source) => Error::Unreachable {
                server,
                why: error_chain(source.as_ref()),
            },
            kube::Error::HyperError(source) => Error::Unreachable {
                server,
                why: error_chain(source),
            },
            other => Error::Other(error_chain(other)),
        }
    }

    /// A kubeconfig that could not be read or used; `origin` says who named `path`.
    pub fn from_kubeconfig(err: KubeconfigError, path: &Path, origin: Origin) -> Self {
        let path = path.display().to_string();
        match err {
            KubeconfigError::ReadConfig(io, _) if io.kind() == std::io::ErrorKind::NotFound => {
                Error::NoKubeconfig { path, origin }
            }
            KubeconfigError::LoadContext(name) => Error::Kubeconfig {
                path,
                why: format!("context {name:?} does not exist"),
            },
            other => Error::Kubeconfig {
                path,
                why: error_chain(&other),
            },
        }
    }
}

/// The status's reason, or the one Kubernetes gives the HTTP code when the answer had none (a
/// proxy's plain-text error, which kube-rs marks "Failed to parse error data").
fn reason_of(reason: &str, code: u16) -> &str {
    if !reason.is_empty() && reason != "Failed to parse error data" {
        return reason;
    }
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Gone",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "",
    }
}

/// Whether the connection was refused, somewhere down the error's sources.
fn refused(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        next = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, reason)
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn a_status_reads_as_kubectl_prints_it_once() {
        let cases = [
            (
                api(
                    400,
                    "BadRequest",
                    "admission webhook \"x\" denied the request: no",
                ),
                "Error from server (BadRequest): admission webhook \"x\" denied the request: no",
            ),
            (
                api(
                    403,
                    "Forbidden",
                    "services is forbidden: User \"bob\" cannot",
                ),
                "Error from server (Forbidden): services is forbidden: User \"bob\" cannot",
            ),
            (
                api(404, "Failed to parse error data", "404 page not found"),
                "Error from server (NotFound): 404 page not found",
            ),
            (api(418, "", "teapot"), "Error from server: teapot"),
        ];
        for (err, want) in cases {
            let worded = Error::from_kube(&err, "h:1");
            assert!(worded.is_verbatim());
            assert_eq!(worded.to_string(), want);
        }
    }

    #[test]
    fn a_refused_connection_names_the_server() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let err = kube::Error::Service(Box::new(io));
        assert_eq!(
            Error::from_kube(&err, "127.0.0.1:9").to_string(),
            "The connection to the server 127.0.0.1:9 was refused - did you specify the right host or port?"
        );
    }

    #[test]
    fn a_timeout_names_the_server_and_the_call() {
        let err = call::Error::Timeout {
            what: "get service app".into(),
            after: std::time::Duration::from_secs(15),
        };
        assert_eq!(
            Error::from_call(err, "h:443").to_string(),
            "Unable to connect to the server h:443: get service app timed out after 15s"
        );
    }

    #[test]
    fn a_missing_kubeconfig_names_the_path_and_the_two_ways_to_give_one() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let err = KubeconfigError::ReadConfig(io, "/x/config".into());
        let worded = Error::from_kubeconfig(err, Path::new("/x/config"), Origin::Env);
        assert!(!worded.is_verbatim());
        assert_eq!(
            worded.to_string(),
            "no kubeconfig at /x/config (named by KUBECONFIG); name one with --kubeconfig FILE \
             or the KUBECONFIG environment variable"
        );
        let ctx = KubeconfigError::LoadContext("prod".into());
        assert_eq!(
            Error::from_kubeconfig(ctx, Path::new("k"), Origin::Flag).to_string(),
            "cannot use the kubeconfig k: context \"prod\" does not exist"
        );
    }
}
