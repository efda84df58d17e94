//! `mutate`, `review`, `uninject`, `name` and `sha`: the admission core on files, no cluster
//! (but for `mutate --sidecars-from-cluster`, which reads the catalogue's ConfigMap as the server
//! does). Reading is [`inputs`]'s, and passing other documents through untouched [`manifests`]'s.

mod fields;
pub mod inputs;
pub mod manifests;

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};

use crate::admission::{self, Request};
use crate::admission::{ksvc, mutate as edits, naming};
use crate::keys;

use clap::{Args, ValueEnum};

use crate::admission::writers::UserInfo;
use crate::cli::policy::{OfflinePolicyArgs, PolicyArgs};
use crate::json::Node;
use crate::json::edit::Editor;
use crate::manifest_text as docs;
use inputs::InputArgs;

fn write_out(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("cannot write to standard output")
}

/// `mutate`: print the mutated manifests, or the violations and fail.
pub fn mutate(args: &MutateArgs) -> anyhow::Result<()> {
    let policy = args.offline.policy()?;
    let inputs = inputs::read_all(&args.input)?;
    let old = match &args.old {
        Some(path) => {
            let old = inputs::read_path(path)?;
            let mut docs = docs::parse(old.text.as_bytes())
                .with_context(|| format!("cannot parse {}", old.name))?
                .items;
            if docs.len() != 1 {
                bail!(
                    "{} must hold exactly one object, found {}",
                    old.name,
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
    let mut unknown = 0;
    let mut diffs = String::new();
    let out = manifests::rewrite(&inputs, |obj| {
        let before = args.diff.then(|| yaml(obj));
        let fields = fields::unknown_fields(obj);
        unknown += fields.len();
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
        for field in fields {
            eprintln!("warning: {shown}: unknown field \"{field}\"");
        }
        let decision = admission::decide(request, &policy);
        for warning in &decision.warnings {
            eprintln!("warning: {shown}: {warning}");
        }
        if decision.allowed {
            *obj = decision.object_json().unwrap_or_default();
        } else {
            rejections.push(format!("{shown} rejected: {}", decision.message()));
        }
        if let Some(before) = before {
            diffs.push_str(&unified(&before, &yaml(obj), &shown));
        }
        Ok(())
    })?;
    let others = &out.others;
    if !others.is_empty() {
        let (n, is) = match others.len() {
            1 => (
                "1 document is".to_owned(),
                "a serving.knative.dev/v1 Service",
            ),
            n => (
                format!("{n} documents are"),
                "serving.knative.dev/v1 Services",
            ),
        };
        eprintln!(
            "warning: {n} not {is}, passed through unchanged: {}",
            others.join(", ")
        );
    }
    if !rejections.is_empty() {
        bail!("{}", rejections.join("\n"));
    }
    write_out(if args.diff { &diffs } else { &out.text })?;
    if args.strict && (unknown > 0 || !others.is_empty()) {
        bail!(
            "--strict: {unknown} unknown field{} and {} document{} that {} not a KService",
            if unknown == 1 { "" } else { "s" },
            others.len(),
            if others.len() == 1 { "" } else { "s" },
            if others.len() == 1 { "is" } else { "are" },
        );
    }
    Ok(())
}

/// One object as YAML, for a diff.
fn yaml(obj: &serde_json::Value) -> String {
    docs::render(docs::Format::Yaml, std::slice::from_ref(obj)).unwrap_or_default()
}

/// The unified diff (3 lines of context) from `before` to `after` of `shown`; nothing when
/// they are equal.
fn unified(before: &str, after: &str, shown: &str) -> String {
    let diff = similar::TextDiff::from_lines(before, after);
    if diff.ratio() == 1.0 {
        return String::new();
    }
    diff.unified_diff()
        .context_radius(3)
        .header(
            &format!("{shown} (as written)"),
            &format!("{shown} (as admitted)"),
        )
        .to_string()
}

fn display_name(obj: Option<&Node>) -> String {
    match obj.map(ksvc::name) {
        Some(name) if !name.is_empty() => format!("Service {name:?}"),
        _ => "Service".to_string(),
    }
}

/// `review`: print the AdmissionReview response the server would send; the review may be
/// written in YAML.
pub fn review(args: &ReviewArgs) -> anyhow::Result<()> {
    let policy = args.policy.policy()?;
    let input = inputs::read_path(&args.file)?;
    let cannot = || format!("cannot review {}", input.name);
    let body = match docs::looks_like_json(&input.text) {
        true => input.text.clone().into_bytes(),
        false => {
            let mut parsed = docs::parse(input.text.as_bytes()).with_context(cannot)?;
            if parsed.items.len() != 1 {
                bail!(
                    "cannot review {}: it must hold one AdmissionReview, found {} documents",
                    input.name,
                    parsed.items.len()
                );
            }
            serde_json::to_vec(&parsed.items.remove(0)).with_context(cannot)?
        }
    };
    let reviewed = admission::review(&body, &policy).with_context(cannot)?;
    let mut text = String::from_utf8_lossy(&reviewed.body).into_owned();
    text.push('\n');
    write_out(&text)
}

/// `uninject`: the manifests without anything the webhook added.
pub fn uninject(args: &UninjectArgs) -> anyhow::Result<()> {
    let inputs = inputs::read_all(&args.input)?;
    let out = manifests::rewrite(&inputs, |obj| {
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
    write_out(&out.text)
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

/// `sha`: `NAMESPACE/NAME  SHA` for each KService, the names aligned.
pub fn sha(args: &ShaArgs) -> anyhow::Result<()> {
    let inputs = inputs::read_all(&args.input)?;
    let mut rows = Vec::new();
    manifests::rewrite(&inputs, |obj| {
        let sha = crate::admission::spec_sha::json_sha(&edits::user_spec(obj));
        let node = Node::from_json(obj.clone());
        let namespace = match ksvc::namespace(&node) {
            "" => args.namespace.as_str(),
            ns => ns,
        };
        let name = match (ksvc::name(&node), ksvc::identity(&node)) {
            ("", Some(id)) => naming::app_name(&id.project, &id.domain, &id.name).name,
            ("", None) => format!("{}*", ksvc::generate_name(&node)),
            (name, _) => name.to_owned(),
        };
        rows.push((format!("{namespace}/{name}"), sha));
        Ok(())
    })?;
    if rows.is_empty() {
        bail!(
            "{} holds no serving.knative.dev/v1 Service",
            inputs::names(&inputs)
        );
    }
    let width = rows
        .iter()
        .map(|(name, _)| name.chars().count())
        .max()
        .unwrap_or(0);
    let lines: String = rows
        .iter()
        .map(|(name, sha)| format!("{name:<width$}  {sha}\n"))
        .collect();
    write_out(&lines)
}

// The flags of the offline subcommands, each with the words after its `--help`: the environment
// variables it reads besides each flag's own, and examples that work when pasted.

/// What `mutate --help` shows after the flags.
const MUTATE_HELP: &str = "\
Environment:
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook mutate -f examples/managed-ksvc.yaml
  ksvc-webhook mutate -f examples/ -f extra.yaml        # every *.yaml, *.yml, *.json; -R recurses
  kubectl get ksvc hello -o yaml | ksvc-webhook mutate -f - --operation update --old stored.yaml";

/// What `review --help` shows after the flags.
const REVIEW_HELP: &str = "\
Environment:
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook review -f examples/managed-review.json
  ksvc-webhook review -f review.yaml --sidecars examples/sidecars.yaml";

/// What `uninject --help` shows after the flags.
const UNINJECT_HELP: &str = "\
Environment:
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook mutate -f examples/managed-ksvc.yaml | ksvc-webhook uninject -f -";

/// What `name --help` shows after the flags.
const NAME_HELP: &str = "\
Environment:
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook name --project proj --domain dev --name MyApp     # myapp-proj-dev";

/// What `sha --help` shows after the flags.
const SHA_HELP: &str = "\
Environment:
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook sha -f examples/managed-ksvc.yaml                 # flyte/myapp-proj-dev  <sha>
  ksvc-webhook sha -R -f examples/ -n team-a";

/// Arguments of `uninject`.
#[derive(Debug, Clone, Args)]
#[command(after_help = UNINJECT_HELP)]
pub struct UninjectArgs {
    #[command(flatten)]
    pub input: InputArgs,
}

/// Arguments of `sha`.
#[derive(Debug, Clone, Args)]
#[command(after_help = SHA_HELP)]
pub struct ShaArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// The namespace shown for objects that do not set one.
    #[arg(short = 'n', long, env = "KSVC_WEBHOOK_SHA_NAMESPACE", default_value = "default",
          value_parser = crate::flags::parse_dns_label)]
    pub namespace: String,
}

/// The admission operation to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OperationArg {
    Create,
    Update,
}

/// Arguments of `mutate`.
#[derive(Debug, Clone, Args)]
#[command(after_help = MUTATE_HELP)]
pub struct MutateArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// The namespace of objects that do not set one.
    #[arg(short = 'n', long, default_value = "default", value_parser = crate::flags::parse_dns_label)]
    pub namespace: String,
    /// The operation to simulate; UPDATE checks the rules that compare with `--old`.
    #[arg(long, value_enum, default_value_t = OperationArg::Create)]
    pub operation: OperationArg,
    /// Print a unified diff of each KService, as written and as admitted, instead of the
    /// manifests.
    #[arg(long, env = "KSVC_WEBHOOK_MUTATE_DIFF")]
    pub diff: bool,
    /// Exit 1 (after printing) when a document is not a serving.knative.dev/v1 Service or a
    /// KService has a field Kubernetes and Knative do not know (each is warned about anyway).
    #[arg(long, env = "KSVC_WEBHOOK_MUTATE_STRICT")]
    pub strict: bool,
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
    pub offline: OfflinePolicyArgs,
}

/// Arguments of `review`.
#[derive(Debug, Clone, Args)]
#[command(after_help = REVIEW_HELP)]
pub struct ReviewArgs {
    /// The admission.k8s.io/v1 AdmissionReview, in JSON or YAML, or `-` for standard input.
    #[arg(short = 'f', long = "filename", value_name = "FILE|-")]
    pub file: PathBuf,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// Arguments of `name`.
#[derive(Debug, Clone, Args)]
#[command(after_help = NAME_HELP)]
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
