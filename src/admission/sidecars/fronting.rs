//! PURE: whether a KService can be fronted safely, and the handover it needs.
//!
//! Reads the user's serving container as the user wrote it (a previous handover undone on
//! paper, from its record) and checks it against Knative's rules as they will stand once a
//! fronting sidecar holds the serving port: one port, `PORT` left to the webhook, the app not
//! on the proxy's port, and probes only where the cluster's multi-container probing allows
//! them. It answers with a [`Handover`] or with every reason it cannot be one; it never edits.

use serde_json::Value;

use super::Template;
use super::handover::{
    Fronts, Handover, Knative, PORT_ENV, PROBES, ProbePort, declares_port, env_ports, restore_port,
};
use super::kind::Kind;
use super::record::Status;
use crate::admission::ksvc;
use crate::admission::violation::{Violation, violation};
use crate::json::Node;
use crate::keys;

/// The port Knative gives the app when its container declares none.
pub const KNATIVE_DEFAULT_PORT: i32 = 8080;
/// The probe handlers whose port the serving container may leave to Knative.
const PORT_HANDLERS: [&str; 2] = ["httpGet", "tcpSocket"];

/// The user's serving container as the user wrote it, a previous handover undone on paper.
#[derive(Debug, Clone)]
pub(super) struct UserView {
    index: usize,
    name: String,
    ports: Option<Value>,
    app_port: i32,
    port_name: String,
    /// Each probe the container has, as written.
    probes: Vec<(&'static str, Value)>,
    /// Whether the user set `PORT` in it.
    sets_port: bool,
}

fn at(index: usize) -> String {
    format!("spec.template.spec.containers[{index}]")
}

/// The user's serving container and its port as written: the one of the user's containers that
/// declares `ports`, else the one a previous handover took them from, else the only one.
pub(super) fn user_view(doc: &Node, previous: &Status) -> Result<UserView, Violation> {
    let user: Vec<(usize, &Node)> = ksvc::containers(doc)
        .iter()
        .enumerate()
        .filter(|(_, c)| !Kind::Container.listed(previous, ksvc::container_name(c)))
        .collect();
    let declaring: Vec<&(usize, &Node)> = user.iter().filter(|(_, c)| declares_port(c)).collect();
    let prev = previous.handover.as_ref();
    let handed = prev.and_then(|h| user.iter().find(|(_, c)| ksvc::container_name(c) == h.from));
    let (index, container, ports) = match (declaring.as_slice(), handed, user.as_slice()) {
        ([(i, c)], _, _) => (*i, *c, c.get("ports").map(Node::to_json)),
        ([], Some((i, c)), _) => (*i, *c, prev.and_then(|h| h.ports.clone())),
        ([], None, [(i, c)]) => (*i, *c, None),
        ([], None, _) => {
            return Err(violation(
                "sidecar-fronting-port",
                "spec.template.spec.containers",
                "declares no port, so it is not clear which of your containers serves",
                "add ports: [{containerPort: 8080}] (your app's port) to your serving container",
            ));
        }
        (many, _, _) => {
            let names: Vec<String> = many.iter().map(|(i, _)| at(*i)).collect();
            return Err(violation(
                "sidecar-fronting-port",
                format!("{}.ports", names.join(", ")),
                "more than one of your containers declares ports; Knative allows one",
                "declare the port in your serving container only",
            ));
        }
    };
    let (app_port, port_name) = port_of(index, ports.as_ref())?;
    let name = ksvc::container_name(container).to_string();
    let prev = prev.filter(|h| h.from == name);
    let probes = PROBES
        .iter()
        .filter_map(|field| {
            let probe = container.get(field).filter(|p| !p.is_null())?;
            Some((*field, as_written(field, probe.to_json(), prev)))
        })
        .collect();
    let ours = prev.map(|h| h.app_port.to_string());
    let sets_port = env_ports(container)
        .iter()
        .any(|(_, value)| ours.as_deref() != Some(value.as_str()));
    Ok(UserView {
        index,
        name,
        ports,
        app_port,
        port_name,
        probes,
        sets_port,
    })
}

/// The app's port and port name from `ports` as written (Knative's defaults without one).
fn port_of(index: usize, ports: Option<&Value>) -> Result<(i32, String), Violation> {
    let Some(ports) = ports else {
        return Ok((KNATIVE_DEFAULT_PORT, String::new()));
    };
    let list = ports.as_array().map_or(&[][..], Vec::as_slice);
    let number = |p: &Value| {
        p.get("containerPort")
            .and_then(Value::as_i64)
            .and_then(|n| i32::try_from(n).ok())
            .filter(|n| (1..=65535).contains(n))
    };
    match list {
        [port] if number(port).is_some() => Ok((
            number(port).unwrap_or(KNATIVE_DEFAULT_PORT),
            port.get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        )),
        _ => Err(violation(
            "sidecar-fronting-port",
            format!("{}.ports", at(index)),
            "is not one port with a containerPort from 1 to 65535, so it cannot be handed over \
             to a fronting sidecar",
            "declare exactly one port, e.g. ports: [{containerPort: 8080}]",
        )),
    }
}

/// `probe` with the ports a previous handover set put back as the user wrote them.
fn as_written(field: &str, mut probe: Value, prev: Option<&Handover>) -> Value {
    if let Some(h) = prev {
        for edit in h.probes.iter().filter(|e| e.probe == field) {
            restore_port(&mut probe, edit, h.app_port);
        }
    }
    probe
}

/// The handover `t` needs from the user's container, or why the KService cannot be fronted
/// safely (each reason in `out`).
pub(super) fn wanted(
    t: &Template,
    fronts: &Fronts,
    view: &UserView,
    knative: Knative,
    out: &mut Vec<Violation>,
) -> Option<Handover> {
    let before = out.len();
    let leave_out = format!(
        "or leave {:?} out of {}",
        t.name,
        keys::ANNOTATION_SIDECAR_INJECT
    );
    if !knative.multi_container_probing {
        for (field, _) in &view.probes {
            out.push(violation(
                "sidecar-fronting-probe",
                format!("{}.{field}", at(view.index)),
                format!(
                    "would be a probe on a container without the serving port once sidecar \
                     template {:?} fronts your app, and Knative refuses those while its \
                     multi-container-probing feature is off",
                    t.name
                ),
                format!(
                    "remove the probe, or enable multi-container-probing in Knative's \
                     config-features and start the webhook with --multi-container-probing, {leave_out}"
                ),
            ));
        }
    }
    if view.sets_port {
        out.push(violation(
            "sidecar-fronting-env",
            format!("{}.env", at(view.index)),
            format!(
                "sets {PORT_ENV:?}, which the webhook sets to your port ({}) once sidecar \
                 template {:?} fronts your app",
                view.app_port, t.name
            ),
            format!("remove it, {leave_out}"),
        ));
    }
    if view.app_port == fronts.port {
        out.push(violation(
            "sidecar-fronting-port",
            format!("{}.ports[0].containerPort", at(view.index)),
            format!(
                "{} is the port sidecar template {:?} listens on in front of your app, and \
                 both share the pod's network",
                view.app_port, t.name
            ),
            format!("listen on another port, {leave_out}"),
        ));
    }
    if out.len() > before {
        return None;
    }
    Some(Handover {
        template: t.name.clone(),
        container: fronts.container.clone(),
        port: fronts.port,
        from: view.name.clone(),
        ports: view.ports.clone(),
        app_port: view.app_port,
        probes: probe_edits(view),
    })
}

/// The probe handlers that leave their port to Knative (unset, 0, or the serving port's name):
/// once the port is gone from the container they must name the app's port.
fn probe_edits(view: &UserView) -> Vec<ProbePort> {
    // Knative calls an unnamed serving port "http" when it checks probe ports.
    let port_name = match view.port_name.as_str() {
        "" => "http",
        name => name,
    };
    let mut edits = Vec::new();
    for (field, probe) in &view.probes {
        for handler in PORT_HANDLERS {
            let Some(h) = probe.get(handler).filter(|h| h.is_object()) else {
                continue;
            };
            let written = h.get("port");
            let implied = match written.filter(|p| !p.is_null()) {
                None => true,
                Some(Value::Number(n)) => n.as_i64() == Some(0),
                Some(Value::String(s)) => s.is_empty() || s == port_name,
                Some(_) => false,
            };
            if implied {
                edits.push(ProbePort {
                    probe: (*field).to_string(),
                    handler: handler.to_string(),
                    port: written.cloned(),
                });
            }
        }
    }
    edits
}
