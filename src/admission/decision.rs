//! PURE: what was decided on one admission request — allowed or not, every violation, the JSON
//! Patch, warnings, the edited object — as [`super::decide`] makes it and [`super::response`]
//! answers it. The type only: no rule and no edit lives here.

use serde_json::Value;

use super::violation::Violation;
use crate::json::Node;
use crate::json::edit::Patch;

/// The outcome of [`decide`].
#[derive(Debug, Clone, Default)]
pub struct Decision<'a> {
    pub allowed: bool,
    /// Why the request was rejected (empty when allowed).
    pub violations: Vec<Violation>,
    /// The edits (empty when nothing changes).
    pub patch: Patch,
    pub warnings: Vec<String>,
    /// The object after the edits, when the request carried a KService that was allowed.
    pub object: Option<Node<'a>>,
    /// What failed inside the webhook, when it could not decide (then `allowed` is false).
    pub failure: Option<String>,
}

impl Decision<'_> {
    /// The edited object as a `serde_json::Value`, when there is one.
    pub fn object_json(&self) -> Option<Value> {
        self.object.as_ref().map(Node::to_json)
    }

    pub(crate) fn allow() -> Self {
        Self {
            allowed: true,
            ..Self::default()
        }
    }

    pub(crate) fn deny(violations: Vec<Violation>) -> Self {
        Self {
            violations,
            ..Self::default()
        }
    }

    /// The webhook failed inside: refuse rather than admit a wrong object.
    pub(crate) fn failed(what: String) -> Self {
        Self {
            failure: Some(what),
            ..Self::default()
        }
    }

    /// The rejection message: every violation as `path: problem; fix`.
    pub fn message(&self) -> String {
        match self.violations.as_slice() {
            [one] => one.to_string(),
            many => {
                let lines: Vec<String> = many.iter().map(|v| format!("- {v}")).collect();
                format!("{} problems:\n{}", many.len(), lines.join("\n"))
            }
        }
    }
}
