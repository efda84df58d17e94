//! How the `app` commands print apps: a kubectl-like table for a person (`table`, `wide`), or for
//! a program `name`, `json`, `yaml` (the `/apps` record with its snake_case keys, drift left
//! out) and `jsonpath=TEMPLATE`.
//!
//! Pure: the caller passes the records and their ages; nothing here reads a clock or writes.

use k8s_openapi::jiff::SignedDuration;
use serde_json::{Value, json};

use super::jsonpath::Template;
use crate::watch::hub::AppRecord;
use crate::watch::status::Phase;

/// The output format of the `app` commands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Output {
    /// `NAME  PHASE  REPLICAS  URL  AGE`, and the message under a row that is not ACTIVE.
    #[default]
    Table,
    /// The table with the app's identity and message as columns.
    Wide,
    /// `service.serving.knative.dev/NAME`, one per line.
    Name,
    /// The record, pretty-printed; several in a `List`.
    Json,
    /// The record as YAML; several in a `List`.
    Yaml,
    /// A kubectl JSONPath template over the JSON.
    JsonPath(Template),
}

/// The forms `-o` takes, for messages.
pub const FORMS: &str = "table, wide, name, json, yaml or jsonpath=TEMPLATE";

/// Parse `-o`: `table`, `wide`, `name`, `json`, `yaml` or `jsonpath=TEMPLATE`.
pub fn parse_output(text: &str) -> Result<Output, String> {
    match text.split_once('=') {
        Some(("jsonpath", template)) => Template::parse(template).map(Output::JsonPath),
        _ => match text {
            "table" => Ok(Output::Table),
            "wide" => Ok(Output::Wide),
            "name" => Ok(Output::Name),
            "json" => Ok(Output::Json),
            "yaml" => Ok(Output::Yaml),
            other => Err(format!("unknown output format `{other}`; use {FORMS}")),
        },
    }
}

/// One app to print: its record and, when the API server said, its age.
#[derive(Debug, Clone)]
pub struct Shown {
    pub record: AppRecord,
    pub age: Option<SignedDuration>,
}

/// Prints apps in one format; a table keeps its column widths across calls, so the rows of a
/// watch stay under their header.
#[derive(Debug, Clone)]
pub struct Printer {
    output: Output,
    namespaces: bool,
    widths: Vec<usize>,
}

impl Printer {
    /// A printer for `output`; `namespaces` adds the NAMESPACE column (`-A`).
    pub fn new(output: Output, namespaces: bool) -> Self {
        Self {
            output,
            namespaces,
            widths: Vec::new(),
        }
    }

    /// Whether the output is for a program (JSON, YAML, JSONPath) rather than a person.
    pub fn structured(&self) -> bool {
        matches!(
            self.output,
            Output::Json | Output::Yaml | Output::JsonPath(_)
        )
    }

    /// `apps` as one listing (a `List` when `list`, else each on its own), the table's header
    /// before the first rows printed.
    pub fn print(&mut self, apps: &[Shown], list: bool) -> Result<String, String> {
        if matches!(self.output, Output::Table | Output::Wide) {
            return Ok(self.table(apps));
        }
        let items = || apps.iter().map(|a| record_json(&a.record));
        let list_value =
            || json!({"apiVersion": "v1", "kind": "List", "items": items().collect::<Vec<_>>()});
        let each = |f: &dyn Fn(&Value) -> Result<String, String>| {
            items().map(|v| f(&v)).collect::<Result<String, String>>()
        };
        match (&self.output, list) {
            (Output::Json, true) => pretty(&list_value()),
            (Output::Json, false) => each(&pretty),
            (Output::Yaml, true) => yaml(&list_value()),
            (Output::Yaml, false) => each(&yaml),
            (Output::JsonPath(t), true) => Ok(t.render(&list_value())),
            (Output::JsonPath(t), false) => each(&|v| Ok(t.render(v))),
            (Output::Name | Output::Table | Output::Wide, _) => Ok(apps
                .iter()
                .map(|a| format!("service.serving.knative.dev/{}\n", a.record.name))
                .collect()),
        }
    }

    fn table(&mut self, apps: &[Shown]) -> String {
        let wide = self.output == Output::Wide;
        let mut header = vec!["NAME", "PHASE", "REPLICAS", "URL", "AGE"];
        if wide {
            header.extend(["APP", "MESSAGE"]);
        }
        if self.namespaces {
            header.insert(0, "NAMESPACE");
        }
        let rows: Vec<Vec<String>> = apps
            .iter()
            .map(|a| cells(a, wide, self.namespaces))
            .collect();
        let mut text = String::new();
        let first = self.widths.is_empty();
        let header: Vec<String> = header.into_iter().map(str::to_owned).collect();
        for row in std::iter::once(&header).chain(&rows) {
            for (i, cell) in row.iter().enumerate() {
                let width = cell.chars().count();
                match self.widths.get_mut(i) {
                    Some(w) => *w = (*w).max(width),
                    None => self.widths.push(width),
                }
            }
        }
        if first {
            text.push_str(&self.line(&header));
        }
        for (row, app) in rows.iter().zip(apps) {
            text.push_str(&self.line(row));
            let status = &app.record.status;
            if !wide && status.phase != Phase::Active && !status.message.trim().is_empty() {
                text.push_str(&format!("  {}\n", status.message.trim()));
            }
        }
        text
    }

    /// Cells padded to the column widths, three spaces apart, as kubectl aligns its columns.
    fn line(&self, cells: &[String]) -> String {
        let mut line = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                line.push_str(cell);
            } else {
                let width = self.widths.get(i).copied().unwrap_or(0);
                line.push_str(&format!("{cell:<width$}   "));
            }
        }
        line.push('\n');
        line
    }
}

fn cells(app: &Shown, wide: bool, namespaces: bool) -> Vec<String> {
    let (record, status) = (&app.record, &app.record.status);
    let dash = || "-".to_owned();
    let mut cells = vec![
        record.name.clone(),
        status.phase.as_str().to_owned(),
        status.replicas.map_or_else(dash, |n| n.to_string()),
        status.url.clone().unwrap_or_else(dash),
        app.age.map_or_else(dash, human_age),
    ];
    if wide {
        let id = match (&record.project, &record.domain, &record.app_name) {
            (Some(p), Some(d), Some(n)) => format!("{p}/{d}/{n}"),
            _ => dash(),
        };
        let message = status.message.trim();
        cells.push(id);
        cells.push(if message.is_empty() {
            dash()
        } else {
            message.to_owned()
        });
    }
    if namespaces {
        cells.insert(0, record.namespace.clone());
    }
    cells
}

/// The record as JSON for a program: the keys of `/apps` (snake_case, the one casing of every
/// machine output of the command line, docs/cli.md), without the drift fields: the command line
/// reads KServices itself and does not judge them (`ksvc-webhook drift` gives the server's
/// report).
pub fn record_json(record: &AppRecord) -> Value {
    let mut value = serde_json::to_value(record).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        for key in ["drift", "drift_new_revision", "readmit"] {
            map.remove(key);
        }
    }
    value
}

fn pretty(value: &Value) -> Result<String, String> {
    serde_json::to_string_pretty(value)
        .map(|text| text + "\n")
        .map_err(|e| e.to_string())
}

fn yaml(value: &Value) -> Result<String, String> {
    serde_saphyr::to_string(value)
        .map(|text| format!("---\n{text}"))
        .map_err(|e| e.to_string())
}

/// An age the way kubectl writes one: `45s`, `12m`, `5h`, `3d`.
pub fn human_age(age: SignedDuration) -> String {
    let secs = age.as_secs().max(0);
    match secs {
        0..120 => format!("{secs}s"),
        120..10_800 => format!("{}m", secs / 60),
        10_800..172_800 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

#[cfg(test)]
#[path = "print_tests.rs"]
mod tests;
