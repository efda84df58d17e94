//! How the `app` commands print apps: a kubectl-like table for a person (`table`, `wide`), or for
//! a program `name`, `json`, `yaml` (the `/apps` record with its snake_case keys, drift left
//! out) and `jsonpath=TEMPLATE`.
//!
//! Pure: the caller passes the records and their ages; nothing here reads a clock or writes.

use k8s_openapi::jiff::SignedDuration;
use serde_json::{Value, json};

use crate::cli::output::{self, Output, Table};
use crate::watch::hub::AppRecord;
use crate::watch::status::Phase;

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
    table: Table,
}

impl Printer {
    /// A printer for `output`; `namespaces` adds the NAMESPACE column (`-A`).
    pub fn new(output: Output, namespaces: bool) -> Self {
        Self {
            output,
            namespaces,
            table: Table::default(),
        }
    }

    /// Whether the output is for a program (JSON, YAML, JSONPath) rather than a person.
    pub fn structured(&self) -> bool {
        self.output.structured()
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
            (Output::Json, true) => output::pretty(&list_value()),
            (Output::Json, false) => each(&output::pretty),
            (Output::Yaml, true) => output::yaml(&list_value()),
            (Output::Yaml, false) => each(&output::yaml),
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
        self.table.render(&header, &rows, |i| {
            let status = &apps[i].record.status;
            match !wide && status.phase != Phase::Active && !status.message.trim().is_empty() {
                true => vec![status.message.trim().to_owned()],
                false => Vec::new(),
            }
        })
    }
}

fn cells(app: &Shown, wide: bool, namespaces: bool) -> Vec<String> {
    let (record, status) = (&app.record, &app.record.status);
    let dash = || "-".to_owned();
    let mut cells = vec![
        record.name.to_string(),
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
        cells.insert(0, record.namespace.to_string());
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
