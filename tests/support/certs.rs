//! The certificate manager's world in the tests: the names it manages (its Secret, the webhook
//! configuration), its arguments, the configuration as the manifests install it and the caBundles
//! it publishes there. Runs nothing.

use base64::Engine as _;
use ksvc_webhook::certmgr::{CertArgs, FailurePolicy};
use serde_json::{Value, json};

use crate::FakeApi;

pub const NS: &str = "ksvc-system";
pub const SECRET: &str = "ksvc-webhook-certs";
pub const CONFIG: &str = "zz-ksvc-webhook.flyte.org";
pub const CONFIGS: &str = "mutatingwebhookconfigurations";

/// Self-managed certificates for [`CONFIG`], `Fail`, no revision guard configuration.
pub fn cert_args() -> CertArgs {
    CertArgs {
        self_managed_certs: Some(true),
        cert_manager: false,
        cert_secret: SECRET.into(),
        webhook_config_name: CONFIG.into(),
        guard_config_name: String::new(),
        service_name: "ksvc-webhook".into(),
        namespace: NS.into(),
        failure_policy: FailurePolicy::Fail,
        cert_sync_interval: std::time::Duration::from_secs(60),
        cert_bootstrap_timeout: std::time::Duration::from_secs(5),
    }
}

/// [`CONFIG`] with one webhook a name, as installed: no failurePolicy, no caBundle yet.
pub fn webhook_config(names: &[&str]) -> Value {
    let hooks: Vec<Value> = names
        .iter()
        .map(|name| {
            json!({"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
                   "clientConfig": {"service": {"name": "ksvc-webhook", "namespace": NS, "path": "/mutate", "port": 443}}})
        })
        .collect();
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
           "metadata": {"name": CONFIG}, "webhooks": hooks})
}

/// The caBundle of every webhook of [`CONFIG`], decoded (empty where there is none).
pub fn bundles(fake: &FakeApi) -> Vec<Vec<u8>> {
    let config = fake.get(CONFIGS, "", CONFIG).unwrap();
    config["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let b64 = h["clientConfig"]["caBundle"].as_str().unwrap_or_default();
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap()
        })
        .collect()
}
