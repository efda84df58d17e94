//! The status hub: every app's current status, and the fan-out of changes to watch subscribers.
//!
//! Each subscriber has a bounded queue. A publisher never blocks and never silently drops: when a
//! subscriber's queue is full it is marked overflowed, its queue is cleared, and its next read is a
//! `RESYNC` event followed by the current state of every app it watches. Must never touch the API.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::status::{AppStatus, Phase};
use super::view::KService;
use crate::admission::drift::{Drift, Finding};
use crate::keys;
use crate::locks::lock;

/// The queue length of one watch subscriber.
pub const DEFAULT_SUBSCRIBER_BUFFER: usize = 256;

/// Namespace and name of a KService (or, in the Revisions' store, of a Revision). Shared, not
/// copied: the store's key, the cached view, the status record and the drift index hold the
/// same two strings.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AppKey {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

/// One app as served by `/apps`: where it lives, who it belongs to, and its status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppRecord {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub project: Option<String>,
    pub domain: Option<String>,
    pub app_name: Option<String>,
    pub status: AppStatus,
    /// What admission would change in the stored KService today.
    #[serde(flatten)]
    pub drift: AppDrift,
}

/// An app's drift report as `/apps` serves it: `drift: [{reason, detail}]` and
/// `drift_new_revision`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppDrift {
    /// Each reason admission would change the stored KService for; empty when it is in step.
    #[serde(default)]
    pub drift: Findings,
    /// Converging it would change `spec.template`: a new Revision and new pods.
    #[serde(default)]
    pub drift_new_revision: bool,
    /// What re-admission is doing with it on the leader (`writing`, `waiting-for-ready`,
    /// `unfixable`, `refused`); absent when nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readmit: Option<String>,
}

impl From<Arc<Drift>> for AppDrift {
    /// The drift index's evaluation, shared, not copied.
    fn from(d: Arc<Drift>) -> Self {
        Self {
            drift_new_revision: d.new_revision,
            drift: Findings(Some(d)),
            readmit: None,
        }
    }
}

/// An app's drift findings: the drift index's evaluation ([`super::drift::DriftIndex`]) held
/// once, by both the index and the app's record; reads as a slice of findings, and is served as
/// a list of them (its `new_revision` is the record's `drift_new_revision`). None is none
/// evaluated yet, without an allocation.
#[derive(Debug, Clone, Default)]
pub struct Findings(Option<Arc<Drift>>);

impl std::ops::Deref for Findings {
    type Target = [Finding];
    fn deref(&self) -> &[Finding] {
        self.0.as_deref().map_or(&[], |d| &d.findings)
    }
}

impl PartialEq for Findings {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Findings {}

impl From<Vec<Finding>> for Findings {
    fn from(findings: Vec<Finding>) -> Self {
        Self(Some(Arc::new(Drift {
            findings,
            new_revision: false,
        })))
    }
}

impl Serialize for Findings {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Findings {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<Finding>::deserialize(d).map(Self::from)
    }
}

impl AppRecord {
    /// The record served for a Service in this status (its drift not yet evaluated).
    pub fn of(ksvc: &KService, status: AppStatus) -> Self {
        let label = |k: &str| ksvc.label(k).map(str::to_owned);
        Self {
            namespace: ksvc.metadata.namespace.clone(),
            name: ksvc.metadata.name.clone(),
            project: label(keys::LABEL_PROJECT),
            domain: label(keys::LABEL_DOMAIN),
            app_name: label(keys::LABEL_APP_NAME),
            status,
            drift: AppDrift::default(),
        }
    }

    /// The record's key.
    pub fn key(&self) -> AppKey {
        AppKey {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// Which apps a listing or a watch covers; `None` matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Filter {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub project: Option<String>,
    pub domain: Option<String>,
}

impl Filter {
    /// Whether the record is covered.
    pub fn matches(&self, r: &AppRecord) -> bool {
        let eq = |want: &Option<String>, have: Option<&str>| {
            want.as_deref().is_none_or(|w| have == Some(w))
        };
        eq(&self.namespace, Some(&r.namespace))
            && eq(&self.name, Some(&r.name))
            && eq(&self.project, r.project.as_deref())
            && eq(&self.domain, r.domain.as_deref())
    }
}

/// One event of `/apps/watch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WatchEvent {
    Created {
        app: AppRecord,
    },
    Updated {
        app: AppRecord,
    },
    Deleted {
        app: AppRecord,
    },
    /// Events were lost to a full buffer: the current state of every watched app follows, as
    /// `UPDATED` events.
    Resync,
}

/// What an upsert changed, for Kubernetes Events and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The app appeared, or its phase, message or substate changed.
    Transition {
        previous: Option<Phase>,
        record: Box<AppRecord>,
    },
    /// Only replicas, URL or identity changed.
    Refresh,
    /// Nothing changed.
    None,
}

#[derive(Default)]
struct SubQueue {
    events: VecDeque<WatchEvent>,
    overflowed: bool,
}

struct SubShared {
    queue: Mutex<SubQueue>,
    notify: Notify,
}

struct SubEntry {
    id: u64,
    filter: Filter,
    capacity: usize,
    shared: Arc<SubShared>,
}

#[derive(Default)]
struct Inner {
    /// Each record boxed: the loop fills the map in key order, which leaves its nodes about
    /// half full, and a half-empty slot of a pointer costs less than one of a record.
    apps: BTreeMap<AppKey, Box<AppRecord>>,
    /// Apps per phase, kept as records come, change phase and go: never a walk of every app.
    phases: BTreeMap<Phase, i64>,
    subs: Vec<SubEntry>,
    next_id: u64,
}

impl Inner {
    /// Store a record, keeping the phase counts.
    fn put(&mut self, key: AppKey, record: AppRecord) {
        *self.phases.entry(record.status.phase).or_default() += 1;
        if let Some(old) = self.apps.insert(key, Box::new(record)) {
            *self.phases.entry(old.status.phase).or_default() -= 1;
        }
    }

    /// Forget a record, keeping the phase counts.
    fn take(&mut self, key: &AppKey) -> Option<AppRecord> {
        let old = self.apps.remove(key)?;
        *self.phases.entry(old.status.phase).or_default() -= 1;
        Some(*old)
    }
}

/// The status of every app, shared by the loop (writer), the HTTP router and subscribers.
#[derive(Default)]
pub struct Hub {
    inner: Mutex<Inner>,
}

impl Hub {
    /// An empty hub.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Store an app's status and tell subscribers. A change of only the transition time keeps the
    /// stored time (no rewrite when only timestamps moved).
    pub fn upsert(&self, mut record: AppRecord) -> Change {
        let mut inner = lock(&self.inner);
        let key = record.key();
        let (event, change) = match inner.apps.get(&key) {
            None => {
                let change = Change::Transition {
                    previous: None,
                    record: Box::new(record.clone()),
                };
                (
                    WatchEvent::Created {
                        app: record.clone(),
                    },
                    change,
                )
            }
            Some(old) if old.status.same_state(&record.status) => {
                record.status.last_transition_time = old.status.last_transition_time.clone();
                if **old == record {
                    return Change::None;
                }
                (
                    WatchEvent::Updated {
                        app: record.clone(),
                    },
                    Change::Refresh,
                )
            }
            Some(old) => {
                let previous = Some(old.status.phase);
                let change = Change::Transition {
                    previous,
                    record: Box::new(record.clone()),
                };
                (
                    WatchEvent::Updated {
                        app: record.clone(),
                    },
                    change,
                )
            }
        };
        inner.put(key, record.clone());
        publish(&inner, &record, &event);
        change
    }

    /// Forget an app (its KService was deleted) and tell subscribers.
    pub fn remove(&self, key: &AppKey) -> Option<AppRecord> {
        let mut inner = lock(&self.inner);
        let record = inner.take(key)?;
        publish(
            &inner,
            &record,
            &WatchEvent::Deleted {
                app: record.clone(),
            },
        );
        Some(record)
    }

    /// Keep only the apps whose keys are in `live`; the others are removed as deleted.
    pub fn retain(&self, live: &std::collections::BTreeSet<AppKey>) {
        let gone = gone(lock(&self.inner).apps.keys(), live);
        for key in gone {
            self.remove(&key);
        }
    }

    /// One app.
    pub fn get(&self, key: &AppKey) -> Option<AppRecord> {
        lock(&self.inner).apps.get(key).map(|r| (**r).clone())
    }

    /// Every app the filter covers, in key order.
    pub fn list(&self, filter: &Filter) -> Vec<AppRecord> {
        lock(&self.inner)
            .apps
            .values()
            .filter(|r| filter.matches(r))
            .map(|r| (**r).clone())
            .collect()
    }

    /// Up to `limit` apps the filter covers after the key `after` (from the first without), in
    /// key order, and whether more follow. With a namespace in the filter only that namespace's
    /// part of the map is walked.
    pub fn page(
        &self,
        filter: &Filter,
        after: Option<&AppKey>,
        limit: usize,
    ) -> (Vec<AppRecord>, bool) {
        use std::ops::Bound;
        let inner = lock(&self.inner);
        let start = match (after, &filter.namespace) {
            (Some(after), Some(ns)) if *after.namespace < **ns => None,
            (Some(after), _) => Some(Bound::Excluded(after.clone())),
            (None, _) => None,
        };
        let start = start.unwrap_or_else(|| match &filter.namespace {
            Some(ns) => Bound::Included(AppKey {
                namespace: ns.as_str().into(),
                name: "".into(),
            }),
            None => Bound::Unbounded,
        });
        let mut covered = inner
            .apps
            .range((start, Bound::Unbounded))
            .take_while(|(k, _)| {
                filter
                    .namespace
                    .as_ref()
                    .is_none_or(|ns| *k.namespace == **ns)
            })
            .map(|(_, r)| &**r)
            .filter(|r| filter.matches(r));
        let records: Vec<AppRecord> = covered.by_ref().take(limit).cloned().collect();
        let more = covered.next().is_some();
        (records, more)
    }

    /// The number of apps in each phase (every phase, zero or not), as kept by every change:
    /// a constant cost, whatever the number of apps.
    pub fn count_by_phase(&self) -> BTreeMap<Phase, i64> {
        let mut counts: BTreeMap<Phase, i64> = Phase::ALL.iter().map(|p| (*p, 0)).collect();
        counts.extend(lock(&self.inner).phases.iter().map(|(p, n)| (*p, *n)));
        counts
    }

    /// Subscribe to changes of the apps the filter covers. The current state comes first, as
    /// `CREATED` events. `capacity` bounds the queue (at least 1).
    pub fn subscribe(self: &Arc<Self>, filter: Filter, capacity: usize) -> Subscription {
        let mut inner = lock(&self.inner);
        let local = inner
            .apps
            .values()
            .filter(|r| filter.matches(r))
            .map(|r| WatchEvent::Created { app: (**r).clone() })
            .collect();
        let shared = Arc::new(SubShared {
            queue: Mutex::default(),
            notify: Notify::new(),
        });
        let id = inner.next_id;
        inner.next_id += 1;
        let capacity = capacity.max(1);
        inner.subs.push(SubEntry {
            id,
            filter: filter.clone(),
            capacity,
            shared: shared.clone(),
        });
        Subscription {
            hub: self.clone(),
            id,
            filter,
            shared,
            local,
        }
    }

    /// The number of live subscribers.
    pub fn subscriber_count(&self) -> usize {
        lock(&self.inner).subs.len()
    }
}

/// The keys of `keys` that are not in `live`: the apps a re-list no longer found.
pub fn gone<'a>(
    keys: impl Iterator<Item = &'a AppKey>,
    live: &std::collections::BTreeSet<AppKey>,
) -> Vec<AppKey> {
    keys.filter(|k| !live.contains(k)).cloned().collect()
}

fn publish(inner: &Inner, record: &AppRecord, event: &WatchEvent) {
    for sub in inner.subs.iter().filter(|s| s.filter.matches(record)) {
        let mut q = lock(&sub.shared.queue);
        if q.overflowed {
            continue;
        }
        if q.events.len() >= sub.capacity {
            // Never a silent drop: the reader is told to resync and gets the current state.
            q.overflowed = true;
            q.events.clear();
        } else {
            q.events.push_back(event.clone());
        }
        drop(q);
        sub.shared.notify.notify_one();
    }
}

/// A watch subscriber's end. Dropping it unsubscribes.
pub struct Subscription {
    hub: Arc<Hub>,
    id: u64,
    filter: Filter,
    shared: Arc<SubShared>,
    local: VecDeque<WatchEvent>,
}

impl Subscription {
    /// The next event, waiting for one. Never ends while the hub lives.
    pub async fn next(&mut self) -> WatchEvent {
        loop {
            if let Some(event) = self.try_next() {
                return event;
            }
            self.shared.notify.notified().await;
        }
    }

    /// The next event if one is ready.
    pub fn try_next(&mut self) -> Option<WatchEvent> {
        if let Some(event) = self.local.pop_front() {
            return Some(event);
        }
        let overflowed = {
            let mut q = lock(&self.shared.queue);
            if !q.overflowed {
                return q.events.pop_front();
            }
            q.overflowed
        };
        if overflowed {
            self.resync();
        }
        self.local.pop_front()
    }

    fn resync(&mut self) {
        // Hold the hub lock so no event slips between the snapshot and the cleared queue.
        let inner = lock(&self.hub.inner);
        let mut q = lock(&self.shared.queue);
        q.overflowed = false;
        q.events.clear();
        self.local.push_back(WatchEvent::Resync);
        let current = inner.apps.values().filter(|r| self.filter.matches(r));
        self.local
            .extend(current.map(|r| WatchEvent::Updated { app: (**r).clone() }));
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        lock(&self.hub.inner).subs.retain(|s| s.id != self.id);
    }
}

#[cfg(test)]
#[path = "hub_tests.rs"]
mod tests;
