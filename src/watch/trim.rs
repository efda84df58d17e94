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

/// The one key of a string map a view keeps.
pub(super) trait OneKey {
    const KEY: &'static str;
}

pub(super) struct OwnerLabel;
impl OneKey for OwnerLabel {
    const KEY: &'static str = keys::LABEL_KNATIVE_SERVICE;
}

pub(super) struct NoGc;
impl OneKey for NoGc {
    const KEY: &'static str = keys::ANNOTATION_NO_GC;
}

/// A string map decoded keeping only `K::KEY`: the other entries are read past, never stored.
pub(super) struct Kept<K> {
    value: Option<String>,
    key: PhantomData<K>,
}

impl<K> Default for Kept<K> {
    fn default() -> Self {
        Self {
            value: None,
            key: PhantomData,
        }
    }
}

impl<K: OneKey> Kept<K> {
    pub(super) fn into_value(self) -> Option<String> {
        self.value
    }
}

impl<'de, K: OneKey> Deserialize<'de> for Kept<K> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<K>(PhantomData<K>);
        impl<'de, K: OneKey> Visitor<'de> for Visit<K> {
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
                    if key == K::KEY {
                        kept.value = Some(map.next_value()?);
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
