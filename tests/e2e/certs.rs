//! Self-managed certificates against the real API: the leader publishes the CA into the real
//! webhook configurations, and kube-apiserver then verifies the webhook's serving certificate
//! on every call (for `ksvc-webhook.ksvc-system.svc`, the name the Service gives it).

use base64::Engine;
use support::control_plane::{ControlPlane, GUARD, MUTATING, SYSTEM_NS, Webhook};

use crate::objects::{example, text};

fn bundle(plane: &ControlPlane, kind: &str, name: &str) -> String {
    let config = plane.get_json(&[kind, name]);
    text(&config, "/webhooks/0/clientConfig/caBundle").to_owned()
}

fn clear_bundle(plane: &ControlPlane, kind: &str, name: &str) {
    plane
        .kubectl(&[
            "patch",
            kind,
            name,
            "--type=json",
            "-p",
            r#"[{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": ""}]"#,
        ])
        .ok("empty the caBundle");
}

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn an_empty_ca_bundle_is_published_and_calls_then_succeed() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let ns = plane.namespace("certs");
    clear_bundle(plane, "mutatingwebhookconfiguration", MUTATING);
    clear_bundle(plane, "validatingwebhookconfiguration", GUARD);
    // A fresh install: no certificate Secret yet.
    plane
        .kubectl(&[
            "delete",
            "secret",
            "ksvc-webhook-certs",
            "-n",
            SYSTEM_NS,
            "--ignore-not-found",
        ])
        .ok("delete the certificate Secret");
    let yaml = example("managed-ksvc.yaml", &ns);

    // failurePolicy Fail: with no CA to verify the webhook by, a KService is not admitted.
    let refused = plane.kubectl_in(&["create", "-f", "-"], yaml.as_bytes());
    assert_eq!(
        refused.code,
        Some(1),
        "created without the webhook: {}",
        refused.stdout
    );
    assert!(
        refused
            .stderr
            .contains(&format!("failed calling webhook \"{MUTATING}\"")),
        "{}",
        refused.stderr
    );

    let _webhook = Webhook::start(plane, "certs", &[]);
    let secret = plane.get_json(&["secret", "ksvc-webhook-certs", "-n", SYSTEM_NS]);
    let ca = base64::engine::general_purpose::STANDARD
        .decode(text(&secret, "/data/ca.crt"))
        .unwrap();
    let ca = String::from_utf8(ca).unwrap();
    for (kind, name) in [
        ("mutatingwebhookconfiguration", MUTATING),
        ("validatingwebhookconfiguration", GUARD),
    ] {
        let published = base64::engine::general_purpose::STANDARD
            .decode(bundle(plane, kind, name))
            .unwrap();
        let published = String::from_utf8(published).unwrap();
        assert!(
            published.contains(ca.trim()),
            "{kind} {name}: the published bundle does not hold the Secret's CA"
        );
    }
    plane
        .kubectl_in(&["create", "-f", "-"], yaml.as_bytes())
        .ok("kubectl create once the CA is published");
}
