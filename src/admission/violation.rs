//! PURE: what a broken rule says — [`Violation`] (where, what is wrong, how to fix it) and the
//! [`Operation`] a rule is judged under. Shared by the rules of [`super::validate`], the stop
//! record's rules in [`super::stop`], the sidecar checks and the revision guard; holds no rule
//! itself, only every rule's id ([`RULES`], for the metrics).
//!
//! What a violation says is bounded, whatever the object holds: a user's value is quoted with
//! [`quoted`] (escaped, cut to [`QUOTED`] bytes with its length), and each part of a violation is
//! cut to [`PART`] bytes, so a denial never echoes a megabyte label back.

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

/// Most bytes of a user's value a violation quotes.
pub const QUOTED: usize = 64;
/// Most bytes of a violation's path, problem or fix.
pub const PART: usize = 1024;

/// A violation of `rule` at `path`: what is wrong, and how to fix it (each cut to [`PART`]).
pub(crate) fn violation(
    rule: &'static str,
    path: impl Into<String>,
    problem: impl Into<String>,
    fix: impl Into<String>,
) -> Violation {
    debug_assert!(RULES.contains(&rule), "rule {rule:?} is missing from RULES");
    Violation {
        rule,
        path: cut(path.into(), PART),
        problem: cut(problem.into(), PART),
        fix: cut(fix.into(), PART),
    }
}

/// `value` quoted and escaped as Rust's `{:?}` writes it, cut to [`QUOTED`] bytes of the value
/// with its length said when cut: `"abc…" (7340032 bytes)`.
pub fn quoted(value: &str) -> String {
    if value.len() <= QUOTED {
        return format!("{value:?}");
    }
    let head = &value[..floor_char_boundary(value, QUOTED)];
    let escaped = format!("{head:?}");
    let open = escaped.strip_suffix('"').unwrap_or(&escaped);
    format!("{open}…\" ({} bytes)", value.len())
}

/// `text` cut to at most `most` bytes (and a mark of the cut), at a character boundary.
fn cut(mut text: String, most: usize) -> String {
    if text.len() > most {
        let all = text.len();
        text.truncate(floor_char_boundary(&text, most));
        text.push_str(&format!("… (cut from {all} bytes)"));
    }
    text
}

/// The largest character boundary of `text` at or below `at`.
fn floor_char_boundary(text: &str, at: usize) -> usize {
    (0..=at.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}

/// Whether the request creates or updates the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_values_are_quoted_escaped_and_cut() {
        assert_eq!(quoted("a\"b\nc"), r#""a\"b\nc""#);
        let long = format!("é{}", "x".repeat(100));
        let q = quoted(&long);
        assert!(q.starts_with("\"éxxx"), "{q}");
        assert!(q.ends_with("…\" (102 bytes)"), "{q}");
        assert!(q.len() < QUOTED + 24, "{q}");
        let v = violation("name", "p", "y".repeat(5 * PART), "fix");
        assert!(v.problem.len() < PART + 40, "{}", v.problem.len());
        assert!(
            v.problem
                .ends_with(&format!("(cut from {} bytes)", 5 * PART))
        );
    }
}
