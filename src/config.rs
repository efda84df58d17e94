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
    /// Stop, start, inspect or update an app's KService in the current kubeconfig's cluster.
    App(AppArgs),
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
}
