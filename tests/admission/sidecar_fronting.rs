//! Fronting sidecars through the same `decide` the server calls: the serving port's handover
//! as a table over the user's port and probes, then its life cycle (re-admission, upgrade,
//! removal, opt-out, uninject, the spec SHA) and failing closed without a catalogue. Every
//! decision's patch is replayed on its input.

#![allow(clippy::unwrap_used)] // test helpers may panic

use std::sync::Arc;

use base64::Engine as _;
use ksvc_webhook::admission::mutate;
use ksvc_webhook::admission::sidecars::{Catalogue, Knative, Status};
use ksvc_webhook::admission::{self, Decision, Policy, Request};
use ksvc_webhook::json::Node;
use serde_json::{Value, json};
use support::admit::{admit, out, uninject};

const CATALOGUE: &str = concat!(
    shipper!(),
    r#"  guard:
    fronts: {port: 4180}
    containers:
      - name: auth-proxy
        image: oauth2-proxy:7
        args: ["--http-address=127.0.0.1:4180", "--upstream=http://127.0.0.1:{{ .AppPort }}"]
  waf:
    fronts: {port: 9000, container: waf}
    containers:
      - {name: waf, image: "waf:1", args: ["--backend=127.0.0.1:{{ .AppPort }}"]}
      - {name: waf-rules, image: "rules:1"}
"#
);

fn policy(text: &str, probing: bool) -> Policy {
    Policy {
        sidecars: Arc::new(Catalogue::parse(text).unwrap()),
        knative: Knative {
            multi_container_probing: probing,
        },
        ..Policy::default()
    }
}

/// A KService named `web` with the given containers and `sidecar.flyte.org/inject` value.
fn ksvc(containers: Value, inject: &str) -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "apps",
                     "annotations": {"sidecar.flyte.org/inject": inject}},
        "spec": {"template": {"spec": {"containers": containers}}},
    })
}

fn app(extra: Value) -> Value {
    let mut c = json!({"name": "app", "image": "web:1"});
    c.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    c
}

fn containers(o: &Value) -> &Vec<Value> {
    o["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
}

fn container<'o>(o: &'o Value, name: &str) -> &'o Value {
    containers(o).iter().find(|c| c["name"] == name).unwrap()
}

/// The names of the containers that declare ports.
fn port_owners(o: &Value) -> Vec<&str> {
    containers(o)
        .iter()
        .filter(|c| c["ports"].as_array().is_some_and(|p| !p.is_empty()))
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

fn status(o: &Value) -> Status {
    Status::read(&Node::from_json(o.clone())).unwrap()
}

/// The value of env var `name` in container `c`.
fn env<'c>(c: &'c Value, name: &str) -> Option<&'c str> {
    c["env"].as_array()?.iter().find(|e| e["name"] == name)?["value"].as_str()
}

fn rules(d: &Decision) -> Vec<&'static str> {
    d.violations.iter().map(|v| v.rule).collect()
}

/// A case: its name, the user's containers, the inject annotation, multi-container probing, and
/// the handover wanted or the rules that refuse it.
type Case = (
    &'static str,
    Vec<Value>,
    &'static str,
    bool,
    Result<Fronted, Vec<&'static str>>,
);

/// What an allowed handover must look like.
struct Fronted {
    owner: &'static str,
    ports: Value,
    upstream: &'static str,
    env_port: &'static str,
    /// The app's probes after the handover.
    probes: Value,
}

#[test]
fn the_serving_port_is_handed_over_as_the_table_says() {
    let probes = json!({
        "readinessProbe": {"httpGet": {"path": "/ready"}},
        "livenessProbe": {"tcpSocket": {"port": "h2c"}},
        "startupProbe": {"exec": {"command": ["true"]}},
    });
    let probes_after = json!({
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
        "livenessProbe": {"tcpSocket": {"port": 8080}},
        "startupProbe": {"exec": {"command": ["true"]}},
    });
    let mut with_probes = probes.clone();
    with_probes["ports"] = json!([{"name": "h2c", "containerPort": 8080}]);
    let fronted = |owner, ports, upstream, env_port, probes| {
        Ok(Fronted {
            owner,
            ports,
            upstream,
            env_port,
            probes,
        })
    };
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        ("named port", vec![app(json!({"ports": [{"name": "h2c", "containerPort": 8080}]}))], "guard", false,
            fronted("auth-proxy", json!([{"name": "h2c", "containerPort": 4180}]), "8080", "8080", json!({}))),
        ("unnamed port", vec![app(json!({"ports": [{"containerPort": 9001, "protocol": "TCP"}]}))], "guard", false,
            fronted("auth-proxy", json!([{"containerPort": 4180, "protocol": "TCP"}]), "9001", "9001", json!({}))),
        ("no port: Knative's 8080", vec![app(json!({}))], "guard", false,
            fronted("auth-proxy", json!([{"containerPort": 4180}]), "8080", "8080", json!({}))),
        ("probes, multi-container probing on", vec![app(with_probes.clone())], "guard", true,
            fronted("auth-proxy", json!([{"name": "h2c", "containerPort": 4180}]), "8080", "8080", probes_after)),
        ("a probe naming its own port stays", vec![app(json!({"ports": [{"containerPort": 8080}], "readinessProbe": {"httpGet": {"port": 8081}}}))], "guard", true,
            fronted("auth-proxy", json!([{"containerPort": 4180}]), "8080", "8080", json!({"readinessProbe": {"httpGet": {"port": 8081}}}))),
        ("the template names its listening container", vec![app(json!({"ports": [{"containerPort": 8080}]}))], "waf", false,
            fronted("waf", json!([{"containerPort": 9000}]), "8080", "8080", json!({}))),
        ("fronting plus ordinary ones", vec![app(json!({"ports": [{"containerPort": 8080}]})), json!({"name": "helper", "image": "h:1"})], "guard,shipper", false,
            fronted("auth-proxy", json!([{"containerPort": 4180}]), "8080", "8080", json!({}))),
        ("probes, multi-container probing off", vec![app(with_probes)], "guard", false,
            Err(vec!["sidecar-fronting-probe"; 3])),
        ("no port among two containers", vec![app(json!({})), json!({"name": "helper", "image": "h:1"})], "guard", false,
            Err(vec!["sidecar-fronting-port"])),
        ("two ports", vec![app(json!({"ports": [{"containerPort": 8080}, {"containerPort": 8081}]}))], "guard", false,
            Err(vec!["sidecar-fronting-port"])),
        ("the app listens where the proxy does", vec![app(json!({"ports": [{"containerPort": 4180}]}))], "guard", false,
            Err(vec!["sidecar-fronting-port"])),
        ("the user sets PORT", vec![app(json!({"ports": [{"containerPort": 8080}], "env": [{"name": "PORT", "value": "1"}]}))], "guard", false,
            Err(vec!["sidecar-fronting-env"])),
        ("two fronting templates", vec![app(json!({"ports": [{"containerPort": 8080}]}))], "guard,waf", false,
            Err(vec!["sidecar-fronting-twice"])),
    ];
    for (name, user, inject, probing, want) in cases {
        let original = ksvc(Value::Array(user), inject);
        let p = policy(CATALOGUE, probing);
        let d = admit("CREATE", original.clone(), &p);
        let want = match want {
            Err(want) => {
                assert_eq!(rules(&d), want, "{name}: {}", d.message());
                continue;
            }
            Ok(want) => want,
        };
        let o = out(&d);
        assert_eq!(port_owners(&o), [want.owner], "{name}");
        assert_eq!(container(&o, want.owner)["ports"], want.ports, "{name}");
        let args = container(&o, want.owner)["args"].to_string();
        assert!(
            args.contains(&format!("127.0.0.1:{}", want.upstream)),
            "{name}: {args}"
        );
        let app = container(&o, "app");
        assert_eq!(env(app, "PORT"), Some(want.env_port), "{name}");
        for (probe, value) in want.probes.as_object().unwrap() {
            assert_eq!(&app[probe], value, "{name}: {probe}");
        }
        let h = status(&o).handover.unwrap();
        assert_eq!(
            (h.container.as_str(), h.from.as_str()),
            (want.owner, "app"),
            "{name}"
        );
        assert_eq!(
            h.ports.as_ref(),
            original["spec"]["template"]["spec"]["containers"][0].get("ports"),
            "{name}"
        );
        // Re-admission changes nothing; uninject gives the original back; the SHA is blind.
        assert!(admit("UPDATE", o.clone(), &p).patch.is_empty(), "{name}");
        assert_eq!(uninject(o.clone()), original, "{name}");
        assert_eq!(
            mutate::user_spec(&o),
            mutate::user_spec(&original),
            "{name}"
        );
        // Opting out hands the port back exactly as it was.
        let mut opted = o;
        opted["metadata"]["annotations"]["sidecar.flyte.org/inject"] = json!("none");
        let d = admit("UPDATE", opted, &p);
        let back = out(&d);
        assert!(
            d.warnings.iter().any(|w| w.contains("no longer fronts")),
            "{name}: {:?}",
            d.warnings
        );
        let mut want_back = original.clone();
        want_back["metadata"]["annotations"]["sidecar.flyte.org/inject"] = json!("none");
        assert_eq!(uninject(back), want_back, "{name}");
    }
}

#[test]
fn the_status_shows_who_holds_the_port_and_the_users_port() {
    let user = app(json!({"ports": [{"name": "h2c", "containerPort": 8080}]}));
    let o = out(&admit(
        "CREATE",
        ksvc(json!([user]), "guard"),
        &policy(CATALOGUE, false),
    ));
    let text = o["metadata"]["annotations"]["sidecar.flyte.org/status"]
        .as_str()
        .unwrap();
    let record: Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        record["handover"],
        json!({"template": "guard", "container": "auth-proxy", "port": 4180, "from": "app",
               "ports": [{"name": "h2c", "containerPort": 8080}], "appPort": 8080})
    );
}

#[test]
fn a_changed_fronting_template_is_upgraded_and_a_removed_one_gives_the_port_back() {
    let user = app(json!({"ports": [{"containerPort": 8080}]}));
    let original = ksvc(json!([user]), "");
    let defaults = CATALOGUE.replace("default: [shipper]", "default: [shipper, guard]");
    let first = out(&admit(
        "CREATE",
        original.clone(),
        &policy(&defaults, false),
    ));
    assert_eq!(port_owners(&first), ["auth-proxy"]);
    // The template moves to another port: the next UPDATE re-injects it there.
    let moved = defaults
        .replace("port: 4180}", "port: 4181}")
        .replace("127.0.0.1:4180", "127.0.0.1:4181");
    let d = admit("UPDATE", first.clone(), &policy(&moved, false));
    let upgraded = out(&d);
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains("changed in the catalogue")),
        "{:?}",
        d.warnings
    );
    assert_eq!(
        container(&upgraded, "auth-proxy")["ports"],
        json!([{"containerPort": 4181}])
    );
    assert_eq!(port_owners(&upgraded), ["auth-proxy"]);
    assert!(
        admit("UPDATE", upgraded.clone(), &policy(&moved, false))
            .patch
            .is_empty()
    );
    // The template leaves the catalogue: the port goes back to the app.
    let gone = out(&admit("UPDATE", upgraded, &policy(CATALOGUE, false)));
    assert_eq!(port_owners(&gone), ["app"]);
    assert_eq!(
        container(&gone, "app")["ports"],
        json!([{"containerPort": 8080}])
    );
    assert_eq!(env(container(&gone, "app"), "PORT"), None);
    assert!(status(&gone).handover.is_none());
    assert_eq!(uninject(gone), original);
}

#[test]
fn a_fronting_copy_edited_in_place_is_put_back_and_knative_defaults_stay() {
    let p = policy(CATALOGUE, false);
    let user = app(json!({"ports": [{"containerPort": 8080}]}));
    let first = out(&admit("CREATE", ksvc(json!([user]), "guard"), &p));
    // Knative's defaulting gives the serving container (the proxy now) a readiness probe.
    let at = containers(&first)
        .iter()
        .position(|c| c["name"] == "auth-proxy")
        .unwrap();
    let mut defaulted = first.clone();
    defaulted["spec"]["template"]["spec"]["containers"][at]["readinessProbe"] =
        json!({"tcpSocket": {"port": 0}, "successThreshold": 1});
    assert!(admit("UPDATE", defaulted.clone(), &p).patch.is_empty());
    // The upstream edited to skip the proxy's checks, the port moved: put back, probe kept.
    let mut edited = defaulted.clone();
    let proxy = &mut edited["spec"]["template"]["spec"]["containers"][at];
    proxy["args"][0] = json!("--skip-auth-regex=.*");
    proxy["ports"] = json!([{"containerPort": 9999}]);
    let req = Request::kservice("u-1", "UPDATE", "apps", edited, Some(defaulted.clone()));
    let d = admission::decide(req, &p);
    let back = out(&d);
    assert_eq!(
        container(&back, "auth-proxy"),
        container(&defaulted, "auth-proxy")
    );
    assert_eq!(port_owners(&back), ["auth-proxy"]);
    assert!(
        d.warnings[0].contains("\"auth-proxy\" of template \"guard\" was edited in place"),
        "{:?}",
        d.warnings
    );
}

#[test]
fn a_port_the_user_declares_again_is_handed_over_again() {
    let p = policy(CATALOGUE, false);
    let user = app(json!({"ports": [{"containerPort": 8080}]}));
    let first = out(&admit("CREATE", ksvc(json!([user]), "guard"), &p));
    // `kubectl apply` of the manifest puts the port back on the app's container, now 8081.
    let mut applied = first.clone();
    applied["spec"]["template"]["spec"]["containers"][0]["ports"] =
        json!([{"containerPort": 8081}]);
    let d = admit("UPDATE", applied, &p);
    let again = out(&d);
    assert_eq!(port_owners(&again), ["auth-proxy"]);
    assert_eq!(env(container(&again, "app"), "PORT"), Some("8081"));
    assert!(container(&again, "app").get("ports").is_none());
    assert!(
        container(&again, "auth-proxy")["args"]
            .to_string()
            .contains("127.0.0.1:8081")
    );
    assert_eq!(status(&again).handover.unwrap().app_port, 8081);
    assert!(admit("UPDATE", again, &p).patch.is_empty());
}

#[test]
fn without_a_catalogue_a_kservice_that_may_be_fronted_is_refused() {
    let unavailable = Policy {
        sidecars: Arc::new(Catalogue::unavailable("cannot read /etc/sidecars.yaml")),
        ..Policy::default()
    };
    let user = app(json!({"ports": [{"containerPort": 8080}]}));
    for inject in ["guard", ""] {
        let d = admit("CREATE", ksvc(json!([user]), inject), &unavailable);
        assert_eq!(rules(&d), ["sidecar-catalogue"], "{inject:?}");
        let message = d.message();
        assert!(
            message.contains("cannot load its sidecar catalogue (cannot read /etc/sidecars.yaml)"),
            "{message}"
        );
        assert!(
            message.contains("rather than admit it unprotected"),
            "{message}"
        );
    }
    // A fronted KService that opts out gets its port back: the record is all it takes.
    let fronted = out(&admit(
        "CREATE",
        ksvc(json!([user]), "guard"),
        &policy(CATALOGUE, false),
    ));
    let mut opted = fronted;
    opted["metadata"]["annotations"]["sidecar.flyte.org/inject"] = json!("none");
    let back = out(&admit("UPDATE", opted, &unavailable));
    assert_eq!(port_owners(&back), ["app"]);
    assert_eq!(containers(&back).len(), 1);
}

#[test]
fn a_review_with_raw_probes_is_fronted_and_readmitted_without_a_patch() {
    let p = policy(CATALOGUE, true);
    let user = app(json!({"ports": [{"containerPort": 8080}],
                          "readinessProbe": {"httpGet": {"path": "/ready"}, "periodSeconds": 5},
                          "env": [{"name": "A", "value": "1"}]}));
    let original = ksvc(json!([user]), "guard");
    let review = |op: &str, object: &Value| {
        let body = serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": op, "namespace": "apps",
                "kind": {"group": "serving.knative.dev", "version": "v1", "kind": "Service"},
                "object": object}
        }))
        .unwrap();
        let reviewed = admission::review(&body, &p).unwrap();
        let response: Value = serde_json::from_slice(&reviewed.body).unwrap();
        assert_eq!(response["response"]["allowed"], true, "{response}");
        let mut obj = object.clone();
        if let Some(patch) = response["response"]["patch"].as_str() {
            let patch = base64::engine::general_purpose::STANDARD
                .decode(patch)
                .unwrap();
            let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
            json_patch::patch(&mut obj, &patch).unwrap();
        }
        (obj, response["response"].get("patch").is_some())
    };
    let (fronted, patched) = review("CREATE", &original);
    assert!(patched);
    assert_eq!(port_owners(&fronted), ["auth-proxy"]);
    let app = container(&fronted, "app");
    assert_eq!(
        app["readinessProbe"],
        json!({"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5})
    );
    assert_eq!(app["env"][0], json!({"name": "A", "value": "1"}));
    assert_eq!(app["env"][1], json!({"name": "PORT", "value": "8080"}));
    let (again, patched) = review("UPDATE", &fronted);
    assert!(!patched, "re-admission patches nothing");
    assert_eq!(again, fronted);
    assert_eq!(uninject(fronted), original);
}

#[test]
fn the_multi_container_probing_flag_and_its_env_var_reach_admission() {
    let dir = std::env::temp_dir().join(format!("ksvc-fronting-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let catalogue = dir.join("sidecars.yaml");
    std::fs::write(&catalogue, CATALOGUE).unwrap();
    let user = app(json!({"ports": [{"containerPort": 8080}],
                          "readinessProbe": {"httpGet": {"path": "/ready"}}}));
    let manifest = dir.join("ksvc.json");
    std::fs::write(&manifest, ksvc(json!([user]), "guard").to_string()).unwrap();
    let mutate = |flag: Option<&str>, env: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ksvc-webhook"));
        cmd.args(["mutate", "--sidecars", catalogue.to_str().unwrap()])
            .args(["-f", manifest.to_str().unwrap()])
            .env_remove("KSVC_WEBHOOK_MULTI_CONTAINER_PROBING");
        cmd.args(flag);
        if let Some(value) = env {
            cmd.env("KSVC_WEBHOOK_MULTI_CONTAINER_PROBING", value);
        }
        let output = cmd.output().unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (ok, stderr) = mutate(None, None);
    assert!(
        !ok && stderr.contains("multi-container-probing"),
        "{stderr}"
    );
    assert!(mutate(Some("--multi-container-probing"), None).0);
    assert!(mutate(None, Some("true")).0);
    std::fs::remove_dir_all(&dir).unwrap();
}
