//! The controller shell: kube-runtime watchers of Services, Revisions and namespaces, the stores
//! they fill ([`super::store`]), and a level-triggered reconcile of every app they touch. The
//! watchers list by streaming, or in pages where the API server refuses that ([`super::listing`]).
//!
//! Every replica keeps the stores, the status hub and the drift report current (the drift report
//! also follows the namespaces' opt-out label and the admission policy, checked every second for
//! a catalogue reload); only the leader runs the plan's writes, records Events and re-admits. The
//! select loop never waits on the API: each event marks apps dirty ([`super::loop_state`]), and
//! each turn publishes the dirty apps' status at once and hands their writes to
//! [`super::write_queue`], which runs them off the loop and returns their outcomes. While a list
//! (or re-list) is under way nothing is reconciled; its end reconciles every app once. A broken watch
//! resumes from its last resourceVersion (kube-runtime's watcher, with backoff); a failed write
//! is retried with backoff; a periodic resync and every gain of leadership reconcile everything
//! again. Decisions live in `status` and `plan`.

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use tokio::sync::watch;
use tokio::time::Instant;

use super::cache::{Cache, Evaluation};
use super::drift::DriftIndex;
use super::hub::{AppKey, Change, Hub};
use super::listing::Listing;
use super::loop_state::LoopState;
use super::metrics::Metrics;
use super::names::Names;
use super::owners::ServiceStore;
use super::readmit::{Readmitter, Wake};
use super::store;
use super::view::{KService, Revision};
use super::watched::Watched;
use super::write_queue::Writes;
use super::writes::{Job, Transition, Writer};
use crate::admission::Policy;
use crate::cluster::call::{Backoff, WATCH_TIMEOUT_SECS};
use crate::report::error_chain;

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct LoopOptions {
    /// Watch one namespace, or all.
    pub namespace: Option<String>,
    /// The timeout of every API call.
    pub api_timeout: Duration,
    /// Backoff of conflicting writes and of failed reconciles.
    pub backoff: Backoff,
    /// How often every app is reconciled again, events or not.
    pub resync_every: Duration,
    /// Apps whose writes may run at once (at least one); one app's writes never overlap.
    pub write_concurrency: usize,
    /// This replica, as reported on Events.
    pub identity: String,
    /// How drifted apps are written again (off unless asked).
    pub readmit: super::readmit::wave::Settings,
}

/// What the loop shares with the rest of the server.
#[derive(Clone)]
pub struct Shared {
    pub hub: Arc<Hub>,
    /// Set once both caches have listed everything and every app has a status; gates `/apps`.
    pub synced: Arc<AtomicBool>,
    /// Whether this replica may write.
    pub leader: watch::Receiver<bool>,
    pub metrics: Metrics,
    /// Set to the loop's Service store when the loop starts; the revision guard reads it.
    pub services: ServiceStore,
    /// The admission policy the drift report evaluates under (swapped by a catalogue reload).
    pub policy: Arc<ArcSwap<Policy>>,
}

fn scoped<K>(client: Client, ns: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
{
    match ns {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    }
}

/// Run the loop until the watch streams end (they do not, short of a dropped runtime).
pub async fn run(client: Client, opts: LoopOptions, shared: Shared) {
    let ns = opts.namespace.as_deref();
    let names = Names::default();
    let (services, svc_writer) = store::store::<KService>(&names);
    let (revisions, rev_writer) = store::store::<Revision>(&names);
    // Set once: a loop runs once per process.
    let _ = shared.services.set(services.clone());
    let cfg = watcher::Config::default().timeout(WATCH_TIMEOUT_SECS);
    // Only the namespaces' labels are read: the opt-out of the webhook's namespaceSelector.
    let ns_cfg = match ns {
        Some(ns) => cfg.clone().fields(&format!("metadata.name={ns}")),
        None => cfg.clone(),
    };
    let ns_api = Api::<PartialObjectMeta<Namespace>>::all(client.clone());
    let mut ns_events = pin!(Listing::new(ns_api, ns_cfg, "namespaces").default_backoff());
    let svc_api = scoped::<Watched<KService>>(client.clone(), ns);
    let rev_api = scoped::<Watched<Revision>>(client.clone(), ns);
    // The drift report asks for the Services' texts again (a new policy) by listing them again.
    let (relist, relist_asks) = tokio::sync::mpsc::unbounded_channel();
    let mut svc_events = pin!(store::reflect(
        svc_writer,
        Listing::new(svc_api, cfg.clone(), "services")
            .relist_on(relist_asks)
            .default_backoff()
    ));
    let mut rev_events = pin!(store::reflect(
        rev_writer,
        Listing::new(rev_api, cfg, "revisions").default_backoff()
    ));
    let writer = Writer::new(
        client,
        opts.api_timeout,
        opts.backoff,
        opts.identity.clone(),
        shared.metrics.clone(),
    );
    let mut readmit = Readmitter::new(opts.readmit.clone(), writer.clone(), shared.policy.clone());
    // Dropped with the loop: a stopping loop aborts its writes.
    let mut writes = Writes::new(writer, shared.leader.clone(), opts.write_concurrency);
    let mut st = LoopState::new(
        Cache::new(services, revisions),
        DriftIndex::new(shared.policy.load_full()),
    );
    let mut leader = shared.leader.clone();
    let mut leader_alive = true;
    let mut resync = tokio::time::interval(opts.resync_every);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut policy_check = tokio::time::interval(POLICY_CHECK);
    policy_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let next_retry = st.next_retry();
        tokio::select! {
            ev = svc_events.next() => match ev {
                Some(Ok(ev)) => st.on_service(&mut writes, &shared.hub, ev),
                Some(Err(error)) => watch_error(&shared, &mut readmit, "services", &error),
                None => return,
            },
            ev = rev_events.next() => match ev {
                Some(Ok(ev)) => st.on_revision(ev),
                Some(Err(error)) => watch_error(&shared, &mut readmit, "revisions", &error),
                None => return,
            },
            ev = ns_events.next() => match ev {
                Some(Ok(ev)) => st.on_namespace(&mut readmit, ev),
                Some(Err(error)) => watch_error(&shared, &mut readmit, "namespaces", &error),
                None => return,
            },
            done = writes.next_done() => st.on_done(&shared.metrics, &opts.backoff, done),
            _ = resync.tick() => {
                st.dirty.extend(st.all_keys());
                st.full = true;
            }
            _ = policy_check.tick() => {
                if st.drift.set_policy(shared.policy.load_full()) {
                    tracing::info!("admission policy changed; evaluating every KService's drift again");
                    st.dirty.extend(st.all_keys());
                    st.full = true;
                    readmit.policy_changed();
                }
            }
            // Only once every cache has listed: a wave never starts from half a picture.
            wake = readmit.next(), if readmit.active() && st.namespaces_listed && shared.synced.load(Ordering::Acquire) => match wake {
                Wake::Tick => {
                    let leading = *shared.leader.borrow();
                    st.dirty.extend(readmit.step(&st.cache, &st.drift, leading));
                }
                Wake::Done(outcome) => st.dirty.extend(readmit.on_outcome(outcome, &st.cache)),
            },
            changed = leader.changed(), if leader_alive => match changed {
                Ok(()) if *leader.borrow() => st.dirty.extend(st.all_keys()),
                Ok(()) => readmit.reset(),
                Err(_) => leader_alive = false,
            },
            _ = tokio::time::sleep_until(next_retry.unwrap_or_else(Instant::now)), if next_retry.is_some() => {
                st.retry_due(Instant::now());
            }
        }
        // A re-list is reconciled once, at its end, not app by app as it comes and then all
        // again: its CPU is the first list's, and no status is taken from half a list.
        if !st.settled() {
            continue;
        }
        let first_sync = after_list(&mut st, &shared);
        // Never waits: status is published here, writes only start (see `write_queue`).
        reconcile_dirty(&mut st, &shared, &mut writes, &readmit);
        let unread = st.drift.take_unread();
        if unread > 0 {
            // Their drift is served as last evaluated until the list brings their texts.
            tracing::info!(
                apps = unread,
                "drift stale for apps whose stored text is not held; listing the Services again"
            );
            // The receiver lives as long as the Services' stream, which this loop owns.
            let _ = relist.send(());
        }
        if first_sync {
            // Synced once every app has a status, not once their writes are done: `/apps` never
            // serves a half-filled cache, and never waits behind a slow write.
            shared.synced.store(true, Ordering::Release);
            shared.metrics.synced.set(1);
            tracing::info!(apps = st.cache.services.len(), "app cache synced");
        }
        shared.metrics.refresh_apps(&shared.hub);
        shared.metrics.refresh_cached(&st.cache);
        shared.metrics.refresh_drift(&st.drift);
        if std::mem::take(&mut st.full) {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            shared
                .metrics
                .drift_evaluated
                .set(now.map_or(0.0, |d| d.as_secs_f64()));
        }
    }
}

/// How often the loop looks for a new admission policy (a pointer comparison).
const POLICY_CHECK: Duration = Duration::from_secs(1);

/// After a complete (re)list: forget deleted apps and look at everything again. Returns whether
/// this is the first complete list.
fn after_list(st: &mut LoopState, shared: &Shared) -> bool {
    let first = !shared.synced.load(Ordering::Acquire);
    if !first && !st.relisted {
        return false;
    }
    let live = st.all_keys();
    shared.hub.retain(&live);
    st.drift.retain(&live);
    st.dirty.extend(live);
    st.full = true;
    st.relisted = false;
    if !first {
        // Said at INFO: a re-list (a 410 after an API server restart or an etcd compaction) is
        // the loop's most costly moment, and the one to find beside a memory graph.
        tracing::info!(
            apps = st.cache.services.len(),
            revisions = st.cache.revisions.len(),
            "app cache listed again"
        );
    }
    first
}

/// Reconcile every dirty app: publish its status now, hand its writes to the queue.
fn reconcile_dirty(st: &mut LoopState, shared: &Shared, writes: &mut Writes, readmit: &Readmitter) {
    for key in std::mem::take(&mut st.dirty) {
        // Read per app; the job reads it again before every write.
        let leading = *shared.leader.borrow();
        let span =
            tracing::debug_span!("reconcile", ns = %key.namespace, name = %key.name, leading);
        let _entered = span.enter();
        let started = std::time::Instant::now();
        st.drift.update(&key, st.cache.service(&key).as_deref());
        let job = reconcile(st, shared, &key, leading, readmit);
        shared
            .metrics
            .duration
            .observe(started.elapsed().as_secs_f64());
        if !writes.is_running(&key) {
            // A job starting now replaces a pending retry; its outcome sets the next one.
            st.retry_at.remove(&key);
            if job.as_ref().is_none_or(|j| j.actions.is_empty()) {
                // Whatever failed before no longer needs writing.
                st.attempts.remove(&key);
            }
        }
        writes.dispatch(&key, job);
    }
}

/// A watch failed: kube-runtime resumes it with backoff; re-admission holds until the API server
/// answers again.
fn watch_error(shared: &Shared, readmit: &mut Readmitter, what: &str, error: &watcher::Error) {
    shared.metrics.error("watch");
    let error = error_chain(error);
    tracing::warn!(resource = what, error = %error, "watch failed; resuming with backoff");
    readmit.unreachable(&error, *shared.leader.borrow());
}

/// Reconcile one app: publish its status (every replica); plan its writes (the leader). `None`
/// when this replica has nothing to write for it.
fn reconcile(
    st: &LoopState,
    shared: &Shared,
    key: &AppKey,
    leading: bool,
    readmit: &Readmitter,
) -> Option<Job> {
    shared.metrics.reconciles.inc();
    let Some(eval) = st.cache.evaluate(key, &Timestamp::now().to_string()) else {
        shared.hub.remove(key);
        return None;
    };
    let Evaluation {
        ksvc,
        plan: planned,
        mut record,
        ..
    } = eval;
    record.drift = st.drift.shared(key).map(Into::into).unwrap_or_default();
    record.drift.readmit = readmit.state_of(key).map(str::to_owned);
    let change = shared.hub.upsert(record);
    if !leading {
        return None;
    }
    if let Some(waiting) = &planned.waiting {
        tracing::debug!(waiting, "stop not finished");
    }
    // One Event per phase change; progress within a phase (a new STOPPING message) is not one.
    let transition = match change {
        Change::Transition {
            previous: Some(previous),
            record,
        } if previous != record.status.phase => Some(Transition { previous, record }),
        Change::Transition { .. } | Change::Refresh | Change::None => None,
    };
    Some(Job {
        key: key.clone(),
        ksvc,
        transition,
        actions: planned.actions,
    })
}
