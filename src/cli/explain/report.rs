//! PURE: what admission would do with one KService, in words: whether its namespace is served,
//! whether it is a managed app, which sidecars it gets, each change sorted into a step (naming,
//! spec SHA, env var, sidecars, labels, other) and each refusal with its field path.
//!
//! Everything here is read off [`admission::decide`] and [`sidecars::plan`]; no rule and no edit
//! is repeated. Never reads a file or the cluster: the namespace's labels and the webhook's
//! `namespaceSelector` come in as arguments.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::admission::drift::excluded;
use crate::admission::{self, Policy, Request, ksvc, naming, sidecars};
use crate::json::Node;
use crate::keys;

/// What the caller knows of the KService's namespace.
#[derive(Debug, Clone, Default)]
pub struct NamespaceFacts {
    /// Its labels (`kubernetes.io/metadata.name` is added as the API server adds it).
    pub labels: BTreeMap<String, String>,
    /// The webhook's `namespaceSelector`, when read from the cluster; otherwise the one the
    /// manifests install is assumed.
    pub selector: Option<Value>,
}

/// Whether the webhook sees writes in the namespace, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Served {
    pub served: bool,
    pub why: String,
}

/// One edit admission would make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub op: String,
    /// The JSON pointer it edits.
    pub path: String,
    /// The value it writes; absent for `remove`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

/// The edits of one step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// `naming`, `spec_sha`, `env_var`, `sidecars`, `labels` or `other`.
    pub step: &'static str,
    pub changes: Vec<Change>,
}

/// One reason admission refuses the object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    pub rule: &'static str,
    /// The field path, e.g. `metadata.labels[flyte.org/project]`.
    pub path: String,
    pub problem: String,
    pub fix: String,
}

/// Everything `explain` says about one KService.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    pub namespace: String,
    /// The name as written (`generateName*` or empty when it has none).
    pub name: String,
    pub served: Served,
    /// `project/domain/name` of a managed app; absent for a plain KService.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// The name admission gives a managed app.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_name: Option<String>,
    /// The sidecar templates selected for it, in injection order.
    pub sidecars: Vec<String>,
    /// How many of admission's rules it is checked against.
    pub rules_checked: usize,
    pub allowed: bool,
    pub steps: Vec<Step>,
    pub refused: Vec<Refusal>,
    pub warnings: Vec<String>,
}

/// Explain a CREATE (or an UPDATE over `old`) of `object` in `namespace` under `policy`.
pub fn explain(
    object: Value,
    old: Option<Value>,
    namespace: &str,
    facts: &NamespaceFacts,
    policy: &Policy,
) -> Explanation {
    let node = Node::from_json(object.clone());
    let namespace = match ksvc::namespace(&node) {
        "" => namespace.to_owned(),
        ns => ns.to_owned(),
    };
    let name = match (ksvc::name(&node), ksvc::generate_name(&node)) {
        ("", "") => String::new(),
        ("", prefix) => format!("{prefix}*"),
        (name, _) => name.to_owned(),
    };
    let identity = ksvc::identity(&node);
    let sidecars = match sidecars::plan(&node, &policy.sidecars, policy.knative) {
        Ok(plan) => plan.selected.iter().map(|t| t.name.clone()).collect(),
        Err(_) => Vec::new(), // the decision below lists why
    };
    let operation = if old.is_some() { "UPDATE" } else { "CREATE" };
    let request = Request::kservice("explain", operation, &namespace, object, old);
    let decision = admission::decide(request, policy);
    let mut refused: Vec<Refusal> = decision
        .violations
        .iter()
        .map(|v| Refusal {
            rule: v.rule,
            path: v.path.clone(),
            problem: v.problem.clone(),
            fix: v.fix.clone(),
        })
        .collect();
    if let Some(failure) = &decision.failure {
        refused.push(Refusal {
            rule: "internal",
            path: String::new(),
            problem: failure.clone(),
            fix: "report it: the webhook could not decide".to_owned(),
        });
    }
    let patch: Vec<Value> = decision
        .patch
        .json()
        .and_then(|bytes| serde_json::from_slice(bytes).ok())
        .unwrap_or_default();
    Explanation {
        served: served(&namespace, facts),
        app_name: identity
            .as_ref()
            .map(|id| naming::app_name(&id.project, &id.domain, &id.name).name),
        identity: identity.map(|id| format!("{}/{}/{}", id.project, id.domain, id.name)),
        namespace,
        name,
        sidecars,
        rules_checked: admission::RULES.len(),
        allowed: decision.allowed,
        steps: steps(&patch),
        refused,
        warnings: decision.warnings.clone(),
    }
}

/// Whether the webhook's selector matches the namespace: the selector read from the cluster when
/// there is one, else the installed one (the excluded names and the opt-out label).
pub fn served(namespace: &str, facts: &NamespaceFacts) -> Served {
    let mut labels = facts.labels.clone();
    labels
        .entry("kubernetes.io/metadata.name".to_owned())
        .or_insert_with(|| namespace.to_owned());
    let Some(selector) = &facts.selector else {
        let inject = labels.get(keys::LABEL_NAMESPACE_INJECT).map(String::as_str);
        return match excluded(namespace, inject) {
            Some(why) => Served { served: false, why },
            None => Served {
                served: true,
                why: format!(
                    "namespace {namespace:?} is not excluded by name and not labelled {}={}",
                    keys::LABEL_NAMESPACE_INJECT,
                    keys::NAMESPACE_INJECT_DISABLED
                ),
            },
        };
    };
    match unmatched(selector, &labels) {
        Some(term) => Served {
            served: false,
            why: format!(
                "the webhook's namespaceSelector does not match namespace {namespace:?}: {term}"
            ),
        },
        None => Served {
            served: true,
            why: format!("the webhook's namespaceSelector matches namespace {namespace:?}"),
        },
    }
}

/// The first term of a label selector that `labels` fail, in words; `None` when all hold.
fn unmatched(selector: &Value, labels: &BTreeMap<String, String>) -> Option<String> {
    let empty = serde_json::Map::new();
    let match_labels = selector["matchLabels"].as_object().unwrap_or(&empty);
    for (key, want) in match_labels {
        let want = want.as_str().unwrap_or_default();
        if labels.get(key).map(String::as_str) != Some(want) {
            return Some(format!("matchLabels wants {key}={want}"));
        }
    }
    let expressions = selector["matchExpressions"].as_array();
    for term in expressions.into_iter().flatten() {
        let key = term["key"].as_str().unwrap_or_default();
        let operator = term["operator"].as_str().unwrap_or_default();
        let values: Vec<&str> = term["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let have = labels.get(key).map(String::as_str);
        let holds = match operator {
            "In" => have.is_some_and(|v| values.contains(&v)),
            "NotIn" => have.is_none_or(|v| !values.contains(&v)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        };
        if !holds {
            let have = have.map_or("no such label".to_owned(), |v| format!("it is {v:?}"));
            return Some(format!(
                "{key} {operator} [{}] fails ({have})",
                values.join(", ")
            ));
        }
    }
    None
}

/// The patch's operations, each in the step its path belongs to, in step order.
fn steps(patch: &[Value]) -> Vec<Step> {
    const ORDER: [&str; 6] = [
        "naming", "spec_sha", "env_var", "sidecars", "labels", "other",
    ];
    let mut by_step: BTreeMap<usize, Vec<Change>> = BTreeMap::new();
    for change in patch.iter().flat_map(changes) {
        let step = step_of(&change.path, change.value.as_ref());
        let index = ORDER
            .iter()
            .position(|s| *s == step)
            .unwrap_or(ORDER.len() - 1);
        by_step.entry(index).or_default().push(change);
    }
    by_step
        .into_iter()
        .map(|(i, changes)| Step {
            step: ORDER[i],
            changes,
        })
        .collect()
}

/// One patch operation as changes: a whole labels or annotations map that admission creates is
/// one change a key, so each key lands in its own step.
fn changes(op: &Value) -> Vec<Change> {
    let path = op["path"].as_str().unwrap_or_default();
    let kind = op["op"].as_str().unwrap_or_default();
    let value = op.get("value");
    match value.and_then(Value::as_object) {
        Some(map) if path == "/metadata/labels" || path == "/metadata/annotations" => map
            .iter()
            .map(|(key, v)| Change {
                op: kind.to_owned(),
                path: format!("{path}/{}", key.replace('~', "~0").replace('/', "~1")),
                value: Some(v.clone()),
            })
            .collect(),
        _ => vec![Change {
            op: kind.to_owned(),
            path: path.to_owned(),
            value: value.cloned(),
        }],
    }
}

/// The step an edit of `path` (writing `value`) belongs to.
fn step_of(path: &str, value: Option<&Value>) -> &'static str {
    let escaped = |key: &str| key.replace('~', "~0").replace('/', "~1");
    let endpoint = value.is_some_and(|v| {
        v.to_string()
            .contains(keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN)
    });
    if path == "/metadata/name" || path == "/metadata/generateName" {
        "naming"
    } else if path.ends_with(&escaped(keys::ANNOTATION_SPEC_SHA)) {
        "spec_sha"
    } else if path.contains(&escaped(keys::ANNOTATION_SIDECAR_STATUS))
        || path.contains("/volumes")
        || (path.contains("/containers/") && !path.contains("/env"))
    {
        "sidecars"
    } else if path.contains("/env") || endpoint {
        "env_var"
    } else if path.starts_with("/metadata/labels") {
        "labels"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_selector_is_evaluated_term_by_term() {
        let selector = json!({"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
            {"key": "ksvc-webhook.flyte.org/inject", "operator": "NotIn", "values": ["disabled"]}]});
        let cases = [
            ("team-a", labels(&[]), true),
            ("kube-system", labels(&[]), false),
            (
                "team-b",
                labels(&[("ksvc-webhook.flyte.org/inject", "disabled")]),
                false,
            ),
            (
                "team-c",
                labels(&[("ksvc-webhook.flyte.org/inject", "enabled")]),
                true,
            ),
        ];
        for (ns, labels, want) in cases {
            let facts = NamespaceFacts {
                labels,
                selector: Some(selector.clone()),
            };
            assert_eq!(served(ns, &facts).served, want, "{ns}");
        }
        let facts = NamespaceFacts {
            labels: labels(&[]),
            selector: Some(json!({"matchLabels": {"tier": "apps"}})),
        };
        let why = served("x", &facts).why;
        assert!(why.contains("matchLabels wants tier=apps"), "{why}");
    }

    #[test]
    fn without_a_selector_the_installed_one_is_assumed() {
        let off = NamespaceFacts {
            labels: labels(&[("ksvc-webhook.flyte.org/inject", "disabled")]),
            selector: None,
        };
        assert!(!served("team-a", &off).served);
        assert!(!served("knative-serving", &NamespaceFacts::default()).served);
        assert!(served("team-a", &NamespaceFacts::default()).served);
    }

    #[test]
    fn a_created_map_is_one_change_a_key() {
        let op = json!({"op": "add", "path": "/metadata/annotations",
                        "value": {"flyte.org/spec-sha": "ab", "flyte.org/app-id": "p/d/n"}});
        let paths: Vec<String> = changes(&op).into_iter().map(|c| c.path).collect();
        assert_eq!(
            paths,
            [
                "/metadata/annotations/flyte.org~1app-id",
                "/metadata/annotations/flyte.org~1spec-sha"
            ]
        );
    }

    #[test]
    fn each_edit_lands_in_its_step() {
        let cases = [
            ("/metadata/name", json!("x"), "naming"),
            (
                "/metadata/annotations/flyte.org~1spec-sha",
                json!("ab"),
                "spec_sha",
            ),
            ("/spec/template/spec/containers/0/env", json!([]), "env_var"),
            (
                "/spec/template/spec/containers/1",
                json!({"name": "s"}),
                "sidecars",
            ),
            ("/spec/template/spec/volumes", json!([]), "sidecars"),
            (
                "/metadata/labels/flyte.org~1app-managed",
                json!("true"),
                "labels",
            ),
            ("/spec/template/metadata", json!({}), "other"),
        ];
        for (path, value, want) in cases {
            assert_eq!(step_of(path, Some(&value)), want, "{path}");
        }
    }
}
