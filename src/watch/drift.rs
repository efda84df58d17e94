//! The drift report of every cached KService, kept current for `/apps` and
//! `ksvc_webhook_drift_apps`: what admission would change in each stored KService today
//! ([`crate::admission::drift`] decides).
//!
//! An app is evaluated again only when something its drift depends on changed: its stored text,
//! its namespace's opt-out label, or the admission policy (one `Arc` a catalogue reload swaps,
//! so a new policy is a new pointer). Counts per reason are kept as apps change, never by a scan.
//! Every replica keeps one.
//!
//! What it keeps per app is the drift and the digest of the text it was evaluated on, never the
//! text: an app is evaluated from the text its Service carries as it comes from a watch or a
//! list. When the policy changes, or a namespace opts in again, the apps' texts are no longer at
//! hand; their drift stays as last evaluated, [`DriftIndex::take_unread`] says so, and the loop
//! lists the Services again (by streaming, or in pages of 500) to evaluate them from the texts
//! that list brings. Never calls the API, never writes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::hub::{AppKey, gone};
use super::view::KService;
use crate::admission::Policy;
use crate::admission::drift::{self, Drift, Reason};

struct Entry {
    /// The digest of the stored text it was evaluated on ([`super::view::Stored::digest`]): no
    /// one keeps the text itself once it is evaluated.
    stored: u64,
    inject: Option<String>,
    /// The policy generation it was evaluated under.
    generation: u64,
    /// Shared with the app's `/apps` record ([`super::hub::Findings`]): held once.
    drift: Arc<Drift>,
}

/// Every app's drift, the namespaces' opt-out labels and the policy they were evaluated under.
pub struct DriftIndex {
    policy: Arc<Policy>,
    generation: u64,
    /// The `ksvc-webhook.flyte.org/inject` label of each namespace that has one.
    namespaces: BTreeMap<String, String>,
    entries: BTreeMap<AppKey, Entry>,
    counts: BTreeMap<Reason, i64>,
    /// Stale apps met without their stored text, since [`DriftIndex::take_unread`].
    unread: usize,
}

impl DriftIndex {
    /// An empty index evaluating under `policy`.
    pub fn new(policy: Arc<Policy>) -> Self {
        Self {
            policy,
            generation: 0,
            namespaces: BTreeMap::new(),
            entries: BTreeMap::new(),
            counts: Reason::ALL.iter().map(|r| (*r, 0)).collect(),
            unread: 0,
        }
    }

    /// Evaluate under `policy` from now on. Returns whether it is another policy than before:
    /// then every app is stale until [`DriftIndex::update`]d.
    pub fn set_policy(&mut self, policy: Arc<Policy>) -> bool {
        if Arc::ptr_eq(&self.policy, &policy) {
            return false;
        }
        self.policy = policy;
        self.generation += 1;
        true
    }

    /// Record a namespace's `ksvc-webhook.flyte.org/inject` label (`None`: none, or the
    /// namespace is gone). Returns whether it changed: then its apps are stale.
    pub fn set_namespace(&mut self, name: &str, inject: Option<&str>) -> bool {
        let previous = match inject {
            Some(value) => self.namespaces.insert(name.to_owned(), value.to_owned()),
            None => self.namespaces.remove(name),
        };
        previous.as_deref() != inject
    }

    /// Bring one app's drift up to date with its Service (`None`: it is gone) and return it.
    /// A Service fresh from the API server carries its stored text; the store's copy does not
    /// ([`super::store::Cached`]): a stale app whose text is not at hand keeps its last drift
    /// and is counted in [`DriftIndex::take_unread`], unless its namespace is excluded (which
    /// needs no text).
    pub fn update(&mut self, key: &AppKey, ksvc: Option<&KService>) -> Option<&Drift> {
        let Some(ksvc) = ksvc else {
            self.remove(key);
            return None;
        };
        let inject = self.namespaces.get(&*key.namespace).cloned();
        let digest = ksvc.stored.digest();
        let fresh = |slot: &Entry| {
            slot.generation == self.generation && slot.inject == inject && slot.stored == digest
        };
        if self.entries.get(key).is_some_and(fresh) {
            return self.get(key);
        }
        let inject_label = inject.as_deref();
        let drift = match ksvc.stored.text() {
            // The cache's text is JSON the view wrote: unreadable only if something is badly
            // wrong, and then admission would refuse it too.
            Some(text) => drift::drift(text, inject_label, &self.policy)
                .unwrap_or_else(|e| Drift::one(Reason::WouldReject, e.to_string())),
            None => match drift::excluded(&key.namespace, inject_label) {
                Some(why) => Drift::one(Reason::Excluded, why),
                None => {
                    self.unread += 1;
                    return self.get(key);
                }
            },
        };
        let entry = Entry {
            stored: digest,
            inject,
            generation: self.generation,
            drift: Arc::new(drift),
        };
        // In place: no key copied, no rebalancing, for the common re-evaluation.
        let (old, new) = match self.entries.get_mut(key) {
            Some(slot) => {
                let old = std::mem::replace(slot, entry);
                (Some(old), slot.drift.reasons().collect::<Vec<_>>())
            }
            None => {
                let reasons = entry.drift.reasons().collect();
                self.entries.insert(key.clone(), entry);
                (None, reasons)
            }
        };
        for reason in new {
            *self.counts.entry(reason).or_default() += 1;
        }
        for reason in old.iter().flat_map(|e| e.drift.reasons()) {
            *self.counts.entry(reason).or_default() -= 1;
        }
        self.get(key)
    }

    /// How many apps [`DriftIndex::update`] found stale without their stored text since the
    /// last call: the loop lists the Services again for their texts when it is not zero.
    pub fn take_unread(&mut self) -> usize {
        std::mem::take(&mut self.unread)
    }

    /// One app's drift, as last evaluated.
    pub fn get(&self, key: &AppKey) -> Option<&Drift> {
        self.entries.get(key).map(|e| &*e.drift)
    }

    /// One app's drift, as last evaluated, shared (for its `/apps` record).
    pub fn shared(&self, key: &AppKey) -> Option<Arc<Drift>> {
        self.entries.get(key).map(|e| e.drift.clone())
    }

    /// Forget an app (its KService was deleted).
    pub fn remove(&mut self, key: &AppKey) {
        if let Some(old) = self.entries.remove(key) {
            for reason in old.drift.reasons() {
                *self.counts.entry(reason).or_default() -= 1;
            }
        }
    }

    /// Keep only the apps whose keys are in `live`.
    pub fn retain(&mut self, live: &BTreeSet<AppKey>) {
        for key in gone(self.entries.keys(), live) {
            self.remove(&key);
        }
    }

    /// The number of apps with each reason (every reason, zero or not).
    pub fn counts(&self) -> &BTreeMap<Reason, i64> {
        &self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::sidecars::Catalogue;
    use serde_json::json;

    fn ksvc(ns: &str, name: &str, image: &str) -> KService {
        serde_json::from_value(json!({
            "apiVersion": "serving.knative.dev/v1", "kind": "Service",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "1"},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": image, "ports": [{"containerPort": 8080}]}]}}},
            "status": {"observedGeneration": 1}
        }))
        .unwrap()
    }

    fn key(ns: &str, name: &str) -> AppKey {
        AppKey {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn count(index: &DriftIndex, reason: Reason) -> i64 {
        index.counts()[&reason]
    }

    #[test]
    fn apps_are_evaluated_again_only_when_what_their_drift_depends_on_changes() {
        let policy = Arc::new(Policy::default());
        let mut index = DriftIndex::new(policy.clone());
        assert_eq!(index.counts().len(), Reason::ALL.len());
        let a = ksvc("team", "a", "app:1");
        let reasons = |d: Option<&Drift>| d.unwrap().reasons().collect::<Vec<_>>();
        assert_eq!(
            reasons(index.update(&key("team", "a"), Some(&a))),
            [Reason::MissingSpecSha, Reason::MissingEndpointEnv]
        );
        index.update(&key("team", "b"), Some(&ksvc("team", "b", "app:1")));
        assert_eq!(count(&index, Reason::MissingSpecSha), 2);

        // Only the status moved: the same text, nothing evaluated again, nothing counted twice.
        let mut moved = a.clone();
        moved.status.observed_generation = Some(2);
        index.update(&key("team", "a"), Some(&moved));
        assert_eq!(count(&index, Reason::MissingSpecSha), 2);

        // The namespace opts out: its apps are excluded, and back again when it opts in.
        assert!(index.set_namespace("team", Some("disabled")));
        assert!(!index.set_namespace("team", Some("disabled")));
        assert_eq!(
            reasons(index.update(&key("team", "a"), Some(&a))),
            [Reason::Excluded]
        );
        assert_eq!(count(&index, Reason::MissingSpecSha), 1);
        assert_eq!(count(&index, Reason::Excluded), 1);
        assert!(index.set_namespace("team", None));
        index.update(&key("team", "a"), Some(&a));
        assert_eq!(count(&index, Reason::Excluded), 0);

        // The same policy is no change; a new one (a catalogue reload) makes every app stale.
        assert!(!index.set_policy(policy.clone()));
        let catalogue = "default: [agent]\ntemplates:\n  agent:\n    containers:\n      - name: agent\n        image: agent:1\n";
        let reloaded = Arc::new(Policy {
            sidecars: Arc::new(Catalogue::parse(catalogue).unwrap()),
            ..Policy::default()
        });
        assert!(index.set_policy(reloaded));
        index.update(&key("team", "a"), Some(&a));
        assert_eq!(
            count(&index, Reason::StaleSidecars),
            1,
            "{:?}",
            index.get(&key("team", "a"))
        );

        // Deleted apps leave the counts.
        index.update(&key("team", "a"), None);
        index.retain(&BTreeSet::new());
        assert!(
            index.counts().values().all(|n| *n == 0),
            "{:?}",
            index.counts()
        );
        assert!(index.get(&key("team", "b")).is_none());
    }

    #[test]
    fn a_stale_app_without_its_text_keeps_its_drift_and_is_counted_unread() {
        use crate::watch::store::Cached;
        let mut index = DriftIndex::new(Arc::new(Policy::default()));
        let a = ksvc("team", "a", "app:1");
        let held = a.cached();
        assert_eq!(held.stored, a.stored, "the same digest");
        assert!(held.stored.text().is_none());
        let before = index.update(&key("team", "a"), Some(&a)).cloned();
        // Fresh: the store's copy, without its text, is enough.
        assert_eq!(
            index.update(&key("team", "a"), Some(&held)).cloned(),
            before
        );
        assert_eq!(index.take_unread(), 0);

        // A new policy: stale, and its text is not at hand; the last drift is served meanwhile.
        assert!(index.set_policy(Arc::new(Policy::default())));
        assert_eq!(
            index.update(&key("team", "a"), Some(&held)).cloned(),
            before
        );
        assert_eq!(index.take_unread(), 1);
        assert_eq!(index.take_unread(), 0, "counted once");
        // The list brings the text: evaluated again, nothing unread.
        index.update(&key("team", "a"), Some(&a));
        assert_eq!(index.take_unread(), 0);

        // An opt-out needs no text; opting in again does.
        assert!(index.set_namespace("team", Some("disabled")));
        let excluded = index.update(&key("team", "a"), Some(&held)).unwrap();
        assert_eq!(excluded.reasons().collect::<Vec<_>>(), [Reason::Excluded]);
        assert_eq!(index.take_unread(), 0);
        assert!(index.set_namespace("team", None));
        index.update(&key("team", "a"), Some(&held));
        assert_eq!(index.take_unread(), 1);
        assert_eq!(count(&index, Reason::Excluded), 1, "as last evaluated");
        index.update(&key("team", "a"), Some(&a));
        assert_eq!(index.get(&key("team", "a")).cloned(), before);
        assert_eq!(count(&index, Reason::Excluded), 0);
    }
}
