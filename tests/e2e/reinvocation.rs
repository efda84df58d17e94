//! Reinvocation: a second mutating webhook (e2e/second-webhook.py) that edits the KService after
//! ours makes kube-apiserver call ours again (`reinvocationPolicy: IfNeeded`), and the result is
//! still right: the spec SHA covers the final spec, second webhook's edit included.

use std::process::{Command, Stdio};

use base64::Engine;
use serde_json::Value;
use support::cli::repo_root;
use support::control_plane::{ControlPlane, Webhook, free_port};

use crate::objects::{env_var, example, mutated_offline, text};

const SHA: &str = "/metadata/annotations/flyte.org~1spec-sha";
const SECOND: &str = "zzz-second.e2e.ksvc-webhook.test";

/// The second webhook's process, killed and unregistered when dropped.
struct Second<'a> {
    plane: &'a ControlPlane,
    child: std::process::Child,
}

impl Drop for Second<'_> {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.plane.kubectl(&[
            "delete",
            "mutatingwebhookconfiguration",
            SECOND,
            "--ignore-not-found",
        ]);
    }
}

/// Start the second webhook and register it for KServices in `ns` only.
fn second_webhook<'a>(plane: &'a ControlPlane, ns: &str, dir: &std::path::Path) -> Second<'a> {
    let (cert, key) = (dir.join("second.crt"), dir.join("second.key"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=second",
        ])
        .args(["-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(
        made.success(),
        "openssl could not make the second webhook's certificate"
    );
    let port = free_port();
    let mut child = Command::new("python3")
        .arg(repo_root().join("e2e/second-webhook.py"))
        .arg(port.to_string())
        .args([&cert, &key])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // It prints `listening` once its socket is bound.
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "listening");
    let bundle = base64::engine::general_purpose::STANDARD.encode(std::fs::read(&cert).unwrap());
    let config = serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": SECOND},
        "webhooks": [{
            "name": SECOND, "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "reinvocationPolicy": "Never", "timeoutSeconds": 5,
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate"), "caBundle": bundle},
            "rules": [{"apiGroups": ["serving.knative.dev"], "apiVersions": ["v1"],
                       "resources": ["services"], "operations": ["CREATE", "UPDATE"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        }],
    });
    plane
        .kubectl_in(&["apply", "-f", "-"], config.to_string().as_bytes())
        .ok("register the second webhook");
    Second { plane, child }
}

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn a_second_webhook_after_ours_triggers_reinvocation_and_the_sha_covers_its_edit() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let ns = plane.namespace("reinvoke");
    let _webhook = Webhook::start(plane, "reinvoke", &[]);
    let dir = tempfile::tempdir().unwrap();
    let _second = second_webhook(plane, &ns, dir.path());

    let yaml = example("managed-ksvc.yaml", &ns);
    let created = plane
        .kubectl_in(&["create", "-o", "json", "-f", "-"], yaml.as_bytes())
        .ok("create through both webhooks");
    let stored: Value = serde_json::from_str(&created.stdout).unwrap();
    assert_eq!(
        env_var(&stored, "SECOND_WEBHOOK"),
        Some("was-here"),
        "{stored:#}"
    );

    // Ours ran again after the second's edit: admitting the stored object changes nothing.
    let again = mutated_offline(&created.stdout, &ns, &[]);
    assert_eq!(
        text(&stored, SHA),
        text(&again, SHA),
        "the SHA misses the second webhook's edit"
    );
    // And it is not the SHA of the object without that edit.
    let before = mutated_offline(&yaml, &ns, &[]);
    assert_ne!(text(&stored, SHA), text(&before, SHA));
}
