//! The loop's object stores: every cached Service or Revision by namespace and name, fed by a
//! kube-runtime watcher and read by the loop, the status API and the revision guard.
//!
//! Unlike kube-runtime's reflector store, which builds a second full map during a (re)list and
//! swaps it in at its end, a list is applied in place: each listed object replaces its entry at
//! once and is marked with the list's number, and when the list is done ([`Event::InitDone`])
//! every entry the list did not name is swept. A re-list so holds one copy of the cache, not two;
//! a list cut short (the watcher starts it again with [`Event::Init`]) leaves nothing behind that
//! the next complete list does not name. While a list runs a reader sees each object as it was
//! either before or in the list, never a half-listed empty store. Each object is held as
//! [`Cached::cached`] makes it: a Service without its stored text (the event that brought it
//! still carries the text, for the drift report), and its namespace and names shared with the
//! other objects' ([`super::names`]). Never calls the API.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use futures::{Stream, TryStreamExt};
use kube::runtime::watcher::{self, Event};

use super::hub::AppKey;
use super::names::Names;
use super::view::{KService, Revision};
use super::watched::{View, Watched};
use crate::locks;

struct Held<K> {
    object: Arc<K>,
    /// The number of the list (or watch after it) that last named it.
    list: u64,
}

struct Map<K> {
    objects: HashMap<AppKey, Held<K>>,
    /// The number of the list under way or last done.
    list: u64,
}

/// A shared, read-only handle on a store; cheap to clone.
pub struct Store<K> {
    map: Arc<RwLock<Map<K>>>,
}

impl<K> std::fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("len", &self.len()).finish()
    }
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Self {
            map: self.map.clone(),
        }
    }
}

/// The one handle that changes a store: it applies the watcher's events.
pub struct Writer<K> {
    map: Arc<RwLock<Map<K>>>,
    names: Names,
}

/// An empty store and its writer, sharing `names` with the loop's other stores.
pub fn store<K>(names: &Names) -> (Store<K>, Writer<K>) {
    let map = Arc::new(RwLock::new(Map {
        objects: HashMap::new(),
        list: 0,
    }));
    let names = names.clone();
    (Store { map: map.clone() }, Writer { map, names })
}

/// What a store keeps of an object a watcher decoded: the parts the readers of the store read.
pub trait Cached: View + Clone {
    /// The copy the store holds.
    fn cached(&self) -> Self;
    /// Trade its namespace and names for the shared copies.
    fn share(&mut self, names: &Names);
}

impl Cached for KService {
    /// The view with its stored text's digest, not the text.
    fn cached(&self) -> Self {
        Self {
            metadata: self.metadata.clone(),
            generation: self.generation,
            deleting: self.deleting,
            created: self.created,
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            spec: self.spec.clone(),
            status: self.status.clone(),
            stored: self.stored.without_text(),
        }
    }
    fn share(&mut self, names: &Names) {
        names.share(&mut self.metadata.namespace);
        names.share(&mut self.metadata.name);
    }
}

impl Cached for Revision {
    fn cached(&self) -> Self {
        self.clone()
    }
    /// Its namespace and its owner's name (its own name is its alone).
    fn share(&mut self, names: &Names) {
        names.share(&mut self.metadata.namespace);
        if let Some(owner) = &mut self.owner {
            names.share(owner);
        }
    }
}

/// The store key of an object: its namespace and name.
pub fn key_of<K: View>(object: &K) -> AppKey {
    let meta = object.metadata();
    AppKey {
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
    }
}

impl<K> Store<K> {
    fn read(&self) -> RwLockReadGuard<'_, Map<K>> {
        locks::read(&self.map)
    }

    /// One object.
    pub fn get(&self, key: &AppKey) -> Option<Arc<K>> {
        self.read().objects.get(key).map(|h| h.object.clone())
    }

    /// Every object, in no particular order.
    pub fn state(&self) -> Vec<Arc<K>> {
        self.read()
            .objects
            .values()
            .map(|h| h.object.clone())
            .collect()
    }

    /// Every object's key, in no particular order.
    pub fn keys(&self) -> Vec<AppKey> {
        self.read().objects.keys().cloned().collect()
    }

    /// The number of objects held.
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// No object held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Cached> Writer<K> {
    fn write(&self) -> RwLockWriteGuard<'_, Map<K>> {
        locks::write(&self.map)
    }

    /// Apply one watcher event (see the module's header for lists): the store keeps the view
    /// ([`Cached::cached`]), not the `ObjectMeta` the event carries; the event's view is given
    /// the shared names first, so what reads the event holds the same strings.
    pub fn apply(&mut self, event: &mut Event<Watched<K>>) {
        if let Event::InitApply(object) | Event::Apply(object) = event {
            object.share(&self.names);
        }
        let mut map = self.write();
        match event {
            Event::Init => map.list += 1,
            Event::InitApply(object) | Event::Apply(object) => {
                let list = map.list;
                let held = Held {
                    object: Arc::new((**object).cached()),
                    list,
                };
                match map.objects.entry(key_of(&**object)) {
                    // In place: the key is not copied again.
                    Entry::Occupied(mut slot) => *slot.get_mut() = held,
                    Entry::Vacant(slot) => {
                        slot.insert(held);
                    }
                }
            }
            Event::Delete(object) => {
                map.objects.remove(&key_of(&**object));
            }
            Event::InitDone => {
                let list = map.list;
                map.objects.retain(|_, held| held.list == list);
                map.objects.shrink_to_fit();
                drop(map);
                self.names.sweep();
            }
        }
    }
}

/// The watcher's stream with each event applied to `writer` before it is passed on.
pub fn reflect<K, S>(mut writer: Writer<K>, events: S) -> impl Stream<Item = S::Item>
where
    K: Cached,
    S: Stream<Item = Result<Event<Watched<K>>, watcher::Error>>,
{
    events.map_ok(move |mut event| {
        writer.apply(&mut event);
        event
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::watch::view::KService;

    fn ksvc(name: &str, generation: i64) -> Watched<KService> {
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "apps", "generation": generation}}),
        )
        .unwrap()
    }

    fn names(store: &Store<KService>) -> Vec<(String, i64)> {
        let mut names: Vec<_> = store
            .state()
            .iter()
            .map(|k| (k.name().to_owned(), k.generation.unwrap_or(0)))
            .collect();
        names.sort();
        names
    }

    fn key(name: &str) -> AppKey {
        AppKey {
            namespace: "apps".into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_relist_applies_in_place_and_sweeps_what_it_did_not_name() {
        let (store, mut writer) = store::<KService>(&Names::default());
        for mut ev in [
            Event::Init,
            Event::InitApply(ksvc("a", 1)),
            Event::InitApply(ksvc("b", 1)),
            Event::InitApply(ksvc("c", 1)),
            Event::InitDone,
            Event::Apply(ksvc("d", 1)),
        ] {
            writer.apply(&mut ev);
        }
        assert_eq!(store.len(), 4);
        let held_a = store.get(&key("a")).unwrap();
        // One namespace string for every object in it.
        let held_b = store.get(&key("b")).unwrap();
        assert!(Arc::ptr_eq(
            &held_a.metadata.namespace,
            &held_b.metadata.namespace
        ));

        // A re-list that fails half-way: what it named is applied at once, nothing is swept yet,
        // and the old objects are still there for readers.
        writer.apply(&mut Event::Init);
        writer.apply(&mut Event::InitApply(ksvc("a", 2)));
        writer.apply(&mut Event::InitApply(ksvc("e", 1)));
        assert_eq!(
            names(&store),
            [("a", 2), ("b", 1), ("c", 1), ("d", 1), ("e", 1)].map(|(n, g)| (n.to_owned(), g))
        );
        assert!(!Arc::ptr_eq(&held_a, &store.get(&key("a")).unwrap()));

        // The watcher lists again from the start: `e` (only in the half list) and `c`, `d` (gone
        // since) are swept once the complete list is done.
        writer.apply(&mut Event::Init);
        writer.apply(&mut Event::InitApply(ksvc("b", 3)));
        writer.apply(&mut Event::InitApply(ksvc("a", 3)));
        assert_eq!(store.len(), 5, "nothing swept before the list is done");
        writer.apply(&mut Event::InitDone);
        assert_eq!(
            names(&store),
            [("a", 3), ("b", 3)].map(|(n, g)| (n.to_owned(), g))
        );

        // Deletes and watch events after the list.
        writer.apply(&mut Event::Delete(ksvc("a", 3)));
        writer.apply(&mut Event::Apply(ksvc("f", 1)));
        assert_eq!(
            names(&store),
            [("b", 3), ("f", 1)].map(|(n, g)| (n.to_owned(), g))
        );
        assert!(store.get(&key("a")).is_none());
        let mut keys = store.keys();
        keys.sort();
        assert_eq!(keys, [key("b"), key("f")]);
    }
}
