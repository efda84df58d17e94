//! Command-line and environment configuration: the only place that reads args and env.
//!
//! Every flag has a `KSVC_WEBHOOK_…` env var and a doc comment that `--help` shows.

use clap::{Args, Parser, Subcommand};

/// Admission webhook, sidecar injector and watch loop for Knative Services.
#[derive(Debug, Parser)]
#[command(name = "ksvc-webhook", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the deterministic KService name of an app identity.
    Name(NameArgs),
}

/// Arguments of `name`.
#[derive(Debug, Args)]
pub struct NameArgs {
    /// The app's project.
    #[arg(long)]
    pub project: String,
    /// The app's domain.
    #[arg(long)]
    pub domain: String,
    /// The app's name.
    #[arg(long)]
    pub name: String,
}

/// Self-managed certificates (`src/certmgr`): flattened into `serve`.
///
/// With `--self-managed-certs` (the default) the server finds or creates its CA and serving
/// certificate in the Secret `--cert-secret`, writes them into its certificate directory, and the
/// leader keeps the CA bundle of `--webhook-config-name` current. Turn it off when cert-manager
/// (or anything else) mounts the certificate files.
#[derive(Debug, Clone, Args)]
pub struct CertArgs {
    /// Create, rotate and publish the webhook's certificates in-process (`false` when
    /// cert-manager provides them).
    #[arg(
        long,
        env = "KSVC_WEBHOOK_SELF_MANAGED_CERTS",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub self_managed_certs: bool,
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
    /// The Service kube-apiserver calls: the serving certificate's names derive from it.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_SERVICE_NAME",
        default_value = "ksvc-webhook"
    )]
    pub service_name: String,
    /// The namespace of the Service and the Secret (the pod's own; the manifests set it from the
    /// downward API).
    #[arg(long, env = "KSVC_WEBHOOK_NAMESPACE", default_value = "ksvc-system")]
    pub namespace: String,
    /// Seconds between two reads of the certificate Secret (rotation checks and bundle
    /// publication). Must stay well below the 10-minute CA overlap.
    #[arg(long, env = "KSVC_WEBHOOK_CERT_SYNC_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=300))]
    pub cert_sync_seconds: u64,
    /// Seconds to keep retrying at start before giving up without certificates (the pod then
    /// exits and the kubelet restarts it).
    #[arg(
        long,
        env = "KSVC_WEBHOOK_CERT_BOOTSTRAP_SECONDS",
        default_value_t = 120
    )]
    pub cert_bootstrap_seconds: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[derive(Debug, Parser)]
    struct CertOnly {
        #[command(flatten)]
        certs: CertArgs,
    }

    #[test]
    fn cert_args_defaults_and_switch_off() {
        CertOnly::command().debug_assert();
        let on = CertOnly::try_parse_from(["x"]).unwrap().certs;
        assert!(on.self_managed_certs);
        assert_eq!(on.cert_secret, "ksvc-webhook-certs");
        assert_eq!(on.webhook_config_name, "zz-ksvc-webhook.flyte.org");
        assert_eq!(
            (on.service_name.as_str(), on.namespace.as_str()),
            ("ksvc-webhook", "ksvc-system")
        );
        let off = CertOnly::try_parse_from(["x", "--self-managed-certs=false"]).unwrap();
        assert!(!off.certs.self_managed_certs);
        let bare = CertOnly::try_parse_from(["x", "--self-managed-certs"]).unwrap();
        assert!(bare.certs.self_managed_certs);
    }
}
