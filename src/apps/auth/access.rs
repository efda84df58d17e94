//! PURE decisions of the status API's access control: reading the bearer token (and refusing an
//! oversized one), naming what a request needs (the SubjectAccessReview attributes), who the
//! caller is (and the namespace of a ServiceAccount caller), and the namespace filter of a
//! cluster-wide listing.
//!
//! Owns no I/O: no clock, no API calls (`api.rs` and `reviewer.rs` beside it make them), no HTTP types. Never
//! decides anything the API server did not answer.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use sha2::{Digest, Sha256};

use crate::watch::hub::AppRecord;

/// The API group of the resource `/apps` stands for.
pub const GROUP: &str = "serving.knative.dev";
/// The resource `/apps` stands for: callers need the rights to read Knative Services.
pub const RESOURCE: &str = "services";

/// The longest bearer token sent to a TokenReview. Kubernetes' own tokens are 1-2 KB (a
/// ServiceAccount JWT with its pod and node bindings); OIDC id-tokens with many groups reach a
/// few KB; 8 KiB is also the header-line limit of common proxies (nginx, Envoy's default), so no
/// working token is longer. A longer one is refused without asking the API server.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// Why a request carries no usable bearer token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error(
        "no bearer token; send `Authorization: Bearer <token>` (a ServiceAccount token, or one from `kubectl create token`)"
    )]
    Missing,
    #[error("the Authorization header is not `Bearer <token>`; send one token after `Bearer `")]
    Malformed,
    #[error(
        "the bearer token is {0} bytes, more than the {MAX_TOKEN_BYTES} this server accepts; Kubernetes tokens are 1-2 KB, send one from `kubectl create token`"
    )]
    TooLong(usize),
}

/// The token of an `Authorization: Bearer <token>` header value (scheme case-insensitive), at
/// most [`MAX_TOKEN_BYTES`] long.
pub fn bearer(header: Option<&[u8]>) -> Result<&str, TokenError> {
    let value = header.ok_or(TokenError::Missing)?;
    let value = std::str::from_utf8(value).map_err(|_| TokenError::Malformed)?;
    let (scheme, token) = value.trim().split_once(' ').ok_or(TokenError::Malformed)?;
    let token = token.trim();
    match scheme.eq_ignore_ascii_case("bearer") {
        true if token.len() > MAX_TOKEN_BYTES => Err(TokenError::TooLong(token.len())),
        true if !token.is_empty() && !token.contains(char::is_whitespace) => Ok(token),
        _ => Err(TokenError::Malformed),
    }
}

/// A token's SHA-256: the token cache's key, so no token is kept in memory longer than its
/// request (or stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    /// The hash of `token`.
    pub fn of(token: &str) -> Self {
        Self(Sha256::digest(token.as_bytes()).into())
    }

    /// The digest's bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

/// A read verb on Knative Services.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    Get,
    List,
    Watch,
}

impl Verb {
    /// The verb as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
        }
    }
}

/// What a request needs: the attributes of its SubjectAccessReview.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Attributes {
    /// A verb on Knative Services: in a namespace or (`None`) cluster-wide, one by name or all.
    Apps {
        verb: Verb,
        namespace: Option<String>,
        name: Option<String>,
    },
    /// `get` on a non-resource URL such as `/metrics`.
    Path(String),
}

impl Attributes {
    /// A verb on the apps of `namespace` (all namespaces when `None`), one by `name` or all.
    pub fn apps(verb: Verb, namespace: Option<&str>, name: Option<&str>) -> Self {
        Self::Apps {
            verb,
            namespace: namespace.map(str::to_owned),
            name: name.map(str::to_owned),
        }
    }
}

impl fmt::Display for Attributes {
    /// What was missing, as `kubectl auth can-i` would ask for it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attributes::Apps {
                verb,
                namespace,
                name,
            } => {
                write!(f, "`{}` on {RESOURCE}.{GROUP}", verb.as_str())?;
                if let Some(name) = name {
                    write!(f, " named `{name}`")?;
                }
                match namespace {
                    Some(ns) => write!(f, " in namespace `{ns}`"),
                    None => write!(f, " in all namespaces (cluster-wide)"),
                }
            }
            Attributes::Path(path) => write!(f, "`get` on the non-resource URL {path}"),
        }
    }
}

/// The caller as the TokenReview named it; passed on to every SubjectAccessReview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub username: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The namespace of a ServiceAccount's username (`system:serviceaccount:NS:NAME`), `None` for
/// any other user.
pub fn service_account_namespace(username: &str) -> Option<&str> {
    let rest = username.strip_prefix("system:serviceaccount:")?;
    let (namespace, name) = rest.split_once(':')?;
    (!namespace.is_empty() && !name.is_empty()).then_some(namespace)
}

/// The TokenReview's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    User(User),
    /// Not authenticated, or not for any of the accepted audiences (the API server's reason
    /// is logged where the answer arrives, never kept or told to the caller).
    Rejected,
}

/// The SubjectAccessReview's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    Allowed,
    /// Denied (or no opinion), with the authorizer's reason when it gave one.
    Denied(Option<String>),
}

/// The namespaces that hold the listed apps, each once, in order.
pub fn namespaces_of(apps: &[AppRecord]) -> BTreeSet<String> {
    apps.iter().map(|a| a.namespace.to_string()).collect()
}

/// The apps of the `allowed` namespaces only, order kept.
pub fn keep_namespaces(apps: Vec<AppRecord>, allowed: &BTreeSet<String>) -> Vec<AppRecord> {
    apps.into_iter()
        .filter(|a| allowed.contains(&*a.namespace))
        .collect()
}

#[cfg(test)]
#[path = "access_tests.rs"]
mod tests;
