//! The Helm chart (charts/ksvc-webhook) is the kustomize install under another name: with
//! default values it renders the objects of `kubectl kustomize manifests/`, and with the values
//! that pick an overlay, that overlay's objects, object by object, apart from Helm's standard
//! labels. Wrong values fail with Helm's own message naming the key; `helm lint --strict` is
//! clean; every example of the chart's README renders; its value table names every value.
//!
//! helm comes from `support::helm` (skipped with a banner without it; a failure under CI).

// A test crate: its helpers may panic on a broken fixture too.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;
use support::helm;

/// The labels Helm's conventions add to every object (and to the pod template); the kustomize
/// manifests carry none of them.
const HELM_LABELS: &[&str] = &[
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
];

/// Each kustomization and the values that make the chart render the same objects.
const PAIRS: &[(&str, &[&str])] = &[
    ("manifests", &[]),
    (
        "manifests/overlays/cert-manager",
        &["--set", "certificates.mode=certManager"],
    ),
    (
        "manifests/overlays/monitoring",
        &[
            "--set",
            "monitoring.podMonitor.enabled=true",
            "--set",
            "monitoring.prometheusRule.enabled=true",
            "--set",
            "monitoring.dashboard.enabled=true",
        ],
    ),
    (
        "manifests/overlays/network-policy",
        &[
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            "networkPolicy.controlPlaneCIDRs={10.0.0.0/16}",
        ],
    ),
];

/// An object's identity: apiVersion, kind, namespace, name.
type Key = (String, String, String, String);

fn key(o: &Value) -> Key {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (
        s(&o["apiVersion"]),
        s(&o["kind"]),
        s(&o["metadata"]["namespace"]),
        s(&o["metadata"]["name"]),
    )
}

/// The objects by identity, without Helm's standard labels (an empty label map left behind
/// goes too).
fn by_key(objects: Vec<Value>) -> BTreeMap<Key, Value> {
    let mut out = BTreeMap::new();
    for mut o in objects {
        for pointer in ["/metadata/labels", "/spec/template/metadata/labels"] {
            if let Some(labels) = o.pointer_mut(pointer).and_then(Value::as_object_mut) {
                for l in HELM_LABELS {
                    labels.remove(*l);
                }
            }
        }
        sort_env(&mut o);
        let k = key(&o);
        assert!(out.insert(k.clone(), o).is_none(), "{k:?} twice");
    }
    out
}

/// Containers' env by name: kustomize's strategic merge moves an entry it patches to the front
/// (the cert-manager overlay's KSVC_WEBHOOK_SELF_MANAGED_CERTS). The order matters only to a
/// `$(VAR)` reference, and none may be there for this to hold.
fn sort_env(o: &mut Value) {
    let Some(containers) = o.pointer_mut("/spec/template/spec/containers") else {
        return;
    };
    for c in containers.as_array_mut().unwrap() {
        let Some(env) = c.get_mut("env").and_then(Value::as_array_mut) else {
            continue;
        };
        assert!(
            env.iter()
                .all(|e| !e["value"].as_str().unwrap_or_default().contains("$(")),
            "an env value refers to another: its order matters, compare it as it is"
        );
        env.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    }
}

/// Every difference between the two renderings, one line per object (a JSON Patch from the
/// kustomize object to the chart's); empty when they are the same.
fn differences(kustomize: BTreeMap<Key, Value>, chart: BTreeMap<Key, Value>) -> Vec<String> {
    let keys: BTreeSet<&Key> = kustomize.keys().chain(chart.keys()).collect();
    let mut out = Vec::new();
    for k in keys {
        match (kustomize.get(k), chart.get(k)) {
            (Some(_), None) => out.push(format!("{k:?}: only in kustomize")),
            (None, Some(_)) => out.push(format!("{k:?}: only in the chart")),
            (Some(a), Some(b)) if a != b => {
                let patch = json_patch::diff(a, b);
                out.push(format!(
                    "{k:?}: kustomize -> chart {}",
                    serde_json::to_string(&patch).unwrap()
                ));
            }
            _ => {}
        }
    }
    out
}

#[test]
fn the_chart_renders_the_kustomize_objects_apart_from_helms_labels() {
    let Some(helm) = helm::helm() else { return };
    for (dir, values) in PAIRS {
        // `helm install --create-namespace` makes the namespace; `namespace.create=true` renders
        // the kustomize base's object, compared below.
        let (namespace, kustomize): (BTreeMap<_, _>, BTreeMap<_, _>) = by_key(helm::kustomize(dir))
            .into_iter()
            .partition(|((_, kind, _, _), _)| kind == "Namespace");
        let chart = by_key(helm::template(&helm, values).unwrap());
        let diff = differences(kustomize, chart);
        assert!(
            diff.is_empty(),
            "{dir} vs the chart with {values:?}:\n{}",
            diff.join("\n")
        );
        let chart_ns = by_key(
            helm::template(
                &helm,
                &[&values[..], &["--set", "namespace.create=true"]].concat(),
            )
            .unwrap(),
        )
        .into_iter()
        .filter(|((_, kind, _, _), _)| kind == "Namespace")
        .collect();
        let diff = differences(namespace, chart_ns);
        assert!(diff.is_empty(), "{dir}'s Namespace:\n{}", diff.join("\n"));
    }
}

/// The chart's copies of the monitoring files are manifests/monitoring's, byte for byte (the
/// comparison above sees them through the rendered objects; this names the file to copy).
#[test]
fn the_charts_monitoring_files_are_copies_of_manifests_monitoring() {
    for file in ["prometheusrule.yaml", "dashboard.json"] {
        let ours = std::fs::read(helm::chart().join("files").join(file)).unwrap();
        let theirs = std::fs::read(helm::root().join("manifests/monitoring").join(file)).unwrap();
        assert!(
            ours == theirs,
            "charts/ksvc-webhook/files/{file} differs from manifests/monitoring/{file}: copy it over"
        );
    }
}

/// A wrong value stops `helm template` (and `helm install`, the same validation) with Helm's
/// schema message naming the key.
#[test]
fn wrong_values_fail_with_helms_message_naming_the_key() {
    let Some(helm) = helm::helm() else { return };
    let cases: &[(&str, &str)] = &[
        ("webhook.failurePolicy=Maybe", "failurePolicy"),
        ("replicas=-1", "replicas"),
        ("certificates.mode=vault", "mode"),
        ("webhook.timeoutSeconds=31", "timeoutSeconds"),
        ("readmit.mode=sometimes", "mode"),
        ("log.format=xml", "format"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("networkPolicy.enabled=true", "controlPlaneCIDRs"),
        ("replica=3", "replica"),
    ];
    for (set, named) in cases {
        let error = helm::template(&helm, &["--set", set]).unwrap_err();
        assert!(
            error.contains("schema") && error.contains(named),
            "--set {set}: helm's message does not name {named}:\n{error}"
        );
    }
    // The valid neighbours of those values render.
    for set in [
        "webhook.failurePolicy=Ignore",
        "replicas=0",
        "certificates.mode=certManager",
    ] {
        helm::template(&helm, &["--set", set]).unwrap_or_else(|e| panic!("--set {set}: {e}"));
    }
}

#[test]
fn helm_lint_strict_is_clean() {
    let Some(helm) = helm::helm() else { return };
    for values in [&[][..], &["--set", "certificates.mode=certManager"][..]] {
        let out = Command::new(&helm)
            .args(["lint", "--strict"])
            .arg(helm::chart())
            .args(values)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "helm lint --strict {values:?}:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !text.contains("[WARNING]") && !text.contains("[ERROR]"),
            "{text}"
        );
    }
}

/// The chart README's examples: every ```yaml block under "## Examples" is a values file.
fn readme_examples() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(helm::chart().join("README.md")).unwrap();
    let section = readme
        .split("\n## Examples")
        .nth(1)
        .expect("README has ## Examples");
    let section = section.split("\n## ").next().unwrap();
    let mut out = Vec::new();
    let mut title = String::new();
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if let Some(t) = line.strip_prefix("### ") {
            title = t.to_owned();
        }
        if line.trim() == "```yaml" {
            let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            out.push((title.clone(), body.join("\n") + "\n"));
        }
    }
    out
}

/// Every README example renders, passes the schema, and changes what is rendered.
#[test]
fn every_readme_example_renders() {
    let Some(helm) = helm::helm() else { return };
    let examples = readme_examples();
    assert!(examples.len() >= 5, "the README's examples: {examples:?}");
    let defaults = helm::template(&helm, &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (i, (title, yaml)) in examples.iter().enumerate() {
        let file = dir.path().join(format!("example-{i}.yaml"));
        std::fs::write(&file, yaml).unwrap();
        let rendered = helm::template(&helm, &["-f", file.to_str().unwrap()])
            .unwrap_or_else(|e| panic!("README example {title:?}:\n{yaml}\n{e}"));
        assert_ne!(
            rendered, defaults,
            "README example {title:?} changes nothing"
        );
        the_server_takes_it(&rendered, title);
    }
}

/// The rendered Deployment's flags parse as `serve`'s, and its sidecar catalogue as a
/// catalogue: a value the chart passes on is one the server accepts.
fn the_server_takes_it(objects: &[Value], title: &str) {
    use clap::Parser;
    use ksvc_webhook::cli::{Cli, Command};
    let deploy = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap();
    let mut argv = vec!["ksvc-webhook".to_owned(), "serve".to_owned()];
    argv.extend(args.iter().map(|a| a.as_str().unwrap().to_owned()));
    match Cli::try_parse_from(&argv) {
        Ok(cli) => assert!(matches!(cli.command, Command::Serve(_)), "{title}"),
        Err(e) => panic!("README example {title:?}: serve refuses {argv:?}: {e}"),
    }
    let catalogue = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "ksvc-webhook-sidecars")
        .unwrap();
    let text = catalogue["data"]["sidecars.yaml"].as_str().unwrap();
    if let Err(e) = ksvc_webhook::admission::sidecars::Catalogue::parse(text) {
        panic!("README example {title:?}: the sidecar catalogue does not parse: {e}");
    }
}

/// The README's value table (first column, `` `a.b` ``) names exactly the values the schema
/// describes, and every key of values.yaml is one of them or under one.
#[test]
fn the_readme_table_names_every_value() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(helm::chart().join("values.schema.json")).unwrap(),
    )
    .unwrap();
    let mut described = BTreeSet::new();
    leaves(&schema, &schema, "", &mut described);
    described.remove("global");
    let readme = std::fs::read_to_string(helm::chart().join("README.md")).unwrap();
    let tabled: BTreeSet<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(name, _)| name.to_owned())
        .collect();
    let missing: Vec<_> = described.difference(&tabled).collect();
    let stale: Vec<_> = tabled.difference(&described).collect();
    assert!(
        missing.is_empty(),
        "values missing from the README table: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "README rows for values the schema does not know: {stale:?}"
    );
    let values: Value = ksvc_webhook::manifest_text::parse(
        &std::fs::read(helm::chart().join("values.yaml")).unwrap(),
    )
    .unwrap()
    .items
    .remove(0);
    let mut keys = BTreeSet::new();
    value_keys(&values, "", &described, &mut keys);
    let undescribed: Vec<_> = keys.difference(&described).collect();
    assert!(
        undescribed.is_empty(),
        "values.yaml keys neither in the schema nor the README: {undescribed:?}"
    );
}

/// The schema's leaf paths: a property without `properties` of its own (after `$ref`).
fn leaves(root: &Value, node: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    let node = match node["$ref"].as_str() {
        Some(r) => root.pointer(r.trim_start_matches('#')).unwrap(),
        None => node,
    };
    let Some(props) = node["properties"].as_object() else {
        out.insert(prefix.to_owned());
        return;
    };
    for (name, sub) in props {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        leaves(root, sub, &path, out);
    }
}

/// values.yaml's keys down to a described leaf (a free-form map such as `resources` stops there).
fn value_keys(v: &Value, prefix: &str, described: &BTreeSet<String>, out: &mut BTreeSet<String>) {
    match v.as_object() {
        Some(map) if !described.contains(prefix) => {
            for (k, sub) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                value_keys(sub, &path, described, out);
            }
        }
        _ => {
            out.insert(prefix.to_owned());
        }
    }
}
