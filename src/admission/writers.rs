//! PURE: who sent a request (`request.userInfo`) and whether a flag's list of users and groups
//! names them.
//!
//! A platform writer (`--platform-writers`: the Flyte control plane's service account, or a member
//! of a named group) keeps the `flyte.org/spec-sha` it stamps: the platform compares that value
//! with its own hash to decide whether a Deploy needs an Update. The revision guard's
//! `--guard-allowed-deleters` names who may always delete a revision. Owns the `USER|group:NAME`
//! syntax of both; never reads the review itself (admission decodes `userInfo` into a
//! [`UserInfo`]).

use std::collections::BTreeSet;

use serde::Deserialize;

/// The prefix of an entry naming a group rather than a user.
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

/// Users and groups a flag names (`--platform-writers`, `--guard-allowed-deleters`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Principals {
    users: BTreeSet<String>,
    groups: BTreeSet<String>,
}

/// An entry of a list of users and groups that names nobody.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "user or group {0:?} is empty; write a username (e.g. system:serviceaccount:flyte:flyteadmin) or group:NAME"
)]
pub struct WritersError(pub String);

impl Principals {
    /// The users and groups of `entries`: usernames, and `group:NAME` for every member of a group.
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

    /// The users named in `names` (no groups).
    pub fn users<'n>(names: impl IntoIterator<Item = &'n str>) -> Self {
        Self {
            users: names.into_iter().map(str::to_string).collect(),
            groups: BTreeSet::new(),
        }
    }

    /// Whether `user` is named, by name or by a group it belongs to.
    pub fn includes(&self, user: &UserInfo) -> bool {
        self.users.contains(&user.username) || user.groups.iter().any(|g| self.groups.contains(g))
    }

    /// Whether nobody is named.
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
        let writers = Principals::parse(&[
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
        assert!(Principals::default().is_empty());
        assert!(!Principals::default().includes(&user("", &[])));
    }

    #[test]
    fn empty_entries_are_refused() {
        for bad in ["", " ", "group:", "group: "] {
            let err = Principals::parse(&[bad]).unwrap_err();
            assert!(err.to_string().contains("group:NAME"), "{err}");
        }
    }
}
