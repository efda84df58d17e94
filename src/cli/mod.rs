//! The subcommands: thin shells over the pure core.

pub mod app;
pub mod app_print;
pub mod certs;
pub mod drift;
mod logs;
pub mod offline;
pub mod policy;
pub mod serve;

use clap::{Parser, Subcommand};

use app::AppArgs;
use certs::CertsArgs;
use drift::DriftArgs;
use offline::{InputArgs, MutateArgs, NameArgs, ReviewArgs};
use serve::ServeArgs;

/// Run the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Mutate(args) => offline::mutate(&args),
        Command::Review(args) => offline::review(&args),
        Command::Uninject(args) => offline::uninject(&args),
        Command::Name(args) => offline::name(&args),
        Command::Sha(args) => offline::sha(&args),
        Command::App(args) => app::run(args),
        Command::Serve(args) => serve::run(*args),
        Command::Certs(args) => certs::run(args),
        Command::Drift(args) => drift::run(*args),
    }
}

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
    /// Report which KServices admission would change today, and why (exit 1 when any has
    /// drifted), from a cluster or a file.
    Drift(Box<DriftArgs>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::time::Duration;

    use app::AppAction;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
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

    #[test]
    fn status_api_is_authenticated_unless_switched_off() {
        let serve = |extra: &[&str]| {
            let args = ["ksvc-webhook", "serve"].iter().chain(extra);
            match Cli::try_parse_from(args).unwrap().command {
                Command::Serve(args) => args.status_api,
                _ => panic!("not serve"),
            }
        };
        let on = serve(&[]);
        assert!(on.status_auth);
        assert_eq!(on.status_auth_cache_ttl, Duration::from_secs(10));
        assert_eq!(on.status_auth_cache_size, 4096);
        assert_eq!(
            (on.max_watch_streams, on.max_watch_streams_per_caller),
            (512, 16)
        );
        assert!(!serve(&["--status-auth=false"]).status_auth);
        let ttl = serve(&["--status-auth-cache-ttl", "1m"]).status_auth_cache_ttl;
        assert_eq!(ttl, Duration::from_secs(60));
    }
}
