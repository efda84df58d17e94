//! `ksvc-webhook explain`: why admission would (not) change or refuse a KService — whether its
//! namespace is served, whether it is a managed app, which sidecars it gets, what each step
//! would change and what would be refused, with field paths.
//!
//! `-f FILE` is offline: the namespace's labels come from `--namespace-label`, and the webhook's
//! `namespaceSelector` is taken as installed. `NAME -n NS` reads the KService, its Namespace and
//! the webhook configuration from the cluster with the user's credentials (reads only, so in no
//! `API_CALLS`), and explains an UPDATE of the stored object onto itself, as the watch loop's
//! re-admission would send it. The judging is [`report`]'s; this file reads and prints.

pub mod report;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject};
use serde_json::Value;

use super::output::{self, Output};
use super::policy::OfflinePolicyArgs;
use crate::cluster::client;
use crate::cluster::{call, errors};
use crate::manifest_text as docs;
use report::{Explanation, NamespaceFacts};

/// Run `explain`: print the explanation of each KService.
pub fn run(args: &ExplainArgs) -> anyhow::Result<()> {
    let policy = args.offline.policy()?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_owned());
    let explained: Vec<Explanation> = match (&args.file, &args.name) {
        (Some(path), _) => {
            let input = super::offline::inputs::read_path(path)?;
            let parsed = docs::parse(input.text.as_bytes())
                .with_context(|| format!("cannot parse {}", input.name))?;
            let facts = NamespaceFacts {
                labels: labels(&args.namespace_labels)?,
                selector: None,
            };
            let explained: Vec<Explanation> = parsed
                .items
                .into_iter()
                .filter(docs::is_kservice)
                .map(|obj| report::explain(obj, None, &namespace, &facts, &policy))
                .collect();
            if explained.is_empty() {
                bail!("{} holds no serving.knative.dev/v1 Service", input.name);
            }
            explained
        }
        (None, Some(name)) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (object, facts, namespace) = runtime.block_on(from_cluster(args, name))?;
            vec![report::explain(
                object.clone(),
                Some(object),
                &namespace,
                &facts,
                &policy,
            )]
        }
        (None, None) => bail!("say what to explain: -f FILE, or NAME (-n NAMESPACE)"),
    };
    let mut out = std::io::stdout().lock();
    match &args.output.output {
        Output::Table | Output::Wide => {
            for (i, e) in explained.iter().enumerate() {
                if i > 0 {
                    writeln!(out)?;
                }
                write!(out, "{}", words(e))?;
            }
        }
        other => output::structured(&explained, other, &mut out)?,
    }
    out.flush().context("cannot write to standard output")?;
    match explained.iter().all(|e| e.allowed) {
        true => Ok(()),
        false => Err(super::drift::Exit(1).into()),
    }
}

/// `KEY=VALUE` flags as a map.
fn labels(flags: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    flags
        .iter()
        .map(|flag| match flag.split_once('=') {
            Some((k, v)) => Ok((k.to_owned(), v.to_owned())),
            None => bail!("--namespace-label {flag:?}: say KEY=VALUE"),
        })
        .collect()
}

/// The stored KService `name`, its namespace's labels and the webhook's `namespaceSelector`.
async fn from_cluster(
    args: &ExplainArgs,
    name: &str,
) -> anyhow::Result<(Value, NamespaceFacts, String)> {
    let (client, server) = client::client(&args.offline.cluster, None).await?;
    let namespace = match &args.namespace {
        Some(ns) => ns.clone(),
        None => client.default_namespace().to_owned(),
    };
    let timeout = args.offline.cluster.api_timeout;
    let worded = |e| errors::Error::from_call(e, &server);
    let services: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &namespace,
        &crate::watch::writes::knative("Service", "services"),
    );
    let Some(service) = call::timed("get ksvc", timeout, services.get_opt(name))
        .await
        .map_err(worded)?
    else {
        bail!("no KService {namespace}/{name} in the cluster");
    };
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let labels = call::timed("get namespace", timeout, namespaces.get_opt(&namespace))
        .await
        .map_err(worded)?
        .and_then(|ns| ns.metadata.labels)
        .unwrap_or_default();
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client);
    let config = call::timed(
        "get mutatingwebhookconfiguration",
        timeout,
        configs.get_opt(&args.webhook_config_name),
    )
    .await
    .map_err(worded)?;
    let selector = config
        .and_then(|c| c.webhooks)
        .and_then(|hooks| hooks.into_iter().next())
        .and_then(|hook| hook.namespace_selector)
        .map(|s| serde_json::to_value(s).unwrap_or_default());
    let object = serde_json::to_value(service).context("cannot read the KService as JSON")?;
    let labels = labels.into_iter().collect();
    Ok((object, NamespaceFacts { labels, selector }, namespace))
}

/// The explanation as lines for a person.
fn words(e: &Explanation) -> String {
    let mut s = String::new();
    let name = if e.name.is_empty() {
        "(no name)"
    } else {
        &e.name
    };
    let mut line = |text: String| {
        s.push_str(&text);
        s.push('\n');
    };
    line(format!("Service {}/{name}", e.namespace));
    let served = if e.served.served { "yes" } else { "no" };
    line(format!("  served:    {served}: {}", e.served.why));
    match (&e.identity, &e.app_name) {
        (Some(id), Some(app)) => line(format!("  managed:   yes: identity {id}, name {app}")),
        _ => line("  managed:   no: the flyte.org/project, flyte.org/domain and flyte.org/app-name labels are not all set".to_owned()),
    }
    let sidecars = match e.sidecars.as_slice() {
        [] => "none".to_owned(),
        names => names.join(", "),
    };
    line(format!("  sidecars:  {sidecars}"));
    line(format!("  rules:     {} checked", e.rules_checked));
    if !e.served.served {
        line(
            "  (the webhook never sees this namespace's writes: what follows would not happen)"
                .to_owned(),
        );
    }
    if e.allowed {
        if e.steps.is_empty() {
            line("  admitted unchanged".to_owned());
        }
        for step in &e.steps {
            line(format!("  {}:", step.step));
            for c in &step.changes {
                match &c.value {
                    Some(v) => line(format!("    {} {} = {}", c.op, c.path, cut(&v.to_string()))),
                    None => line(format!("    {} {}", c.op, c.path)),
                }
            }
        }
    } else {
        line(format!("  refused:   {} problem(s)", e.refused.len()));
        for r in &e.refused {
            line(format!(
                "    {}: {}; {} [{}]",
                r.path, r.problem, r.fix, r.rule
            ));
        }
    }
    for w in &e.warnings {
        line(format!("  warning:   {w}"));
    }
    s
}

/// `text` cut to [`SHOWN`] characters, for a line a person reads (JSON and YAML keep it all).
fn cut(text: &str) -> String {
    match text.char_indices().nth(SHOWN) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The longest value a line shows, in characters.
const SHOWN: usize = 160;

/// What `explain --help` shows after the flags.
const HELP: &str = "\
Environment:
  KUBECONFIG   kubeconfig files (':'-separated), for NAME and --sidecars-from-cluster
  NO_COLOR     any value: no colour in help and errors

With -f, nothing is read from the cluster (but the catalogue with --sidecars-from-cluster): the
namespace's labels are the --namespace-label flags and the webhook's namespaceSelector is the one
the manifests install. With NAME, the stored KService, its Namespace and the webhook's
configuration are read from the cluster.

Exit status: 0 admitted, 1 refused (or an error).

Examples:
  ksvc-webhook explain -f examples/managed-ksvc.yaml
  ksvc-webhook explain -f app.yaml -n team-a --namespace-label ksvc-webhook.flyte.org/inject=disabled
  ksvc-webhook explain myapp-proj-dev -n flyte --sidecars-from-cluster -o yaml";

/// Arguments of `explain`.
#[derive(Debug, Clone, Args)]
#[command(after_help = HELP)]
pub struct ExplainArgs {
    /// The KService(s) to explain, offline: a YAML or JSON file, or `-` for standard input.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE|-",
        conflicts_with = "name"
    )]
    pub file: Option<PathBuf>,
    /// The KService to read from the cluster instead of a file.
    #[arg(required_unless_present = "file")]
    pub name: Option<String>,
    /// Its namespace; default: the object's own, else the kubeconfig context's (with -f:
    /// `default`).
    #[arg(short = 'n', long, env = "KSVC_WEBHOOK_EXPLAIN_NAMESPACE",
          value_parser = crate::flags::parse_dns_label)]
    pub namespace: Option<String>,
    /// With -f: a label of the namespace, as KEY=VALUE (repeat), e.g.
    /// `ksvc-webhook.flyte.org/inject=disabled`.
    #[arg(long = "namespace-label", value_name = "KEY=VALUE", requires = "file")]
    pub namespace_labels: Vec<String>,
    /// With NAME: the MutatingWebhookConfiguration whose namespaceSelector decides what is
    /// served.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_EXPLAIN_WEBHOOK_CONFIG",
        default_value = "zz-ksvc-webhook.flyte.org"
    )]
    pub webhook_config_name: String,
    #[command(flatten)]
    pub output: output::StructuredArgs,
    #[command(flatten)]
    pub offline: OfflinePolicyArgs,
}
