//! Property tests of sidecar injection over generated KServices and selections, a fronting
//! template among them: injecting twice is injecting once (empty second patch), the patch
//! replays, uninject(inject(x)) = x, a catalogue change converges to what a fresh injection
//! gives, exactly one container declares the port after any admission with sidecars, and
//! opting out of a fronting template gives the user's containers back as written.

#![allow(clippy::unwrap_used)] // test helpers may panic

use std::sync::Arc;

use ksvc_webhook::admission::{self, Decision, Policy, Request};
use ksvc_webhook::admission::{mutate, naming};
use ksvc_webhook::json::Node;
use ksvc_webhook::json::edit::Editor;
use proptest::prelude::*;
use serde_json::{Value, json};

const CATALOGUE: &str = concat!(
    shipper!(),
    r#"  proxy:
    containers:
      - {name: auth-proxy, image: "oauth2-proxy:7", args: ["--client-id={{ .Project }}-{{ .Domain }}"]}
  metrics:
    containers:
      - name: metrics-agent
        image: otel/opentelemetry-collector:0.110.0
        volumeMounts: [{name: otel-config, mountPath: /etc/otel, readOnly: true}]
      - {name: metrics-helper, image: "busybox:1"}
    volumes: [{name: otel-config, configMap: {name: otel}}]
  front:
    fronts: {port: 4180}
    containers:
      - {name: front-proxy, image: "proxy:1", args: ["--upstream=127.0.0.1:{{ .AppPort }}"]}
"#
);

fn policy(text: &str) -> Policy {
    Policy {
        sidecars: Arc::new(ksvc_webhook::admission::sidecars::Catalogue::parse(text).unwrap()),
        // Fronting a container with probes needs Knative's multi-container probing.
        knative: ksvc_webhook::admission::sidecars::Knative {
            multi_container_probing: true,
        },
        ..Policy::default()
    }
}

/// The names of the containers that declare ports.
fn port_owners(o: &Value) -> usize {
    o["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ports"].as_array().is_some_and(|p| !p.is_empty()))
        .count()
}

/// Whether the webhook injected any sidecar into `o`.
fn with_sidecars(o: &Value) -> bool {
    o["metadata"]["annotations"]
        .get("sidecar.flyte.org/status")
        .is_some()
}

fn with_inject(x: &Value, inject: &str) -> Value {
    let mut x = x.clone();
    x["metadata"]["annotations"]["sidecar.flyte.org/inject"] = json!(inject);
    x
}

fn decide(op: &str, object: Value, policy: &Policy) -> Decision<'static> {
    let old = (op == "UPDATE").then(|| object.clone());
    let d = support::admit::decide(
        Request::kservice("p", op, "ns", object.clone(), old),
        &object,
        policy,
    );
    assert!(d.allowed, "{}", d.message());
    d
}

fn container(i: usize, port: Option<&Value>, env: bool, extra: bool) -> Value {
    let mut c = json!({"name": format!("c{i}"), "image": format!("img:{i}")});
    if let Some(port) = port {
        c["ports"] = json!([port]);
        c["readinessProbe"] = json!({"httpGet": {"path": "/ready", "port": port.get("name")}});
        c["livenessProbe"] = json!({"tcpSocket": {}, "periodSeconds": 3});
    }
    if env {
        c["env"] = json!([{"name": "A", "value": "1"}]);
    }
    if extra {
        c["futureField"] = json!({"k": [1, null]});
    }
    c
}

prop_compose! {
    fn kservice()(
        name in "[a-z][a-z0-9]{0,8}",
        managed in any::<bool>(),
        stopped in any::<bool>(),
        shapes in prop::collection::vec((any::<bool>(), any::<bool>()), 1..4),
        port_at in 0usize..3,
        port in prop_oneof![
            Just(json!({"containerPort": 8080})),
            Just(json!({"containerPort": 9000, "name": "h2c"})),
            Just(json!({"containerPort": 8081, "name": "http1", "protocol": "TCP"})),
        ],
        probes in any::<bool>(),
        volumes in 0usize..3,
        selection in prop_oneof![
            Just(None),
            Just(Some("none".to_string())),
            prop::sample::subsequence(vec!["proxy", "metrics", "shipper", "front"], 0..=4)
                .prop_map(|names| Some(names.join(","))),
            Just(Some("none,front".to_string())),
        ],
        user_annotation in any::<bool>(),
    ) -> Value {
        let port_at = port_at % shapes.len();
        // A lone container may leave its port to Knative (8080) when it is fronted.
        let fronted = selection.as_deref().is_some_and(|s| s.contains("front"));
        let portless = shapes.len() == 1 && fronted && !probes;
        let mut containers: Vec<Value> = shapes
            .iter()
            .enumerate()
            .map(|(i, (env, extra))| {
                container(i, (i == port_at && !portless).then_some(&port), *env, *extra)
            })
            .collect();
        if !probes {
            for c in &mut containers {
                let c = c.as_object_mut().unwrap();
                c.remove("readinessProbe");
                c.remove("livenessProbe");
            }
        }
        let mut obj = json!({
            "apiVersion": "serving.knative.dev/v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"template": {"spec": {"containers": containers}}},
        });
        if volumes > 0 {
            let vs: Vec<Value> = (0..volumes).map(|i| json!({"name": format!("v{i}"), "emptyDir": {}})).collect();
            obj["spec"]["template"]["spec"]["volumes"] = Value::from(vs);
        }
        if managed {
            obj["metadata"]["labels"] = json!({"flyte.org/project": "p", "flyte.org/domain": "d", "flyte.org/app-name": name});
            obj["metadata"]["name"] = json!(naming::app_name("p", "d", &name).name);
        }
        if stopped {
            obj["metadata"]["labels"]["flyte.org/app-stopped"] = json!("true");
        }
        if let Some(selection) = selection {
            obj["metadata"]["annotations"] = json!({"sidecar.flyte.org/inject": selection});
        }
        if user_annotation {
            obj["metadata"]["annotations"]["team"] = json!("web");
        }
        obj
    }
}

proptest! {
    #[test]
    fn exactly_one_container_declares_the_port_after_any_admission(
        x in kservice(),
        next in prop::sample::select(vec!["", "none", "front", "none,front", "proxy", "none,metrics"]),
    ) {
        let p = policy(CATALOGUE);
        // With sidecars, exactly one container declares the port; without, the user's own
        // containers are as written (a lone container may leave its port to Knative).
        let user_ports = port_owners(&x);
        let holds = |o: &Value| match with_sidecars(o) {
            true => port_owners(o) == 1,
            false => port_owners(o) == user_ports,
        };
        let first = decide("CREATE", x, &p).object_json().unwrap();
        prop_assert!(holds(&first), "{first}");
        let changed = with_inject(&first, next);
        let req = Request::kservice("p", "UPDATE", "ns", changed.clone(), Some(changed));
        let d = admission::decide(req, &p);
        match d.object_json() {
            Some(o) if d.allowed => prop_assert!(holds(&o), "{o}"),
            // Only a lone container without a port is refused ordinary sidecars.
            _ => prop_assert_eq!(user_ports, 0, "{}", d.message()),
        }
    }

    #[test]
    fn opting_out_of_a_fronting_template_gives_the_containers_back(x in kservice()) {
        let p = policy(CATALOGUE);
        let fronted = decide("CREATE", with_inject(&x, "front"), &p).object_json().unwrap();
        prop_assert_eq!(port_owners(&fronted), 1);
        let back = decide("UPDATE", with_inject(&fronted, "none"), &p).object_json().unwrap();
        prop_assert_eq!(mutate::user_spec(&back), mutate::user_spec(&with_inject(&x, "none")));
        prop_assert_eq!(port_owners(&back), port_owners(&x));
    }

    #[test]
    fn inject_twice_is_inject_once(x in kservice()) {
        let p = policy(CATALOGUE);
        let once = decide("CREATE", x, &p).object_json().unwrap();
        let twice = decide("UPDATE", once.clone(), &p);
        prop_assert!(twice.patch.is_empty(), "{:?}", twice.patch);
        prop_assert!(twice.warnings.is_empty(), "{:?}", twice.warnings);
        prop_assert_eq!(twice.object_json().unwrap(), once);
    }

    #[test]
    fn uninject_of_inject_is_identity(x in kservice()) {
        let injected = decide("CREATE", x.clone(), &policy(CATALOGUE)).object_json().unwrap();
        prop_assert_eq!(&mutate::user_spec(&injected), &mutate::user_spec(&x));
        let mut node = Node::from_json(injected);
        prop_assert!(mutate::strip(&mut Editor::new(&mut node)));
        prop_assert_eq!(node.to_json(), x);
    }

    #[test]
    fn a_catalogue_change_converges_like_a_fresh_injection(x in kservice()) {
        let changed = CATALOGUE
            .replace("fluent-bit:3.1", "fluent-bit:3.2")
            .replace("busybox:1", "busybox:2");
        let (old, new) = (policy(CATALOGUE), policy(&changed));
        let upgraded = decide("UPDATE", decide("CREATE", x.clone(), &old).object_json().unwrap(), &new)
            .object_json()
            .unwrap();
        let fresh = decide("CREATE", x, &new).object_json().unwrap();
        // The same containers and volumes (an upgraded copy may move to the end) and status.
        let sorted = |o: &Value, list: &str| {
            let mut items = o["spec"]["template"]["spec"][list].as_array().cloned().unwrap_or_default();
            items.sort_by_key(|i| i["name"].as_str().unwrap_or_default().to_string());
            items
        };
        for list in ["containers", "volumes"] {
            prop_assert_eq!(sorted(&upgraded, list), sorted(&fresh, list));
        }
        prop_assert_eq!(&upgraded["metadata"], &fresh["metadata"]);
        prop_assert!(decide("UPDATE", upgraded, &new).patch.is_empty());
    }
}
