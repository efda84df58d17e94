//! The loop's bookkeeping between two reconciles: the caches and the drift report it reads, which
//! apps are dirty, which failed app is tried again when, and whether each watch has listed; and
//! how each watch event and each ended write changes it.
//!
//! Marks apps dirty and nothing more: what an app's status and writes are is decided when the
//! loop reconciles it ([`super::controller`]); never calls the API, never waits.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::PartialObjectMeta;
use kube::runtime::watcher;
use tokio::time::Instant;

use super::cache::{Cache, service_key};
use super::drift::DriftIndex;
use super::hub::{AppKey, Hub};
use super::metrics::Metrics;
use super::readmit::Readmitter;
use super::view::{KService, Revision};
use super::watched::Watched;
use super::write_queue::{Done, Writes};
use crate::cluster::call::Backoff;
use crate::keys;
use crate::report::error_chain;

/// What the loop knows between events.
pub(super) struct LoopState {
    pub(super) cache: Cache,
    pub(super) drift: DriftIndex,
    /// Every app is dirty for a full drift evaluation (a list, a resync, a new policy).
    pub(super) full: bool,
    pub(super) dirty: BTreeSet<AppKey>,
    /// When a failed app is tried again.
    pub(super) retry_at: BTreeMap<AppKey, Instant>,
    /// Failed attempts in a row, per app; cleared by a success.
    pub(super) attempts: BTreeMap<AppKey, u32>,
    pub(super) services_listed: bool,
    pub(super) revisions_listed: bool,
    /// A list of Services or of Revisions is under way (begun, not done): nothing is
    /// reconciled from a half-listed cache, and the list's end reconciles everything once.
    pub(super) listing: [bool; 2],
    /// The namespaces (and so their labels) have been listed once.
    pub(super) namespaces_listed: bool,
    pub(super) relisted: bool,
}

impl LoopState {
    /// Nothing listed yet, nothing dirty.
    pub(super) fn new(cache: Cache, drift: DriftIndex) -> Self {
        Self {
            cache,
            drift,
            full: false,
            dirty: BTreeSet::new(),
            retry_at: BTreeMap::new(),
            attempts: BTreeMap::new(),
            services_listed: false,
            revisions_listed: false,
            listing: [false; 2],
            namespaces_listed: false,
            relisted: false,
        }
    }

    /// Both caches are complete and no list is under way: the time to reconcile.
    pub(super) fn settled(&self) -> bool {
        self.services_listed && self.revisions_listed && self.listing == [false; 2]
    }

    /// Every cached app.
    pub(super) fn all_keys(&self) -> BTreeSet<AppKey> {
        self.cache.keys()
    }

    /// When the next failed app is due to be tried again.
    pub(super) fn next_retry(&self) -> Option<Instant> {
        self.retry_at.values().min().copied()
    }

    /// Mark dirty the failed apps whose retry is due at `now`.
    pub(super) fn retry_due(&mut self, now: Instant) {
        let due: Vec<AppKey> = self
            .retry_at
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            self.retry_at.remove(&key);
            self.dirty.insert(key);
        }
    }

    /// A job ended: forget its failures, or retry it after a backoff; reconcile again at once if
    /// the app changed while it ran.
    pub(super) fn on_done(&mut self, metrics: &Metrics, backoff: &Backoff, done: Done) {
        let Done { key, result, again } = done;
        match result {
            Ok(()) => {
                self.attempts.remove(&key);
            }
            Err(error) => {
                metrics.error("write");
                let attempt = self.attempts.get(&key).map_or(0, |n| n + 1);
                let delay = backoff.delay(attempt);
                tracing::warn!(ns = %key.namespace, name = %key.name, error = %error_chain(&error), ?delay, "reconcile failed; retrying");
                self.attempts.insert(key.clone(), attempt);
                self.retry_at.insert(key.clone(), Instant::now() + delay);
            }
        }
        if again {
            self.dirty.insert(key);
        }
    }

    /// A Service was added, changed or deleted, or its list began or ended. Its drift is
    /// brought up to date from the text the event carries.
    pub(super) fn on_service(
        &mut self,
        writes: &mut Writes,
        hub: &Hub,
        ev: watcher::Event<Watched<KService>>,
    ) {
        match ev {
            watcher::Event::Apply(k) | watcher::Event::InitApply(k) => {
                let key = service_key(&k);
                // Now, while the event carries the stored text: the store keeps its digest only.
                self.drift.update(&key, Some(&*k));
                self.dirty.insert(key);
            }
            watcher::Event::Delete(k) => {
                let key = service_key(&k);
                self.dirty.remove(&key);
                self.retry_at.remove(&key);
                self.attempts.remove(&key);
                writes.forget(&key);
                self.drift.remove(&key);
                hub.remove(&key);
            }
            watcher::Event::Init => self.listing[0] = true,
            watcher::Event::InitDone => {
                self.listing[0] = false;
                self.relisted = self.services_listed;
                self.services_listed = true;
            }
        }
    }

    /// A namespace's labels: its re-admission label goes to `readmit`; a change of its opt-out
    /// label makes its apps' drift stale.
    pub(super) fn on_namespace(
        &mut self,
        readmit: &mut Readmitter,
        ev: watcher::Event<PartialObjectMeta<Namespace>>,
    ) {
        let (ns, label) = match &ev {
            watcher::Event::Apply(ns) | watcher::Event::InitApply(ns) => {
                let enabled = ns.labels().get(keys::LABEL_NAMESPACE_READMIT);
                readmit.set_namespace(
                    &ns.name_any(),
                    enabled.is_some_and(|v| v == keys::NAMESPACE_READMIT_ENABLED),
                );
                (
                    ns.name_any(),
                    ns.labels().get(keys::LABEL_NAMESPACE_INJECT).cloned(),
                )
            }
            watcher::Event::Delete(ns) => (ns.name_any(), None),
            watcher::Event::Init => return,
            watcher::Event::InitDone => {
                self.namespaces_listed = true;
                return;
            }
        };
        if self.drift.set_namespace(&ns, label.as_deref()) {
            let stale = self.all_keys().into_iter().filter(|k| *k.namespace == *ns);
            self.dirty.extend(stale);
        }
    }

    /// A Revision was added, changed or deleted: its app's status may have moved.
    pub(super) fn on_revision(&mut self, ev: watcher::Event<Watched<Revision>>) {
        match ev {
            watcher::Event::Apply(r) | watcher::Event::InitApply(r) => {
                self.dirty.extend(self.cache.note_revision(&r, true));
            }
            watcher::Event::Delete(r) => {
                self.dirty.extend(self.cache.note_revision(&r, false));
            }
            watcher::Event::Init => self.listing[1] = true,
            watcher::Event::InitDone => {
                self.listing[1] = false;
                self.relisted |= self.revisions_listed;
                self.revisions_listed = true;
            }
        }
    }
}
