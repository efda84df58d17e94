//! The I/O of the install's safety, part of the certificate shell: the certificate Secret's
//! owner, the webhook configuration (the failurePolicy switch is [`super::super::keeper`]'s).
//! Never fails a certificate round: what goes wrong is logged.

use tracing::warn;

use super::super::policy;
use super::{Manager, api};
use crate::report::error_chain;

impl Manager {
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
