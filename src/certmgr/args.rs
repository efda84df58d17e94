//! The certificate manager's flags, flattened into `serve`.

use std::time::Duration;

use clap::Args;

use super::FailurePolicy;
use crate::flags::parse_duration;

/// Self-managed certificates (`src/certmgr`): flattened into `serve`.
///
/// With `--self-managed-certs` (the default) the server finds or creates its CA and serving
/// certificate in the Secret `--cert-secret`, writes them into its certificate directory, and the
/// leader keeps the CA bundle of `--webhook-config-name` current. Turn it off when something
/// else mounts the certificate files; with cert-manager, say `--cert-manager` instead, so the
/// leader still switches the failurePolicy.
#[derive(Debug, Clone, Args)]
pub struct CertArgs {
    /// Create, rotate and publish the webhook's certificates in-process (`false` when
    /// cert-manager provides them). Default: on inside a cluster, unless `--tls-cert`,
    /// `--tls-key` or `--tls-dir` names the files to serve; off outside a cluster.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_SELF_MANAGED_CERTS",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub self_managed_certs: Option<bool>,
    /// The certificate files come from cert-manager (its Secret mounted at `--tls-dir` or beside
    /// `--tls-cert`, with `ca.crt`): served as they are, as with `--self-managed-certs=false`, and
    /// the admission leader still switches `--webhook-config-name` from the install's `Ignore`
    /// to `--failure-policy` once cainjector has published that `ca.crt` and its own listener
    /// answered through TLS with it.
    #[arg(long, env = "KSVC_WEBHOOK_CERT_MANAGER", action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub cert_manager: bool,
    /// The Secret (type kubernetes.io/tls) that holds the CA and serving certificate shared by
    /// every replica.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_CERT_SECRET",
        default_value = "ksvc-webhook-certs"
    )]
    pub cert_secret: String,
    /// The MutatingWebhookConfiguration whose `caBundle` the leader keeps current.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_WEBHOOK_CONFIG_NAME",
        default_value = "zz-ksvc-webhook.flyte.org"
    )]
    pub webhook_config_name: String,
    /// The ValidatingWebhookConfiguration of the revision guard, whose `caBundle` the leader
    /// keeps current too (empty: none). A guard configuration that is missing or cannot be
    /// patched is logged and never holds up the certificates.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_GUARD_CONFIG_NAME",
        default_value = "ksvc-webhook-revision-guard.flyte.org"
    )]
    pub guard_config_name: String,
    /// The failurePolicy the leader gives the webhook once the configuration carries the CA
    /// bundle and this replica answered its own TLS probe. The install registers `Ignore`, so
    /// no write is refused before a replica answered (docs/install.md).
    #[arg(
        long,
        env = "KSVC_WEBHOOK_FAILURE_POLICY",
        value_enum,
        default_value_t = FailurePolicy::Fail
    )]
    pub failure_policy: FailurePolicy,
    /// The Service kube-apiserver calls: the serving certificate's names derive from it.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_SERVICE_NAME",
        default_value = "ksvc-webhook"
    )]
    pub service_name: String,
    /// The webhook's own namespace, of its Service and Secret (the manifests set it from the
    /// downward API); `--namespace` is an older spelling.
    #[arg(
        long = "webhook-namespace",
        alias = "namespace",
        env = "KSVC_WEBHOOK_POD_NAMESPACE",
        default_value = "ksvc-system"
    )]
    pub namespace: String,
    /// How often the certificate Secret is read again (rotation checks and bundle publication);
    /// at most 5m, well below the 10-minute CA overlap.
    #[arg(long, env = "KSVC_WEBHOOK_CERT_SYNC_INTERVAL", default_value = "60s",
          value_parser = parse_sync_interval)]
    pub cert_sync_interval: Duration,
    /// How long to keep retrying at start before giving up without certificates (the process
    /// then exits 1 with the reason, and the kubelet restarts the pod).
    #[arg(long, env = "KSVC_WEBHOOK_CERT_BOOTSTRAP_TIMEOUT", default_value = "120s",
          value_parser = parse_duration)]
    pub cert_bootstrap_timeout: Duration,
}

/// A sync interval between 1s and 5m.
fn parse_sync_interval(text: &str) -> Result<Duration, String> {
    let interval = parse_duration(text)?;
    match interval {
        d if d < Duration::from_secs(1) => Err(format!("`{text}` is below 1s")),
        d if d > Duration::from_secs(300) => Err(format!(
            "`{text}` is above 5m; the Secret must be read well within the 10-minute CA overlap"
        )),
        d => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Debug, Parser)]
    struct CertOnly {
        #[command(flatten)]
        certs: CertArgs,
    }

    #[test]
    fn cert_args_defaults_and_switch_off() {
        CertOnly::command().debug_assert();
        let on = CertOnly::try_parse_from(["x", "--self-managed-certs"])
            .unwrap()
            .certs;
        assert_eq!(on.self_managed_certs, Some(true));
        assert_eq!(on.cert_secret, "ksvc-webhook-certs");
        assert_eq!(on.webhook_config_name, "zz-ksvc-webhook.flyte.org");
        assert_eq!(
            (on.service_name.as_str(), on.namespace.as_str()),
            ("ksvc-webhook", "ksvc-system")
        );
        assert_eq!(on.cert_sync_interval, Duration::from_secs(60));
        assert_eq!(on.failure_policy, FailurePolicy::Fail);
        let ignore = CertOnly::try_parse_from(["x", "--failure-policy=Ignore"]).unwrap();
        assert_eq!(ignore.certs.failure_policy, FailurePolicy::Ignore);
        assert!(CertOnly::try_parse_from(["x", "--failure-policy=Maybe"]).is_err());
        let off = CertOnly::try_parse_from(["x", "--self-managed-certs=false"]).unwrap();
        assert_eq!(off.certs.self_managed_certs, Some(false));
        assert!(CertOnly::try_parse_from(["x", "--cert-sync-interval=10m"]).is_err());
        let unset = CertOnly::try_parse_from(["x"]).unwrap();
        assert_eq!(unset.certs.self_managed_certs, None);
        assert!(!unset.certs.cert_manager);
        let cm = CertOnly::try_parse_from(["x", "--cert-manager"]).unwrap();
        assert!(cm.certs.cert_manager);
    }
}
