//! `mutate`, `review`, `uninject`, `name` and `sha`: the admission core on files, no cluster.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::admission::{self, Request};
use crate::admission::{ksvc, mutate as edits, naming};
use crate::keys;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::policy::PolicyArgs;
use crate::admission::writers::UserInfo;
use crate::docs::{self, Documents};
use crate::json::Node;
use crate::json::edit::Editor;

/// Read a file, or standard input for `-`.
fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    if path == Path::new("-") {
        std::io::stdin()
            .read_to_end(&mut bytes)
            .context("cannot read standard input")?;
    } else {
        bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    }
    Ok(bytes)
}

fn read_docs(path: &Path) -> anyhow::Result<Documents> {
    docs::parse(&read(path)?).with_context(|| format!("cannot parse {}", path.display()))
}

fn write_out(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("cannot write to standard output")
}

/// Apply `f` to every KService in `doc`, looking inside `kind: List`.
fn each_kservice(
    doc: &mut Value,
    f: &mut impl FnMut(&mut Value) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    if doc.get("kind").and_then(Value::as_str) == Some("List") {
        if let Some(items) = doc.get_mut("items").and_then(Value::as_array_mut) {
            for item in items {
                each_kservice(item, f)?;
            }
        }
        return Ok(());
    }
    if docs::is_kservice(doc) {
        f(doc)
    } else {
        Ok(())
    }
}

/// `mutate`: print the mutated manifests, or the violations and fail.
pub fn mutate(args: &MutateArgs) -> anyhow::Result<()> {
    let policy = args.policy.policy()?;
    let mut input = read_docs(&args.input.file)?;
    let old = match &args.old {
        Some(path) => {
            let mut docs = read_docs(path)?.items;
            if docs.len() != 1 {
                bail!(
                    "{} must hold exactly one object, found {}",
                    path.display(),
                    docs.len()
                );
            }
            docs.pop()
        }
        None => None,
    };
    let operation = match args.operation {
        OperationArg::Create => "CREATE",
        OperationArg::Update => "UPDATE",
    };
    let mut rejections = Vec::new();
    for doc in &mut input.items {
        each_kservice(doc, &mut |obj| {
            let request = Request {
                user_info: UserInfo {
                    username: args.user.clone().unwrap_or_default(),
                    groups: args.groups.clone(),
                },
                ..Request::kservice(
                    "offline",
                    operation,
                    &args.namespace,
                    obj.take(),
                    old.clone(),
                )
            };
            let shown = display_name(request.object.as_ref());
            let decision = admission::decide(request, &policy);
            for warning in &decision.warnings {
                eprintln!("warning: {shown}: {warning}");
            }
            if decision.allowed {
                *obj = decision.object_json().unwrap_or_default();
            } else {
                rejections.push(format!("{shown} rejected: {}", decision.message()));
            }
            Ok(())
        })?;
    }
    if !rejections.is_empty() {
        bail!("{}", rejections.join("\n"));
    }
    write_out(&docs::render(input.format, &input.items)?)
}

fn display_name(obj: Option<&Node>) -> String {
    match obj.map(ksvc::name) {
        Some(name) if !name.is_empty() => format!("Service {name:?}"),
        _ => "Service".to_string(),
    }
}

/// `review`: print the AdmissionReview response the server would send.
pub fn review(args: &ReviewArgs) -> anyhow::Result<()> {
    let policy = args.policy.policy()?;
    let body = read(&args.input.file)?;
    let reviewed = admission::review(&body, &policy)?;
    let mut text = String::from_utf8_lossy(&reviewed.body).into_owned();
    text.push('\n');
    write_out(&text)
}

/// `uninject`: the manifests without anything the webhook added.
pub fn uninject(args: &InputArgs) -> anyhow::Result<()> {
    let mut input = read_docs(&args.file)?;
    for doc in &mut input.items {
        each_kservice(doc, &mut |obj| {
            let mut node = Node::from_json(obj.take());
            if !edits::strip(&mut Editor::new(&mut node)) {
                eprintln!(
                    "warning: the stop-restore or sidecar status annotation is unreadable; \
                     what it records was kept"
                );
            }
            *obj = node.to_json();
            Ok(())
        })?;
    }
    write_out(&docs::render(input.format, &input.items)?)
}

/// `name`: the deterministic KService name of an identity, or admission's refusal of it.
pub fn name(args: &NameArgs) -> anyhow::Result<()> {
    let labels = serde_json::json!({
        keys::LABEL_PROJECT: args.project, keys::LABEL_DOMAIN: args.domain,
        keys::LABEL_APP_NAME: args.name,
    });
    let object = serde_json::json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"labels": labels},
        "spec": {"template": {"spec": {"containers": [{"image": "image"}]}}},
    });
    let request = Request::kservice("offline", "CREATE", "default", object, None);
    let decision = admission::decide(request, &admission::Policy::default());
    // Only the identity's own rules: the namespace and the route domain are not known here.
    let refused: Vec<String> = decision
        .violations
        .iter()
        .filter(|v| v.rule.starts_with("identity"))
        .map(|v| format!("\n- {v}"))
        .collect();
    if !refused.is_empty() {
        bail!("admission refuses this identity:{}", refused.concat());
    }
    let app = naming::app_name(&args.project, &args.domain, &args.name);
    if app.hashed {
        eprintln!("note: the name was hashed to fit 63 characters");
    }
    write_out(&format!("{}\n", app.name))
}

/// `sha`: the spec SHA of each KService, one per line.
pub fn sha(args: &InputArgs) -> anyhow::Result<()> {
    let mut input = read_docs(&args.file)?;
    let mut lines = String::new();
    for doc in &mut input.items {
        each_kservice(doc, &mut |obj| {
            lines.push_str(&crate::admission::spec_sha::json_sha(&edits::user_spec(
                obj,
            )));
            lines.push('\n');
            Ok(())
        })?;
    }
    if lines.is_empty() {
        bail!(
            "{} holds no serving.knative.dev/v1 Service",
            args.file.display()
        );
    }
    write_out(&lines)
}

// The flags of the offline subcommands.

/// A manifest to read.
#[derive(Debug, Clone, Args)]
pub struct InputArgs {
    /// The manifest: a file of JSON or (multi-document) YAML, or `-` for standard input.
    #[arg(short = 'f', long = "filename", value_name = "FILE|-")]
    pub file: PathBuf,
}

/// The admission operation to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OperationArg {
    Create,
    Update,
}

/// Arguments of `mutate`.
#[derive(Debug, Clone, Args)]
pub struct MutateArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// The namespace of objects that do not set one.
    #[arg(short = 'n', long, default_value = "default", value_parser = crate::flags::parse_dns_label)]
    pub namespace: String,
    /// The operation to simulate; UPDATE checks the rules that compare with `--old`.
    #[arg(long, value_enum, default_value_t = OperationArg::Create)]
    pub operation: OperationArg,
    /// The stored object, for UPDATE (identity labels must not change).
    #[arg(long, value_name = "FILE")]
    pub old: Option<PathBuf>,
    /// Act as this writer (`request.userInfo.username`), e.g. a platform writer.
    #[arg(long, env = "KSVC_WEBHOOK_MUTATE_USER", value_name = "USERNAME")]
    pub user: Option<String>,
    /// Act as a member of these groups (`request.userInfo.groups`); repeat or comma-separate.
    #[arg(
        long = "group",
        env = "KSVC_WEBHOOK_MUTATE_GROUPS",
        value_delimiter = ',',
        value_name = "GROUP"
    )]
    pub groups: Vec<String>,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// Arguments of `review`.
#[derive(Debug, Clone, Args)]
pub struct ReviewArgs {
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// Arguments of `name`.
#[derive(Debug, Clone, Args)]
pub struct NameArgs {
    /// The app's project.
    #[arg(long)]
    pub project: String,
    /// The app's domain.
    #[arg(long)]
    pub domain: String,
    /// The app's name.
    #[arg(long)]
    pub name: String,
}
