//! `ksvc-webhook app stop|start|status|update NAME [-n NS]`: the app lifecycle against the current
//! kubeconfig's cluster.
//!
//! Thin: each subcommand is one retry-on-conflict read-modify-write of the KService's raw JSON
//! (edits from `watch::edit`), or a read mapped by `watch::status`. These calls run with the
//! user's credentials, not the server's service account, so they are not in any `API_CALLS`:
//! services get/update/watch and revisions list/watch.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use futures::StreamExt;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, reflector, watcher};

use super::app_print::{self, Output};
use crate::cluster::call::{self, Backoff, Updated};
use crate::cluster::errors::{self, Origin};
use crate::flags;
use clap::{Args, Subcommand};

use crate::keys;
use crate::watch::controller::record_of;
use crate::watch::edit::{AppUpdate, set_stopped};
use crate::watch::hub::AppRecord;
use crate::watch::status::status_for;
use crate::watch::view::{KService, Revision};
use crate::watch::writes::knative;

const TIMEOUT: Duration = Duration::from_secs(15);

/// Run `app …` on a fresh single-threaded runtime.
pub fn run(args: AppArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let target = match &args.action {
            AppAction::Stop(t) | AppAction::Start(t) => t,
            AppAction::Status(s) => &s.target,
            AppAction::Update(u) => &u.target,
        };
        let (client, server) = client_for(&target.cluster).await?;
        let ns = match &target.namespace {
            Some(ns) => ns.clone(),
            // Checked before any call: a bad name would only come back as "invalid uri".
            None => flags::parse_dns_label(client.default_namespace())
                .map_err(|e| anyhow!("the kubeconfig context's namespace: {e}"))?,
        };
        run_with_client(client, &ns, args.action, &mut std::io::stdout())
            .await
            .map_err(|e| reword(e, &server))
    })
}

/// The client for the user's cluster, and the server's `HOST:PORT` for messages: the one place
/// the CLI builds a client. Without a kubeconfig, inside a pod, its service account.
pub async fn client_for(args: &ClusterArgs) -> Result<(Client, String), errors::Error> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let (read, path, origin) = match &args.kubeconfig {
        Some(path) => (Kubeconfig::read_from(path), path.clone(), Origin::Flag),
        None => match std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
            Some(paths) => (Kubeconfig::read(), PathBuf::from(paths), Origin::Env),
            None => (Kubeconfig::read(), default_kubeconfig(), Origin::Default),
        },
    };
    let worded = |e| errors::Error::from_kubeconfig(e, &path, origin);
    let config = match read.map_err(worded) {
        Ok(kubeconfig) => kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(worded)?,
        Err(missing @ errors::Error::NoKubeconfig { .. })
            if origin == Origin::Default && args.context.is_none() =>
        {
            kube::Config::incluster().map_err(|_| missing)?
        }
        Err(e) => return Err(e),
    };
    let url = &config.cluster_url;
    let port = url.port_u16().unwrap_or(match url.scheme_str() {
        Some("http") => 80,
        _ => 443,
    });
    let server = format!("{}:{port}", url.host().unwrap_or("localhost"));
    let client = Client::try_from(config).map_err(|e| errors::Error::from_kube(&e, &server))?;
    Ok((client, server))
}

/// `~/.kube/config`, as kube-rs looks it up.
fn default_kubeconfig() -> PathBuf {
    std::env::home_dir()
        .unwrap_or_default()
        .join(".kube")
        .join("config")
}

/// A failed call, worded as kubectl words it; any other error as it is.
fn reword(err: anyhow::Error, server: &str) -> anyhow::Error {
    match err.downcast::<call::Error>() {
        Ok(failed) => errors::Error::from_call(failed, server).into(),
        Err(err) => match err.downcast::<kube::Error>() {
            Ok(failed) => errors::Error::from_kube(&failed, server).into(),
            Err(err) => err,
        },
    }
}

/// Run one action against a client (tests pass one pointed at a fake API server).
pub async fn run_with_client(
    client: Client,
    ns: &str,
    action: AppAction,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let services = Api::namespaced_with(client.clone(), ns, &knative("Service", "services"));
    let backoff = Backoff::default();
    let (name, outcome) = match action {
        AppAction::Stop(t) => (
            t.name.clone(),
            call::update_raw(&services, &t.name, TIMEOUT, &backoff, |v| {
                set_stopped(v, true)
            })
            .await?,
        ),
        AppAction::Start(t) => (
            t.name.clone(),
            call::update_raw(&services, &t.name, TIMEOUT, &backoff, |v| {
                set_stopped(v, false)
            })
            .await?,
        ),
        AppAction::Update(u) => {
            let update = AppUpdate {
                image: u.image,
                min_scale: u.min_scale,
                max_scale: u.max_scale,
            };
            if update.is_empty() {
                bail!("nothing to update: give --image, --min-scale or --max-scale");
            }
            let mut invalid = None;
            let edit = |v: &mut serde_json::Value| {
                update.apply(v).unwrap_or_else(|e| {
                    invalid = Some(e);
                    false
                })
            };
            let outcome =
                call::update_raw(&services, &u.target.name, TIMEOUT, &backoff, edit).await?;
            if let Some(e) = invalid {
                return Err(e).context(format!("cannot update {ns}/{}", u.target.name));
            }
            (u.target.name, outcome)
        }
        AppAction::Status(s) => {
            return status(client, ns, &s.target.name, s.watch, s.output, out).await;
        }
    };
    match outcome {
        Updated::NotFound => bail!("no KService {ns}/{name}; check the name and -n NAMESPACE"),
        Updated::Unchanged => writeln!(out, "{ns}/{name}: unchanged")?,
        Updated::Written(_) => writeln!(out, "{ns}/{name}: updated")?,
    }
    Ok(())
}

async fn status(
    client: Client,
    ns: &str,
    name: &str,
    follow: bool,
    output: Output,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let services: Api<KService> = Api::namespaced(client.clone(), ns);
    let revisions: Api<Revision> = Api::namespaced(client, ns);
    let selector = format!("{}={name}", keys::LABEL_KNATIVE_SERVICE);
    if !follow {
        let ksvc = call::timed("get service", TIMEOUT, services.get_opt(name))
            .await?
            .with_context(|| format!("no KService {ns}/{name}; check the name and -n NAMESPACE"))?;
        let revs = call::timed(
            "list revisions",
            TIMEOUT,
            revisions.list(&ListParams::default().labels(&selector)),
        )
        .await?
        .items;
        let now = Timestamp::now();
        let record = record_of(&ksvc, status_for(&ksvc, &revs, &now.to_string()));
        return print(out, &record, age(&ksvc, now), output, true);
    }
    let (svc_store, svc_writer) = reflector::store::<KService>();
    let (rev_store, rev_writer) = reflector::store::<Revision>();
    let svc_cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let svc_events =
        reflector::reflector(svc_writer, watcher(services, svc_cfg).default_backoff()).map(|_| ());
    let rev_cfg = watcher::Config::default().labels(&selector);
    let rev_events =
        reflector::reflector(rev_writer, watcher(revisions, rev_cfg).default_backoff()).map(|_| ());
    let mut events = std::pin::pin!(futures::stream::select(svc_events, rev_events));
    let mut last = None;
    while events.next().await.is_some() {
        let Some(ksvc) = svc_store.state().into_iter().next() else {
            continue;
        };
        let now = Timestamp::now();
        let status = status_for(&ksvc, &rev_store.state(), &now.to_string());
        if last
            .as_ref()
            .is_none_or(|l: &crate::watch::status::AppStatus| !l.same_state(&status))
        {
            let record = record_of(&ksvc, status.clone());
            print(out, &record, age(&ksvc, now), output, last.is_none())?;
            out.flush()?;
            last = Some(status);
        }
    }
    Ok(())
}

/// How long the KService has existed, when the API server said.
fn age(ksvc: &KService, now: Timestamp) -> Option<SignedDuration> {
    let created = ksvc.metadata.creation_timestamp.as_ref()?;
    Some(now.duration_since(created.0))
}

/// Print one record in `output`; a table gets its header before the `first` row only.
fn print(
    out: &mut dyn Write,
    record: &AppRecord,
    age: Option<SignedDuration>,
    output: Output,
    first: bool,
) -> anyhow::Result<()> {
    match output {
        Output::Table if first => {
            writeln!(out, "{}", app_print::header(record, age))?;
            writeln!(out, "{}", app_print::row(record, age))?;
        }
        Output::Table => writeln!(out, "{}", app_print::row(record, age))?,
        Output::Json => writeln!(out, "{}", serde_json::to_string(record)?)?,
        Output::Yaml => write!(out, "---\n{}", serde_saphyr::to_string(record)?)?,
    }
    Ok(())
}

// The flags of `app`.

/// Arguments of `app`.
#[derive(Debug, Args)]
pub struct AppArgs {
    #[command(subcommand)]
    pub action: AppAction,
}

/// What `app` does.
#[derive(Debug, Subcommand)]
pub enum AppAction {
    /// Stop the app: set the label `flyte.org/app-stopped=true` (scale to zero, cluster-local).
    Stop(AppTarget),
    /// Start the app: remove the label `flyte.org/app-stopped`.
    Start(AppTarget),
    /// Print the app's status (phase, message, replicas, URL).
    Status(AppStatusArgs),
    /// Change only the given fields, in a retry-on-conflict read-modify-write.
    Update(AppUpdateArgs),
}

/// Which app, in which cluster.
#[derive(Debug, Clone, Args)]
pub struct AppTarget {
    /// The KService name.
    #[arg(value_parser = super::parse_service_name)]
    pub name: String,
    /// The KService namespace; default: the kubeconfig context's namespace.
    #[arg(short = 'n', long, env = "KSVC_WEBHOOK_APP_NAMESPACE", value_parser = flags::parse_dns_label)]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Which cluster, as the user's kubeconfig names it.
#[derive(Debug, Clone, Default, Args)]
pub struct ClusterArgs {
    /// Kubeconfig file with the user's own credentials; default: `$KUBECONFIG`, then
    /// `~/.kube/config`, then the in-cluster config.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use; default: its current context.
    #[arg(long, env = "KSVC_WEBHOOK_APP_CONTEXT")]
    pub context: Option<String>,
}

/// Arguments of `app status`.
#[derive(Debug, Args)]
pub struct AppStatusArgs {
    #[command(flatten)]
    pub target: AppTarget,
    /// Keep printing the status whenever it changes.
    #[arg(long, env = "KSVC_WEBHOOK_APP_WATCH")]
    pub watch: bool,
    /// Output format: `table` (a short line for people, the message under it when the app is
    /// not ACTIVE), `json` (one `/apps` record per line) or `yaml`.
    #[arg(
        short = 'o',
        long,
        value_enum,
        default_value_t,
        env = "KSVC_WEBHOOK_APP_OUTPUT"
    )]
    pub output: crate::cli::app_print::Output,
}

/// Arguments of `app update`; an absent flag leaves its field unchanged.
#[derive(Debug, Args)]
pub struct AppUpdateArgs {
    #[command(flatten)]
    pub target: AppTarget,
    /// New image of the serving container.
    #[arg(long, env = "KSVC_WEBHOOK_APP_IMAGE")]
    pub image: Option<String>,
    /// New `autoscaling.knative.dev/min-scale`: 0 to 2147483647.
    #[arg(long, env = "KSVC_WEBHOOK_APP_MIN_SCALE", value_parser = parse_scale,
          allow_negative_numbers = true)]
    pub min_scale: Option<u32>,
    /// New `autoscaling.knative.dev/max-scale`: 0 (unlimited) to 2147483647.
    #[arg(long, env = "KSVC_WEBHOOK_APP_MAX_SCALE", value_parser = parse_scale,
          allow_negative_numbers = true)]
    pub max_scale: Option<u32>,
}

/// A scale bound as Knative takes it: an int32 of 0 or more.
fn parse_scale(text: &str) -> Result<u32, String> {
    let limit = i32::MAX.unsigned_abs();
    match text.trim().parse::<i64>() {
        Ok(n) if (0..=i64::from(limit)).contains(&n) => u32::try_from(n).map_err(|e| e.to_string()),
        Ok(_) => Err(format!(
            "{text} is out of range: Knative takes a scale from 0 to {limit} (an int32)"
        )),
        Err(_) => Err(format!("`{text}` is not a whole number from 0 to {limit}")),
    }
}
