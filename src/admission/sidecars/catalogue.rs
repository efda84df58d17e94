//! PURE (but for [`load`]): the checked sidecar catalogue and its templates — parsing a
//! catalogue (refused, with every problem, when `checks.rs` finds any), its fingerprint, and
//! [`load`], the one function of the sidecar module that reads a file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::checks::{self, Problem, RawCatalogue};
use super::handover::Fronts;
use super::params;
use crate::admission::spec_sha::{canonical_json, json_sha};

/// A catalogue that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    #[error("sidecar catalogue is not valid YAML")]
    Yaml(#[source] Box<serde_saphyr::Error>),
    #[error("sidecar catalogue does not have the expected shape")]
    Shape(#[source] serde_json::Error),
    #[error("sidecar catalogue has {} problem(s):\n{}", .0.len(), list(.0))]
    Invalid(Vec<Problem>),
}

fn list(problems: &[Problem]) -> String {
    let lines: Vec<String> = problems.iter().map(|p| format!("- {p}")).collect();
    lines.join("\n")
}

/// A catalogue file that cannot be read or used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read sidecar catalogue {}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("sidecar catalogue {} is not UTF-8 text", .path.display())]
    NotUtf8 { path: PathBuf },
    #[error("cannot use sidecar catalogue {}", .path.display())]
    Invalid {
        path: PathBuf,
        #[source]
        source: CatalogueError,
    },
}

pub type Result<T, E = CatalogueError> = std::result::Result<T, E>;

/// One named template, checked and ready to inject.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// The name the `sidecar.flyte.org/inject` annotation selects it by.
    pub name: String,
    /// Free text for people; neither injected nor hashed.
    pub description: Option<String>,
    /// The containers, as written (parameters not yet filled).
    pub containers: Vec<Value>,
    /// The volumes the containers mount, as written.
    pub volumes: Vec<Value>,
    /// For a fronting template, the port its container listens on instead of the app.
    pub fronts: Option<Fronts>,
    /// 16 hex characters of SHA-256 over the canonical JSON of `{containers, volumes}` (and
    /// `fronts` when the template fronts the app).
    pub hash: String,
    /// The container names, in order.
    pub container_names: Vec<String>,
    /// The volume names, in order.
    pub volume_names: Vec<String>,
    /// The containers ready to fill in and inject (parallel to `containers`).
    pub(super) container_items: Vec<params::Item>,
    /// The volumes ready to fill in and inject (parallel to `volumes`).
    pub(super) volume_items: Vec<params::Item>,
}

impl Template {
    /// Whether any string holds a `{{ .Param }}` placeholder.
    pub fn parameterised(&self) -> bool {
        self.container_items
            .iter()
            .chain(&self.volume_items)
            .any(params::Item::parameterised)
    }
}

/// A checked sidecar catalogue. The empty catalogue (the default) injects nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalogue {
    templates: BTreeMap<String, Template>,
    default: Vec<String>,
    fingerprint: String,
    /// Why the catalogue file could not be loaded at start-up, when it could not: admission
    /// then fails closed for every KService that may get a sidecar.
    unavailable: Option<String>,
}

impl Catalogue {
    /// Parse and check a catalogue; every problem is listed, each with its path. An empty
    /// document is the empty catalogue.
    pub fn parse(text: &str) -> Result<Self> {
        let doc: Value =
            serde_saphyr::from_str_with_options(text, crate::manifest_text::yaml_options())
                .map_err(|e| CatalogueError::Yaml(Box::new(e)))?;
        let fingerprint = fingerprint_of(&doc);
        let raw: RawCatalogue = match doc {
            Value::Null => RawCatalogue::default(),
            doc => serde_json::from_value(doc).map_err(CatalogueError::Shape)?,
        };
        let problems = checks::check(&raw.templates, &raw.default);
        if !problems.is_empty() {
            return Err(CatalogueError::Invalid(problems));
        }
        let templates = raw
            .templates
            .into_iter()
            .map(|(name, t)| {
                let fronts = t.fronts.as_ref().map(|f| Fronts {
                    // Checked in range by `checks::check`.
                    port: i32::try_from(f.port).unwrap_or_default(),
                    container: f.container.clone().unwrap_or_else(|| {
                        checks::name_of(t.containers.first().unwrap_or(&Value::Null))
                            .unwrap_or_default()
                            .to_string()
                    }),
                });
                let mut template = build(&name, t.containers, t.volumes, fronts);
                template.description = t.description;
                (name, template)
            })
            .collect();
        let mut default: Vec<String> = Vec::new();
        for name in raw.default {
            if !default.contains(&name) {
                default.push(name);
            }
        }
        Ok(Self {
            templates,
            default,
            fingerprint,
            unavailable: None,
        })
    }

    /// The stand-in for a catalogue file that could not be loaded (`reason` says why): it
    /// injects nothing and makes admission refuse every KService that does not opt out of
    /// sidecars, since one of them may be an auth proxy that must not be left out.
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self {
            unavailable: Some(reason.into()),
            ..Self::default()
        }
    }

    /// Why the catalogue could not be loaded, if it could not.
    pub fn unavailable_reason(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// SHA-256 (hex) of the canonical JSON of the parsed document: equal for catalogues that
    /// differ only in comments, key order or formatting. A poller compares it to tell a change.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The template called `name`.
    pub fn get(&self, name: &str) -> Option<&Template> {
        self.templates.get(name)
    }

    /// Every template name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.templates.keys().map(String::as_str)
    }

    /// The templates every KService gets unless it opts out, in the catalogue's order.
    pub fn default_names(&self) -> &[String] {
        &self.default
    }

    /// Whether the catalogue holds no template.
    pub fn is_empty(&self) -> bool {
        self.templates.is_empty()
    }
}

/// `values` (a template's containers or volumes) ready to inject, each named by its path.
fn items(template: &str, list: &str, values: &[Value]) -> Vec<params::Item> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| params::Item::new(v, &format!("templates.{template}.{list}[{i}]")))
        .collect()
}

fn build(
    name: &str,
    containers: Vec<Value>,
    volumes: Vec<Value>,
    fronts: Option<Fronts>,
) -> Template {
    let name_of = |v: &Value| {
        v.get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let mut body = json!({"containers": containers, "volumes": volumes});
    if let Some(f) = &fronts {
        body["fronts"] = json!({"port": f.port, "container": f.container});
    }
    Template {
        name: name.to_string(),
        description: None,
        fronts,
        hash: json_sha(&body),
        container_names: containers.iter().map(name_of).collect(),
        volume_names: volumes.iter().map(name_of).collect(),
        container_items: items(name, "containers", &containers),
        volume_items: items(name, "volumes", &volumes),
        containers,
        volumes,
    }
}

fn fingerprint_of(doc: &Value) -> String {
    hex::encode(Sha256::digest(canonical_json(doc).as_bytes()))
}

/// SHA-256 (hex) of raw file bytes: lets a poller skip parsing when the bytes did not change.
pub fn content_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Read and parse the catalogue file at `path` (the only I/O of this module).
pub fn load(path: &Path) -> Result<Catalogue, LoadError> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|_| LoadError::NotUtf8 {
        path: path.to_path_buf(),
    })?;
    Catalogue::parse(&text).map_err(|source| LoadError::Invalid {
        path: path.to_path_buf(),
        source,
    })
}
