//! Typed, read-only views of the Knative objects the watch loop caches: `Service` and `Revision`.
//!
//! Knative's types are not in k8s-openapi, so these are serde structs of the fields the loop reads
//! that tolerate every unknown field (`#[serde(default)]`, no `deny_unknown_fields`). They are
//! what the watch stores hold, trimmed as they are decoded: `managedFields` and kubectl's
//! last-applied annotation go from both (together about 60 % of a KService as kubectl and the
//! platform write it, and nothing reads them). A Revision keeps only its name, uid,
//! resourceVersion, owner label, `no-gc` annotation and status. A Service keeps the metadata,
//! labels and annotations the loop and the status API read, and its [`Stored`] text (the whole
//! object but its status and resourceVersion) for the drift report while it is fresh from the
//! API server: the store keeps only the text's digest. So a Service is cached at a few hundred
//! bytes plus its status, whatever its spec. They are not kube `Resource`s: the watchers and the
//! API client decode them inside a [`super::watched::Watched`], which adds the `ObjectMeta` kube
//! reads, and the stores keep the view alone.
//! They are never written back: every write fetches the raw object fresh and edits its JSON, so
//! fields unknown to these views survive (a view serialised over the object would drop them).
//! Must never do I/O.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::trim::{self, Kept, ServiceAnnotations, ServiceLabels, TemplateAnnotations};
use crate::admission::ksvc;
use crate::keys;

/// The API group of Knative Serving.
pub const GROUP: &str = "serving.knative.dev";
/// The served version of Knative Serving.
pub const VERSION: &str = "v1";

/// An object's metadata as the cache holds it: what the loop reads, and not kube's `ObjectMeta`
/// (about 350 bytes inline, nearly all of it options the views never fill). The watchers decode
/// a view inside a [`super::watched::Watched`], which carries the `ObjectMeta` kube-runtime
/// reads (the resourceVersion) until the store takes the view out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// Shared with the store's key and the app's status record ([`super::hub::AppKey`]).
    pub name: Arc<str>,
    pub namespace: Arc<str>,
    pub uid: Option<Box<str>>,
    pub resource_version: Option<Box<str>>,
}

impl Metadata {
    /// Name, namespace, uid and resourceVersion, taken out of the decoded metadata.
    fn take_from<L: trim::Wanted, A: trim::Wanted>(m: &mut trim::Meta<L, A>) -> Self {
        let boxed = |s: Option<String>| s.map(String::into_boxed_str);
        let shared = |s: Option<String>| s.map_or_else(|| Arc::from(""), Arc::from);
        Self {
            name: shared(m.name.take()),
            namespace: shared(m.namespace.take()),
            uid: boxed(m.uid.take()),
            resource_version: boxed(m.resource_version.take()),
        }
    }
}

/// One entry of a status `conditions[]` list (Knative's `apis.Condition`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: Box<str>,
    /// `"True"`, `"False"` or `"Unknown"`.
    pub status: Box<str>,
    pub reason: Box<str>,
    pub message: Box<str>,
    pub last_transition_time: Box<str>,
}

/// One `status.traffic[]` entry of a Service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TrafficTarget {
    pub revision_name: Box<str>,
    pub percent: Option<i64>,
    pub tag: Box<str>,
}

/// The parts of a Service's `status` the loop reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServiceStatus {
    pub observed_generation: Option<i64>,
    /// Only those the status mapping reads; only `Ready` with its transition time.
    pub conditions: Vec<Condition>,
    pub latest_created_revision_name: Box<str>,
    pub latest_ready_revision_name: Box<str>,
    pub url: Box<str>,
    pub traffic: Vec<TrafficTarget>,
}

/// The template metadata of a Service (`spec.template.metadata`): the annotations the loop reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TemplateMeta {
    #[serde(skip_serializing)]
    pub annotations: Kept<TemplateAnnotations>,
}

/// The template of a Service (`spec.template`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Template {
    pub metadata: TemplateMeta,
}

/// The parts of a Service's `spec` the loop reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServiceSpec {
    pub template: Template,
}

/// A Knative `Service` (`serving.knative.dev/v1`), as cached: the fields the loop reads, and
/// the object as admission reads it, for the drift report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct KService {
    /// Name, namespace, uid and resourceVersion; no labels or annotations (the fields below
    /// hold the ones the loop reads).
    pub metadata: Metadata,
    /// `metadata.generation`.
    #[serde(skip)]
    pub generation: Option<i64>,
    /// `metadata.deletionTimestamp` is set: the Service is being deleted.
    #[serde(skip)]
    pub deleting: bool,
    /// `metadata.creationTimestamp`, in seconds since the epoch (`app list`'s AGE).
    #[serde(skip)]
    pub created: Option<i64>,
    /// The labels the loop and the status API read ([`trim::ServiceLabels`]).
    #[serde(skip)]
    pub labels: Kept<ServiceLabels>,
    /// The annotations the loop reads ([`trim::ServiceAnnotations`]).
    #[serde(skip)]
    pub annotations: Kept<ServiceAnnotations>,
    pub spec: ServiceSpec,
    pub status: ServiceStatus,
    #[serde(skip)]
    pub stored: Stored,
}

impl<'de> Deserialize<'de> for KService {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Default, Deserialize)]
        #[serde(default)]
        struct Fields {
            metadata: trim::Meta<ServiceLabels, ServiceAnnotations>,
            spec: ServiceSpec,
            status: ServiceStatus,
        }
        let mut value = serde_json::Value::deserialize(d)?;
        trim::drop_unread(&mut value);
        let mut fields = Fields::deserialize(&value).map_err(serde::de::Error::custom)?;
        let conditions = &mut fields.status.conditions;
        trim_conditions(conditions, trim::SERVICE_CONDITIONS, Some("Ready"));
        let mut m = fields.metadata;
        Ok(Self {
            generation: m.generation,
            deleting: m.deletion_timestamp.is_some(),
            created: m.creation_timestamp.as_ref().map(|t| t.0.as_second()),
            metadata: Metadata::take_from(&mut m),
            labels: m.labels,
            annotations: m.annotations,
            spec: fields.spec,
            status: fields.status,
            stored: Stored::of(value),
        })
    }
}

/// A stored Service as admission reads it: the digest of its JSON text without what admission
/// never reads and what changes while the object's spec and metadata do not (`status`,
/// `managedFields`, `resourceVersion`, kubectl's last-applied configuration), so two equal
/// digests mean an unchanged object; and the text itself while the object is fresh from the API
/// server. The store keeps the digest only ([`Stored::without_text`]): the drift report reads the
/// text of each object as it arrives from a watch or a list, and asks for a list again when it
/// needs the texts of objects it no longer holds (a new policy).
#[derive(Debug, Clone)]
pub struct Stored {
    digest: u64,
    text: Option<Arc<str>>,
}

impl Default for Stored {
    fn default() -> Self {
        Self::of_text(Arc::from("{}"))
    }
}

/// Two stored objects are the same object when their digests are.
impl PartialEq for Stored {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
    }
}

impl Eq for Stored {}

impl Stored {
    fn of(mut value: serde_json::Value) -> Self {
        if let Some(object) = value.as_object_mut() {
            object.remove("status");
        }
        // `managedFields` and the last-applied annotation are gone already (`trim::drop_unread`).
        if let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.remove("resourceVersion");
        }
        Self::of_text(Arc::from(value.to_string()))
    }

    fn of_text(text: Arc<str>) -> Self {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut hasher);
        Self {
            digest: hasher.finish(),
            text: Some(text),
        }
    }

    /// The JSON text, while it is held: an object decoded from the API server has it, the
    /// store's copy does not.
    pub fn text(&self) -> Option<&str> {
        self.text.as_deref()
    }

    /// A 64-bit digest of the text, to tell a changed text from an unchanged one without
    /// keeping a copy. Held in memory only, never persisted (std's hasher may change between
    /// releases).
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// The digest alone, as the store keeps it.
    pub fn without_text(&self) -> Self {
        Self {
            digest: self.digest,
            text: None,
        }
    }
}

/// The parts of a Revision's `status` the loop reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RevisionStatus {
    /// Only those the status mapping reads, without their transition times.
    #[serde(deserialize_with = "read_conditions")]
    pub conditions: Vec<Condition>,
    pub actual_replicas: Option<i32>,
    pub desired_replicas: Option<i32>,
}

fn read_conditions<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Condition>, D::Error> {
    let mut conditions = Vec::<Condition>::deserialize(d)?;
    trim_conditions(&mut conditions, trim::REVISION_CONDITIONS, None);
    Ok(conditions)
}

/// A Knative `Revision` (`serving.knative.dev/v1`), as cached: name, namespace, uid,
/// resourceVersion (the preconditions of its delete), its owner and routing-state labels and
/// `no-gc` annotation (as fields, not as maps: a map of one entry costs a whole B-tree node,
/// about 550 bytes), and its status. Everything else is skipped while decoding, never held.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Revision {
    /// Name, namespace, uid and resourceVersion.
    pub metadata: Metadata,
    /// The owning Service's name (label `serving.knative.dev/service`).
    #[serde(skip)]
    pub owner: Option<Arc<str>>,
    /// Annotated `serving.knative.dev/no-gc: "true"`.
    #[serde(skip)]
    pub no_gc: bool,
    /// Labelled `serving.knative.dev/routingState: active`: Knative still routes to it (the
    /// label can lag `status.traffic`; the revision guard refuses its delete meanwhile).
    #[serde(skip)]
    pub routed: bool,
    pub status: RevisionStatus,
}

impl<'de> Deserialize<'de> for Revision {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Unknown fields (managedFields, annotations' values, the spec) are skipped by serde
        // without being built.
        #[derive(Default, Deserialize)]
        #[serde(default)]
        struct Fields {
            metadata: trim::Meta<trim::RevisionLabels, trim::NoGc>,
            status: RevisionStatus,
        }
        let Fields {
            metadata: mut m,
            status,
        } = Fields::deserialize(d)?;
        let routing = m.labels.take(keys::LABEL_ROUTING_STATE);
        Ok(Self {
            metadata: Metadata::take_from(&mut m),
            owner: m.labels.take(keys::LABEL_KNATIVE_SERVICE).map(Arc::from),
            no_gc: m.annotations.take(keys::ANNOTATION_NO_GC).as_deref() == Some("true"),
            routed: routing.as_deref() == Some(keys::ROUTING_STATE_ACTIVE),
            status,
        })
    }
}

/// Keep only the conditions the status mapping reads: those of the `read` types, and any with
/// a reason or a message (failure substates are read from every condition's, in order); and
/// the `lastTransitionTime` only of the `timed` one (the Service's `Ready`).
fn trim_conditions(conditions: &mut Vec<Condition>, read: &[&str], timed: Option<&str>) {
    conditions
        .retain(|c| read.contains(&&*c.type_) || !c.reason.is_empty() || !c.message.is_empty());
    conditions.shrink_to_fit();
    for condition in conditions {
        if Some(&*condition.type_) != timed {
            condition.last_transition_time = Box::default();
        }
    }
}

/// Find a condition by type.
pub fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| &*c.type_ == type_)
}

impl KService {
    /// `metadata.name`, or `""`.
    pub fn name(&self) -> &str {
        &self.metadata.name
    }
    /// `metadata.namespace`, or `""`.
    pub fn namespace(&self) -> &str {
        &self.metadata.namespace
    }
    /// A label's value, if the loop reads it ([`trim::ServiceLabels`]).
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key)
    }
    /// An annotation's value, if the loop reads it ([`trim::ServiceAnnotations`]).
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key)
    }
    /// A template annotation's value (`spec.template.metadata.annotations`), if the loop
    /// reads it ([`trim::TemplateAnnotations`]).
    pub fn template_annotation(&self, key: &str) -> Option<&str> {
        self.spec.template.metadata.annotations.get(key)
    }
    /// The app is desired stopped ([`ksvc::is_stopped`]).
    pub fn is_stopped(&self) -> bool {
        ksvc::is_stopped(|key| self.label(key))
    }
    /// The app is one of ours ([`ksvc::is_managed`]): the `flyte.org/app-managed` label, or for
    /// apps without it the old annotation, the identity or the stop label.
    pub fn is_managed(&self) -> bool {
        ksvc::is_managed(|key| self.label(key), |key| self.annotation(key))
    }
    /// Knative has observed the current spec (`status.observedGeneration == metadata.generation`).
    pub fn generation_observed(&self) -> bool {
        match (self.generation, self.status.observed_generation) {
            (Some(g), Some(o)) => o >= g,
            // No generation at all (some fakes, very old servers): nothing to wait for.
            (None, _) => true,
            (Some(_), None) => false,
        }
    }
    /// Whether `status.traffic` names this revision.
    pub fn routes_to(&self, revision: &str) -> bool {
        self.status
            .traffic
            .iter()
            .any(|t| *t.revision_name == *revision)
    }
}

impl Revision {
    /// `metadata.name`, or `""`.
    pub fn name(&self) -> &str {
        &self.metadata.name
    }
    /// `metadata.namespace`, or `""`.
    pub fn namespace(&self) -> &str {
        &self.metadata.namespace
    }
    /// The owning Service's name (label `serving.knative.dev/service`).
    pub fn service(&self) -> Option<&str> {
        self.owner.as_deref()
    }
    /// Annotated `serving.knative.dev/no-gc: "true"`.
    pub fn is_no_gc(&self) -> bool {
        self.no_gc
    }
    /// Labelled as routed to by Knative (`serving.knative.dev/routingState: active`).
    pub fn is_routed(&self) -> bool {
        self.routed
    }
    /// Still holds (or is about to hold) pods: replicas above zero, or `Active=True`.
    pub fn has_pods(&self) -> bool {
        self.status.actual_replicas.unwrap_or(0) > 0
            || self.status.desired_replicas.unwrap_or(0) > 0
            || condition(&self.status.conditions, "Active").is_some_and(|c| &*c.status == "True")
    }
}

#[cfg(test)]
#[path = "view_tests.rs"]
mod tests;
