//! `ksvc-webhook app stop|start|status|list|update`: the app lifecycle against the user's
//! kubeconfig's cluster.
//!
//! Thin: each write is one retry-on-conflict read-modify-write of the KService's raw JSON (edits
//! from `watch::edit`), optionally a server dry run, optionally followed by waiting for the phase
//! it leads to; reads and watches are in [`follow`]. These calls run with the user's
//! credentials, not the server's service account, so they are not in any `API_CALLS`: services
//! get/list/update/watch and revisions list/watch. A failed call is worded as kubectl words it
//! ([`crate::cluster::errors`]).

mod args;
mod follow;
pub mod print;

use std::io::Write;

use anyhow::{Context, anyhow, bail};
use kube::Client;
use kube::api::Api;

use crate::cluster::call::{self, Backoff, Updated};
use crate::cluster::client;
use crate::cluster::errors;
use crate::flags;
use crate::watch::edit::{AppUpdate, set_stopped};
use crate::watch::status::Phase;
use crate::watch::writes::knative;
pub use args::{
    AppAction, AppArgs, AppListArgs, AppStatusArgs, AppTarget, AppUpdateArgs, AppWriteArgs, DryRun,
    OutputArgs, TIMEOUT, WaitArgs,
};

/// Run `app …` on a fresh single-threaded runtime.
pub fn run(args: AppArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let (cluster, namespace) = args.action.scope();
        let (client, server) = client::client(cluster, None).await?;
        let ns = match namespace {
            Some(ns) => ns.to_owned(),
            // Checked before any call: a bad name would only come back as "invalid uri".
            None => flags::parse_dns_label(client.default_namespace())
                .map_err(|e| anyhow!("the kubeconfig context's namespace: {e}"))?,
        };
        run_with_client(client, &ns, args.action, &mut std::io::stdout())
            .await
            .map_err(|e| reword(e, &server))
    })
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
    match action {
        AppAction::Stop(w) => {
            let edit = |v: &mut serde_json::Value| set_stopped(v, true);
            write(
                client,
                ns,
                &w.target.name,
                &w.wait,
                Phase::Stopped,
                edit,
                out,
            )
            .await
        }
        AppAction::Start(w) => {
            let edit = |v: &mut serde_json::Value| set_stopped(v, false);
            write(
                client,
                ns,
                &w.target.name,
                &w.wait,
                Phase::Active,
                edit,
                out,
            )
            .await
        }
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
            let name = &u.target.name;
            write(client, ns, name, &u.wait, Phase::Active, edit, out).await?;
            match invalid {
                Some(e) => Err(e).context(format!("cannot update {ns}/{name}")),
                None => Ok(()),
            }
        }
        AppAction::Status(s) => follow::status(client, ns, &s, out).await,
        AppAction::List(l) => follow::list(client, ns, &l, out).await,
    }
}

/// Edit the KService `ns/name` with `edit` (a dry run if asked), say what happened, and with
/// `--wait` follow it until it is `target`.
async fn write(
    client: Client,
    ns: &str,
    name: &str,
    wait: &WaitArgs,
    target: Phase,
    edit: impl FnMut(&mut serde_json::Value) -> bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let services = Api::namespaced_with(client.clone(), ns, &knative("Service", "services"));
    let dry_run = wait.dry_run == DryRun::Server;
    let outcome =
        call::update_raw_with(&services, name, TIMEOUT, &Backoff::default(), dry_run, edit).await?;
    let suffix = if dry_run { " (server dry run)" } else { "" };
    match outcome {
        Updated::NotFound => bail!("no KService {ns}/{name}; check the name and -n NAMESPACE"),
        Updated::Unchanged => writeln!(out, "{ns}/{name}: unchanged{suffix}")?,
        Updated::Written(_) => writeln!(out, "{ns}/{name}: updated{suffix}")?,
    }
    if wait.wait {
        out.flush()?;
        follow::wait_for(client, ns, name, target, wait.timeout, out).await?;
    }
    Ok(())
}
