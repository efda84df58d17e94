use super::*;
use serde_json::json;
use time::Duration;

const INSTALL: Install = Install {
    namespace: "ksvc-system",
    service: "ksvc-webhook",
    secret: "ksvc-webhook-certs",
};

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

/// A CA and a serving certificate for the install, valid for `days` from `issued`.
fn material(issued: OffsetDateTime, days: i64) -> (pki::CertKey, pki::CertKey) {
    let ca = pki::issue_ca("ca", issued, Duration::days(days * 10)).unwrap();
    let sans = pki::service_sans(INSTALL.service, INSTALL.namespace);
    let leaf = pki::issue_serving(&ca, &sans, issued, Duration::days(days)).unwrap();
    (ca, leaf)
}

fn secret(leaf: &pki::CertKey) -> Fetched<Value> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    Fetched::Found(json!({"data": {"tls.crt": b64(&leaf.cert_pem)}}))
}

fn config(bundle: &str) -> Fetched<Value> {
    let b64 = base64::engine::general_purpose::STANDARD.encode(bundle);
    Fetched::Found(json!({"webhooks": [{"name": "hook", "clientConfig": {"caBundle": b64}}]}))
}

#[test]
fn a_bundle_trusts_the_certificate_only_if_it_holds_its_ca() {
    let (ca, leaf) = material(now(), 30);
    let (other, _) = material(now(), 30);
    let check = |bundle: &str| {
        webhook_config(
            "w",
            "MutatingWebhookConfiguration",
            "x",
            &config(bundle),
            &secret(&leaf),
            &INSTALL,
            now(),
        )
    };
    assert!(check(&ca.cert_pem).ok);
    let both = format!("{}{}", other.cert_pem, ca.cert_pem);
    assert!(check(&both).ok, "any CA of the bundle may sign it");
    let stale = check(&other.cert_pem);
    assert!(!stale.ok);
    assert!(
        stale
            .message
            .contains("the caBundle of hook does not trust"),
        "{}",
        stale.message
    );
    let missing = webhook_config(
        "w",
        "K",
        "x",
        &Fetched::Missing,
        &secret(&leaf),
        &INSTALL,
        now(),
    );
    assert_eq!(missing.message, "K x does not exist");
}

#[test]
fn the_certificate_is_checked_for_expiry() {
    let (_, leaf) = material(now() - Duration::days(10), 30);
    let ok = certificate(&secret(&leaf), &INSTALL, now());
    assert!(ok.ok, "{ok:?}");
    assert!(ok.message.ends_with("(20 days)"), "{}", ok.message);
    let (_, old) = material(now() - Duration::days(40), 30);
    let expired = certificate(&secret(&old), &INSTALL, now());
    assert!(!expired.ok);
    assert!(
        expired.message.contains("expired on"),
        "{}",
        expired.message
    );
    assert!(!certificate(&Fetched::Missing, &INSTALL, now()).ok);
}

#[test]
fn endpoints_count_only_ready_ones() {
    let slices = |ready: &[bool]| {
        let endpoints: Vec<Value> = ready
            .iter()
            .map(|r| json!({"conditions": {"ready": r}}))
            .collect();
        Fetched::Found(vec![json!({"endpoints": endpoints})])
    };
    assert!(!endpoints(&slices(&[false]), &INSTALL).ok);
    assert!(!endpoints(&Fetched::Found(vec![]), &INSTALL).ok);
    let two = endpoints(&slices(&[true, false, true]), &INSTALL);
    assert_eq!(
        two.message,
        "Service ksvc-system/ksvc-webhook has 2 ready endpoints"
    );
}

#[test]
fn rbac_names_every_call_denied() {
    let access = |call: &str, allowed: bool| Access {
        call: call.into(),
        allowed: Fetched::Found(allowed),
    };
    let all = [access("get secrets", true), access("watch services", true)];
    assert!(rbac("rbac", "sa", "the server", &all).ok);
    let some = [
        access("get secrets", false),
        access("watch services", true),
        access("create events", false),
    ];
    let denied = rbac("rbac", "sa", "the server", &some);
    assert_eq!(
        denied.message,
        "sa may not make 2 of the 3 API calls the server makes:"
    );
    assert_eq!(denied.details, ["get secrets", "create events"]);
}
