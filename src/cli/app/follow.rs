//! The reading side of `app`: `status` and `list` once, or followed (`-w`, `--until`, and the
//! `--wait` of the writes) over one watch of the KServices and their Revisions.
//!
//! Thin: the status is `watch::status`'s, the printing [`super::print`]'s. A watch prints an app when
//! its state (phase, message, substate) changes and a line when it is deleted; it ends on an
//! error the way kubectl does, except a 410 Gone, after which the watcher lists again.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{anyhow, bail};
use futures::StreamExt;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};

use super::args::TIMEOUT;
use super::args::{AppListArgs, AppStatusArgs};
use super::print::{Printer, Shown};
use crate::cluster::call;
use crate::keys;
use crate::watch::hub::AppKey;
use crate::watch::hub::AppRecord;
use crate::watch::status::{AppStatus, Phase, status_for};
use crate::watch::view::{KService, Revision};
use crate::watch::watched::Watched;

/// Objects a list page holds where the command has no `--chunk-size` (kubectl's default).
const CHUNK: u32 = 500;

/// Which KServices a read covers.
struct Scope<'a> {
    /// `None`: every namespace.
    namespace: Option<&'a str>,
    name: Option<&'a str>,
    selector: Option<&'a str>,
    /// Objects a list page holds (kubectl's `--chunk-size`).
    chunk: u32,
}

impl Scope<'_> {
    fn apis(&self, client: Client) -> (Api<Watched<KService>>, Api<Watched<Revision>>) {
        match self.namespace {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client, ns),
            ),
            None => (Api::all(client.clone()), Api::all(client)),
        }
    }

    /// The Revisions worth reading: the one Service's, or all in scope.
    fn revision_labels(&self) -> Option<String> {
        self.name
            .map(|name| format!("{}={name}", keys::LABEL_KNATIVE_SERVICE))
    }
}

/// `app status`: the app once, or followed with `-w` / `--until`.
pub async fn status(
    client: Client,
    ns: &str,
    args: &AppStatusArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let name = args.target.name.as_str();
    let scope = Scope {
        namespace: Some(ns),
        name: Some(name),
        selector: None,
        chunk: CHUNK,
    };
    let mut printer = Printer::new(args.output.output.clone(), false);
    let apps = read(client.clone(), &scope).await?;
    if apps.is_empty() {
        bail!("no KService {ns}/{name}; check the name and -n NAMESPACE");
    }
    if !args.watch && args.until.is_none() {
        return emit(out, &printer.print(&apps, false));
    }
    let Some(until) = args.until else {
        return follow(client, &scope, |changes| {
            print_changes(&mut printer, changes, out)?;
            Ok(changes.iter().any(|c| matches!(c, Change::Deleted(_))))
        })
        .await;
    };
    follow_until(
        client,
        ns,
        name,
        until,
        args.timeout,
        Some(&mut printer),
        out,
    )
    .await
}

/// `app list`: the apps in scope, then with `-w` every change.
pub async fn list(
    client: Client,
    ns: &str,
    args: &AppListArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let scope = Scope {
        namespace: (!args.all_namespaces).then_some(ns),
        name: None,
        selector: args.selector.as_deref(),
        chunk: args.chunk_size,
    };
    let mut printer = Printer::new(args.output.output.clone(), args.all_namespaces);
    if !args.watch {
        let apps = read(client, &scope).await?;
        if apps.is_empty() && !printer.structured() {
            match scope.namespace {
                Some(ns) => eprintln!("No apps found in {ns} namespace."),
                None => eprintln!("No apps found."),
            }
            return Ok(());
        }
        let list = printer.structured();
        return emit(out, &printer.print(&apps, list));
    }
    follow(client, &scope, |changes| {
        print_changes(&mut printer, changes, out)?;
        Ok(false)
    })
    .await
}

/// `--wait` after a write: follow `ns/name` until it is `target`, one line per phase.
pub async fn wait_for(
    client: Client,
    ns: &str,
    name: &str,
    target: Phase,
    timeout: Duration,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    follow_until(client, ns, name, target, timeout, None, out).await
}

/// Follow `ns/name` until it is `target`, printing each state with `printer` as `-w` does, or
/// without one as `ns/name: PHASE (message)` lines. Fails when the app goes, when it is FAILED
/// (unless FAILED is `target`), or after `timeout`.
async fn follow_until(
    client: Client,
    ns: &str,
    name: &str,
    target: Phase,
    timeout: Duration,
    mut printer: Option<&mut Printer>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let scope = Scope {
        namespace: Some(ns),
        name: Some(name),
        selector: None,
        chunk: CHUNK,
    };
    let mut last: Option<AppStatus> = None;
    let followed = follow(client, &scope, |changes| {
        for change in changes {
            let Change::Status(app) = change else {
                bail!(
                    "{ns}/{name} was deleted while waiting for it to be {}",
                    target.as_str()
                );
            };
            let status = &app.record.status;
            match printer.as_deref_mut() {
                Some(printer) => emit(out, &printer.print(std::slice::from_ref(app), false))?,
                None => emit(out, &Ok(progress_line(ns, name, status)))?,
            }
            last = Some(status.clone());
        }
        match &last {
            Some(s) if s.phase == target => Ok(true),
            // A terminal failure ends the wait, as `kubectl rollout status` ends at a failed
            // rollout: waiting on would only run out the timeout.
            Some(s) if s.phase == Phase::Failed => bail!(
                "{ns}/{name} is FAILED, not {}: {}",
                target.as_str(),
                failure_reason(s)
            ),
            _ => Ok(false),
        }
    });
    match tokio::time::timeout(timeout, followed).await {
        Ok(done) => done,
        Err(_) => {
            let now = last.map_or_else(
                || "its status was never read".to_owned(),
                |s| format!("it is {}", with_message(&s)),
            );
            Err(anyhow!(
                "timed out after {} waiting for {ns}/{name} to be {}; {now}",
                super::print::human_age(SignedDuration::try_from(timeout).unwrap_or_default()),
                target.as_str()
            ))
        }
    }
}

/// Why a FAILED app failed: its message (Knative's `Reason: message`), or a pointer to more.
fn failure_reason(status: &AppStatus) -> String {
    match status.message.trim() {
        "" => "Knative gives no reason; see kubectl get revisions".to_owned(),
        message => message.to_owned(),
    }
}

fn progress_line(ns: &str, name: &str, status: &AppStatus) -> String {
    format!("{ns}/{name}: {}\n", with_message(status))
}

fn with_message(status: &AppStatus) -> String {
    match status.message.trim() {
        "" => status.phase.as_str().to_owned(),
        message => format!("{} ({message})", status.phase.as_str()),
    }
}

/// Print the changes of a watch: the apps as the output says, a deletion as a line of its own
/// (on stderr under a structured output, which must stay parseable).
fn print_changes(
    printer: &mut Printer,
    changes: &[Change],
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    for change in changes {
        match change {
            Change::Status(app) => emit(out, &printer.print(std::slice::from_ref(app), false))?,
            Change::Deleted(key) if printer.structured() => {
                eprintln!("{}/{} deleted", key.namespace, key.name);
            }
            Change::Deleted(key) => {
                emit(
                    out,
                    &Ok(format!("{}/{} deleted\n", key.namespace, key.name)),
                )?;
            }
        }
    }
    Ok(())
}

fn emit(out: &mut dyn Write, text: &Result<String, String>) -> anyhow::Result<()> {
    let text = text
        .as_ref()
        .map_err(|e| anyhow!("cannot print the apps: {e}"))?;
    out.write_all(text.as_bytes())?;
    Ok(out.flush()?)
}

/// The apps in scope now, in namespace and name order.
async fn read(client: Client, scope: &Scope<'_>) -> anyhow::Result<Vec<Shown>> {
    let (services, revisions) = scope.apis(client);
    let ksvcs = match scope.name {
        // One app is read as kubectl reads one: a get, which a role may grant without list.
        Some(name) => call::timed("get service", TIMEOUT, services.get_opt(name))
            .await?
            .into_iter()
            .collect(),
        None => {
            let mut params = ListParams::default();
            if let Some(selector) = scope.selector {
                params = params.labels(selector);
            }
            all_pages(&services, params, scope.chunk).await?
        }
    };
    let mut rev_params = ListParams::default();
    if let Some(labels) = scope.revision_labels() {
        rev_params = rev_params.labels(&labels);
    }
    let revs = all_pages(&revisions, rev_params, scope.chunk).await?;
    let now = Timestamp::now();
    Ok(ksvcs.iter().map(|ksvc| shown(ksvc, &revs, now)).collect())
}

/// Every object of a list, read `chunk` at a time (`limit`, then the `continue` token of each
/// page) as kubectl reads a large list.
async fn all_pages<K>(api: &Api<K>, params: ListParams, chunk: u32) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut params = params.limit(chunk);
    let mut items = Vec::new();
    loop {
        let page = call::timed("list", TIMEOUT, api.list(&params)).await?;
        items.extend(page.items);
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(items),
        }
    }
}

fn shown<R: std::borrow::Borrow<Revision>>(
    ksvc: &Watched<KService>,
    revs: &[R],
    now: Timestamp,
) -> Shown {
    let record = AppRecord::of(ksvc, status_for(ksvc, revs, &now.to_string()));
    let age = ksvc
        .created
        .and_then(|second| Timestamp::from_second(second).ok())
        .map(|created| now.duration_since(created));
    Shown { record, age }
}

/// One change a watch reports.
enum Change {
    /// An app is new, or its state changed.
    Status(Box<Shown>),
    /// An app is gone.
    Deleted(AppKey),
}

/// Watch the apps in `scope`; after both caches have synced and on every event, hand the
/// changes to `handle` (the first time, every app); end when it returns `true`.
async fn follow(
    client: Client,
    scope: &Scope<'_>,
    mut handle: impl FnMut(&[Change]) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let (services, revisions) = scope.apis(client);
    let mut svc_cfg = watcher::Config::default().page_size(scope.chunk);
    if let Some(name) = scope.name {
        svc_cfg = svc_cfg.fields(&format!("metadata.name={name}"));
    }
    if let Some(selector) = scope.selector {
        svc_cfg = svc_cfg.labels(selector);
    }
    let mut rev_cfg = watcher::Config::default().page_size(scope.chunk);
    if let Some(labels) = scope.revision_labels() {
        rev_cfg = rev_cfg.labels(&labels);
    }
    let (svc_store, svc_writer) = reflector::store::<Watched<KService>>();
    let (rev_store, rev_writer) = reflector::store::<Watched<Revision>>();
    // Each event as (from the Services' watch, whether it ends an initial listing).
    let svc = reflector::reflector(svc_writer, watcher(services, svc_cfg).default_backoff())
        .map(|event| (true, event.map(|e| matches!(e, watcher::Event::InitDone))));
    let rev = reflector::reflector(rev_writer, watcher(revisions, rev_cfg).default_backoff())
        .map(|event| (false, event.map(|e| matches!(e, watcher::Event::InitDone))));
    let mut events = std::pin::pin!(futures::stream::select(svc, rev));
    let (mut svc_synced, mut rev_synced, mut first) = (false, false, true);
    let mut seen: BTreeMap<AppKey, AppStatus> = BTreeMap::new();
    while let Some((is_svc, event)) = events.next().await {
        match event {
            Ok(true) if is_svc => svc_synced = true,
            Ok(true) => rev_synced = true,
            Ok(false) => {}
            // Gone (410), or a stream cut short: the watcher lists or watches again by itself;
            // a failure to do so ends the command.
            Err(watcher::Error::WatchError(status)) if status.code == 410 => continue,
            Err(watcher::Error::WatchFailed(_)) => continue,
            Err(err) => return Err(watch_error(err)),
        }
        if !(svc_synced && rev_synced) {
            continue;
        }
        let changes = diff(&mut seen, &svc_store.state(), &rev_store.state());
        if (first || !changes.is_empty()) && handle(&changes)? {
            return Ok(());
        }
        first = false;
    }
    Ok(())
}

/// What changed since `seen`, which is brought up to date.
fn diff<S, R>(seen: &mut BTreeMap<AppKey, AppStatus>, ksvcs: &[S], revs: &[R]) -> Vec<Change>
where
    S: std::borrow::Borrow<Watched<KService>>,
    R: std::borrow::Borrow<Watched<Revision>>,
{
    let now = Timestamp::now();
    let revs: Vec<&Revision> = revs.iter().map(|r| &**r.borrow()).collect();
    let mut current: Vec<Shown> = ksvcs
        .iter()
        .map(|k| shown(k.borrow(), &revs, now))
        .collect();
    current.sort_by_key(|a| a.record.key());
    let keys: std::collections::BTreeSet<AppKey> = current.iter().map(|a| a.record.key()).collect();
    let mut changes: Vec<Change> = seen
        .keys()
        .filter(|key| !keys.contains(key))
        .cloned()
        .map(Change::Deleted)
        .collect();
    for change in &changes {
        if let Change::Deleted(key) = change {
            seen.remove(key);
        }
    }
    for app in current {
        let key = app.record.key();
        if seen
            .get(&key)
            .is_none_or(|before| !before.same_state(&app.record.status))
        {
            seen.insert(key, app.record.status.clone());
            changes.push(Change::Status(Box::new(app)));
        }
    }
    changes
}

/// A watcher's error as the kube error it carries, for kubectl's wording.
fn watch_error(err: watcher::Error) -> anyhow::Error {
    match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e.into(),
        watcher::Error::WatchError(status) => kube::Error::Api(status).into(),
        other => other.into(),
    }
}
