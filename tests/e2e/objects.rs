//! The KServices and files of the suite: the repository's examples, moved into a test's own
//! namespace, and what `ksvc-webhook mutate` makes of them offline.

use serde_json::Value;
use support::cli::{repo_root, run_bin};
use support::control_plane::ControlPlane;

/// The example `examples/<file>` with its namespace set to `namespace`.
pub fn example(file: &str, namespace: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join("examples").join(file)).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        match line.strip_prefix("  namespace: ") {
            Some(_) => out.push_str(&format!("  namespace: {namespace}")),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// YAML or JSON text as a JSON value.
pub fn parse(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("not YAML ({e}):\n{text}"))
}

/// `yaml` as kube-apiserver hands it to admission: with the defaults of Knative's structural
/// schema applied first. The one default our examples reach is a container port's
/// `protocol: TCP`, added here after each `containerPort:` line that has no protocol.
pub fn defaulted(yaml: &str) -> String {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        out.push_str(line);
        out.push('\n');
        let Some(at) = line.find("containerPort:") else {
            continue;
        };
        let indent = " ".repeat(at);
        let has_protocol = lines[i + 1..]
            .iter()
            .take_while(|l| {
                l.starts_with(&indent) && !l[at..].starts_with('-') && !l[at..].starts_with(' ')
            })
            .any(|l| l[at..].starts_with("protocol:"));
        if !has_protocol {
            out.push_str(&format!("{indent}protocol: TCP\n"));
        }
    }
    out
}

/// `ksvc-webhook mutate` of `yaml` in `namespace` with `extra` flags, after the schema's
/// defaults ([`defaulted`]): the object admission should store.
pub fn mutated_offline(yaml: &str, namespace: &str, extra: &[&str]) -> Value {
    let mut args = vec!["mutate", "-f", "-", "-n", namespace];
    args.extend_from_slice(extra);
    let ran = run_bin(&args, &[], defaulted(yaml).as_bytes());
    assert_eq!(ran.code, Some(0), "mutate failed: {}", ran.stderr);
    parse(&ran.stdout)
}

/// The value at a JSON pointer, as text ("" when absent).
pub fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The first container's env var `name`, if set.
pub fn env_var<'a>(ksvc: &'a Value, name: &str) -> Option<&'a str> {
    ksvc.pointer("/spec/template/spec/containers/0/env")?
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?
        .get("value")?
        .as_str()
}

/// Create the example managed KService (`managed-ksvc.yaml`, its name left to the webhook) in
/// `namespace`, failing the test as `what` when kubectl refuses; the name it was given.
pub fn create_managed_app(plane: &ControlPlane, namespace: &str, what: &str) -> String {
    let created = plane
        .kubectl_in(
            &["create", "-f", "-", "-o", "name"],
            example("managed-ksvc.yaml", namespace).as_bytes(),
        )
        .ok(what);
    created.stdout.trim().rsplit('/').next().unwrap().to_owned()
}
