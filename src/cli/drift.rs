//! `ksvc-webhook drift`: which KServices admission would change today, and why.
//!
//! By default the server's own answer: the drift report its watch loop keeps on `/apps`, read
//! from the status listener on a Ready pod's loopback through a port-forward, or from
//! `--status-url` ([`super::status`]), so the command says what the alert that sent you here
//! (`ksvc_webhook_drift_apps`) says. With `-f FILE` (e.g. the output of `kubectl get ksvc -A -o
//! yaml`) it judges offline instead, with the policy flags given (`--sidecars-from-cluster` reads
//! the catalogue's ConfigMap as `mutate` does): each KService is read as the loop's cache reads
//! it (`watch::view`) and judged by `admission::drift`; one that cannot be read is a row of its
//! own, never the end of the report.
//!
//! Exit codes follow `kubectl diff`: 0 when nothing has drifted, 1 when something has, 2 on an
//! error (the report is still printed for every KService that could be read). Never writes to
//! the cluster; its reads use the user's credentials, so they are in no `API_CALLS`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde::Serialize;
use serde_json::Value;

use super::output::{self, Output, Table};
use super::policy::{PolicyArgs, SidecarSourceArgs};
use super::status::{self, StatusApiArgs};
use crate::admission::Policy;
use crate::admission::drift::{self, Finding};
use crate::cluster::client::{self, ClientArgs};
use crate::keys;
use crate::manifest_text;
use crate::report::error_chain;
use crate::watch::hub::AppRecord;
use crate::watch::view::KService;

/// The end of a command that has printed all it had to say: only its exit status is left
/// (`main` exits with it and prints nothing more).
#[derive(Debug, thiserror::Error)]
#[error("exit status {0}")]
pub struct Exit(pub u8);

/// Run `drift`: print the report, then end with its exit status.
pub fn run(args: DriftArgs) -> anyhow::Result<()> {
    let code = match report(&args, &mut std::io::stdout().lock()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", error_chain(err.as_ref()));
            2
        }
    };
    match code {
        0 => Ok(()),
        code => Err(Exit(code).into()),
    }
}

/// Print the report of `args` to `out`; returns the exit status.
fn report(args: &DriftArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let mut rows: Vec<Row> = match &args.file {
        Some(path) => {
            let mut policy = args
                .policy
                .policy()
                .context("invalid admission policy flags")?;
            args.sidecars_source.apply(&mut policy, &args.cluster)?;
            let input = from_file(path, args.namespace.as_deref())?;
            input
                .services
                .into_iter()
                .map(|s| row(s, &input.namespaces, &policy))
                .collect()
        }
        None => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(from_server(args))?
            .into_iter()
            .map(Row::from)
            .collect(),
    };
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    print(&rows, &args.output, out)?;
    let code = match (
        rows.iter().any(|r| r.error.is_some()),
        rows.iter().any(|r| r.drifted),
    ) {
        (true, _) => 2,
        (false, true) => 1,
        (false, false) => 0,
    };
    Ok(code)
}

/// The server's records of the namespace the flags name (`-A`: all; neither: the kubeconfig
/// context's).
async fn from_server(args: &DriftArgs) -> anyhow::Result<Vec<AppRecord>> {
    let namespace = match (args.all_namespaces, &args.namespace) {
        (true, _) => None,
        (false, Some(ns)) => Some(ns.clone()),
        (false, None) => Some(
            client::config(&args.cluster, None)
                .await?
                .0
                .default_namespace,
        ),
    };
    Ok(status::apps(&args.status_api, &args.cluster, namespace.as_deref()).await?)
}

/// The KServices to judge, and the opt-out label of each namespace known to have one.
struct Input {
    services: Vec<Value>,
    namespaces: BTreeMap<String, String>,
}

/// The KServices (a `List`'s items included) and Namespaces of a file; those in `namespace`
/// only, when given (an object without a namespace is in `default`).
fn from_file(path: &Path, namespace: Option<&str>) -> anyhow::Result<Input> {
    let bytes = match path == Path::new("-") {
        true => {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
                .context("cannot read standard input")?;
            bytes
        }
        false => std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?,
    };
    let docs =
        manifest_text::parse(&bytes).with_context(|| format!("cannot parse {}", path.display()))?;
    let mut items = Vec::new();
    for doc in docs.items {
        match doc.get("kind").and_then(Value::as_str) {
            Some("List") => items.extend(
                doc.get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            ),
            _ => items.push(doc),
        }
    }
    let mut input = Input {
        services: Vec::new(),
        namespaces: BTreeMap::new(),
    };
    for mut item in items {
        if item.get("kind").and_then(Value::as_str) == Some("Namespace") {
            let name = item.pointer("/metadata/name").and_then(Value::as_str);
            let label = item
                .pointer("/metadata/labels")
                .and_then(|l| l.get(keys::LABEL_NAMESPACE_INJECT))
                .and_then(Value::as_str);
            if let (Some(name), Some(label)) = (name, label) {
                input.namespaces.insert(name.to_owned(), label.to_owned());
            }
        } else if manifest_text::is_kservice(&item) {
            if let Some(meta) = item.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.entry("namespace").or_insert_with(|| "default".into());
            }
            let ns = item.pointer("/metadata/namespace").and_then(Value::as_str);
            if namespace.is_none_or(|want| ns == Some(want)) {
                input.services.push(item);
            }
        }
    }
    Ok(input)
}

/// One KService's line of the report.
#[derive(Debug, Serialize)]
struct Row {
    namespace: String,
    name: String,
    /// Every reason, with its detail.
    drift: Vec<Finding>,
    /// Converging it changes `spec.template`: a new Revision and new pods.
    new_revision: bool,
    /// Why it could not be judged.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip)]
    drifted: bool,
}

impl From<AppRecord> for Row {
    /// The server's judgement of one app.
    fn from(record: AppRecord) -> Self {
        Row {
            drifted: !record.drift.drift.is_empty(),
            namespace: record.namespace.to_string(),
            name: record.name.to_string(),
            drift: record.drift.drift.to_vec(),
            new_revision: record.drift.drift_new_revision,
            error: None,
        }
    }
}

/// Judge one KService.
fn row(service: Value, namespaces: &BTreeMap<String, String>, policy: &Policy) -> Row {
    let text = |pointer: &str| {
        service
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("-")
            .to_owned()
    };
    let mut row = Row {
        namespace: text("/metadata/namespace"),
        name: text("/metadata/name"),
        drift: Vec::new(),
        new_revision: false,
        error: None,
        drifted: false,
    };
    let judged = serde_json::from_value::<KService>(service)
        .map_err(|e| format!("cannot be read as a KService: {e}"))
        .and_then(|ksvc| {
            let inject = namespaces.get(ksvc.namespace()).map(String::as_str);
            drift::drift(ksvc.stored.text().unwrap_or_default(), inject, policy)
                .map_err(|e| e.to_string())
        });
    match judged {
        Ok(found) => {
            row.drifted = found.drifted();
            row.new_revision = found.new_revision;
            row.drift = found.findings;
        }
        Err(error) => row.error = Some(error),
    }
    row
}

/// Print the rows in `output`.
fn print(rows: &[Row], output: &Output, out: &mut dyn Write) -> anyhow::Result<()> {
    if output.structured() {
        return output::structured(rows, output, out);
    }
    let cells: Vec<Vec<String>> = rows.iter().map(cells).collect();
    let header = ["NAMESPACE", "NAME", "REASONS", "NEW-REVISION"];
    let under = |i: usize| rows[i].error.iter().cloned().collect();
    write!(out, "{}", Table::default().render(&header, &cells, under))?;
    Ok(())
}

fn cells(row: &Row) -> Vec<String> {
    let reasons: Vec<&str> = row.drift.iter().map(|f| f.reason.as_str()).collect();
    let (reasons, new_revision) = match (&row.error, reasons.is_empty()) {
        (Some(_), _) => ("error".to_owned(), "-"),
        (None, true) => ("-".to_owned(), "no"),
        (None, false) => (
            reasons.join(","),
            if row.new_revision { "yes" } else { "no" },
        ),
    };
    vec![
        row.namespace.clone(),
        row.name.clone(),
        reasons,
        new_revision.to_owned(),
    ]
}

/// What `drift --help` shows after the flags.
const HELP: &str = "\
Environment:
  KUBECONFIG   kubeconfig files (':'-separated) when --kubeconfig is not given
  NO_COLOR     any value: no colour in help and errors

Without -f, the report is the server's: the drift its watch loop computes with the policy it
runs, the one its ksvc_webhook_drift_apps gauge counts, read from `/apps` on the status listener
of a Ready pod of --webhook-service through a port-forward, as kubectl port-forward does (you
need get on services, list on pods and create on pods/portforward in --webhook-namespace), or
from --status-url. With -f, the KServices in the file are judged here, with the policy flags
given.

Exit status: 0 nothing has drifted, 1 something has, 2 an error.

Examples:
  ksvc-webhook drift -A
  ksvc-webhook drift -n team-a -o json
  ksvc-webhook drift -A --status-url http://127.0.0.1:8444
  kubectl get ksvc -A -o yaml | ksvc-webhook drift -f - --sidecars-from-cluster";

/// Arguments of `drift`.
#[derive(Debug, Clone, Args)]
#[command(after_help = HELP)]
#[command(mut_group("PolicyArgs", |g| g.requires("file")))]
#[command(mut_group("SidecarSourceArgs", |g| g.requires("file")))]
pub struct DriftArgs {
    /// Judge the KServices in this file (`-` for standard input) here, with the policy flags,
    /// instead of reading the server's report: JSON or (multi-document) YAML, `List` items
    /// included, e.g. `kubectl get ksvc -A -o yaml`; Namespace objects in it give their opt-out
    /// label.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE|-",
        env = "KSVC_WEBHOOK_DRIFT_FILE"
    )]
    pub file: Option<PathBuf>,
    /// Only this namespace; default: the kubeconfig context's namespace (with `-f`: the whole
    /// file).
    #[arg(short = 'n', long, env = "KSVC_WEBHOOK_DRIFT_NAMESPACE")]
    pub namespace: Option<String>,
    /// Every namespace of the cluster.
    #[arg(
        short = 'A',
        long,
        env = "KSVC_WEBHOOK_DRIFT_ALL_NAMESPACES",
        conflicts_with_all = ["namespace", "file"]
    )]
    pub all_namespaces: bool,
    #[command(flatten)]
    pub cluster: ClientArgs,
    #[command(flatten)]
    pub status_api: StatusApiArgs,
    /// Output format: `table`, `json` or `yaml` (each KService's namespace, name,
    /// `drift: [{reason, detail}]`, `new_revision`, and `error` when it could not be judged), or
    /// `jsonpath=TEMPLATE`.
    #[arg(short = 'o', long, env = "KSVC_WEBHOOK_DRIFT_OUTPUT", default_value = "table",
          value_parser = output::Forms { document: true }, hide_possible_values = true)]
    pub output: Output,
    #[command(flatten)]
    pub policy: PolicyArgs,
    // With `-f` only, as the policy flags.
    #[command(flatten)]
    pub sidecars_source: SidecarSourceArgs,
}
