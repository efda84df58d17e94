//! PURE: when the admission webhook's `failurePolicy` becomes the configured one, and who owns
//! the certificate Secret.
//!
//! The install registers the MutatingWebhookConfiguration with `failurePolicy: Ignore`, so a
//! KService write is never refused because no replica has answered yet (an image that cannot be
//! pulled, pods not Ready, no caBundle yet). The leader switches it to `--failure-policy`
//! (default `Fail`) once the configuration carries the current CA bundle and the leader's own
//! listener has answered through TLS with that CA: from then on kube-apiserver can reach a
//! replica it trusts, and the configured policy holds. Switching to `Ignore` never waits.
//!
//! Never does I/O: the shell reads the configuration, asks [`step`] and carries the patch out.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// kube-apiserver's behaviour when it cannot call the webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailurePolicy {
    /// Refuse the write.
    #[value(name = "Fail")]
    Fail,
    /// Let the write through without the webhook.
    #[value(name = "Ignore")]
    Ignore,
}

impl FailurePolicy {
    /// The value in the webhook configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
    }
}

/// Why the configured policy is not written yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// Some webhook of the configuration does not carry the current CA bundle yet.
    Bundle,
    /// This replica's listener has not answered its own TLS probe yet.
    Answer,
}

/// What the leader does about the failure policy.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Every webhook has the configured policy.
    Current,
    /// Not yet: kube-apiserver may not reach a replica it trusts.
    Wait(Waiting),
    /// A JSON Patch that sets the configured policy on every webhook whose policy differs,
    /// guarded by a `test` of the resourceVersion that was read.
    Patch(serde_json::Value),
}

/// The next step for `config`, whose webhooks should carry `bundle` and `want`; `answered` says
/// whether this replica's listener answered its own probe.
pub fn step(
    config: &MutatingWebhookConfiguration,
    bundle: &[u8],
    want: FailurePolicy,
    answered: bool,
) -> Step {
    let hooks = config.webhooks.as_deref().unwrap_or_default();
    let differing: Vec<usize> = hooks
        .iter()
        .enumerate()
        // An unset policy is kube-apiserver's default, Fail.
        .filter(|(_, h)| h.failure_policy.as_deref().unwrap_or("Fail") != want.as_str())
        .map(|(i, _)| i)
        .collect();
    if differing.is_empty() {
        return Step::Current;
    }
    if want == FailurePolicy::Fail {
        let published = hooks
            .iter()
            .all(|h| h.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) == Some(bundle));
        match (published, answered) {
            (false, _) => return Step::Wait(Waiting::Bundle),
            (true, false) => return Step::Wait(Waiting::Answer),
            (true, true) => {}
        }
    }
    let version = config.metadata.resource_version.clone().unwrap_or_default();
    let mut ops = vec![serde_json::json!({
        "op": "test", "path": "/metadata/resourceVersion", "value": version,
    })];
    ops.extend(differing.into_iter().map(|i| {
        serde_json::json!({
            "op": "add",
            "path": format!("/webhooks/{i}/failurePolicy"),
            "value": want.as_str(),
        })
    }));
    Step::Patch(serde_json::Value::Array(ops))
}

/// The owner reference that makes the certificate Secret go with the webhook configuration:
/// when `helm uninstall` or `kubectl delete -k` removes the configuration, the garbage
/// collector removes the Secret (a cluster-scoped owner of a namespaced object is allowed).
/// `None` without a name or UID (a configuration not read from the API server).
pub fn secret_owner(config: &MutatingWebhookConfiguration) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: "MutatingWebhookConfiguration".into(),
        name: config.metadata.name.clone()?,
        uid: config.metadata.uid.clone()?,
        // Neither controller nor blocking: deleting the configuration never waits on the Secret.
        controller: None,
        block_owner_deletion: None,
    })
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
