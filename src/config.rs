//! Command-line and environment configuration: the only place that reads args and env.
//!
//! Every flag has a `KSVC_WEBHOOK_…` env var and a doc comment that `--help` shows.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::admission::Policy;
use crate::mutate::Settings;
use crate::naming::{DomainTemplate, TemplateError};
use crate::sidecars::{self, Catalogue};

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
    /// Mutate manifests offline as admission would: print the result, or the violations and exit 1.
    Mutate(MutateArgs),
    /// Answer an admission.k8s.io/v1 AdmissionReview exactly as the server would.
    Review(ReviewArgs),
    /// Strip everything the webhook added to manifests (env var, sidecars, annotations, stop
    /// state).
    Uninject(InputArgs),
    /// Print the deterministic KService name of an app identity.
    Name(NameArgs),
    /// Print the spec SHA of each KService in a manifest (the `flyte.org/spec-sha` value).
    Sha(InputArgs),
    /// Stop, start, inspect or update an app's KService in the current kubeconfig's cluster.
    App(AppArgs),
    /// Serve admission reviews over HTTPS (plus health and metrics).
    Serve(Box<ServeArgs>),
    /// Generate a CA and a serving certificate for the webhook Service.
    Certs(CertsArgs),
}

/// Cluster settings the admission decision depends on.
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    /// Knative's route-host template (config-network `domain-template`); only `.Name`,
    /// `.Namespace` and `.Domain` are supported.
    #[arg(long, env = "KSVC_WEBHOOK_DOMAIN_TEMPLATE", default_value = DomainTemplate::DEFAULT)]
    pub domain_template: String,
    /// The cluster's route domain (Knative's config-domain), used to check host lengths.
    #[arg(long, env = "KSVC_WEBHOOK_DOMAIN", default_value = "example.com")]
    pub domain: String,
    /// Template of the endpoint suffix of managed apps: `{{ project }}` and `{{ domain }}` are
    /// replaced by the lower-cased identity labels.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_ENDPOINT_SUFFIX_TEMPLATE",
        default_value = "{{ project }}-{{ domain }}"
    )]
    pub endpoint_suffix_template: String,
    /// The cluster sets config-autoscaler `allow-zero-initial-scale: "true"`, so stopping an app
    /// may also set `initial-scale: "0"` (Knative rejects it otherwise).
    #[arg(long, env = "KSVC_WEBHOOK_ALLOW_ZERO_INITIAL_SCALE")]
    pub allow_zero_initial_scale: bool,
    /// The sidecar catalogue: a YAML file of named container/volume templates and a `default`
    /// list (see examples/sidecars.yaml). Without it no sidecar is injected.
    #[arg(long, env = "KSVC_WEBHOOK_SIDECARS", value_name = "FILE")]
    pub sidecars: Option<PathBuf>,
}

/// Settings that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error(transparent)]
    Sidecars(#[from] sidecars::LoadError),
}

impl PolicyArgs {
    /// The validated policy, with the sidecar catalogue read from its file.
    pub fn policy(&self) -> Result<Policy, PolicyError> {
        let catalogue = match &self.sidecars {
            Some(path) => sidecars::load(path)?,
            None => Catalogue::default(),
        };
        Ok(Policy {
            domain_template: DomainTemplate::new(&self.domain_template, &self.domain)?,
            mutate: Settings {
                suffix_template: self.endpoint_suffix_template.clone(),
                allow_zero_initial_scale: self.allow_zero_initial_scale,
            },
            sidecars: Arc::new(catalogue),
        })
    }
}

/// A manifest to read.
#[derive(Debug, Clone, Args)]
pub struct InputArgs {
    /// The manifest: a file of JSON or (multi-document) YAML, or `-` for standard input.
    #[arg(short = 'f', long = "filename", value_name = "FILE|-")]
    pub file: PathBuf,
}

/// The admission operation to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OperationArg {
    Create,
    Update,
}

/// Arguments of `mutate`.
#[derive(Debug, Clone, Args)]
pub struct MutateArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// The namespace of objects that do not set one.
    #[arg(
        short = 'n',
        long,
        env = "KSVC_WEBHOOK_NAMESPACE",
        default_value = "default"
    )]
    pub namespace: String,
    /// The operation to simulate; UPDATE checks the rules that compare with `--old`.
    #[arg(long, value_enum, default_value_t = OperationArg::Create)]
    pub operation: OperationArg,
    /// The stored object, for UPDATE (identity labels must not change).
    #[arg(long, value_name = "FILE")]
    pub old: Option<PathBuf>,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// Arguments of `review`.
#[derive(Debug, Clone, Args)]
pub struct ReviewArgs {
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// Arguments of `name`.
#[derive(Debug, Clone, Args)]
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

/// Arguments of `serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address of the HTTPS admission listener.
    #[arg(long, env = "KSVC_WEBHOOK_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// PEM certificate chain of the serving certificate.
    #[arg(long, env = "KSVC_WEBHOOK_TLS_CERT", default_value = "certs/tls.crt")]
    pub tls_cert: PathBuf,
    /// PEM (PKCS#8, SEC1 or PKCS#1) private key of the serving certificate.
    #[arg(long, env = "KSVC_WEBHOOK_TLS_KEY", default_value = "certs/tls.key")]
    pub tls_key: PathBuf,
    /// Directory holding `tls.crt` and `tls.key` (a mounted `kubernetes.io/tls` Secret);
    /// overrides `--tls-cert` and `--tls-key`.
    #[arg(long, env = "KSVC_WEBHOOK_TLS_DIR")]
    pub tls_dir: Option<PathBuf>,
    /// How often the certificate files are re-read; a changed valid pair replaces the old one.
    #[arg(long, env = "KSVC_WEBHOOK_CERT_RELOAD_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub cert_reload_interval: Duration,
    /// Offer HTTP/2 through ALPN (off: kube-apiserver talks HTTP/1.1 to webhooks).
    #[arg(long, env = "KSVC_WEBHOOK_HTTP2")]
    pub http2: bool,
    /// Plain-HTTP address serving only /healthz, /readyz and /metrics (off when unset).
    #[arg(long, env = "KSVC_WEBHOOK_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// A client that has not finished its TLS handshake or request headers by then is cut off.
    #[arg(long, env = "KSVC_WEBHOOK_HEADER_READ_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// After SIGTERM: how long to keep answering (readiness already failing) before draining.
    #[arg(long, env = "KSVC_WEBHOOK_DRAIN_PERIOD", default_value = "5s", value_parser = parse_duration)]
    pub drain_period: Duration,
    /// Tokio worker threads (default: the CPUs this process may run on; 1 runs the
    /// current-thread scheduler).
    #[arg(long, env = "KSVC_WEBHOOK_WORKERS")]
    pub workers: Option<NonZeroUsize>,
    /// Log line format.
    #[arg(long, env = "KSVC_WEBHOOK_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub watch: WatchArgs,
    #[command(flatten)]
    pub certs: CertArgs,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable text.
    Plain,
}

/// Arguments of `certs`.
#[derive(Debug, Clone, Args)]
pub struct CertsArgs {
    /// Name of the webhook's Kubernetes Service.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_SERVICE_NAME",
        default_value = "ksvc-webhook"
    )]
    pub service: String,
    /// Namespace of the webhook's Kubernetes Service.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_SERVICE_NAMESPACE",
        default_value = "ksvc-system"
    )]
    pub namespace: String,
    /// Directory that receives ca.crt, tls.crt and tls.key.
    #[arg(long, env = "KSVC_WEBHOOK_CERTS_OUT", default_value = "certs")]
    pub out: PathBuf,
    /// Validity of the serving certificate in days (the CA gets ten times as long).
    #[arg(long, env = "KSVC_WEBHOOK_CERT_DAYS", default_value_t = 365)]
    pub days: u32,
}

/// Parse a duration such as `500ms`, `10s`, `2m` or `1h` (a bare number means seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a duration; write e.g. 500ms, 10s, 2m or 1h"))?;
    let millis = match unit.trim() {
        "ms" => Some(value),
        "" | "s" => value.checked_mul(1_000),
        "m" => value.checked_mul(60_000),
        "h" => value.checked_mul(3_600_000),
        other => {
            return Err(format!(
                "unknown duration unit `{other}`; use ms, s, m or h"
            ));
        }
    };
    millis
        .map(Duration::from_millis)
        .ok_or_else(|| format!("duration `{text}` is too large"))
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

/// Flags of the watch loop (flattened into `serve`).
#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// Do not run the watch loop (no app status, no stop teardown); admission still works.
    #[arg(long, env = "KSVC_WEBHOOK_NO_WATCH")]
    pub no_watch: bool,
    /// Kubeconfig file for the watch loop; default: in-cluster config, then the usual kubeconfig.
    #[arg(long, env = "KSVC_WEBHOOK_KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Watch KServices in this namespace only; default: all namespaces.
    #[arg(long, env = "KSVC_WEBHOOK_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// Namespace of the leader-election Lease; default: the pod's (the client's default) namespace.
    #[arg(long, env = "KSVC_WEBHOOK_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_LEASE_NAME",
        default_value = "ksvc-webhook-watch"
    )]
    pub lease_name: String,
    /// This replica's identity in the Lease (set from the downward API); default: a generated one.
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// Seconds a Lease stays valid without renewal.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_LEASE_DURATION_SECONDS",
        default_value_t = 15
    )]
    pub lease_duration_seconds: u64,
    /// Timeout of every Kubernetes API call of the loop, in seconds.
    #[arg(long, env = "KSVC_WEBHOOK_API_TIMEOUT_SECONDS", default_value_t = 10)]
    pub api_timeout_seconds: u64,
    /// Seconds between full re-reconciles of every app.
    #[arg(long, env = "KSVC_WEBHOOK_RESYNC_SECONDS", default_value_t = 300)]
    pub resync_seconds: u64,
    /// Events a `/apps/watch` subscriber may lag behind before it is told to resync.
    #[arg(long, env = "KSVC_WEBHOOK_WATCH_BUFFER", default_value_t = 256)]
    pub watch_buffer: usize,
    /// Apps whose writes (as leader) may run at once; one app's writes never overlap, and
    /// status never waits for a write.
    #[arg(long, env = "KSVC_WEBHOOK_WRITE_CONCURRENCY", default_value = "4")]
    pub write_concurrency: std::num::NonZeroUsize,
}

/// Arguments of `app`.
#[derive(Debug, Args)]
pub struct AppArgs {
    #[command(subcommand)]
    pub action: AppAction,
}

/// What `app` does.
#[derive(Debug, Subcommand)]
pub enum AppAction {
    /// Stop the app: set the label `flyte.org/app-stopped=true` (scale to zero, cluster-local).
    Stop(AppTarget),
    /// Start the app: remove the label `flyte.org/app-stopped`.
    Start(AppTarget),
    /// Print the app's status (phase, message, replicas, URL).
    Status(AppStatusArgs),
    /// Change only the given fields, in a retry-on-conflict read-modify-write.
    Update(AppUpdateArgs),
}

/// Which app, in which cluster.
#[derive(Debug, Clone, Args)]
pub struct AppTarget {
    /// The KService name.
    pub name: String,
    /// The KService namespace; default: the kubeconfig context's namespace.
    #[arg(short = 'n', long, env = "KSVC_WEBHOOK_APP_NAMESPACE")]
    pub namespace: Option<String>,
    /// Kubeconfig file; default: the usual kubeconfig lookup.
    #[arg(long, env = "KSVC_WEBHOOK_KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,
}

/// Arguments of `app status`.
#[derive(Debug, Args)]
pub struct AppStatusArgs {
    #[command(flatten)]
    pub target: AppTarget,
    /// Keep printing the status whenever it changes.
    #[arg(long, env = "KSVC_WEBHOOK_APP_WATCH")]
    pub watch: bool,
}

/// Arguments of `app update`; an absent flag leaves its field unchanged.
#[derive(Debug, Args)]
pub struct AppUpdateArgs {
    #[command(flatten)]
    pub target: AppTarget,
    /// New image of the serving container.
    #[arg(long, env = "KSVC_WEBHOOK_APP_IMAGE")]
    pub image: Option<String>,
    /// New `autoscaling.knative.dev/min-scale`.
    #[arg(long, env = "KSVC_WEBHOOK_APP_MIN_SCALE")]
    pub min_scale: Option<u32>,
    /// New `autoscaling.knative.dev/max-scale` (0 = unlimited).
    #[arg(long, env = "KSVC_WEBHOOK_APP_MAX_SCALE")]
    pub max_scale: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_parse() {
        let cases = [
            ("500ms", Ok(Duration::from_millis(500))),
            ("10s", Ok(Duration::from_secs(10))),
            ("7", Ok(Duration::from_secs(7))),
            ("2m", Ok(Duration::from_secs(120))),
            ("1h", Ok(Duration::from_secs(3600))),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text), want, "{text}");
        }
        for bad in ["", "s", "10x", "-1s", "99999999999999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn serve_defaults() {
        let cli = Cli::try_parse_from(["ksvc-webhook", "serve"]).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(args.listen.to_string(), "0.0.0.0:8443");
        assert_eq!(args.drain_period, Duration::from_secs(5));
        assert!(!args.http2);
        assert!(args.policy.policy().is_ok());
    }

    #[test]
    fn every_flag_is_documented() {
        fn walk(cmd: &clap::Command) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id != "help" && id != "version" {
                    assert!(
                        arg.get_help().is_some(),
                        "{} --{id} has no help",
                        cmd.get_name()
                    );
                }
            }
            cmd.get_subcommands().for_each(walk);
        }
        walk(&Cli::command());
    }

    #[test]
    fn default_policy_is_valid() {
        let cli = Cli::parse_from(["ksvc-webhook", "review", "-f", "-"]);
        let Command::Review(args) = cli.command else {
            panic!("parsed another command")
        };
        assert!(args.policy.policy().is_ok());
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

    #[derive(Debug, Parser)]
    struct WithWatch {
        #[command(flatten)]
        watch: WatchArgs,
    }

    #[test]
    fn watch_args_are_well_formed_and_default_sensibly() {
        WithWatch::command().debug_assert();
        let parsed = WithWatch::try_parse_from(["x", "--no-watch", "--lease-name", "l"]).unwrap();
        assert!(parsed.watch.no_watch);
        assert_eq!(parsed.watch.lease_name, "l");
        assert_eq!(parsed.watch.api_timeout_seconds, 10);
    }

    #[test]
    fn app_update_flags_are_optional() {
        let cli = Cli::try_parse_from([
            "ksvc-webhook",
            "app",
            "update",
            "myapp",
            "-n",
            "ns",
            "--image",
            "i",
        ])
        .unwrap();
        let Command::App(AppArgs {
            action: AppAction::Update(u),
        }) = cli.command
        else {
            panic!("not update")
        };
        assert_eq!(
            (u.image.as_deref(), u.min_scale, u.max_scale),
            (Some("i"), None, None)
        );
        assert_eq!(u.target.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn sidecars_flag_loads_the_catalogue() {
        let parse = |path: &str| {
            let cli = Cli::parse_from(["ksvc-webhook", "review", "-f", "-", "--sidecars", path]);
            let Command::Review(args) = cli.command else {
                panic!("parsed another command")
            };
            args.policy.policy()
        };
        let policy = parse("examples/sidecars.yaml").unwrap();
        assert_eq!(policy.sidecars.default_names(), ["log-shipper"]);
        let err = parse("examples/missing.yaml").unwrap_err().to_string();
        assert!(err.contains("examples/missing.yaml"), "{err}");
    }
}
