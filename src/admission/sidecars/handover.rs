//! PURE: handing a KService's serving port over to a fronting sidecar, and back.
//!
//! Knative's queue-proxy sends every request to the port of the one container that declares
//! `ports`. A fronting template (an auth proxy, a WAF) gets onto the request path by taking that
//! declaration over: its container declares the port (at `fronts.port`, under the user's port
//! name, so `h2c` stays `h2c`); the user's container declares none and gets `PORT` set to where
//! the app listens (Knative sets `PORT` in the serving container only); and the user's probes
//! that left their port to Knative name it outright, as Knative requires of a sidecar's probes.
//! What changed is recorded as a [`Handover`] in `sidecar.flyte.org/status`, so [`undo`] gives
//! every byte back. This module edits only the user's serving container; whether a KService can
//! be fronted is `fronting.rs`'s to say, and the fronting container's port is written by
//! `inject.rs` when it fills the template in.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::admission::ksvc;
use crate::json::Node;
use crate::json::edit::Editor;

/// A container's probes.
pub(super) const PROBES: [&str; 3] = ["livenessProbe", "readinessProbe", "startupProbe"];
/// The variable Knative sets to the serving port, in the serving container only.
pub(super) const PORT_ENV: &str = "PORT";

/// What the cluster's Knative allows that fronting depends on (its `config-features`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Knative {
    /// `multi-container-probing: enabled`: containers without the port may have probes, each
    /// naming its port. Off (Knative's default), a sidecar's probes are refused.
    pub multi_container_probing: bool,
}

/// Where a fronting template listens instead of the app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fronts {
    /// The port its container listens on: the revision's serving port once injected.
    pub port: i32,
    /// The container of the template that listens on it.
    pub container: String,
}

/// A handover as recorded in `sidecar.flyte.org/status`: who holds the serving port now, and
/// everything needed to give it back exactly as it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Handover {
    /// The fronting template.
    pub template: String,
    /// The container that declares the serving port now.
    pub container: String,
    /// The port it listens on.
    pub port: i32,
    /// The user's container that declared it.
    pub from: String,
    /// The user's `ports`, exactly as written; absent when the container declared none (then
    /// Knative's default, 8080, was the app's port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Value>,
    /// Where the app listens: `{{ .AppPort }}`, and the `PORT` set in the user's container.
    pub app_port: i32,
    /// The user's probes now naming the app's port, each with the port it had.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<ProbePort>,
}

/// One probe handler given the app's port by a handover.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbePort {
    /// `livenessProbe`, `readinessProbe` or `startupProbe`.
    pub probe: String,
    /// `httpGet` or `tcpSocket`.
    pub handler: String,
    /// The port as written (`null` too); absent when it was unset.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub port: Option<Value>,
}

/// A member that is present is `Some`, even when it is `null` (serde's `Option` would say
/// `None`), so a `port: null` is given back as written.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl Handover {
    /// The fronting container's `ports`: its port under the user's port name and protocol, so
    /// Knative speaks to it as it spoke to the app.
    pub(super) fn serving_ports<'a>(&self) -> Node<'a> {
        let mut port = crate::json::Map::new();
        let first = self.ports.as_ref().and_then(|p| p.get(0));
        for key in ["name", "protocol"] {
            if let Some(v) = first.and_then(|p| p.get(key)) {
                port.insert(key, Node::from_json(v.clone()));
            }
        }
        port.insert("containerPort", Node::Number(self.port.into()));
        Node::Array(vec![Node::Object(port)])
    }
}

/// Whether a container declares a port (an empty list declares none, as for Knative).
pub(super) fn declares_port(c: &Node) -> bool {
    c.get("ports")
        .and_then(Node::as_array)
        .is_some_and(|p| !p.is_empty())
}

/// Put `edit`'s port back into `probe` if it still holds the one the handover set.
pub(super) fn restore_port(probe: &mut Value, edit: &ProbePort, app_port: i32) -> bool {
    let Some(handler) = probe
        .get_mut(edit.handler.as_str())
        .and_then(Value::as_object_mut)
    else {
        return false;
    };
    if handler.get("port") != Some(&json!(app_port)) {
        return false;
    }
    match &edit.port {
        Some(port) => handler.insert("port".into(), port.clone()),
        None => handler.remove("port"),
    };
    true
}

/// The `PORT` entries of a container's env: index and value. Entries the parser kept raw are
/// read only when their text holds the name.
pub(super) fn env_ports(container: &Node) -> Vec<(usize, String)> {
    let entries = container.get("env").and_then(Node::as_array);
    entries
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, entry)| {
            if let Node::Raw { text, .. } = entry
                && super::params::find(text, PORT_ENV).is_none()
            {
                return None;
            }
            let parsed;
            let entry = match entry {
                Node::Raw { .. } => {
                    parsed = Node::from_json(entry.to_json());
                    &parsed
                }
                entry => entry,
            };
            (entry.get("name").and_then(Node::as_str) == Some(PORT_ENV)).then(|| {
                let value = entry.get("value").and_then(Node::as_str);
                (i, value.unwrap_or_default().to_string())
            })
        })
        .collect()
}

/// Hand the port over in the user's container as `h` says; edits only what is not so already.
pub(super) fn apply(ed: &mut Editor, h: &Handover) {
    let Some(index) = ksvc::position(ed.doc(), ksvc::CONTAINERS, &h.from) else {
        return;
    };
    let idx = index.to_string();
    let path = [ksvc::CONTAINERS, &[idx.as_str()]].concat();
    let container = &ksvc::containers(ed.doc())[index];
    let declares = declares_port(container);
    let value = h.app_port.to_string();
    let has_env = env_ports(container).iter().any(|(_, v)| *v == value);
    let probes = edited_probes(container, h, |probe, edit| {
        match probe
            .get_mut(edit.handler.as_str())
            .and_then(Value::as_object_mut)
        {
            Some(handler) if handler.get("port") != Some(&json!(h.app_port)) => {
                handler.insert("port".into(), json!(h.app_port));
                true
            }
            _ => false,
        }
    });
    if declares {
        ed.remove(&[path.as_slice(), &["ports"]].concat());
    }
    if !has_env {
        ed.push(
            &[path.as_slice(), &["env"]].concat(),
            Node::from_json(json!({"name": PORT_ENV, "value": value})),
        );
    }
    for (field, probe) in probes {
        ed.set(
            &[path.as_slice(), &[field]].concat(),
            Node::from_json(probe),
        );
    }
}

/// Give the port back to the user's container as `h` recorded it: `ports` as written (unless
/// the user declared them again), no `PORT` of the webhook's, the probes' ports as written.
pub(super) fn undo(ed: &mut Editor, h: &Handover) {
    let Some(index) = ksvc::position(ed.doc(), ksvc::CONTAINERS, &h.from) else {
        return;
    };
    let idx = index.to_string();
    let path = [ksvc::CONTAINERS, &[idx.as_str()]].concat();
    let container = &ksvc::containers(ed.doc())[index];
    let declares = declares_port(container);
    let value = h.app_port.to_string();
    let ours: Vec<usize> = env_ports(container)
        .into_iter()
        .filter(|(_, v)| *v == value)
        .map(|(i, _)| i)
        .collect();
    let probes = edited_probes(container, h, |probe, edit| {
        restore_port(probe, edit, h.app_port)
    });
    if let (false, Some(ports)) = (declares, &h.ports) {
        ed.set(
            &[path.as_slice(), &["ports"]].concat(),
            Node::from_json(ports.clone()),
        );
    }
    let env = [path.as_slice(), &["env"]].concat();
    for i in ours.iter().rev() {
        let at = i.to_string();
        ed.remove(&[env.as_slice(), &[at.as_str()]].concat());
    }
    if !ours.is_empty()
        && ksvc::get(ed.doc(), &env)
            .and_then(Node::as_array)
            .is_some_and(Vec::is_empty)
    {
        ed.remove(&env);
    }
    for (field, probe) in probes {
        ed.set(
            &[path.as_slice(), &[field]].concat(),
            Node::from_json(probe),
        );
    }
}

/// The container's probes that `edit` changes, each edited whole (the parser may have kept a
/// probe as raw text, which cannot be edited in place).
fn edited_probes(
    container: &Node,
    h: &Handover,
    edit: impl Fn(&mut Value, &ProbePort) -> bool,
) -> Vec<(&'static str, Value)> {
    PROBES
        .iter()
        .filter_map(|field| {
            let mut probe = container.get(field)?.to_json();
            let mut changed = false;
            for e in h.probes.iter().filter(|e| e.probe == *field) {
                changed |= edit(&mut probe, e);
            }
            changed.then_some((*field, probe))
        })
        .collect()
}

/// The index of the app's own container: the one `handover` (the handover admission converged
/// on, if any) took the serving port from, else Knative's serving container (the one that
/// declares a port, else the first).
pub fn app_container(doc: &Node, handover: Option<&Handover>) -> Option<usize> {
    handover
        .and_then(|h| ksvc::position(doc, ksvc::CONTAINERS, &h.from))
        .or_else(|| ksvc::serving_container(ksvc::containers(doc)))
}
