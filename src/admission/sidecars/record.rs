//! PURE: the `sidecar.flyte.org/status` record of what the webhook injected (like Istio's
//! `sidecar.istio.io/status`): per template its name, hash, container and volume names, and the
//! serving port's handover. Read from a KService here; written by `inject.rs`.

use serde::{Deserialize, Serialize};

use super::Template;
use super::handover::Handover;
use crate::admission::ksvc;
use crate::json::Node;
use crate::keys;

/// One template as injected.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Injected {
    /// The template's name in the catalogue.
    pub name: String,
    /// The template's hash when it was injected; a different hash means it changed since.
    pub hash: String,
    /// The names of the containers it added.
    #[serde(default)]
    pub containers: Vec<String>,
    /// The names of the volumes it added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    /// For a template with placeholders, the digest of the values it was filled with.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub params: String,
}

impl Injected {
    pub(super) fn of(t: &Template, digest: &str) -> Self {
        Self {
            name: t.name.clone(),
            hash: t.hash.clone(),
            containers: t.container_names.clone(),
            volumes: t.volume_names.clone(),
            params: if t.parameterised() {
                digest.to_string()
            } else {
                String::new()
            },
        }
    }
}

/// The `sidecar.flyte.org/status` annotation: every template injected, in order, and the
/// serving port's handover to a fronting template.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// In injection order.
    #[serde(default)]
    pub templates: Vec<Injected>,
    /// Which container holds the serving port, and the user's port as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover: Option<Handover>,
}

impl Status {
    /// The record on `doc`: empty when absent, `Err` when it cannot be read.
    pub fn read(doc: &Node) -> Result<Self, serde_json::Error> {
        match ksvc::entry(doc, ksvc::ANNOTATIONS, keys::ANNOTATION_SIDECAR_STATUS) {
            Some(text) => serde_json::from_str(text),
            None => Ok(Self::default()),
        }
    }
}
