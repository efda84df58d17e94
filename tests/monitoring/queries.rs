//! What the monitoring component asks: every dashboard panel's queries and every alert's
//! expression, read from the files that ship, and the metric names an expression uses.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;

pub const JOB: &str = "ksvc-system/ksvc-webhook";
pub const NS: &str = "ksvc-system";

/// Series that come from kube-apiserver and kube-state-metrics, never from the server.
pub const FOREIGN: &[&str] = &[
    "apiserver_admission_webhook_admission_duration_seconds_bucket",
    "apiserver_admission_webhook_rejection_count",
    "apiserver_admission_webhook_fail_open_count",
    "kube_deployment_status_replicas_available",
    "up",
];

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every query of the dashboard, by panel title, with the template variables filled in.
pub fn dashboard_queries() -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(root().join("manifests/monitoring/dashboard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let mut panels = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let Some(targets) = panel["targets"].as_array() else {
            continue;
        };
        let exprs = targets
            .iter()
            .map(|t| {
                t["expr"]
                    .as_str()
                    .unwrap()
                    .replace("$namespace", NS)
                    .replace("$job", JOB)
                    .replace("$__rate_interval", "20s")
            })
            .collect();
        panels.push((panel["title"].as_str().unwrap().to_string(), exprs));
    }
    // The template variables' own queries.
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(q) = var["definition"].as_str() {
            let series = q
                .trim_start_matches("label_values(")
                .split([',', ')'])
                .next()
                .unwrap()
                .replace("$namespace", NS);
            panels.push((format!("variable {}", var["name"]), vec![series]));
        }
    }
    panels
}

/// Every alert expression of the PrometheusRule, by alert name.
pub fn alert_exprs() -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(root().join("manifests/monitoring/prometheusrule.yaml")).unwrap();
    let rule: Value = serde_saphyr::from_str(&text).unwrap();
    let mut alerts = Vec::new();
    for group in rule["spec"]["groups"].as_array().unwrap() {
        for r in group["rules"].as_array().unwrap() {
            alerts.push((
                r["alert"].as_str().unwrap().to_string(),
                r["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    alerts
}

/// The metric names an expression reads (identifiers followed by `{`, `[` or a space that are
/// not PromQL functions, keywords or label names).
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    const WORDS: &[&str] = &[
        "sum",
        "by",
        "rate",
        "increase",
        "histogram_quantile",
        "max",
        "min",
        "count",
        "absent",
        "or",
        "unless",
        "on",
        "vector",
        "time",
        "and",
        "le",
        "without",
        "avg",
        "irate",
    ];
    let mut names = BTreeSet::new();
    let mut rest = expr;
    // Drop label matchers `{…}` and the grouping `(…)` after by/on, whose words are labels.
    let mut cleaned = String::new();
    let mut depth = 0;
    for c in rest.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ if depth == 0 => cleaned.push(c),
            _ => {}
        }
    }
    for group in ["by (", "on("] {
        while let Some(i) = cleaned.find(group) {
            let end = cleaned[i..].find(')').map_or(cleaned.len(), |e| i + e + 1);
            cleaned.replace_range(i..end, " ");
        }
    }
    rest = &cleaned;
    for word in rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
        let is_name = word.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && !WORDS.contains(&word)
            && word.contains('_')
            || word == "up";
        if is_name {
            names.insert(word.to_string());
        }
    }
    names
}

/// The metric names `serve` exports, from one scrape of its /metrics.
pub fn exported(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = line.split(['{', ' ']).next().unwrap();
        names.insert(name.to_string());
    }
    names
}
