//! PURE: a sidecar catalogue as written, what can be wrong with it ([`Problem`]), and its
//! load-time checks — Knative's multi-container rules.
//!
//! A template that Knative would reject once injected is refused here, when the catalogue is
//! parsed, so a bad catalogue never reaches admission. Every problem is reported with its path.
//! Containers and volumes are read through k8s-openapi's types only to check them.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, Volume};
use serde::Deserialize;
use serde_json::Value;

use super::params;
use crate::admission::naming::dns1123_problem;

/// One thing wrong with a catalogue, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where, e.g. `templates.log-shipper.containers[0].ports`.
    pub path: String,
    /// What is wrong and, where it helps, what to do instead.
    pub problem: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.problem)
    }
}

/// The catalogue file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCatalogue {
    #[serde(default)]
    pub(super) default: Vec<String>,
    #[serde(default)]
    pub(super) templates: BTreeMap<String, RawTemplate>,
}

/// One template as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTemplate {
    #[serde(default)]
    pub(super) description: Option<String>,
    #[serde(default)]
    pub(super) containers: Vec<Value>,
    #[serde(default)]
    pub(super) volumes: Vec<Value>,
    #[serde(default)]
    pub(super) fronts: Option<RawFronts>,
}

/// `fronts:` as written: the port the fronting container listens on, and which container that
/// is (needed only when the template has several).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFronts {
    pub(super) port: i64,
    #[serde(default)]
    pub(super) container: Option<String>,
}

/// Env names Knative sets itself (`PORT` only on the user container, but a sidecar has no port).
pub const RESERVED_ENV: [&str; 4] = ["PORT", "K_SERVICE", "K_CONFIGURATION", "K_REVISION"];
/// Ports Knative's queue-proxy and its metrics use.
pub const RESERVED_PORTS: [i32; 6] = [8012, 8013, 8022, 8008, 9090, 9091];
/// Mount paths Knative refuses.
const RESERVED_MOUNT_PATHS: [&str; 3] = ["/", "/dev", "/dev/log"];
/// Container fields Knative's field mask refuses.
const DISALLOWED_FIELDS: [&str; 5] = ["lifecycle", "stdin", "stdinOnce", "tty", "volumeDevices"];
/// Volume sources whose mounts may be writable in Knative.
const WRITABLE_SOURCES: [&str; 3] = ["emptyDir", "persistentVolumeClaim", "ephemeral"];

/// Every problem of the catalogue, in a stable order.
pub(super) fn check(templates: &BTreeMap<String, RawTemplate>, default: &[String]) -> Vec<Problem> {
    let mut out = Vec::new();
    for (i, name) in default.iter().enumerate() {
        if !templates.contains_key(name) {
            out.push(problem(
                format!("default[{i}]"),
                format!("names {name:?}, which is not a template of this catalogue"),
            ));
        }
    }
    let fronting: Vec<&str> = default
        .iter()
        .filter(|n| templates.get(*n).is_some_and(|t| t.fronts.is_some()))
        .map(String::as_str)
        .collect();
    if fronting.len() > 1 {
        out.push(problem(
            "default",
            format!(
                "lists the fronting templates {}; only one sidecar can hold the app's serving \
                 port, so at most one fronting template may be a default",
                quoted(&fronting)
            ),
        ));
    }
    for (name, template) in templates {
        check_template(name, template, &mut out);
    }
    unique_across(templates, &mut out);
    out
}

fn quoted(names: &[&str]) -> String {
    let names: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    names.join(" and ")
}

/// A fronting template's `fronts`: a port Knative lets the serving container declare, on one of
/// the template's own containers.
fn check_fronts(at: &str, template: &RawTemplate, out: &mut Vec<Problem>) {
    let Some(fronts) = &template.fronts else {
        return;
    };
    let port = fronts.port;
    if !(1..=65535).contains(&port) {
        out.push(problem(
            format!("{at}.fronts.port"),
            format!("{port} is not a port: use 1 to 65535"),
        ));
    } else if RESERVED_PORTS.iter().any(|r| i64::from(*r) == port) {
        out.push(problem(
            format!("{at}.fronts.port"),
            format!("{port} is a port Knative reserves for its queue-proxy; use another"),
        ));
    }
    let names: Vec<&str> = template.containers.iter().filter_map(name_of).collect();
    match (&fronts.container, names.as_slice()) {
        (Some(c), _) if !names.contains(&c.as_str()) => out.push(problem(
            format!("{at}.fronts.container"),
            format!(
                "names {c:?}, which is not a container of this template; name the container \
                 that listens on fronts.port"
            ),
        )),
        (None, [_, _, ..]) => out.push(problem(
            format!("{at}.fronts.container"),
            "is missing: the template has several containers, so say which one listens on \
             fronts.port",
        )),
        _ => {}
    }
}

fn problem(path: impl Into<String>, problem: impl Into<String>) -> Problem {
    Problem {
        path: path.into(),
        problem: problem.into(),
    }
}

fn check_template(name: &str, template: &RawTemplate, out: &mut Vec<Problem>) {
    let at = format!("templates.{name}");
    if let Some(p) = dns1123_problem(name) {
        out.push(problem(&at, format!("the template name {name:?} {p}")));
    }
    if name == crate::keys::SIDECAR_INJECT_NONE {
        out.push(problem(
            &at,
            "\"none\" is the opt-out value of the inject annotation; rename the template",
        ));
    }
    if template.containers.is_empty() {
        out.push(problem(
            format!("{at}.containers"),
            "is empty; a template injects at least one container",
        ));
    }
    let volumes: Vec<(String, &Value)> = template
        .volumes
        .iter()
        .enumerate()
        .filter_map(|(i, v)| check_volume(&format!("{at}.volumes[{i}]"), v, out).map(|n| (n, v)))
        .collect();
    let mut mounted = Vec::new();
    for (i, c) in template.containers.iter().enumerate() {
        let path = format!("{at}.containers[{i}]");
        check_container(
            &path,
            c,
            &volumes,
            &mut mounted,
            template.fronts.is_some(),
            out,
        );
    }
    for (vname, _) in &volumes {
        if !mounted.contains(vname) {
            out.push(problem(
                format!("{at}.volumes"),
                format!(
                    "volume {vname:?} is not mounted by any container of the template; \
                     Knative refuses unmounted volumes"
                ),
            ));
        }
    }
    duplicates(&at, "containers", &template.containers, out);
    duplicates(&at, "volumes", &template.volumes, out);
    check_fronts(&at, template, out);
    let fronting = template.fronts.is_some();
    for (field, items) in [
        ("containers", &template.containers),
        ("volumes", &template.volumes),
    ] {
        for (i, item) in items.iter().enumerate() {
            placeholders(&format!("{at}.{field}[{i}]"), item, fronting, out);
        }
    }
}

/// Check one volume; its name when it is a usable volume.
fn check_volume(path: &str, value: &Value, out: &mut Vec<Problem>) -> Option<String> {
    let volume: Volume = match serde_json::from_value(value.clone()) {
        Ok(v) => v,
        Err(err) => {
            out.push(problem(path, format!("is not a Kubernetes volume: {err}")));
            return None;
        }
    };
    if let Some(p) = dns1123_problem(&volume.name) {
        out.push(problem(
            format!("{path}.name"),
            format!("{:?} {p}", volume.name),
        ));
    }
    Some(volume.name)
}

fn check_container(
    path: &str,
    value: &Value,
    volumes: &[(String, &Value)],
    mounted: &mut Vec<String>,
    fronting: bool,
    out: &mut Vec<Problem>,
) {
    let c: Container = match serde_json::from_value(value.clone()) {
        Ok(c) => c,
        Err(err) => {
            out.push(problem(
                path,
                format!("is not a Kubernetes container: {err}"),
            ));
            return;
        }
    };
    if let Some(p) = dns1123_problem(&c.name) {
        out.push(problem(format!("{path}.name"), format!("{:?} {p}", c.name)));
    }
    if c.name == "queue-proxy" {
        out.push(problem(
            format!("{path}.name"),
            "\"queue-proxy\" is reserved for Knative's own sidecar",
        ));
    }
    if c.image.as_deref().is_none_or(str::is_empty) {
        out.push(problem(format!("{path}.image"), "is missing"));
    }
    for (i, port) in c.ports.iter().flatten().enumerate() {
        if RESERVED_PORTS.contains(&port.container_port) {
            out.push(problem(
                format!("{path}.ports[{i}]"),
                format!("{} is a port Knative reserves", port.container_port),
            ));
        }
    }
    if c.ports.as_ref().is_some_and(|p| !p.is_empty()) {
        out.push(problem(
            format!("{path}.ports"),
            match fronting {
                false => {
                    "sidecars declare no ports: Knative allows one port per revision, and it is \
                     the user's (a template that must receive the requests says fronts: {port: N})"
                }
                true => {
                    "a fronting template declares no ports: the webhook hands the revision's one \
                     port over to it at admission, from fronts.port"
                }
            },
        ));
    }
    let probes = [
        ("livenessProbe", c.liveness_probe.is_some()),
        ("readinessProbe", c.readiness_probe.is_some()),
        ("startupProbe", c.startup_probe.is_some()),
    ];
    for (field, set) in probes {
        if set {
            out.push(problem(
                format!("{path}.{field}"),
                "sidecars have no probes (Knative's multi-container-probing is off by default)",
            ));
        }
    }
    for (i, env) in c.env.iter().flatten().enumerate() {
        if RESERVED_ENV.contains(&env.name.as_str()) {
            out.push(problem(
                format!("{path}.env[{i}].name"),
                format!("{:?} is reserved: Knative sets it", env.name),
            ));
        }
    }
    for field in DISALLOWED_FIELDS {
        if value.get(field).is_some() {
            out.push(problem(
                format!("{path}.{field}"),
                "Knative does not allow this field",
            ));
        }
    }
    check_mounts(path, &c, volumes, mounted, out);
}

/// Mounts name a volume of the template, avoid reserved paths, and are read-only unless the
/// volume may be written.
fn check_mounts(
    path: &str,
    c: &Container,
    volumes: &[(String, &Value)],
    mounted: &mut Vec<String>,
    out: &mut Vec<Problem>,
) {
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let at = format!("{path}.volumeMounts[{i}]");
        if RESERVED_MOUNT_PATHS.contains(&m.mount_path.as_str()) {
            out.push(problem(
                format!("{at}.mountPath"),
                format!("{:?} is reserved", m.mount_path),
            ));
        }
        let Some((_, volume)) = volumes.iter().find(|(n, _)| *n == m.name) else {
            out.push(problem(
                format!("{at}.name"),
                format!(
                    "mounts {:?}, which is not a volume of this template",
                    m.name
                ),
            ));
            continue;
        };
        mounted.push(m.name.clone());
        let writable = WRITABLE_SOURCES.iter().any(|s| volume.get(*s).is_some());
        if !writable && m.read_only != Some(true) {
            out.push(problem(
                format!("{at}.readOnly"),
                format!(
                    "must be true: Knative allows writable mounts only of emptyDir, \
                     persistentVolumeClaim and ephemeral volumes, and {:?} is none of them",
                    m.name
                ),
            ));
        }
    }
}

pub(super) fn name_of(v: &Value) -> Option<&str> {
    v.get("name").and_then(Value::as_str)
}

fn duplicates(at: &str, field: &str, items: &[Value], out: &mut Vec<Problem>) {
    let names: Vec<&str> = items.iter().filter_map(name_of).collect();
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            out.push(problem(
                format!("{at}.{field}"),
                format!("name {name:?} is used twice"),
            ));
        }
    }
}

/// Bad placeholders anywhere. (A placeholder in a container or volume name is refused by the
/// DNS-1123 check: names must be known at load, for the uniqueness and clash checks.)
/// `{{ .AppPort }}` is known only to a fronting template: only it moves the app's port.
fn placeholders(at: &str, body: &Value, fronting: bool, out: &mut Vec<Problem>) {
    walk(at, body, &mut |path, s| {
        if let Some(p) = params::problem(s, fronting) {
            out.push(problem(path, p));
        }
    });
}

fn walk(path: &str, value: &Value, f: &mut impl FnMut(&str, &str)) {
    match value {
        Value::String(s) => f(path, s),
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                walk(&format!("{path}[{i}]"), v, f);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                walk(&format!("{path}.{k}"), v, f);
            }
        }
        _ => {}
    }
}

/// Templates can be combined on one KService, so names are unique across the catalogue.
fn unique_across(templates: &BTreeMap<String, RawTemplate>, out: &mut Vec<Problem>) {
    for (field, kind) in [("containers", "container"), ("volumes", "volume")] {
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for (tname, t) in templates {
            let items = match field {
                "containers" => &t.containers,
                _ => &t.volumes,
            };
            let mut own: Vec<&str> = items.iter().filter_map(name_of).collect();
            own.dedup();
            for name in own {
                match seen.get(name) {
                    Some(first) if first != tname => out.push(problem(
                        format!("templates.{tname}.{field}"),
                        format!(
                            "{kind} name {name:?} is also used by template {first:?}; \
                             templates can be combined, so names must be unique across the catalogue"
                        ),
                    )),
                    _ => {
                        seen.insert(name, tname);
                    }
                }
            }
        }
    }
}
