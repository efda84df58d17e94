//! `ksvc-webhook check` against the fake API: a healthy install passes every check and exits 0;
//! each way an install breaks fails its check with a × line, what to do, and exit 1. The status
//! API behind the fake's service proxy is the real router; admission in the fake's write path is
//! the webhook's decision, so the admission check's dry run is really mutated.
#![allow(clippy::unwrap_used)]

use base64::Engine as _;
use ksvc_webhook::admission::Policy;
use ksvc_webhook::certmgr::pki::{self, CertKey};
use ksvc_webhook::cli::serve::{CertMode, api_calls};
use ksvc_webhook::server::role::Role;
use serde_json::{Value, json};
use support::FakeApi;
use support::cli::{Ran, run, run_against};
use support::fake_api::Fault;
use time::{Duration, OffsetDateTime};

const NS: &str = "ksvc-system";
const SA: &str = "system:serviceaccount:ksvc-system:ksvc-webhook";
const CONTROLLER_SA: &str = "system:serviceaccount:ksvc-system:ksvc-webhook-controller";

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A CA and a serving certificate for the Service, issued `ago` days ago, valid for `days`.
fn material(ago: i64, days: i64) -> (CertKey, CertKey) {
    let issued = OffsetDateTime::now_utc() - Duration::days(ago);
    let ca = pki::issue_ca("ksvc-webhook-ca", issued, Duration::days(days * 10)).unwrap();
    let sans = pki::service_sans("ksvc-webhook", NS);
    let leaf = pki::issue_serving(&ca, &sans, issued, Duration::days(days)).unwrap();
    (ca, leaf)
}

fn secret(leaf: &CertKey) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
           "metadata": {"name": "ksvc-webhook-certs", "namespace": NS},
           "data": {"tls.crt": b64(&leaf.cert_pem), "tls.key": b64(&leaf.key_pem)}})
}

fn webhook_config(kind: &str, name: &str, ca: &CertKey) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name},
           "webhooks": [{"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
                         "clientConfig": {"caBundle": b64(&ca.cert_pem),
                                          "service": {"name": "ksvc-webhook", "namespace": NS}}}]})
}

fn endpoints(ready: bool) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
           "metadata": {"name": "ksvc-webhook-abcde", "namespace": NS,
                        "labels": {"kubernetes.io/service-name": "ksvc-webhook"}},
           "endpoints": [{"addresses": ["10.0.0.7"], "conditions": {"ready": ready}}]})
}

/// Every API call the server makes, allowed for `user` but `except` these (`verb resource`).
fn allow_server_calls(fake: &FakeApi, user: &str, except: &[(&str, &str)]) {
    for call in api_calls(Role::All, CertMode::SelfManaged)
        .into_iter()
        .flatten()
    {
        if !except.contains(&(call.verb, call.resource)) {
            fake.allow(user, call.group, call.resource, call.verb);
        }
    }
}

/// A healthy install: Knative's CRD, both configurations trusting the certificate in the Secret,
/// a ready endpoint, the RBAC, a catalogue that loads, and one opted-out namespace.
async fn healthy() -> (FakeApi, CertKey) {
    let fake = FakeApi::start().await;
    fake.put(
        "customresourcedefinitions",
        json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "services.serving.knative.dev"},
        "spec": {"group": "serving.knative.dev", "scope": "Namespaced",
                 "names": {"plural": "services", "kind": "Service"},
                 "versions": [{"name": "v1", "served": true, "storage": true}]},
        "status": {"conditions": [{"type": "Established", "status": "True"}]}}),
    );
    let (ca, leaf) = material(1, 365);
    install_certificates(&fake, &ca, &leaf);
    fake.put("endpointslices", endpoints(true));
    let catalogue = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/sidecars.yaml"
    ))
    .unwrap();
    fake.put(
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "ksvc-webhook-sidecars", "namespace": NS},
        "data": {"sidecars.yaml": catalogue}}),
    );
    fake.put_namespace("legacy", &[("ksvc-webhook.flyte.org/inject", "disabled")]);
    fake.put_namespace("team-a", &[]);
    allow_server_calls(&fake, SA, &[]);
    allow_server_calls(&fake, CONTROLLER_SA, &[]);
    fake.admit_with(Policy::default());
    let status =
        support::status_api::setup(fake.client(), std::time::Duration::from_secs(10), (8, 8));
    fake.proxy_to(status.app);
    (fake, ca)
}

/// The checks a run failed, by id.
async fn failed_checks(fake: &FakeApi) -> Vec<String> {
    let json = run(fake, &["check", "-o", "json"]).await;
    assert_eq!(json.code, Some(1), "{json:?}");
    let report: Value = serde_json::from_str(&json.stdout).unwrap();
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| c["check"].as_str().unwrap().to_owned())
        .collect()
}

/// The × lines of a run.
fn failures(ran: &Ran) -> Vec<&str> {
    ran.stdout.lines().filter(|l| l.starts_with("× ")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_install_passes_every_check() {
    let (fake, _) = healthy().await;
    let ran = run(&fake, &["check"]).await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(lines.len(), 11, "{}", ran.stdout);
    assert!(lines.iter().all(|l| l.starts_with("✓ ")), "{}", ran.stdout);
    let calls = |role| -> usize {
        api_calls(role, CertMode::SelfManaged)
            .iter()
            .map(|c| c.len())
            .sum()
    };
    for needle in [
        "✓ Knative Services are served (services.serving.knative.dev v1)",
        "✓ MutatingWebhookConfiguration zz-ksvc-webhook.flyte.org exists and its caBundle trusts the serving certificate",
        "✓ Service ksvc-system/ksvc-webhook has 1 ready endpoint",
        &format!(
            "✓ {SA} may make all {} API calls the admission part makes",
            calls(Role::Admission)
        ),
        &format!(
            "✓ {CONTROLLER_SA} may make all {} API calls the controller part makes",
            calls(Role::Controller)
        ),
        "✓ the sidecar catalogue in ConfigMap ksvc-system/ksvc-webhook-sidecars loads (2 templates)",
        "✓ namespaces opted out of the webhook: legacy",
        "✓ the status API behind Service ksvc-system/ksvc-webhook-controller answers (401: it asks for a token, which the API server's proxy does not pass on)",
    ] {
        assert!(lines.contains(&needle), "{needle}\n{}", ran.stdout);
    }
    let admission = lines.last().unwrap();
    assert!(
        admission.starts_with("✓ admission answers a server dry run in default: name probe-ksvc-webhook-check-check, flyte.org/spec-sha "),
        "{admission}"
    );
    assert!(
        admission.ends_with("; an invalid KService is refused"),
        "{admission}"
    );
    assert!(
        admission.contains(", env INTERNAL_APP_ENDPOINT_PATTERN="),
        "{admission}"
    );
    let dry_runs = fake.requests_to(axum::http::Method::POST, "services");
    assert!(
        dry_runs
            .iter()
            .all(|r| r.query.get("dryRun").map(String::as_str) == Some("All"))
    );
    assert!(fake.all("services").is_empty(), "a dry run stores nothing");
    assert!(ran.stdout.contains("is valid until"), "{}", ran.stdout);
    let json = run(&fake, &["check", "-o", "json"]).await;
    assert_eq!(json.code, Some(0));
    let report: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(report["ok"], true);
    assert_eq!(report["checks"].as_array().unwrap().len(), 11);
    assert_eq!(report["checks"][0]["check"], "knative-crd");
}

/// Break the healthy install with `breaks`; `check` fails exactly the check `id` with `line`.
async fn fails_with(id: &str, breaks: impl FnOnce(&FakeApi), line: &str) {
    let (fake, _) = healthy().await;
    breaks(&fake);
    let ran = run(&fake, &["check"]).await;
    assert_eq!(ran.code, Some(1), "{id}: {ran:?}");
    assert_eq!(failures(&ran), [line], "{id}: {}", ran.stdout);
    assert!(
        ran.stderr.starts_with("error: 1 of 11 checks failed"),
        "{id}: {}",
        ran.stderr
    );
    let json = run(&fake, &["check", "-o", "json"]).await;
    assert_eq!(json.code, Some(1));
    let report: Value = serde_json::from_str(&json.stdout).unwrap();
    let failed: Vec<&Value> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false)
        .collect();
    assert_eq!(failed.len(), 1, "{id}: {}", json.stdout);
    assert_eq!(failed[0]["check"], id);
    assert!(
        failed[0]["hint"].is_string(),
        "{id}: a failure says what to do"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_configuration_fails() {
    fails_with(
        "revision-guard",
        |fake| {
            fake.remove(
                "validatingwebhookconfigurations",
                "",
                "ksvc-webhook-revision-guard.flyte.org",
            )
        },
        "× ValidatingWebhookConfiguration ksvc-webhook-revision-guard.flyte.org does not exist",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_ca_bundle_fails() {
    let (other_ca, _) = material(1, 365);
    fails_with(
        "mutating-webhook",
        |fake| fake.put("mutatingwebhookconfigurations", webhook_config("MutatingWebhookConfiguration", "zz-ksvc-webhook.flyte.org", &other_ca)),
        "× MutatingWebhookConfiguration zz-ksvc-webhook.flyte.org: the caBundle of zz-ksvc-webhook.flyte.org does not trust the serving certificate in Secret ksvc-system/ksvc-webhook-certs (stale caBundle)",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ready_endpoints_fail() {
    fails_with(
        "endpoints",
        |fake| fake.put("endpointslices", endpoints(false)),
        "× Service ksvc-system/ksvc-webhook has no ready endpoints",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_api_that_fails_inside_fails_its_check() {
    use ksvc_webhook::apps::http::{Options, router};
    let not_synced = router(
        ksvc_webhook::watch::hub::Hub::new(),
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        Options::unauthenticated(8),
    );
    fails_with(
        "status-api",
        |fake| fake.proxy_to(not_synced),
        "× the status API behind Service ksvc-system/ksvc-webhook-controller answers 503: the app cache has not synced with the cluster yet; retry shortly",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_rbac_fails_with_a_line_per_call() {
    let (fake, _) = healthy().await;
    fake.remove("fake-rbac", "", &format!("{SA}.update.secrets."));
    fake.remove(
        "fake-rbac",
        "",
        &format!("{CONTROLLER_SA}.watch.revisions.serving.knative.dev"),
    );
    fake.remove(
        "fake-rbac",
        "",
        &format!("{CONTROLLER_SA}.create.events.events.k8s.io"),
    );
    let ran = run(&fake, &["check"]).await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    let calls = |role| -> usize {
        api_calls(role, CertMode::SelfManaged)
            .iter()
            .map(|c| c.len())
            .sum()
    };
    // Each part's account is reviewed for its own part's calls, and named in its own line.
    let expected = [
        format!(
            "× {SA} may not make 1 of the {} API calls the admission part makes:
    - update secrets/ksvc-webhook-certs
    apply the RBAC of manifests/ (kubectl apply -k manifests/)
",
            calls(Role::Admission)
        ),
        format!(
            "× {CONTROLLER_SA} may not make 2 of the {} API calls the controller part makes:
    - watch revisions.serving.knative.dev
    - create events.events.k8s.io
    apply the RBAC of manifests/ (kubectl apply -k manifests/)
",
            calls(Role::Controller)
        ),
    ];
    for expected in expected {
        assert!(ran.stdout.contains(&expected), "{expected}\n{}", ran.stdout);
    }
    assert_eq!(failures(&ran).len(), 2, "{}", ran.stdout);
}

/// An install with cert-manager (cainjector's annotation on the webhook configuration): the
/// admission part writes no Secret and no revision guard bundle, so its account is reviewed for
/// the failurePolicy switch's calls and its Lease only, and passes without the Secret's grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_cert_manager_the_admission_part_is_reviewed_for_the_switchs_calls() {
    let (fake, _) = healthy().await;
    let annotated = fake.edit(
        "mutatingwebhookconfigurations",
        "",
        "zz-ksvc-webhook.flyte.org",
        |config| {
            config["metadata"]["annotations"] =
                json!({"cert-manager.io/inject-ca-from": "ksvc-system/ksvc-webhook-serving"});
        },
    );
    assert!(annotated);
    for (verb, resource, group) in [
        ("get", "secrets", ""),
        ("create", "secrets", ""),
        ("update", "secrets", ""),
        (
            "get",
            "validatingwebhookconfigurations",
            "admissionregistration.k8s.io",
        ),
        (
            "patch",
            "validatingwebhookconfigurations",
            "admissionregistration.k8s.io",
        ),
    ] {
        fake.remove("fake-rbac", "", &format!("{SA}.{verb}.{resource}.{group}"));
    }
    let ran = run(&fake, &["check"]).await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let calls: usize = api_calls(Role::Admission, CertMode::CertManager)
        .iter()
        .map(|c| c.len())
        .sum();
    let line = format!("✓ {SA} may make all {calls} API calls the admission part makes");
    assert!(
        ran.stdout.lines().any(|l| l == line),
        "{line}\n{}",
        ran.stdout
    );
    // Without the annotation the same grants fall short: self-managed certificates need them.
    fake.edit(
        "mutatingwebhookconfigurations",
        "",
        "zz-ksvc-webhook.flyte.org",
        |config| config["metadata"]["annotations"] = json!({}),
    );
    let ran = run(&fake, &["check"]).await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(
        ran.stdout.contains("- update secrets/ksvc-webhook-certs"),
        "{}",
        ran.stdout
    );
}

/// The failure that kube-apiserver gives a write when it cannot call the webhook.
fn cannot_call(why: &'static str) -> Fault {
    Fault::Refusal(500, "InternalError", why)
}

/// Four ways an install breaks, each failing its own set of checks with its own words; the
/// Service missing and the server stopped used to pass the status API check on the API server's
/// own 404 and 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_way_the_install_breaks_has_its_own_failures() {
    let service_missing = || async {
        let (fake, _) = healthy().await;
        fake.proxy_to_nothing();
        fake.remove("endpointslices", NS, "ksvc-webhook-abcde");
        fake.inject("create", "services", None, cannot_call("Internal error occurred: failed calling webhook \"zz-ksvc-webhook.flyte.org\": failed to call webhook: Post \"https://ksvc-webhook.ksvc-system.svc:443/mutate?timeout=10s\": service \"ksvc-webhook\" not found"), 100);
        fake
    };
    let stopped = || async {
        let (fake, _) = healthy().await;
        fake.proxy_without_endpoints();
        fake.put("endpointslices", endpoints(false));
        fake.inject("create", "services", None, cannot_call("Internal error occurred: failed calling webhook \"zz-ksvc-webhook.flyte.org\": failed to call webhook: Post \"https://ksvc-webhook.ksvc-system.svc:443/mutate?timeout=10s\": no endpoints available for service \"ksvc-webhook\""), 100);
        fake
    };
    let stale_bundle = || async {
        let (fake, _) = healthy().await;
        let (other_ca, _) = material(1, 365);
        fake.put(
            "mutatingwebhookconfigurations",
            webhook_config(
                "MutatingWebhookConfiguration",
                "zz-ksvc-webhook.flyte.org",
                &other_ca,
            ),
        );
        fake.inject("create", "services", None, cannot_call("Internal error occurred: failed calling webhook \"zz-ksvc-webhook.flyte.org\": failed to call webhook: Post \"https://ksvc-webhook.ksvc-system.svc:443/mutate?timeout=10s\": tls: failed to verify certificate: x509: certificate signed by unknown authority"), 100);
        fake
    };
    let refusing = || async {
        let (fake, _) = healthy().await;
        fake.inject("create", "services", None, Fault::Refusal(400, "BadRequest", "admission webhook \"zz-ksvc-webhook.flyte.org\" denied the request: every write is refused"), 100);
        fake
    };
    let cases = [
        (
            service_missing().await,
            vec!["endpoints", "status-api", "admission"],
            "× Service ksvc-system/ksvc-webhook-controller does not exist (the API server answers 404: services \"ksvc-webhook-controller\" not found)",
        ),
        (
            stopped().await,
            vec!["endpoints", "status-api", "admission"],
            "× no pod of Service ksvc-system/ksvc-webhook-controller answers (the API server answers 503: no endpoints available for service \"ksvc-webhook-controller\")",
        ),
        (
            stale_bundle().await,
            vec!["mutating-webhook", "admission"],
            "× the API server cannot call the webhook: Internal error occurred: failed calling webhook \"zz-ksvc-webhook.flyte.org\": failed to call webhook: Post \"https://ksvc-webhook.ksvc-system.svc:443/mutate?timeout=10s\": tls: failed to verify certificate: x509: certificate signed by unknown authority",
        ),
        (
            refusing().await,
            vec!["admission"],
            "× admission refuses a valid KService in default (server dry run, 400): admission webhook \"zz-ksvc-webhook.flyte.org\" denied the request: every write is refused",
        ),
    ];
    let mut seen = Vec::new();
    for (fake, checks, line) in cases {
        assert_eq!(failed_checks(&fake).await, checks, "{line}");
        let ran = run(&fake, &["check"]).await;
        assert!(failures(&ran).contains(&line), "{line}\n{}", ran.stdout);
        seen.push(failures(&ran).join("\n"));
    }
    seen.dedup();
    assert_eq!(seen.len(), 4, "each breakage reads differently: {seen:#?}");
}

/// An API server that cannot be reached is one line, not a × for every read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_is_one_line() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let ran = run_against(&format!("http://{addr}"), &["check"]).await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert_eq!(
        ran.stdout.lines().next().unwrap(),
        format!(
            "× cannot reach the API server {addr}: The connection to the server {addr} was refused - did you specify the right host or port?"
        )
    );
    assert_eq!(failures(&ran).len(), 1, "{}", ran.stdout);
    assert!(
        ran.stderr.starts_with("error: 1 of 1 checks failed"),
        "{}",
        ran.stderr
    );
}

/// The serving certificate `leaf` in the Secret, and `ca` in both webhook configurations.
fn install_certificates(fake: &FakeApi, ca: &CertKey, leaf: &CertKey) {
    fake.put("secrets", secret(leaf));
    for (resource, kind, name) in [
        (
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            "zz-ksvc-webhook.flyte.org",
        ),
        (
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            "ksvc-webhook-revision-guard.flyte.org",
        ),
    ] {
        fake.put(resource, webhook_config(kind, name, ca));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_fails_its_check_and_the_trust_checks() {
    let (fake, _) = healthy().await;
    let (ca, old) = material(40, 30);
    install_certificates(&fake, &ca, &old);
    let ran = run(&fake, &["check", "-o", "json"]).await;
    assert_eq!(ran.code, Some(1));
    let report: Value = serde_json::from_str(&ran.stdout).unwrap();
    let failed: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    // kube-apiserver would refuse the expired certificate too.
    assert_eq!(
        failed,
        ["mutating-webhook", "revision-guard", "certificate"]
    );
    let text = run(&fake, &["check"]).await;
    let expired = failures(&text)
        .into_iter()
        .find(|l| l.contains("expired on"))
        .unwrap();
    assert!(
        expired.starts_with(
            "× the serving certificate in Secret ksvc-system/ksvc-webhook-certs expired on "
        ),
        "{expired}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_crd_and_a_broken_catalogue_fail() {
    fails_with(
        "knative-crd",
        |fake| {
            fake.remove(
                "customresourcedefinitions",
                "",
                "services.serving.knative.dev",
            )
        },
        "× the CRD services.serving.knative.dev is not installed",
    )
    .await;
    let (fake, _) = healthy().await;
    fake.put(
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "ksvc-webhook-sidecars", "namespace": NS},
        "data": {"sidecars.yaml": "templates: [not a map]\n"}}),
    );
    let ran = run(&fake, &["check"]).await;
    assert_eq!(ran.code, Some(1));
    let failed = failures(&ran);
    assert_eq!(failed.len(), 1, "{}", ran.stdout);
    assert!(
        failed[0].starts_with(
            "× the sidecar catalogue in ConfigMap ksvc-system/ksvc-webhook-sidecars does not load: "
        ),
        "{}",
        failed[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_repeats_until_the_install_is_healthy() {
    let (fake, _) = healthy().await;
    fake.put("endpointslices", endpoints(false));
    let (ran, ()) = tokio::join!(
        run(&fake, &["check", "--wait", "--timeout", "30s"]),
        async {
            support::poll::until("a first round of checks", support::poll::LIMIT, || {
                fake.requests()
                    .iter()
                    .filter(|r| r.resource == "endpointslices")
                    .count()
                    >= 1
            })
            .await;
            fake.put("endpointslices", endpoints(true));
        }
    );
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(
        ran.stderr.contains("waiting for: endpoints"),
        "{}",
        ran.stderr
    );
    let late = run(
        &fake,
        &[
            "check",
            "--wait",
            "--timeout",
            "1s",
            "--webhook-namespace",
            "elsewhere",
        ],
    )
    .await;
    assert_eq!(late.code, Some(1));
}

/// An empty cluster with Knative Serving's CRD, and a user who may create every kind.
async fn empty_cluster() -> FakeApi {
    let fake = FakeApi::start().await;
    fake.put(
        "customresourcedefinitions",
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "services.serving.knative.dev"},
               "spec": {"versions": [{"name": "v1", "served": true, "storage": true}]},
               "status": {"conditions": [{"type": "Established", "status": "True"}]}}),
    );
    // The kubeconfig's user, not impersonated.
    for (_, group, resource, _) in ksvc_webhook::cli::check::pre::BASE_KINDS {
        fake.allow("", group, resource, "create");
    }
    fake
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_passes_on_an_empty_cluster_and_fails_once_without_knative() {
    let fake = empty_cluster().await;
    let ran = run(&fake, &["check", "--pre"]).await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert_eq!(
        ran.stdout,
        "✓ the API server runs Kubernetes v1.35.0-fake, 1.33 or newer
✓ Knative Services are served (services.serving.knative.dev v1)
✓ you may create all 12 kinds the install holds
✓ namespace ksvc-system is free: the install creates it
✓ no webhook configuration of ksvc-webhook is there yet
"
    );
    fake.remove(
        "customresourcedefinitions",
        "",
        "services.serving.knative.dev",
    );
    let ran = run(&fake, &["check", "--pre"]).await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert_eq!(
        failures(&ran),
        ["× the CRD services.serving.knative.dev is not installed"]
    );
    assert!(
        ran.stdout.contains("    install Knative Serving\n"),
        "{}",
        ran.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_names_what_stands_in_the_way() {
    let fake = empty_cluster().await;
    fake.remove(
        "fake-rbac",
        "",
        ".create.clusterroles.rbac.authorization.k8s.io",
    );
    fake.put_namespace("ksvc-system", &[]);
    let (ca, _) = material(1, 365);
    fake.put(
        "mutatingwebhookconfigurations",
        webhook_config(
            "MutatingWebhookConfiguration",
            "zz-ksvc-webhook.flyte.org",
            &ca,
        ),
    );
    let ran = run(&fake, &["check", "--pre", "--cert-manager", "-o", "json"]).await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    let report: Value = serde_json::from_str(&ran.stdout).unwrap();
    let failed: Vec<(&str, &Value)> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| (c["check"].as_str().unwrap(), &c["details"]))
        .collect();
    assert_eq!(
        failed,
        [
            (
                "install-permissions",
                &json!([
                    "create ClusterRole",
                    "create Certificate in ksvc-system",
                    "create Issuer in ksvc-system"
                ])
            ),
            ("namespace", &Value::Null),
            ("cert-manager-crd", &Value::Null),
            ("cert-manager-crd", &Value::Null),
            (
                "no-previous-install",
                &json!(["MutatingWebhookConfiguration zz-ksvc-webhook.flyte.org"])
            ),
        ],
        "{}",
        ran.stdout
    );
}
