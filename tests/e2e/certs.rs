//! Self-managed certificates against the real API: the leader publishes the CA into the real
//! webhook configurations, and kube-apiserver then verifies the webhook's serving certificate
//! on every call (for `ksvc-webhook.ksvc-system.svc`, the name the Service gives it), through a
//! rotation too.

use base64::Engine;
use ksvc_webhook::certmgr::pki::{self, CertKey};
use std::time::Duration;
use support::control_plane::{ControlPlane, GUARD, MUTATING, SYSTEM_NS, Webhook};
use support::poll;

use crate::objects::{example, text};

fn bundle(plane: &ControlPlane, kind: &str, name: &str) -> String {
    let config = plane.get_json(&[kind, name]);
    text(&config, "/webhooks/0/clientConfig/caBundle").to_owned()
}

fn clear_bundle(plane: &ControlPlane, kind: &str, name: &str) {
    let patch = r#"[{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": ""}]"#;
    plane.json_patch(kind, name, patch, "empty the caBundle");
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
    refused.refused_by_the_webhook("created without the webhook");

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

fn secret_pem(secret: &serde_json::Value, key: &str) -> String {
    let pointer = format!("/data/{}", key.replace('/', "~1"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text(secret, &pointer))
        .unwrap();
    String::from_utf8(bytes).unwrap()
}

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn a_forced_rotation_of_the_serving_certificate_fails_no_write() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let ns = plane.namespace("rotate");
    let fast = ["--cert-sync-interval=1s", "--cert-reload-interval=1s"];
    let _webhook = Webhook::start(plane, "rotate", &fast);

    // A serving certificate of the same CA that expires tomorrow: due for renewal at once.
    let secret = plane.get_json(&["secret", "ksvc-webhook-certs", "-n", SYSTEM_NS]);
    let ca = CertKey {
        cert_pem: secret_pem(&secret, "ca.crt"),
        key_pem: secret_pem(&secret, "ca.key"),
    };
    let now = time::OffsetDateTime::now_utc();
    let sans = pki::service_sans("ksvc-webhook", SYSTEM_NS);
    let expiring = pki::issue_serving(&ca, &sans, now, time::Duration::days(1)).unwrap();
    let encode = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    let patch = serde_json::json!({"data": {
        "tls.crt": encode(&expiring.cert_pem), "tls.key": encode(&expiring.key_pem),
    }});
    plane
        .kubectl(&[
            "patch",
            "secret",
            "ksvc-webhook-certs",
            "-n",
            SYSTEM_NS,
            "--type=merge",
            "-p",
            &patch.to_string(),
        ])
        .ok("put an expiring serving certificate in the Secret");

    // Writes all through the rotation: every one admitted.
    let mut written = 0;
    let renewed = poll::blocking(
        "the leader has renewed the serving certificate",
        Duration::from_secs(60),
        || {
            let yaml = example("plain-ksvc.yaml", &ns)
                .replace("name: hello", &format!("name: hello-{written}"));
            plane
                .kubectl_in(&["create", "-f", "-"], yaml.as_bytes())
                .ok("a write during the rotation");
            written += 1;
            let secret = plane.get_json(&["secret", "ksvc-webhook-certs", "-n", SYSTEM_NS]);
            let serving = secret_pem(&secret, "tls.crt");
            (serving != expiring.cert_pem).then_some(serving)
        },
    );
    let end = pki::not_after(&renewed).unwrap();
    assert!(
        end - now > time::Duration::days(60),
        "renewed until {end} only"
    );
    // And after it, until the server has reloaded the new certificate and beyond.
    for n in written..written + 15 {
        let yaml =
            example("plain-ksvc.yaml", &ns).replace("name: hello", &format!("name: hello-{n}"));
        plane
            .kubectl_in(&["create", "-f", "-"], yaml.as_bytes())
            .ok("a write after the rotation");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
