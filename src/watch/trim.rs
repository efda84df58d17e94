//! PURE: what the cached views drop while they are decoded ([`super::view`]): `managedFields`
//! and kubectl's last-applied annotation from every object, the metadata a Service's view never
//! reads, and every label and annotation of a Revision but the one of each the loop reads
//! ([`Kept`], which reads past the others without storing them). Must never do I/O.

use std::borrow::Cow;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, Visitor};

use crate::keys;

/// Remove from a decoded object what nothing of ours reads and what makes it large:
/// `metadata.managedFields` and kubectl's last-applied annotation (a copy of the whole object).
pub(super) fn drop_unread(value: &mut serde_json::Value) {
    if let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("managedFields");
        if let Some(annotations) = meta.get_mut("annotations").and_then(|a| a.as_object_mut()) {
            annotations.remove(keys::ANNOTATION_LAST_APPLIED);
        }
    }
}

/// A Service's metadata as the loop reads it: name, namespace, uid, resourceVersion,
/// generation, deletion time, labels and annotations.
pub(super) fn service_meta(meta: ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        generation: meta.generation,
        deletion_timestamp: meta.deletion_timestamp,
        labels: meta.labels,
        annotations: meta.annotations,
        ..ObjectMeta::default()
    }
}

/// The keys of a string map a view keeps.
pub(super) trait Wanted {
    const KEYS: &'static [&'static str];
}

/// A Revision's labels: its owner's name, and whether Knative routes to it.
pub(super) struct RevisionLabels;
impl Wanted for RevisionLabels {
    const KEYS: &'static [&'static str] = &[keys::LABEL_KNATIVE_SERVICE, keys::LABEL_ROUTING_STATE];
}

pub(super) struct NoGc;
impl Wanted for NoGc {
    const KEYS: &'static [&'static str] = &[keys::ANNOTATION_NO_GC];
}

/// A string map decoded keeping only `K::KEYS`: the other entries are read past, never stored.
pub(super) struct Kept<K> {
    values: Vec<(&'static str, String)>,
    keys: PhantomData<K>,
}

impl<K> Default for Kept<K> {
    fn default() -> Self {
        Self {
            values: Vec::new(),
            keys: PhantomData,
        }
    }
}

impl<K: Wanted> Kept<K> {
    /// The value of `key` (one of `K::KEYS`), taken out.
    pub(super) fn take(&mut self, key: &str) -> Option<String> {
        let at = self.values.iter().position(|(k, _)| *k == key)?;
        Some(self.values.swap_remove(at).1)
    }
}

impl<'de, K: Wanted> Deserialize<'de> for Kept<K> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<K>(PhantomData<K>);
        impl<'de, K: Wanted> Visitor<'de> for Visit<K> {
            type Value = Kept<K>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of strings, or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Kept::default())
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Kept::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut kept = Kept::default();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if let Some(wanted) = K::KEYS.iter().find(|k| **k == key) {
                        kept.values.push((wanted, map.next_value()?));
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(kept)
            }
        }
        d.deserialize_any(Visit(PhantomData))
    }
}
