//! PURE: the reviewer's answer cache. Keys are fixed-size digests ([`CacheKey`]: the token's
//! SHA-256, or the SHA-256 of the user and the attributes asked about), so a caller's strings
//! never sit in memory as keys; answers expire `ttl` after they were stored; the cache is
//! bounded in entries and in bytes ([`Weigh`]).
//!
//! Owns no clock (time comes in as an argument) and no API call.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::apps::auth::access::{Access, Attributes, Identity, TokenHash, User};

/// A cache key: a SHA-256 digest, 32 bytes whatever it stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey([u8; 32]);

impl CacheKey {
    /// The key of a token's TokenReview answer.
    pub fn token(hash: &TokenHash) -> Self {
        Self(*hash.as_bytes())
    }

    /// The key of a SubjectAccessReview answer: who asks (every field the review carries) and
    /// what for. Keyed by the user, not the token, so every token of one user shares answers.
    pub fn access(user: &User, needs: &Attributes) -> Self {
        let mut digest = Sha256::new();
        let mut field = |bytes: &[u8]| {
            // Length-prefixed, so no two different field lists hash the same bytes.
            digest.update((bytes.len() as u64).to_le_bytes());
            digest.update(bytes);
        };
        field(user.username.as_bytes());
        field(user.uid.as_deref().unwrap_or_default().as_bytes());
        for group in &user.groups {
            field(group.as_bytes());
        }
        field(b"\0extra");
        for (key, values) in &user.extra {
            field(key.as_bytes());
            values.iter().for_each(|v| field(v.as_bytes()));
        }
        match needs {
            Attributes::Apps {
                verb,
                namespace,
                name,
            } => {
                field(verb.as_str().as_bytes());
                field(namespace.as_deref().unwrap_or("\0all").as_bytes());
                field(name.as_deref().unwrap_or("\0all").as_bytes());
            }
            Attributes::Path(path) => {
                field(b"\0path");
                field(path.as_bytes());
            }
        }
        Self(digest.finalize().into())
    }
}

/// What a cached value holds on the heap, in bytes (an estimate that never undercounts
/// strings' contents).
pub trait Weigh {
    fn heap_bytes(&self) -> usize;
}

fn strings<'a>(all: impl IntoIterator<Item = &'a String>) -> usize {
    all.into_iter()
        .map(|s| s.capacity() + size_of::<String>())
        .sum()
}

impl Weigh for Identity {
    fn heap_bytes(&self) -> usize {
        match self {
            Identity::Rejected => 0,
            Identity::User(user) => {
                let extra = user
                    .extra
                    .iter()
                    .map(|(k, v)| k.capacity() + size_of::<(String, Vec<String>)>() + strings(v));
                user.username.capacity()
                    + user.uid.as_ref().map_or(0, String::capacity)
                    + strings(&user.groups)
                    + extra.sum::<usize>()
            }
        }
    }
}

impl Weigh for Access {
    fn heap_bytes(&self) -> usize {
        match self {
            Access::Allowed => 0,
            Access::Denied(reason) => reason.as_ref().map_or(0, String::capacity),
        }
    }
}

/// A cache of answers that each expire `ttl` after they were stored, bounded in entries and in
/// bytes.
///
/// When full, expired answers go first, then the ones that would expire soonest; an answer
/// larger than the whole byte budget is not kept. A lookup never returns an expired answer.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    entries: HashMap<K, Entry<V>>,
    capacity: usize,
    max_bytes: usize,
    bytes: usize,
    ttl: Duration,
}

#[derive(Debug)]
struct Entry<V> {
    value: V,
    expires: Instant,
    bytes: usize,
}

impl<K: Eq + Hash + Clone, V: Clone + Weigh> TtlCache<K, V> {
    /// An empty cache of at most `capacity` answers (at least one) and `max_bytes`, each kept
    /// for `ttl`.
    pub fn new(capacity: usize, max_bytes: usize, ttl: Duration) -> Self {
        Self {
            entries: HashMap::new(),
            capacity: capacity.max(1),
            max_bytes,
            bytes: 0,
            ttl,
        }
    }

    /// The bytes an entry of `value` takes: its slot in the table (key, value, expiry, size
    /// and the table's control byte) and what the value holds on the heap.
    fn weigh(value: &V) -> usize {
        size_of::<(K, Entry<V>)>() + 1 + value.heap_bytes()
    }

    /// The answer for `key` if stored and not expired at `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        self.entries
            .get(key)
            .filter(|e| now < e.expires)
            .map(|e| e.value.clone())
    }

    /// The answer last stored for `key`, expired or not, while it has not been pushed out.
    pub fn last(&self, key: &K) -> Option<V> {
        self.entries.get(key).map(|e| e.value.clone())
    }

    /// Store `value` for `key` as of `now`, making room when full; `false` when the value alone
    /// is larger than the byte budget (then it is not stored).
    pub fn insert(&mut self, key: K, value: V, now: Instant) -> bool {
        if let Some(old) = self.entries.remove(&key) {
            self.bytes -= old.bytes;
        }
        let bytes = Self::weigh(&value);
        if bytes > self.max_bytes {
            return false;
        }
        let full = |c: &Self| c.entries.len() >= c.capacity || c.bytes + bytes > c.max_bytes;
        if full(self) {
            let before = self.entries.len();
            self.entries.retain(|_, e| now < e.expires);
            if self.entries.len() != before {
                self.bytes = self.entries.values().map(|e| e.bytes).sum();
            }
        }
        while full(self) {
            let soonest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.expires)
                .map(|(k, _)| k.clone());
            match soonest.and_then(|k| self.entries.remove(&k)) {
                Some(gone) => self.bytes -= gone.bytes,
                None => break,
            }
        }
        let expires = now + self.ttl;
        let entry = Entry {
            value,
            expires,
            bytes,
        };
        self.entries.insert(key, entry);
        self.bytes += bytes;
        true
    }

    /// Stored answers, expired ones included until they are pushed out.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The bytes the stored answers take, as [`Weigh`] counts them; never above the budget.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
