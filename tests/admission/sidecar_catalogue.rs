//! Table tests of the sidecar catalogue's load-time checks: every Knative rule is refused when
//! the catalogue is parsed, each problem with its path.

#![allow(clippy::unwrap_used)] // test helpers may panic

use ksvc_webhook::admission::sidecars::{Catalogue, CatalogueError, content_hash, load};
use serde_json::{Value, json};

/// A valid template: one container mounting one emptyDir volume.
fn good() -> Value {
    json!({
        "containers": [{
            "name": "shipper",
            "image": "fluent/fluent-bit:3.1",
            "env": [{"name": "NS", "value": "{{ .Namespace }}"}],
            "volumeMounts": [{"name": "logs", "mountPath": "/var/log/app"}],
        }],
        "volumes": [{"name": "logs", "emptyDir": {}}],
    })
}

fn catalogue_text(templates: Value, default: Value) -> String {
    serde_saphyr::to_string(&json!({"default": default, "templates": templates})).unwrap()
}

/// The problems of a catalogue holding `template` as `t` (plus `good` as `other`).
fn problems(template: Value) -> Vec<String> {
    let mut other = good();
    other["containers"][0]["name"] = json!("other");
    other["containers"][0]["volumeMounts"][0]["name"] = json!("other-logs");
    other["volumes"][0]["name"] = json!("other-logs");
    let text = catalogue_text(json!({"t": template, "other": other}), json!([]));
    match Catalogue::parse(&text) {
        Ok(_) => Vec::new(),
        Err(CatalogueError::Invalid(found)) => found.iter().map(ToString::to_string).collect(),
        Err(other) => vec![format!("unexpected: {other}")],
    }
}

fn with(path: &[&str], value: Value) -> Value {
    let mut t = good();
    let mut node = &mut t;
    for token in &path[..path.len() - 1] {
        node = match token.parse::<usize>() {
            Ok(i) => &mut node[i],
            Err(_) => &mut node[*token],
        };
    }
    let last = path[path.len() - 1];
    match node {
        Value::Array(items) => {
            let i: usize = last.parse().unwrap();
            if i == items.len() {
                items.push(value);
            } else {
                items[i] = value;
            }
        }
        _ => node[last] = value,
    }
    t
}

#[test]
fn a_valid_catalogue_parses() {
    assert_eq!(problems(good()), Vec::<String>::new());
    let text = std::fs::read_to_string("examples/sidecars.yaml").unwrap();
    let cat = Catalogue::parse(&text).unwrap();
    assert_eq!(
        cat.names().collect::<Vec<_>>(),
        ["auth-proxy", "log-shipper"]
    );
    assert_eq!(cat.default_names(), ["log-shipper"]);
    assert_eq!(cat.get("log-shipper").unwrap().volume_names.len(), 2);
}

#[test]
fn every_knative_rule_is_refused_at_load() {
    fn at(field: &'static str) -> [&'static str; 3] {
        ["containers", "0", field]
    }
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "a port",
            with(&at("ports"), json!([{"containerPort": 9000}])),
            "templates.t.containers[0].ports: sidecars declare no ports",
        ),
        (
            "a reserved port",
            with(&at("ports"), json!([{"containerPort": 8012}])),
            "templates.t.containers[0].ports[0]: 8012 is a port Knative reserves",
        ),
        (
            "a liveness probe",
            with(&at("livenessProbe"), json!({"tcpSocket": {"port": 1}})),
            "templates.t.containers[0].livenessProbe: sidecars have no probes",
        ),
        (
            "a readiness probe",
            with(
                &at("readinessProbe"),
                json!({"exec": {"command": ["true"]}}),
            ),
            "templates.t.containers[0].readinessProbe: sidecars have no probes",
        ),
        (
            "a startup probe",
            with(&at("startupProbe"), json!({"exec": {"command": ["true"]}})),
            "templates.t.containers[0].startupProbe: sidecars have no probes",
        ),
        (
            "a reserved env name",
            with(&at("env"), json!([{"name": "K_REVISION", "value": "x"}])),
            "templates.t.containers[0].env[0].name: \"K_REVISION\" is reserved",
        ),
        (
            "PORT",
            with(&at("env"), json!([{"name": "PORT", "value": "1"}])),
            "\"PORT\" is reserved",
        ),
        (
            "queue-proxy",
            with(&at("name"), json!("queue-proxy")),
            "\"queue-proxy\" is reserved",
        ),
        (
            "a container name that is not a DNS-1123 label",
            with(&at("name"), json!("Log_Shipper")),
            "templates.t.containers[0].name: \"Log_Shipper\" is not a DNS-1123 label",
        ),
        (
            "a placeholder in a name",
            with(&at("name"), json!("{{ .Name }}-shipper")),
            "is not a DNS-1123 label",
        ),
        (
            "a volume name that is not a DNS-1123 label",
            with(&["volumes", "0", "name"], json!("-logs")),
            "templates.t.volumes[0].name: \"-logs\" is not a DNS-1123 label",
        ),
        (
            "a duplicate container name",
            with(
                &["containers", "1"],
                json!({"name": "shipper", "image": "x"}),
            ),
            "templates.t.containers: name \"shipper\" is used twice",
        ),
        (
            "a container name another template uses",
            with(&at("name"), json!("other")),
            "container name \"other\" is also used by template",
        ),
        (
            "a volume name another template uses",
            with(&["volumes", "0", "name"], json!("other-logs")),
            "volume name \"other-logs\" is also used by template",
        ),
        (
            "an unknown placeholder",
            with(&at("args"), json!(["--x={{ .Cluster }}"])),
            "templates.t.containers[0].args[0]: uses the unknown placeholder {{ .Cluster }}",
        ),
        (
            "an unmounted volume",
            with(&["volumes", "1"], json!({"name": "spare", "emptyDir": {}})),
            "volume \"spare\" is not mounted",
        ),
        (
            "a mount of no volume of the template",
            with(
                &at("volumeMounts"),
                json!([{"name": "nope", "mountPath": "/x"}]),
            ),
            "mounts \"nope\", which is not a volume of this template",
        ),
        (
            "a writable mount of a configMap",
            with(
                &["volumes", "0"],
                json!({"name": "logs", "configMap": {"name": "c"}}),
            ),
            "volumeMounts[0].readOnly: must be true",
        ),
        (
            "a reserved mount path",
            with(
                &at("volumeMounts"),
                json!([{"name": "logs", "mountPath": "/dev"}]),
            ),
            "mountPath: \"/dev\" is reserved",
        ),
        (
            "a field Knative disallows",
            with(
                &at("lifecycle"),
                json!({"preStop": {"exec": {"command": ["x"]}}}),
            ),
            "templates.t.containers[0].lifecycle: Knative does not allow this field",
        ),
        (
            "a container that is not a container",
            with(&at("ports"), json!("8080")),
            "templates.t.containers[0]: is not a Kubernetes container",
        ),
        (
            "no image",
            with(&at("image"), json!("")),
            "templates.t.containers[0].image: is missing",
        ),
        (
            "no container",
            json!({"containers": []}),
            "templates.t.containers: is empty",
        ),
    ];
    for (what, template, want) in cases {
        let found = problems(template);
        assert!(
            found.iter().any(|p| p.contains(want)),
            "{what}: want {want:?} in {found:#?}"
        );
    }
}

#[test]
fn every_problem_is_listed_at_once() {
    let mut t = with(
        &["containers", "0", "ports"],
        json!([{"containerPort": 8013}]),
    );
    t["containers"][0]["readinessProbe"] = json!({"tcpSocket": {"port": 1}});
    t["containers"][0]["env"] = json!([{"name": "K_SERVICE", "value": "x"}]);
    let found = problems(t);
    assert_eq!(found.len(), 4, "{found:#?}");
}

#[test]
fn catalogue_level_names_are_checked() {
    let cases = [
        (
            catalogue_text(json!({"t": good()}), json!(["t", "missing"])),
            "default[1]: names \"missing\", which is not a template",
        ),
        (
            catalogue_text(json!({"Bad_Name": good()}), json!([])),
            "the template name \"Bad_Name\" is not a DNS-1123 label",
        ),
        (
            catalogue_text(json!({"none": good()}), json!([])),
            "\"none\" is the opt-out value",
        ),
    ];
    for (text, want) in cases {
        let err = Catalogue::parse(&text).unwrap_err().to_string();
        assert!(err.contains(want), "want {want:?} in {err}");
    }
}

#[test]
fn shape_and_yaml_errors_are_refused() {
    assert!(matches!(
        Catalogue::parse("templates: [1, 2"),
        Err(CatalogueError::Yaml(_))
    ));
    assert!(matches!(
        Catalogue::parse("templatez: {}"),
        Err(CatalogueError::Shape(_))
    ));
    assert!(matches!(
        Catalogue::parse("templates: {t: {containers: [], extra: 1}}"),
        Err(CatalogueError::Shape(_))
    ));
}

#[test]
fn empty_documents_are_the_empty_catalogue() {
    for text in ["", "# nothing yet\n", "templates: {}\n"] {
        let cat = Catalogue::parse(text).unwrap();
        assert!(cat.is_empty() && cat.default_names().is_empty(), "{text:?}");
    }
}

#[test]
fn fingerprint_ignores_formatting_and_sees_changes() {
    let a = catalogue_text(json!({"t": good()}), json!(["t"]));
    let b = format!(
        "# a comment\n{}",
        serde_json::to_string(&serde_saphyr::from_str::<Value>(&a).unwrap()).unwrap()
    );
    let fa = Catalogue::parse(&a).unwrap();
    let fb = Catalogue::parse(&b).unwrap();
    assert_eq!(fa.fingerprint(), fb.fingerprint());
    assert_eq!(fa.fingerprint().len(), 64);
    assert_ne!(content_hash(a.as_bytes()), content_hash(b.as_bytes()));
    let c = catalogue_text(
        json!({"t": with(&["containers", "0", "image"], json!("x:2"))}),
        json!(["t"]),
    );
    assert_ne!(
        Catalogue::parse(&c).unwrap().fingerprint(),
        fa.fingerprint()
    );
}

#[test]
fn template_hash_covers_containers_and_volumes_only() {
    let hash = |t: Value| {
        Catalogue::parse(&catalogue_text(json!({"t": t}), json!([])))
            .unwrap()
            .get("t")
            .unwrap()
            .hash
            .clone()
    };
    let mut described = good();
    described["description"] = json!("ships logs");
    assert_eq!(hash(good()), hash(described));
    assert_ne!(
        hash(good()),
        hash(with(
            &["containers", "0", "image"],
            json!("fluent/fluent-bit:3.2")
        ))
    );
}

#[test]
fn load_reports_the_file() {
    let dir = std::env::temp_dir().join(format!("ksvc-sidecars-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        catalogue_text(
            json!({"t": with(&["containers", "0", "ports"], json!([{"containerPort": 1}]))}),
            json!([]),
        ),
    )
    .unwrap();
    let err = load(&bad).unwrap_err();
    let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    assert!(
        chain.contains("bad.yaml") && chain.contains("declare no ports"),
        "{chain}"
    );
    assert!(
        load(&dir.join("missing.yaml"))
            .unwrap_err()
            .to_string()
            .contains("cannot read")
    );
    assert!(load(std::path::Path::new("examples/sidecars.yaml")).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fronting_templates_are_checked_at_load() {
    let fronting = |fronts: Value| {
        let mut t = good();
        t["fronts"] = fronts;
        t
    };
    let mut two = fronting(json!({"port": 4180}));
    two["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "helper", "image": "h:1"}));
    let mut with_port = fronting(json!({"port": 4180}));
    with_port["containers"][0]["ports"] = json!([{"containerPort": 4180}]);
    let upstream = json!(["--upstream=http://127.0.0.1:{{ .AppPort }}"]);
    let mut app_port_elsewhere = good();
    app_port_elsewhere["containers"][0]["args"] = upstream.clone();
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "port 0",
            fronting(json!({"port": 0})),
            "templates.t.fronts.port: 0 is not a port",
        ),
        (
            "a reserved port",
            fronting(json!({"port": 8012})),
            "templates.t.fronts.port: 8012 is a port Knative reserves",
        ),
        (
            "an unknown container",
            fronting(json!({"port": 4180, "container": "nope"})),
            "templates.t.fronts.container: names \"nope\", which is not a container",
        ),
        (
            "several containers, none named",
            two,
            "templates.t.fronts.container: is missing",
        ),
        (
            "a port of its own",
            with_port,
            "templates.t.containers[0].ports: a fronting template declares no ports",
        ),
        (
            "{{ .AppPort }} outside a fronting template",
            app_port_elsewhere,
            "templates.t.containers[0].args[0]: uses {{ .AppPort }}, which only a fronting template",
        ),
    ];
    for (name, template, want) in cases {
        let found = problems(template);
        assert!(
            found.iter().any(|p| p.starts_with(want)),
            "{name}: want {want:?} in {found:#?}"
        );
    }
    let mut ok = fronting(json!({"port": 4180}));
    ok["containers"][0]["args"] = upstream;
    assert_eq!(problems(ok), Vec::<String>::new());
}

#[test]
fn at_most_one_fronting_template_is_a_default_and_fronts_is_hashed() {
    let fronting = |port: u16| {
        let mut t = good();
        t["fronts"] = json!({"port": port});
        t
    };
    let mut other = fronting(4181);
    other["containers"][0]["name"] = json!("other");
    other["containers"][0]["volumeMounts"][0]["name"] = json!("other-logs");
    other["volumes"][0]["name"] = json!("other-logs");
    let text = catalogue_text(json!({"a": fronting(4180), "b": other}), json!(["a", "b"]));
    let err = Catalogue::parse(&text).unwrap_err().to_string();
    assert!(
        err.contains("default: lists the fronting templates \"a\" and \"b\""),
        "{err}"
    );
    let hash = |t: Value| {
        let cat = Catalogue::parse(&catalogue_text(json!({"t": t}), json!([]))).unwrap();
        cat.get("t").unwrap().hash.clone()
    };
    assert_ne!(hash(fronting(4180)), hash(fronting(4181)));
    assert_ne!(hash(fronting(4180)), hash(good()));
    let example = std::fs::read_to_string("examples/sidecars.yaml").unwrap();
    let fronts = Catalogue::parse(&example).unwrap();
    let fronts = fronts.get("auth-proxy").unwrap().fronts.as_ref().unwrap();
    assert_eq!(
        (fronts.port, fronts.container.as_str()),
        (4180, "auth-proxy")
    );
}
