//! Tests of the certificate state: the Secret round-trips every role, incomplete Secrets are
//! invalid, the bundle and its patch, the subject alternative names.

use super::*;
use crate::certmgr::pki;
use time::Duration;

fn material(now: OffsetDateTime) -> SecretData {
    let ca = pki::issue_ca("ca", now, Duration::days(10)).unwrap();
    let sans = pki::service_sans("svc", "ns");
    let serving = pki::issue_serving(&ca, &sans, now, Duration::days(1)).unwrap();
    SecretData {
        ca,
        serving,
        next_ca: None,
        previous_ca: None,
    }
}

#[test]
fn secret_round_trip_keeps_every_role() {
    let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    let mut data = material(now);
    let other = material(now);
    data.next_ca = Some(Dated {
        value: other.ca.clone(),
        since: now,
    });
    data.previous_ca = Some(Dated {
        value: other.serving.cert_pem.clone(),
        since: now - Duration::hours(1),
    });
    let secret = data.to_secret("s", "ns", None);
    assert_eq!(secret.type_.as_deref(), Some(SECRET_TYPE_TLS));
    assert_eq!(secret.metadata.name.as_deref(), Some("s"));
    assert_eq!(SecretData::from_secret(&secret).unwrap(), data);
    // Without the optional roles the annotations disappear.
    data.next_ca = None;
    data.previous_ca = None;
    let plain = data.to_secret("s", "ns", Some(&secret));
    assert_eq!(plain.metadata.annotations, None);
    assert!(!plain.data.as_ref().unwrap().contains_key(KEY_CA_NEXT_CRT));
    assert_eq!(SecretData::from_secret(&plain).unwrap(), data);
}

#[test]
fn incomplete_secrets_are_invalid() {
    let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    let mut secret = material(now).to_secret("s", "ns", None);
    secret.data.as_mut().unwrap().remove(KEY_CA_KEY);
    assert_eq!(
        SecretData::from_secret(&secret),
        Err(Invalid::Missing(KEY_CA_KEY))
    );
    let mut secret = material(now).to_secret("s", "ns", None);
    let data = secret.data.as_mut().unwrap();
    data.insert(KEY_CA_PREVIOUS_CRT.into(), ByteString(b"x".to_vec()));
    assert_eq!(
        SecretData::from_secret(&secret),
        Err(Invalid::Missing(keys::ANNOTATION_CA_PREVIOUS_SINCE))
    );
    let data = secret.data.as_mut().unwrap();
    data.remove(KEY_CA_PREVIOUS_CRT);
    data.insert(KEY_TLS_CRT.into(), ByteString(vec![0xff]));
    assert_eq!(
        SecretData::from_secret(&secret),
        Err(Invalid::NotText(KEY_TLS_CRT))
    );
}

#[test]
fn bundle_lists_current_next_and_previous() {
    let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    let mut data = material(now);
    let next = material(now).ca;
    let previous = material(now).ca;
    assert_eq!(
        data.bundle(),
        format!("{}\n", data.ca.cert_pem.trim_end()).into_bytes()
    );
    data.next_ca = Some(Dated {
        value: next.clone(),
        since: now,
    });
    data.previous_ca = Some(Dated {
        value: previous.cert_pem.clone(),
        since: now,
    });
    let bundle = data.bundle();
    for pem in [&data.ca.cert_pem, &next.cert_pem, &previous.cert_pem] {
        assert!(bundle_contains(&bundle, pem));
    }
    assert!(!bundle_contains(&bundle, &material(now).ca.cert_pem));
    assert!(!bundle_contains(&bundle, ""));
}

#[test]
fn bundle_patch_touches_only_stale_webhooks_and_tests_the_version() {
    let config: MutatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "w", "resourceVersion": "7"},
        "webhooks": [
            {"name": "a", "clientConfig": {"caBundle": "b2xk"}, "sideEffects": "None", "admissionReviewVersions": ["v1"]},
            {"name": "b", "clientConfig": {"caBundle": "bmV3"}, "sideEffects": "None", "admissionReviewVersions": ["v1"]},
            {"name": "c", "clientConfig": {}, "sideEffects": "None", "admissionReviewVersions": ["v1"]}
        ]
    }))
    .unwrap();
    let patch = bundle_patch(&config, b"new").unwrap();
    assert_eq!(
        patch,
        serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
            {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "bmV3"},
            {"op": "add", "path": "/webhooks/2/clientConfig/caBundle", "value": "bmV3"}
        ])
    );
    assert_eq!(
        published_bundles(&config),
        vec![b"old".to_vec(), b"new".to_vec(), vec![]]
    );
    let mut done = config.clone();
    for hook in done.webhooks.iter_mut().flatten() {
        hook.client_config.ca_bundle = Some(ByteString(b"new".to_vec()));
    }
    assert_eq!(bundle_patch(&done, b"new"), None);
}

#[test]
fn subject_alt_names_include_dns_and_ip() {
    let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    let names = subject_alt_names(&material(now).serving.cert_pem).unwrap();
    let mut want = pki::service_sans("svc", "ns");
    want.sort();
    assert_eq!(names, want);
    assert_eq!(subject_alt_names("junk"), None);
}
