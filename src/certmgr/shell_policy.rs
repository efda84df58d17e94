//! The I/O of the install's safety, part of the certificate shell: the leader's failurePolicy
//! switch ([`policy::step`] decides) and the certificate Secret's owner, the webhook
//! configuration. Never fails a certificate round: what goes wrong is logged and retried.

use kube::api::{Patch, PatchParams};
use tracing::{info, warn};

use super::super::policy;
use super::{MAX_PATCH_ATTEMPTS, Manager, api};
use crate::report::error_chain;

impl Manager {
    /// Give the webhook the configured failurePolicy when [`policy::step`] says so. A failure is
    /// said in the log and retried next round; it never fails the certificates.
    pub(super) async fn enforce_policy(&self, bundle: &[u8]) -> bool {
        const CALL: &str = "patch webhook failurePolicy";
        let name = &self.webhook_config;
        for _ in 0..MAX_PATCH_ATTEMPTS {
            let config = match self
                .timed("get webhook configuration", self.webhooks.get_opt(name))
                .await
            {
                Ok(Ok(Some(config))) => config,
                Ok(Ok(None)) => return false,
                Ok(Err(error)) => {
                    warn!(config = %name, error = %error_chain(&api("get webhook configuration", error)), "failurePolicy not checked; retrying next round");
                    return false;
                }
                Err(error) => {
                    warn!(config = %name, error = %error_chain(&error), "failurePolicy not checked; retrying next round");
                    return false;
                }
            };
            let answered = *self.answered.borrow();
            let ops = match policy::step(&config, bundle, self.failure_policy, answered) {
                policy::Step::Current => return false,
                policy::Step::Wait(waiting) => {
                    info!(config = %name, want = self.failure_policy.as_str(), waiting = ?waiting, "failurePolicy not switched yet; kube-apiserver ignores the webhook's failures until then");
                    return false;
                }
                policy::Step::Patch(ops) => ops,
            };
            let Ok(patch) = serde_json::from_value::<json_patch::Patch>(ops) else {
                return false;
            };
            let (pp, patch) = (PatchParams::default(), Patch::Json::<()>(patch));
            let call = self.webhooks.patch(name, &pp, &patch);
            match self.timed(CALL, call).await {
                Ok(Ok(_)) => {
                    info!(config = %name, failure_policy = self.failure_policy.as_str(), "webhook failurePolicy set");
                    return true;
                }
                // The resourceVersion test failed or a write raced: re-read.
                Ok(Err(kube::Error::Api(status))) if matches!(status.code, 409 | 422) => continue,
                Ok(Err(error)) => {
                    warn!(config = %name, error = %error_chain(&api(CALL, error)), "failurePolicy not set; retrying next round");
                    return false;
                }
                Err(error) => {
                    warn!(config = %name, error = %error_chain(&error), "failurePolicy not set; retrying next round");
                    return false;
                }
            }
        }
        warn!(config = %name, "the webhook configuration kept changing; failurePolicy retried next round");
        false
    }

    /// The webhook configuration as the Secret's owner; `None` (logged) when it cannot be read:
    /// the Secret is then made without one, and stays after an uninstall.
    pub(super) async fn secret_owner(
        &self,
    ) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
        let read = self
            .timed(
                "get webhook configuration",
                self.webhooks.get_opt(&self.webhook_config),
            )
            .await;
        match read {
            Ok(Ok(Some(config))) => policy::secret_owner(&config),
            Ok(Ok(None)) => {
                warn!(config = %self.webhook_config, "webhook configuration not found; the certificate Secret gets no owner and outlives an uninstall");
                None
            }
            Ok(Err(error)) => {
                warn!(config = %self.webhook_config, error = %error_chain(&api("get webhook configuration", error)), "the certificate Secret gets no owner");
                None
            }
            Err(error) => {
                warn!(config = %self.webhook_config, error = %error_chain(&error), "the certificate Secret gets no owner");
                None
            }
        }
    }
}
