//! PURE decisions of the status API's access control: reading the bearer token, naming what a
//! request needs (the SubjectAccessReview attributes), the bounded TTL cache of answers, the
//! namespace filter of a cluster-wide listing, and the `/apps/watch` stream limits.
//!
//! Owns no I/O: no clock (time comes in as an argument), no API calls (those are in
//! [`super::auth`]), no HTTP types. Never decides anything the API server did not answer.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::hash::Hash;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::watch::hub::AppRecord;

/// The API group of the resource `/apps` stands for.
pub const GROUP: &str = "serving.knative.dev";
/// The resource `/apps` stands for: callers need the rights to read Knative Services.
pub const RESOURCE: &str = "services";

/// Why a request carries no usable bearer token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error(
        "no bearer token; send `Authorization: Bearer <token>` (a ServiceAccount token, or one from `kubectl create token`)"
    )]
    Missing,
    #[error("the Authorization header is not `Bearer <token>`; send one token after `Bearer `")]
    Malformed,
}

/// The token of an `Authorization: Bearer <token>` header value (scheme case-insensitive).
pub fn bearer(header: Option<&[u8]>) -> Result<&str, TokenError> {
    let value = header.ok_or(TokenError::Missing)?;
    let value = std::str::from_utf8(value).map_err(|_| TokenError::Malformed)?;
    let (scheme, token) = value.trim().split_once(' ').ok_or(TokenError::Malformed)?;
    let token = token.trim();
    match scheme.eq_ignore_ascii_case("bearer") {
        true if !token.is_empty() && !token.contains(char::is_whitespace) => Ok(token),
        _ => Err(TokenError::Malformed),
    }
}

/// A token's SHA-256: the cache key, so no token is kept in memory longer than its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    /// The hash of `token`.
    pub fn of(token: &str) -> Self {
        Self(Sha256::digest(token.as_bytes()).into())
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

/// The TokenReview's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    User(User),
    /// Not authenticated, with the API server's reason when it gave one.
    Rejected(Option<String>),
}

/// The SubjectAccessReview's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    Allowed,
    /// Denied (or no opinion), with the authorizer's reason when it gave one.
    Denied(Option<String>),
}

/// A size-bounded cache of answers that each expire `ttl` after they were stored.
///
/// When full, expired answers go first, then the one that would expire soonest; a lookup never
/// returns an expired answer.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    entries: HashMap<K, (V, Instant)>,
    capacity: usize,
    ttl: Duration,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    /// An empty cache of at most `capacity` answers (at least one) kept for `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        Self {
            entries: HashMap::new(),
            capacity: capacity.max(1),
            ttl,
        }
    }

    /// The answer for `key` if stored and not expired at `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        self.entries
            .get(key)
            .filter(|(_, expires)| now < *expires)
            .map(|(value, _)| value.clone())
    }

    /// Store `value` for `key` as of `now`, making room when full.
    pub fn insert(&mut self, key: K, value: V, now: Instant) {
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            self.entries.retain(|_, (_, expires)| now < *expires);
            if self.entries.len() >= self.capacity {
                let soonest = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (_, expires))| *expires)
                    .map(|(k, _)| k.clone());
                if let Some(k) = soonest {
                    self.entries.remove(&k);
                }
            }
        }
        self.entries.insert(key, (value, now + self.ttl));
    }

    /// Stored answers, expired ones included until they are pushed out.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The namespaces that hold the listed apps, each once, in order.
pub fn namespaces_of(apps: &[AppRecord]) -> BTreeSet<String> {
    apps.iter().map(|a| a.namespace.clone()).collect()
}

/// The apps of the `allowed` namespaces only, order kept.
pub fn keep_namespaces(apps: Vec<AppRecord>, allowed: &BTreeSet<String>) -> Vec<AppRecord> {
    apps.into_iter()
        .filter(|a| allowed.contains(&a.namespace))
        .collect()
}

/// Which stream limit a caller hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LimitHit {
    #[error("the server already serves its maximum of {0} /apps/watch streams; retry later")]
    Total(usize),
    #[error(
        "you already have the maximum of {0} open /apps/watch streams; close one or retry later"
    )]
    PerCaller(usize),
}

impl LimitHit {
    /// The metric label of the limit.
    pub fn label(self) -> &'static str {
        match self {
            LimitHit::Total(_) => "total",
            LimitHit::PerCaller(_) => "per_caller",
        }
    }
}

/// Open `/apps/watch` streams, overall and per caller, against their maximums.
#[derive(Debug)]
pub struct StreamLimits {
    total: usize,
    per_caller: usize,
    open: usize,
    by_caller: HashMap<String, usize>,
}

impl StreamLimits {
    /// Limits of `total` streams overall and `per_caller` per caller.
    pub fn new(total: usize, per_caller: usize) -> Self {
        Self {
            total,
            per_caller,
            open: 0,
            by_caller: HashMap::new(),
        }
    }

    /// Count a new stream of `caller` (`None`: unauthenticated, only the total applies), or
    /// say which limit it would break.
    pub fn open(&mut self, caller: Option<&str>) -> Result<(), LimitHit> {
        if self.open >= self.total {
            return Err(LimitHit::Total(self.total));
        }
        if let Some(caller) = caller {
            let mine = self.by_caller.entry(caller.to_owned()).or_insert(0);
            if *mine >= self.per_caller {
                return Err(LimitHit::PerCaller(self.per_caller));
            }
            *mine += 1;
        }
        self.open += 1;
        Ok(())
    }

    /// Forget a stream [`open`](Self::open) counted.
    pub fn close(&mut self, caller: Option<&str>) {
        self.open = self.open.saturating_sub(1);
        if let Some(caller) = caller
            && let Some(mine) = self.by_caller.get_mut(caller)
        {
            *mine = mine.saturating_sub(1);
            if *mine == 0 {
                self.by_caller.remove(caller);
            }
        }
    }

    /// Streams open now.
    pub fn open_streams(&self) -> usize {
        self.open
    }
}

#[cfg(test)]
#[path = "access_tests.rs"]
mod tests;
