//! Our patches against Knative's real structural schema (e2e/crds/): kube-apiserver prunes any
//! field a CRD's schema does not know, silently. Each KService is read back and compared with what
//! `ksvc-webhook mutate` makes of the same input offline: a pruned field shows as a difference.

use serde_json::Value;
use support::control_plane::{ControlPlane, Webhook};

use crate::objects::{example, mutated_offline};

const CATALOGUE: &str = "--sidecars=examples/sidecars.yaml";

/// What admission decides about a KService: its name, labels, annotations and spec.
fn admitted(ksvc: &Value) -> Value {
    serde_json::json!({
        "name": ksvc["metadata"]["name"],
        "labels": ksvc["metadata"]["labels"],
        "annotations": ksvc["metadata"]["annotations"],
        "spec": ksvc["spec"],
    })
}

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn every_injected_field_survives_the_knative_schema_with_sidecars_and_a_fronting_proxy() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let ns = plane.namespace("schema");
    let _webhook = Webhook::start(plane, "schema", &[CATALOGUE]);

    for file in ["sidecar-ksvc.yaml", "managed-ksvc.yaml", "plain-ksvc.yaml"] {
        let yaml = example(file, &ns);
        let offline = mutated_offline(&yaml, &ns, &[CATALOGUE]);
        let created = plane
            .kubectl_in(&["create", "-f", "-", "-o", "name"], yaml.as_bytes())
            .ok(&format!("kubectl create -f examples/{file}"));
        let name = created.stdout.trim().to_owned();
        let stored = plane.get_json(&[&name, "-n", &ns]);
        pretty_assertions::assert_eq!(
            admitted(&stored),
            admitted(&offline),
            "examples/{file}: what kube-apiserver stored (left) differs from the offline mutation (right)"
        );
    }
    // The sidecars are really there: the fronting proxy took the serving port.
    let shop = plane.get_json(&["ksvc", "-n", &ns, "-l", "flyte.org/app-name=shop"]);
    let containers = &shop["items"][0]["spec"]["template"]["spec"]["containers"];
    let names: Vec<&str> = containers
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(
        names.contains(&"auth-proxy") && names.contains(&"log-shipper"),
        "sidecars missing after storage: {names:?}"
    );
}
