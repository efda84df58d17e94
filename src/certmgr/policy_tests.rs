//! Tests of the failure policy's step: every combination of the published bundle, the own
//! probe's answer and the policy in place, as data; and the Secret's owner.

use super::*;
use serde_json::json;

const BUNDLE: &[u8] = b"-----BEGIN CERTIFICATE-----\ncurrent\n";

/// A configuration of one webhook with `policy` (None: unset) and `bundle`.
fn config(policy: Option<&str>, bundle: Option<&[u8]>) -> MutatingWebhookConfiguration {
    use base64::Engine as _;
    let mut hook = json!({
        "name": "zz-ksvc-webhook.flyte.org",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "clientConfig": {"service": {"name": "ksvc-webhook", "namespace": "ksvc-system"}},
    });
    if let Some(p) = policy {
        hook["failurePolicy"] = json!(p);
    }
    if let Some(b) = bundle {
        hook["clientConfig"]["caBundle"] =
            json!(base64::engine::general_purpose::STANDARD.encode(b));
    }
    serde_json::from_value(json!({
        "metadata": {"name": "zz-ksvc-webhook.flyte.org", "resourceVersion": "7", "uid": "u-1"},
        "webhooks": [hook],
    }))
    .unwrap()
}

fn patch_to(policy: &str) -> Step {
    Step::Patch(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "add", "path": "/webhooks/0/failurePolicy", "value": policy},
    ]))
}

/// The policy in place, the bundle published, the one wanted, whether the replica answered,
/// and the step expected.
type Case<'a> = (Option<&'a str>, Option<&'a [u8]>, FailurePolicy, bool, Step);

#[test]
fn fail_is_written_only_once_the_bundle_is_published_and_the_replica_answered() {
    use FailurePolicy::{Fail, Ignore};
    let stale: &[u8] = b"old";
    let cases: &[Case] = &[
        // The install's Ignore, nothing published or answered yet: writes keep going through.
        (
            Some("Ignore"),
            None,
            Fail,
            false,
            Step::Wait(Waiting::Bundle),
        ),
        (
            Some("Ignore"),
            None,
            Fail,
            true,
            Step::Wait(Waiting::Bundle),
        ),
        (
            Some("Ignore"),
            Some(stale),
            Fail,
            true,
            Step::Wait(Waiting::Bundle),
        ),
        (
            Some("Ignore"),
            Some(BUNDLE),
            Fail,
            false,
            Step::Wait(Waiting::Answer),
        ),
        (Some("Ignore"), Some(BUNDLE), Fail, true, patch_to("Fail")),
        // Already in place (unset is kube-apiserver's default, Fail).
        (Some("Fail"), Some(BUNDLE), Fail, true, Step::Current),
        (None, Some(BUNDLE), Fail, false, Step::Current),
        (Some("Ignore"), None, Ignore, false, Step::Current),
        // Ignore is always safe to write: no wait.
        (Some("Fail"), None, Ignore, false, patch_to("Ignore")),
        (None, Some(BUNDLE), Ignore, true, patch_to("Ignore")),
    ];
    for (policy, bundle, want, answered, expected) in cases {
        let got = step(&config(*policy, *bundle), BUNDLE, *want, *answered);
        assert_eq!(
            &got, expected,
            "{policy:?} {bundle:?} want {want:?} answered {answered}"
        );
    }
}

#[test]
fn a_configuration_without_webhooks_needs_nothing() {
    let empty: MutatingWebhookConfiguration =
        serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
    assert_eq!(
        step(&empty, BUNDLE, FailurePolicy::Fail, true),
        Step::Current
    );
}

#[test]
fn the_secret_is_owned_by_the_configuration_read_from_the_api_server() {
    let owner = secret_owner(&config(None, None)).unwrap();
    assert_eq!(owner.kind, "MutatingWebhookConfiguration");
    assert_eq!(owner.api_version, "admissionregistration.k8s.io/v1");
    assert_eq!(
        (owner.name.as_str(), owner.uid.as_str()),
        ("zz-ksvc-webhook.flyte.org", "u-1")
    );
    assert_eq!(
        owner.block_owner_deletion, None,
        "no finalizer rights needed"
    );
    let unread: MutatingWebhookConfiguration =
        serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
    assert_eq!(secret_owner(&unread), None);
}
