//! PURE: what a broken rule says — [`Violation`] (where, what is wrong, how to fix it) and the
//! [`Operation`] a rule is judged under. Shared by the rules of [`super::validate`], the stop
//! record's rules in [`super::stop`], the sidecar checks and the revision guard; holds no rule
//! itself, only every rule's id ([`RULES`], for the metrics).

use std::fmt;

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// A short stable id of the rule, for metrics (e.g. `name`, `identity-immutable`).
    pub rule: &'static str,
    /// The field path, e.g. `metadata.labels[flyte.org/project]`.
    pub path: String,
    /// What is wrong.
    pub problem: String,
    /// How to fix it.
    pub fix: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}; {}", self.path, self.problem, self.fix)
    }
}

/// Every rule's id, for the metrics to count each from the first scrape on. A violation of a
/// rule missing here fails a debug build's tests ([`violation`] checks).
pub const RULES: [&str; 23] = [
    "containers",
    "generate-name",
    "identity-immutable",
    "identity-name",
    "identity-partial",
    "identity-value",
    "name",
    "object",
    "route-host",
    "stopped-value",
    "stop-record",
    "stop-record-keys",
    "stop-record-untrusted",
    "sidecar-catalogue",
    "sidecar-clash",
    "sidecar-fronting-env",
    "sidecar-fronting-port",
    "sidecar-fronting-probe",
    "sidecar-fronting-twice",
    "sidecar-port",
    "sidecar-status",
    "sidecar-unknown",
    "revision-in-traffic",
];

/// A violation of `rule` at `path`: what is wrong, and how to fix it.
pub(crate) fn violation(
    rule: &'static str,
    path: impl Into<String>,
    problem: impl Into<String>,
    fix: impl Into<String>,
) -> Violation {
    debug_assert!(RULES.contains(&rule), "rule {rule:?} is missing from RULES");
    Violation {
        rule,
        path: path.into(),
        problem: problem.into(),
        fix: fix.into(),
    }
}

/// Whether the request creates or updates the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
}
