//! PURE: who wrote a request (`request.userInfo`) and whether that writer is the platform.
//!
//! A platform writer (the Flyte control plane's service account, or a member of a named group)
//! keeps the `flyte.org/spec-sha` it stamps: the platform compares that value with its own hash
//! to decide whether a Deploy needs an Update. Owns the `--platform-writers` syntax; never reads
//! the review itself (admission decodes `userInfo` into a [`UserInfo`]).

use std::collections::BTreeSet;

use serde::Deserialize;

/// The prefix of a `--platform-writers` entry naming a group rather than a user.
pub const GROUP_PREFIX: &str = "group:";

/// The writer of a request, as kube-apiserver reports it (`request.userInfo`); other members
/// (`uid`, `extra`) are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct UserInfo {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub groups: Vec<String>,
}

/// The users and groups whose `flyte.org/spec-sha` is kept as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlatformWriters {
    users: BTreeSet<String>,
    groups: BTreeSet<String>,
}

/// A `--platform-writers` entry that names nobody.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "platform writer {0:?} is empty; write a username (e.g. system:serviceaccount:flyte:flyteadmin) or group:NAME"
)]
pub struct WritersError(pub String);

impl PlatformWriters {
    /// The writers of `entries`: usernames, and `group:NAME` for every member of a group.
    /// Surrounding spaces are ignored; an entry that names nobody is an error.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, WritersError> {
        let mut writers = Self::default();
        for entry in entries {
            let raw = entry.as_ref();
            let (set, name) = match raw.trim().strip_prefix(GROUP_PREFIX) {
                Some(group) => (&mut writers.groups, group.trim()),
                None => (&mut writers.users, raw.trim()),
            };
            if name.is_empty() {
                return Err(WritersError(raw.to_string()));
            }
            set.insert(name.to_string());
        }
        Ok(writers)
    }

    /// Whether `user` is one of the writers, by name or by a group it belongs to.
    pub fn includes(&self, user: &UserInfo) -> bool {
        self.users.contains(&user.username) || user.groups.iter().any(|g| self.groups.contains(g))
    }

    /// Whether no writer is configured.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty() && self.groups.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            username: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    #[test]
    fn writers_match_by_name_or_group() {
        let writers = PlatformWriters::parse(&[
            "system:serviceaccount:flyte:flyteadmin",
            " group:flyte-platform ",
        ])
        .unwrap();
        let cases = [
            (user("system:serviceaccount:flyte:flyteadmin", &[]), true),
            (user("alice", &["devs", "flyte-platform"]), true),
            (user("alice", &["devs"]), false),
            (user("flyte-platform", &[]), false),
            (user("", &[]), false),
        ];
        for (who, want) in cases {
            assert_eq!(writers.includes(&who), want, "{who:?}");
        }
        assert!(PlatformWriters::default().is_empty());
        assert!(!PlatformWriters::default().includes(&user("", &[])));
    }

    #[test]
    fn empty_entries_are_refused() {
        for bad in ["", " ", "group:", "group: "] {
            let err = PlatformWriters::parse(&[bad]).unwrap_err();
            assert!(err.to_string().contains("group:NAME"), "{err}");
        }
    }
}
