//! Table tests of every admission rule, through the same `decode` and `decide` the server calls:
//! each request is a serialized AdmissionReview read by the server's parser and skim table.

#![allow(clippy::unwrap_used)] // test helpers may panic

use ksvc_webhook::admission::ksvc;
use ksvc_webhook::admission::mutate::Settings;
use ksvc_webhook::admission::naming::DomainTemplate;
use ksvc_webhook::admission::{self, Decision, GroupVersionKind, Policy, Request};
use ksvc_webhook::json::Node;
use serde_json::{Value, json};

fn kservice(meta: Value, containers: Value) -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {"template": {"spec": {"containers": containers}}},
    })
}

fn app(meta: Value) -> Value {
    kservice(
        meta,
        json!([{"image": "nginx", "ports": [{"containerPort": 8080}]}]),
    )
}

fn managed(extra_labels: Value) -> Value {
    let mut labels = json!({"flyte.org/project": "proj", "flyte.org/domain": "dev", "flyte.org/app-name": "myapp"});
    labels
        .as_object_mut()
        .unwrap()
        .extend(extra_labels.as_object().unwrap().clone());
    app(json!({"namespace": "flyte", "labels": labels}))
}

/// A review of `object` as kube-apiserver sends one, decoded as the server decodes it: the rules
/// decide on exactly the tree they see in production (skimmed fields stay text).
fn request(op: &str, object: Value, old: Option<Value>) -> Request<'static> {
    let body = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "serving.knative.dev", "version": "v1", "kind": "Service"},
            "operation": op, "namespace": "default", "object": object, "oldObject": old,
        },
    }))
    .unwrap();
    admission::decode(&body).unwrap().into_owned()
}

fn create(object: Value) -> Decision<'static> {
    admission::decide(request("CREATE", object, None), &Policy::default())
}

fn update(old: Value, object: Value) -> Decision<'static> {
    admission::decide(request("UPDATE", object, Some(old)), &Policy::default())
}

fn rules(d: &Decision) -> Vec<&'static str> {
    d.violations.iter().map(|v| v.rule).collect()
}

fn out(d: &Decision) -> Value {
    d.object_json().expect("allowed with an object")
}

fn env(obj: &Value, container: usize) -> Vec<(String, String)> {
    obj["spec"]["template"]["spec"]["containers"][container]["env"]
        .as_array()
        .map(|e| {
            e.iter()
                .map(|v| {
                    (
                        v["name"].as_str().unwrap().to_string(),
                        v["value"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn names_must_be_dns1035_labels() {
    let long = "a".repeat(64);
    let cases: Vec<(Value, Option<&str>)> = vec![
        (json!({"name": "hello"}), None),
        (json!({"name": "a".repeat(63)}), None),
        (json!({"name": long}), Some("name")),
        (json!({"name": "9lives"}), Some("name")),
        (json!({"name": "my_app"}), Some("name")),
        (json!({"name": "Hello"}), Some("name")),
        (json!({"name": "hello-"}), Some("name")),
        (json!({"generateName": "hello-"}), None),
        (json!({"generateName": "a".repeat(58)}), None),
        (
            json!({"generateName": "a".repeat(59)}),
            Some("generate-name"),
        ),
        (json!({"generateName": "-x"}), Some("generate-name")),
        (json!({}), Some("name")),
    ];
    for (meta, want) in cases {
        let d = create(app(meta.clone()));
        assert_eq!(rules(&d).first().copied(), want, "{meta}");
        assert_eq!(d.allowed, want.is_none(), "{meta}");
    }
}

#[test]
fn every_violation_says_where_what_and_how() {
    let d = create(app(json!({"name": "a".repeat(64)})));
    let v = &d.violations[0];
    assert_eq!(v.path, "metadata.name");
    assert!(
        v.problem.contains("64 characters long, more than 63"),
        "{}",
        v.problem
    );
    assert!(v.fix.contains("at most 63"), "{}", v.fix);
    assert!(d.message().starts_with("metadata.name: "));
}

#[test]
fn route_host_labels_must_fit() {
    let policy = Policy {
        domain_template: DomainTemplate::new("{{.Name}}-{{.Namespace}}.{{.Domain}}", "example.com")
            .unwrap(),
        ..Policy::default()
    };
    let mut obj = app(json!({"name": "a".repeat(40), "namespace": "b".repeat(30)}));
    let d = admission::decide(request("CREATE", obj.clone(), None), &policy);
    assert_eq!(rules(&d), ["route-host"]);
    assert!(d.violations[0].problem.contains("71 characters"));
    obj["metadata"]["namespace"] = json!("b".repeat(10));
    assert!(admission::decide(request("CREATE", obj, None), &policy).allowed);
    // The default template keeps name and namespace in their own labels.
    assert!(
        create(app(
            json!({"name": "a".repeat(63), "namespace": "b".repeat(63)})
        ))
        .allowed
    );
}

#[test]
fn managed_apps_get_their_deterministic_name() {
    let d = create(managed(json!({})));
    assert!(d.allowed);
    let o = out(&d);
    assert_eq!(o["metadata"]["name"], "myapp-proj-dev");
    // A label since issue 13: the platform selects its KServices by it.
    assert_eq!(o["metadata"]["labels"]["flyte.org/app-managed"], "true");
    assert!(
        o["metadata"]["annotations"]
            .get("flyte.org/app-managed")
            .is_none()
    );
    assert_eq!(
        o["metadata"]["annotations"]["flyte.org/app-id"],
        "proj/dev/myapp"
    );

    let mut named = managed(json!({}));
    named["metadata"]["name"] = json!("myapp-proj-dev");
    assert!(create(named.clone()).allowed);

    named["metadata"]["name"] = json!("other");
    let d = create(named);
    assert_eq!(rules(&d), ["identity-name"]);
    assert!(
        d.violations[0].fix.contains("\"myapp-proj-dev\""),
        "{}",
        d.message()
    );

    // generateName is overridden by the deterministic name.
    let mut generated = managed(json!({}));
    generated["metadata"]["generateName"] = json!("x-");
    assert_eq!(
        out(&create(generated))["metadata"]["name"],
        "myapp-proj-dev"
    );
}

#[test]
fn hashed_names_warn_about_app_fqdn() {
    // Each label value fits in 63 characters; together they do not.
    let name = "a-rather-long-application-name-for-tests";
    let d = create(managed(
        json!({"flyte.org/app-name": name, "flyte.org/project": "analytics-platform-team"}),
    ));
    assert!(d.allowed, "{}", d.message());
    let want = ksvc_webhook::admission::naming::app_name("analytics-platform-team", "dev", name);
    assert!(want.hashed);
    assert_eq!(out(&d)["metadata"]["name"], want.name.as_str());
    assert!(
        d.warnings.iter().any(|w| w.contains("{app_fqdn}")),
        "{:?}",
        d.warnings
    );
}

#[test]
fn identity_labels_are_checked() {
    let cases: Vec<(Value, &str)> = vec![
        (
            app(json!({"name": "x", "labels": {"flyte.org/project": "proj"}})),
            "identity-partial",
        ),
        (
            managed(json!({"flyte.org/project": "bad/value"})),
            "identity-value",
        ),
        (managed(json!({"flyte.org/domain": ""})), "identity-value"),
        (
            managed(json!({"flyte.org/app-name": "9lives"})),
            "identity-name",
        ),
        (
            managed(json!({"flyte.org/app-name": "my_app"})),
            "identity-name",
        ),
    ];
    for (obj, rule) in cases {
        let d = create(obj.clone());
        assert_eq!(rules(&d), [rule], "{}", obj["metadata"]);
    }
}

#[test]
fn identity_labels_are_immutable_on_update() {
    let old = out(&create(managed(json!({})))).clone();
    let mut changed = old.clone();
    changed["metadata"]["labels"]["flyte.org/domain"] = json!("prod");
    let d = update(old.clone(), changed);
    assert_eq!(rules(&d), ["identity-immutable"]);
    assert!(d.violations[0].problem.contains("\"dev\" to \"prod\""));

    let mut removed = old.clone();
    removed["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .clear();
    assert!(rules(&update(old.clone(), removed)).contains(&"identity-immutable"));

    // Becoming managed later is a change of identity too.
    let plain = out(&create(app(
        json!({"name": "myapp-proj-dev", "namespace": "flyte"}),
    )))
    .clone();
    assert_eq!(
        rules(&update(plain, old.clone())),
        ["identity-immutable"; 3]
    );
    assert!(update(old.clone(), old).allowed);
}

#[test]
fn stopped_label_takes_true_or_false() {
    for (value, ok) in [
        ("true", true),
        ("false", true),
        ("yes", false),
        ("True", false),
        ("", false),
    ] {
        let d = create(app(
            json!({"name": "x", "labels": {"flyte.org/app-stopped": value}}),
        ));
        assert_eq!(d.allowed, ok, "{value}");
    }
}

#[test]
fn at_least_one_container() {
    for containers in [json!([]), json!(null)] {
        let d = create(kservice(json!({"name": "x"}), containers));
        assert_eq!(rules(&d), ["containers"]);
    }
    let d = create(kservice(json!({"name": "x"}), json!("nginx")));
    assert_eq!(rules(&d), ["object"]);
}

#[test]
fn all_violations_are_listed_at_once() {
    let obj = app(
        json!({"name": "Bad_Name", "labels": {"flyte.org/project": "p", "flyte.org/app-stopped": "maybe"}}),
    );
    let d = create(obj);
    assert_eq!(rules(&d), ["identity-partial", "name", "stopped-value"]);
    assert!(d.message().starts_with("3 problems:\n- "));
}

#[test]
fn endpoint_pattern_is_upserted_in_the_serving_container() {
    let d = create(managed(json!({})));
    assert_eq!(
        env(&out(&d), 0),
        [(
            "INTERNAL_APP_ENDPOINT_PATTERN".into(),
            "http://{app_fqdn}-proj-dev.flyte.svc.cluster.local".into()
        )]
    );
    // Unmanaged, namespace from the request.
    let d = create(app(json!({"name": "hello"})));
    assert_eq!(
        env(&out(&d), 0)[0].1,
        "http://{app_fqdn}.default.svc.cluster.local"
    );
    // The container with the port is the serving one.
    let two = kservice(
        json!({"name": "x"}),
        json!([{"name": "side", "image": "a"}, {"name": "main", "image": "b", "ports": [{"containerPort": 80}]}]),
    );
    let d = create(two);
    assert!(env(&out(&d), 0).is_empty());
    assert_eq!(env(&out(&d), 1).len(), 1);
    // A custom suffix template.
    let policy = Policy {
        mutate: Settings {
            suffix_template: "custom-{{ domain }}".into(),
            ..Settings::default()
        },
        ..Policy::default()
    };
    let d = admission::decide(request("CREATE", managed(json!({})), None), &policy);
    assert_eq!(
        env(&out(&d), 0)[0].1,
        "http://{app_fqdn}-custom-dev.flyte.svc.cluster.local"
    );
}

#[test]
fn a_user_value_is_replaced_once_with_a_warning() {
    let obj = kservice(
        json!({"name": "x"}),
        json!([{"image": "a", "env": [
            {"name": "A", "value": "1"},
            {"name": "INTERNAL_APP_ENDPOINT_PATTERN", "value": "http://mine"},
            {"name": "INTERNAL_APP_ENDPOINT_PATTERN", "value": "http://dup"},
        ]}]),
    );
    let d = create(obj);
    assert_eq!(
        env(&out(&d), 0),
        [
            ("A".into(), "1".into()),
            (
                "INTERNAL_APP_ENDPOINT_PATTERN".into(),
                "http://{app_fqdn}.default.svc.cluster.local".into()
            )
        ]
    );
    assert!(
        d.warnings.iter().any(|w| w.contains("http://mine")),
        "{:?}",
        d.warnings
    );
}

#[test]
fn a_user_value_spelled_with_escapes_is_still_found_in_a_review() {
    // The review parser leaves env entries as text unless one may be ours: an escaped name is.
    let body = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1",
        "kind":{"group":"serving.knative.dev","version":"v1","kind":"Service"},"operation":"CREATE",
        "namespace":"default","object":{"apiVersion":"serving.knative.dev/v1","kind":"Service",
        "metadata":{"name":"x"},"spec":{"template":{"spec":{"containers":[{"image":"a","env":[
        {"name":"A","value":"1"},{"name":"\u0049NTERNAL_APP_ENDPOINT_PATTERN","value":"http://mine"}]}]}}}}}}"#;
    let reviewed = admission::review(body.as_bytes(), &Policy::default()).unwrap();
    let response: Value = serde_json::from_slice(&reviewed.body).unwrap();
    let patch = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        response["response"]["patch"].as_str().unwrap(),
    )
    .unwrap();
    let ops: Value = serde_json::from_slice(&patch).unwrap();
    let env_ops: Vec<&Value> = ops
        .as_array()
        .unwrap()
        .iter()
        .filter(|op| op["path"].as_str().unwrap().contains("/env"))
        .collect();
    assert_eq!(
        env_ops,
        [
            &json!({"op": "add", "path": "/spec/template/spec/containers/0/env/1/value",
                 "value": "http://{app_fqdn}.default.svc.cluster.local"})
        ]
    );
}

#[test]
fn spec_sha_is_stamped_and_overwritten() {
    let mut obj = app(json!({"name": "x", "annotations": {"flyte.org/spec-sha": "forged"}}));
    let sha = out(&create(obj.clone()))["metadata"]["annotations"]["flyte.org/spec-sha"].clone();
    assert_eq!(sha.as_str().unwrap().len(), 16);
    assert_ne!(sha, "forged");
    // Any user-visible spec change moves it; metadata changes do not.
    obj["metadata"]["labels"] = json!({"team": "a"});
    assert_eq!(
        out(&create(obj.clone()))["metadata"]["annotations"]["flyte.org/spec-sha"],
        sha
    );
    obj["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
    assert_ne!(
        out(&create(obj))["metadata"]["annotations"]["flyte.org/spec-sha"],
        sha
    );
}

fn stopped(obj: &Value, value: &str) -> Value {
    let mut o = obj.clone();
    o["metadata"]["labels"]["flyte.org/app-stopped"] = json!(value);
    o
}

#[test]
fn stop_and_start_through_the_label() {
    let mut base = managed(json!({}));
    base["spec"]["template"]["metadata"] =
        json!({"annotations": {"autoscaling.knative.dev/min-scale": "2"}});
    let running = out(&create(base)).clone();
    let d = update(running.clone(), stopped(&running, "true"));
    let s = out(&d).clone();
    assert_eq!(
        s["metadata"]["labels"]["networking.knative.dev/visibility"],
        "cluster-local"
    );
    assert_eq!(
        s["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"],
        "0"
    );
    assert!(
        s["spec"]["template"]["metadata"]["annotations"]
            .get("autoscaling.knative.dev/initial-scale")
            .is_none()
    );
    assert_eq!(
        s["metadata"]["annotations"]["flyte.org/spec-sha"],
        running["metadata"]["annotations"]["flyte.org/spec-sha"]
    );
    // Re-admitting the stopped object changes nothing (no new revision).
    assert!(update(s.clone(), s.clone()).patch.is_empty());
    // Start by setting "false", or by removing the label: both restore what the user had.
    for start in [stopped(&s, "false"), {
        let mut o = s.clone();
        o["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("flyte.org/app-stopped");
        o
    }] {
        let back = out(&update(s.clone(), start.clone())).clone();
        let mut want = running.clone();
        let labels = want["metadata"]["labels"].as_object_mut().unwrap();
        if let Some(v) = start["metadata"]["labels"].get("flyte.org/app-stopped") {
            labels.insert("flyte.org/app-stopped".into(), v.clone());
        }
        assert_eq!(back, want);
    }
}

#[test]
fn stop_sets_initial_scale_only_when_the_cluster_allows_it() {
    let policy = Policy {
        mutate: Settings {
            allow_zero_initial_scale: true,
            ..Settings::default()
        },
        ..Policy::default()
    };
    let obj = stopped(&app(json!({"name": "x"})), "true");
    let d = admission::decide(request("CREATE", obj, None), &policy);
    let ann = &out(&d)["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(ann["autoscaling.knative.dev/initial-scale"], "0");
    assert_eq!(ann["autoscaling.knative.dev/min-scale"], "0");
}

#[test]
fn a_user_change_while_stopped_is_what_start_restores() {
    let running = out(&create(app(json!({"name": "x"})))).clone();
    let s = out(&update(running.clone(), stopped(&running, "true"))).clone();
    let mut edited = s.clone();
    edited["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] =
        json!("5");
    let s2 = out(&update(s.clone(), edited)).clone();
    assert_eq!(
        s2["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"],
        "0"
    );
    let started = out(&update(s2.clone(), stopped(&s2, "false"))).clone();
    assert_eq!(
        started["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"],
        "5"
    );
}

#[test]
fn other_kinds_operations_and_subresources_pass_unchanged() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "Bad_Name"}});
    let mut req = request("CREATE", pod, None);
    req.kind = Some(GroupVersionKind {
        group: "".into(),
        version: "v1".into(),
        kind: "Pod".into(),
    });
    let d = admission::decide(req, &Policy::default());
    assert!(d.allowed && d.patch.is_empty());

    for op in ["DELETE", "CONNECT"] {
        let d = admission::decide(
            request(op, app(json!({"name": "Bad"})), None),
            &Policy::default(),
        );
        assert!(d.allowed && d.patch.is_empty(), "{op}");
    }
    let mut status = request("UPDATE", app(json!({"name": "Bad"})), None);
    status.sub_resource = Some("status".into());
    assert!(
        admission::decide(status, &Policy::default())
            .patch
            .is_empty()
    );

    let mut missing = request("CREATE", Value::Null, None);
    missing.object = None;
    assert_eq!(
        rules(&admission::decide(missing, &Policy::default())),
        ["object"]
    );
}

#[test]
fn unknown_fields_survive_and_a_second_pass_is_empty() {
    let mut obj = managed(json!({}));
    obj["spec"]["futureField"] = json!({"x": [1, 2.5, null]});
    obj["metadata"]["managedFields"] = json!([{"manager": "kubectl"}]);
    obj["spec"]["template"]["spec"]["containers"][0]["newContainerField"] = json!(true);
    let first = create(obj.clone());
    let o = out(&first).clone();
    assert_eq!(o["spec"]["futureField"], obj["spec"]["futureField"]);
    assert_eq!(
        o["metadata"]["managedFields"],
        obj["metadata"]["managedFields"]
    );
    assert_eq!(
        o["spec"]["template"]["spec"]["containers"][0]["newContainerField"],
        true
    );
    let again = update(o.clone(), o.clone());
    assert!(again.allowed && again.patch.is_empty() && again.warnings.is_empty());
}

#[test]
fn dry_run_gets_the_same_answer() {
    let body = |dry: bool| {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": "CREATE", "dryRun": dry,
                "kind": {"group": "serving.knative.dev", "version": "v1", "kind": "Service"},
                "object": managed(json!({}))}
        }))
        .unwrap()
    };
    let wet = admission::review(&body(false), &Policy::default()).unwrap();
    let dry = admission::review(&body(true), &Policy::default()).unwrap();
    assert_eq!(wet.body, dry.body);
    assert!(dry.summary.dry_run);
}

/// A rule that reads a field the skim table leaves as text would find nothing in production; in
/// a debug build the read panics and names the path to add to `admission::skim`.
#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "request.object.spec.template.spec.nodeSelector")]
fn a_rule_reading_a_skimmed_field_trips_the_debug_assertion() {
    let mut obj = app(json!({"name": "x"}));
    obj["spec"]["template"]["spec"]["nodeSelector"] = json!({"disk": "ssd"});
    let req = request("CREATE", obj, None);
    let object = req.object.unwrap();
    // What a rule on node selectors would read.
    let _ = ksvc::get(
        &object,
        &["spec", "template", "spec", "nodeSelector", "disk"],
    );
}

/// `Request::kservice`, which the offline CLI decides on, reads objects as the server does.
#[test]
fn kservice_requests_are_skimmed_as_reviews_are() {
    let mut obj = app(json!({"name": "x"}));
    obj["spec"]["template"]["spec"]["nodeSelector"] = json!({"disk": "ssd"});
    let from_cli = Request::kservice("u-1", "CREATE", "default", obj.clone(), None);
    let from_review = request("CREATE", obj, None);
    let pod = |r: &Request| {
        let object = r.object.as_ref().unwrap();
        matches!(
            ksvc::get(object, &["spec", "template", "spec"])
                .and_then(|p| p.as_object()?.get("nodeSelector")),
            Some(Node::Raw { .. })
        )
    };
    assert!(pod(&from_cli) && pod(&from_review));
}

/// A spec whose canonical JSON cannot be written is refused with an internal error (code 500 in
/// the status, no patch), never hashed as something else.
#[test]
fn a_spec_that_cannot_be_hashed_is_refused_never_given_a_wrong_sha() {
    let mut req = request("CREATE", managed(json!({})), None);
    let spec = req
        .object
        .as_mut()
        .and_then(|o| o.get_mut("spec"))
        .and_then(|s| s.as_object_mut())
        .unwrap();
    // Text no parser would have kept: as if it had skimmed a value it cannot read again.
    let broken = Node::Raw {
        text: "{\"a\":".into(),
        canonical: false,
        at: Default::default(),
    };
    spec.insert("broken", broken);
    let d = admission::decide(req, &Policy::default());
    assert!(!d.allowed && d.patch.is_empty());
    assert!(
        d.failure.as_deref().unwrap().contains("spec SHA"),
        "{:?}",
        d.failure
    );
    let response: Value = serde_json::from_slice(&admission::encode("u-1", &d).unwrap()).unwrap();
    let response = &response["response"];
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 500);
    assert_eq!(response["status"]["reason"], "InternalError");
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("does not read as JSON")
    );
    assert!(response.get("patch").is_none());
}

/// Issue 28: annotations past Kubernetes' 256 KiB, which kube-apiserver never stores, are
/// refused; at the limit they pass.
#[test]
fn annotations_over_kubernetes_limit_are_refused() {
    let with = |bytes: usize| {
        app(json!({"name": "myapp", "namespace": "default",
                   "annotations": {"example.com/big": "x".repeat(bytes)}}))
    };
    let key = "example.com/big".len();
    let at_limit = create(with(256 * 1024 - key));
    assert!(at_limit.allowed, "{:?}", at_limit.violations);
    let over = create(with(256 * 1024 - key + 1));
    assert!(!over.allowed);
    let said = over.violations[0].to_string();
    assert!(
        said.contains("metadata.annotations: hold 262145 bytes"),
        "{said}"
    );
}
