//! The loop's cache: the stores ([`super::store`]) of Services and Revisions plus an index of revisions by
//! owning Service, so one reconcile costs O(its revisions), not O(all revisions).
//!
//! [`Cache::evaluate`] is the read half of a reconcile — status and plan for one app from the
//! cache — shared by the controller and the benchmark. Must never call the API.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::runtime::watcher;

use super::hub::{AppKey, AppRecord};
use super::names::Names;
use super::plan::{Plan, plan};
use super::status::status_for;
use super::store::{self, Store};
use super::view::{KService, Revision};
use super::watched::Watched;

/// The stores and the revision index.
pub struct Cache {
    pub services: Store<KService>,
    pub revisions: Store<Revision>,
    /// Each Service's revision names, sorted: a vector, not a set (a set of two names costs a
    /// whole B-tree node); each name shared with its Revision's view.
    index: BTreeMap<AppKey, Vec<Arc<str>>>,
}

/// One app as evaluated from the cache.
pub struct Evaluation {
    pub ksvc: Arc<KService>,
    pub revisions: Vec<Arc<Revision>>,
    pub record: AppRecord,
    pub plan: Plan,
}

/// The key of the Service owning a revision, if labelled.
pub fn owner_key(r: &Revision) -> Option<AppKey> {
    r.owner.as_ref().map(|s| AppKey {
        namespace: r.metadata.namespace.clone(),
        name: s.clone(),
    })
}

/// The key of a Service.
pub fn service_key(k: &KService) -> AppKey {
    store::key_of(k)
}

impl Cache {
    /// A cache over two stores (fed by the loop's watchers).
    pub fn new(services: Store<KService>, revisions: Store<Revision>) -> Self {
        Self {
            services,
            revisions,
            index: BTreeMap::new(),
        }
    }

    /// A cache holding exactly these objects (benchmarks, tests).
    pub fn from_objects(services: Vec<KService>, revisions: Vec<Revision>) -> Self {
        Self::from_named(&Names::default(), services, revisions)
    }

    /// A cache holding exactly these objects, whose stores share `names` (benchmarks).
    pub fn from_named(names: &Names, services: Vec<KService>, revisions: Vec<Revision>) -> Self {
        let (svc_store, mut svc_writer) = store::store::<KService>(names);
        let (rev_store, mut rev_writer) = store::store::<Revision>(names);
        svc_writer.apply(&mut watcher::Event::Init);
        for k in services {
            svc_writer.apply(&mut watcher::Event::InitApply(Watched::new(k)));
        }
        svc_writer.apply(&mut watcher::Event::InitDone);
        rev_writer.apply(&mut watcher::Event::Init);
        let mut cache = Self::new(svc_store, rev_store);
        for r in revisions {
            cache.note_revision(&r, true);
            rev_writer.apply(&mut watcher::Event::InitApply(Watched::new(r)));
        }
        rev_writer.apply(&mut watcher::Event::InitDone);
        cache
    }

    /// Record that a revision exists (`true`) or was deleted (`false`); returns its owner.
    pub fn note_revision(&mut self, r: &Revision, exists: bool) -> Option<AppKey> {
        let key = owner_key(r)?;
        let name = r.name();
        if exists {
            let names = self.index.entry(key.clone()).or_default();
            if let Err(at) = names.binary_search_by(|n| (**n).cmp(name)) {
                names.insert(at, r.metadata.name.clone());
            }
        } else if let Some(names) = self.index.get_mut(&key) {
            if let Ok(at) = names.binary_search_by(|n| (**n).cmp(name)) {
                names.remove(at);
            }
            if names.is_empty() {
                self.index.remove(&key);
            }
        }
        Some(key)
    }

    /// Every Service's key.
    pub fn keys(&self) -> BTreeSet<AppKey> {
        self.services.keys().into_iter().collect()
    }

    /// One Service.
    pub fn service(&self, key: &AppKey) -> Option<Arc<KService>> {
        self.services.get(key)
    }

    /// The cached revisions of one Service (names indexed but no longer stored are skipped).
    pub fn revisions_of(&self, key: &AppKey) -> Vec<Arc<Revision>> {
        let Some(names) = self.index.get(key) else {
            return Vec::new();
        };
        names
            .iter()
            .filter_map(|n| {
                self.revisions.get(&AppKey {
                    namespace: key.namespace.clone(),
                    name: n.clone(),
                })
            })
            .filter(|r| owner_key(r).as_ref() == Some(key))
            .collect()
    }

    /// Status and plan of one managed app; `None` when the Service is gone or not managed.
    pub fn evaluate(&self, key: &AppKey, now: &str) -> Option<Evaluation> {
        let ksvc = self.service(key).filter(|k| k.is_managed())?;
        let revisions = self.revisions_of(key);
        let record = AppRecord::of(&ksvc, status_for(&ksvc, &revisions, now));
        let plan = plan(&ksvc, &revisions);
        Some(Evaluation {
            ksvc,
            revisions,
            record,
            plan,
        })
    }
}
