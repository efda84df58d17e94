//! The status API (`/apps`) with real ServiceAccount tokens: kube-apiserver answers the
//! webhook's TokenReviews and SubjectAccessReviews, authorized by the manifests' RBAC and by a
//! Role of the reader's own; and `ksvc-webhook drift`'s default read, the loopback status
//! listener, gives what `/apps` and the `ksvc_webhook_drift_apps` gauge give.

use std::collections::BTreeMap;

use std::process::Command;
use std::time::Duration;
use support::poll;

use base64::Engine;
use support::control_plane::{ControlPlane, MUTATING, Webhook};

use crate::objects::{example, text};

/// A ServiceAccount `reader` in `namespace` that may read KServices there (and nowhere else).
pub fn reader(plane: &ControlPlane, namespace: &str) {
    let yaml = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: reader, namespace: {namespace}}}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: ksvc-reader, namespace: {namespace}}}\n\
         rules:\n- apiGroups: [serving.knative.dev]\n  resources: [services]\n  verbs: [get, list, watch]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: ksvc-reader, namespace: {namespace}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: ksvc-reader}}\n\
         subjects: [{{kind: ServiceAccount, name: reader, namespace: {namespace}}}]\n"
    );
    plane
        .kubectl_in(&["apply", "-f", "-"], yaml.as_bytes())
        .ok("create the reader");
}

/// `GET path` on the controller part (the status API) with `token`, verifying its certificate
/// (the admission part's, which it serves) by the published CA for the Service's name, as
/// kube-apiserver does: the HTTP status and the body.
pub fn get(plane: &ControlPlane, token: &str, path: &str) -> (u16, String) {
    let config = plane.get_json(&["mutatingwebhookconfiguration", MUTATING]);
    let ca = base64::engine::general_purpose::STANDARD
        .decode(text(&config, "/webhooks/0/clientConfig/caBundle"))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, ca).unwrap();
    let host = "ksvc-webhook.ksvc-system.svc";
    let port = plane.status_port;
    let out = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "--cacert"])
        .arg(&ca_file)
        .arg("--resolve")
        .arg(format!("{host}:{port}:127.0.0.1"))
        .arg("-H")
        .arg(format!("Authorization: Bearer {token}"))
        .arg(format!("https://{host}:{port}{path}"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = out.rsplit_once('\n').unwrap();
    (code.parse().unwrap_or(0), body.to_owned())
}

/// `ksvc-webhook drift`'s default answer (the loopback status listener, read with
/// `--status-url`) for `ns` is `/apps?namespace=NS` as `reader` of `ns` reads it through the
/// status API, and for every namespace the gauge `ksvc_webhook_drift_apps{reason}` of the same
/// process counts what it reports. Read until all three agree (the cache moves between reads),
/// at most 30 s; returns the report of `ns`.
pub fn drift_agrees_with_the_server(
    plane: &ControlPlane,
    webhook: &Webhook,
    ns: &str,
) -> serde_json::Value {
    let token = plane.token(ns, "reader", None);
    let start = std::time::Instant::now();
    loop {
        let report = crate::readmit::server_drift_report(plane, webhook, Some(ns));
        let (code, body) = get(plane, &token, &format!("/apps?namespace={ns}"));
        let apps: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let served: Vec<serde_json::Value> = apps
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                serde_json::json!({"namespace": r["namespace"], "name": r["name"],
                               "drift": r["drift"], "new_revision": r["drift_new_revision"]})
            })
            .collect();
        let all = crate::readmit::server_drift_report(plane, webhook, None);
        let mut counted: BTreeMap<String, u64> = BTreeMap::new();
        for row in all.as_array().unwrap() {
            for finding in row["drift"].as_array().unwrap() {
                *counted
                    .entry(finding["reason"].as_str().unwrap().to_owned())
                    .or_default() += 1;
            }
        }
        let (_, metrics) = get(plane, &token, "/metrics");
        let gauge: BTreeMap<String, u64> = metrics
            .lines()
            .filter_map(|l| l.strip_prefix("ksvc_webhook_drift_apps{reason=\""))
            .filter_map(|l| l.split_once("\"} "))
            .map(|(reason, n)| (reason.to_owned(), n.parse().unwrap()))
            .filter(|(_, n)| *n > 0)
            .collect();
        if code == 200 && report == serde_json::Value::Array(served) && counted == gauge {
            return report;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "drift, /apps and the gauge disagree for 30 s:\ndrift -n {ns}: {report}\n\
             /apps ({code}): {body}\ndrift -A counts {counted:?}, gauge {gauge:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn a_reader_token_reads_its_namespace_and_is_refused_elsewhere() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let mine = plane.namespace("status-mine");
    let other = plane.namespace("status-other");
    reader(plane, &mine);
    let _webhook = Webhook::start(plane, "status", &[]);
    let created = plane
        .kubectl_in(
            &["create", "-o", "name", "-f", "-"],
            example("managed-ksvc.yaml", &mine).as_bytes(),
        )
        .ok("create a managed app");
    let name = created.stdout.trim().rsplit('/').next().unwrap().to_owned();
    let token = plane.token(&mine, "reader", None);

    // 503 until the watch cache has synced; then the app is listed.
    let body = poll::blocking("/apps lists the app", Duration::from_secs(60), || {
        let (code, body) = get(plane, &token, &format!("/apps?namespace={mine}"));
        (code == 200 && body.contains(&format!("\"{name}\""))).then_some(body)
    });
    assert!(body.contains(&mine), "{body}");
    let (code, body) = get(plane, &token, &format!("/apps/{mine}/{name}"));
    assert_eq!(code, 200, "{body}");

    let (code, body) = get(plane, &token, &format!("/apps?namespace={other}"));
    assert_eq!(code, 403, "another namespace: {body}");
    let (code, body) = get(plane, &token, "/apps?namespace=kube-system");
    assert_eq!(code, 403, "kube-system: {body}");

    let (code, body) = get(plane, "not-a-token", &format!("/apps?namespace={mine}"));
    assert_eq!(code, 401, "a garbage token: {body}");
}

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn with_audiences_set_only_a_token_minted_for_them_is_accepted() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let mine = plane.namespace("status-aud");
    reader(plane, &mine);
    let _webhook = Webhook::start(plane, "audience", &["--status-auth-audiences=ksvc-webhook"]);
    let path = format!("/apps?namespace={mine}");

    let minted = plane.token(&mine, "reader", Some("ksvc-webhook"));
    poll::blocking(
        "/apps answers a token minted for ksvc-webhook",
        Duration::from_secs(60),
        || (get(plane, &minted, &path).0 == 200).then_some(()),
    );
    let for_the_api_server = plane.token(&mine, "reader", None);
    let (code, body) = get(plane, &for_the_api_server, &path);
    assert_eq!(code, 401, "a token for the API server's audience: {body}");
}
