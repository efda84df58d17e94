//! PURE: what the cached views drop while they are decoded ([`super::view`]): `managedFields`
//! and kubectl's last-applied annotation from every object (before a Service's stored text is
//! made), every label and annotation but the few the loop reads ([`Kept`], which reads past
//! the others without storing them), and which conditions the status mapping reads (the views
//! drop the others, beside their `Condition`). Must never do I/O.

use std::borrow::Cow;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
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

/// The conditions of a Service the status mapping looks up by type.
pub(super) const SERVICE_CONDITIONS: &[&str] = &["Ready", "ConfigurationsReady"];
/// The conditions of a Revision the status mapping looks up by type.
pub(super) const REVISION_CONDITIONS: &[&str] = &["Active"];

/// An object's metadata as a view decodes it: what the loop reads, and of its labels and
/// annotations the `L` and `A` keys; the rest is read past.
#[derive(Deserialize)]
#[serde(default, rename_all = "camelCase", bound = "")]
pub(super) struct Meta<L: Wanted, A: Wanted> {
    pub(super) name: Option<String>,
    pub(super) namespace: Option<String>,
    pub(super) uid: Option<String>,
    pub(super) resource_version: Option<String>,
    pub(super) generation: Option<i64>,
    pub(super) creation_timestamp: Option<Time>,
    pub(super) deletion_timestamp: Option<Time>,
    pub(super) labels: Kept<L>,
    pub(super) annotations: Kept<A>,
}

impl<L: Wanted, A: Wanted> Default for Meta<L, A> {
    fn default() -> Self {
        Self {
            name: None,
            namespace: None,
            uid: None,
            resource_version: None,
            generation: None,
            creation_timestamp: None,
            deletion_timestamp: None,
            labels: Kept::default(),
            annotations: Kept::default(),
        }
    }
}

/// The keys of a string map a view keeps.
pub trait Wanted {
    const KEYS: &'static [&'static str];
}

/// A Service's labels the loop and the status API read: the app's identity, whether it is ours
/// and stopped, and its visibility.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceLabels;
impl Wanted for ServiceLabels {
    const KEYS: &'static [&'static str] = &[
        keys::LABEL_APP_MANAGED,
        keys::LABEL_APP_NAME,
        keys::LABEL_APP_STOPPED,
        keys::LABEL_PROJECT,
        keys::LABEL_DOMAIN,
        keys::LABEL_VISIBILITY,
    ];
}

/// A Service's annotations the loop reads: the old managed mark and re-admission's two.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAnnotations;
impl Wanted for ServiceAnnotations {
    const KEYS: &'static [&'static str] = &[
        keys::ANNOTATION_APP_MANAGED,
        keys::ANNOTATION_READMIT,
        keys::ANNOTATION_READMITTED,
    ];
}

/// A Service's template annotations the loop reads: whether it scales to zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateAnnotations;
impl Wanted for TemplateAnnotations {
    const KEYS: &'static [&'static str] = &[keys::ANNOTATION_MIN_SCALE];
}

/// A Revision's labels: its owner's name, and whether Knative routes to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevisionLabels;
impl Wanted for RevisionLabels {
    const KEYS: &'static [&'static str] = &[keys::LABEL_KNATIVE_SERVICE, keys::LABEL_ROUTING_STATE];
}

/// A Revision's annotation the loop reads: `no-gc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoGc;
impl Wanted for NoGc {
    const KEYS: &'static [&'static str] = &[keys::ANNOTATION_NO_GC];
}

/// A string map decoded keeping only `K::KEYS`: the other entries are read past, never stored.
/// A boxed slice of the entries found (a key is a pointer to its constant), not a B-tree map: a
/// map of a few entries costs a whole node of about 550 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept<K> {
    values: Box<[(&'static str, Box<str>)]>,
    keys: PhantomData<K>,
}

impl<K> Default for Kept<K> {
    fn default() -> Self {
        Self {
            values: Box::default(),
            keys: PhantomData,
        }
    }
}

impl<K: Wanted> Kept<K> {
    /// The value of `key`, if kept.
    pub fn get(&self, key: &str) -> Option<&str> {
        let (_, value) = self.values.iter().find(|(k, _)| *k == key)?;
        Some(value)
    }

    /// The value of `key` (one of `K::KEYS`), taken out.
    pub(super) fn take(&mut self, key: &str) -> Option<String> {
        let at = self.values.iter().position(|(k, _)| *k == key)?;
        let mut values = std::mem::take(&mut self.values).into_vec();
        let (_, value) = values.swap_remove(at);
        self.values = values.into_boxed_slice();
        Some(value.into())
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
                let mut values = Vec::new();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if let Some(wanted) = K::KEYS.iter().find(|k| **k == key) {
                        values.push((*wanted, map.next_value()?));
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Kept {
                    values: values.into_boxed_slice(),
                    keys: PhantomData,
                })
            }
        }
        d.deserialize_any(Visit(PhantomData))
    }
}
