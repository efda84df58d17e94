//! The subcommands, a folder for each command with several files (`app/`, `check/`,
//! `explain/`, `offline/`), a file for each other (`drift`, `certs`, `serve`), and what they
//! share: the policy flags ([`policy`]), the status API read through the API server ([`status`])
//! and the printing of records ([`output`]). Each command's `Args` carries its `--help` words
//! beside its flags. A decision on a review or an app is the core's (`admission`,
//! `watch::status`, `certmgr`), never made again here; what only a command line needs lives
//! here, pure and beside its command: the JSONPath subset, the tables, what `check` concludes
//! from what it read.

pub mod app;
pub mod certs;
pub mod check;
pub mod drift;
pub mod explain;
pub mod offline;
pub mod output;
pub mod policy;
pub mod serve;
pub mod status;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use app::AppArgs;
use certs::CertsArgs;
use drift::DriftArgs;
use offline::{MutateArgs, NameArgs, ReviewArgs, ShaArgs, UninjectArgs};
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
        Command::Check(args) => check::run(*args),
        Command::Drift(args) => drift::run(*args),
        Command::Explain(args) => explain::run(&args),
        Command::Completion(args) => completion(&args),
    }
}

/// `completion`: the shell's completion script on stdout.
fn completion(args: &CompletionArgs) -> anyhow::Result<()> {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "ksvc-webhook", &mut script);
    let script = String::from_utf8(script)?;
    let script = match args.shell {
        Shell::Bash => bash_subcommands_fixed(&script),
        Shell::Zsh | Shell::Fish => script,
    };
    std::io::Write::write_all(&mut std::io::stdout().lock(), script.as_bytes())
        .map_err(|e| anyhow::anyhow!("cannot write the completion script: {e}"))
}

/// clap_complete's bash script names the states of a hyphenated binary's subcommands two ways:
/// it sets `cmd=ksvc__webhook__subcmd__app` but matches `ksvc__subcmd__webhook__subcmd__app)`,
/// so nothing below the top level completes. The matches are renamed to what is set.
fn bash_subcommands_fixed(script: &str) -> String {
    script.replace("ksvc__subcmd__webhook__subcmd__", "ksvc__webhook__subcmd__")
}

/// Parse the command line; exit 2 with clap's message when it is wrong, naming the environment
/// variable when the bad value came from one.
pub fn parse() -> Cli {
    Cli::try_parse().unwrap_or_else(|err| name_the_variable(err).exit())
}

/// `err`, with `'--flag <VALUE>' from the environment variable 'NAME'` when the value it refuses
/// is the flag's environment variable's and the command line does not give the flag.
fn name_the_variable(mut err: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        err.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return err;
    }
    let (Some(ContextValue::String(shown)), Some(ContextValue::String(value))) = (
        err.get(ContextKind::InvalidArg),
        err.get(ContextKind::InvalidValue),
    ) else {
        return err;
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let given = |arg: &clap::Arg| {
        argv.iter().any(|a| {
            let long = arg.get_long().is_some_and(|l| {
                a.strip_prefix("--")
                    .and_then(|a| a.strip_prefix(l))
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('='))
            });
            let short = arg.get_short().is_some_and(|s| {
                a.strip_prefix('-')
                    .is_some_and(|rest| !rest.starts_with('-') && rest.starts_with(s))
            });
            long || short
        })
    };
    let from_env = |arg: &clap::Arg| {
        let env = arg.get_env()?;
        let named = arg
            .get_long()
            .is_some_and(|l| shown.split(' ').next() == Some(&format!("--{l}")));
        let same = std::env::var_os(env).is_some_and(|v| v.to_string_lossy() == value.as_str());
        (named && same && !given(arg)).then(|| env.to_string_lossy().into_owned())
    };
    let Some(variable) = find_arg(&Cli::command(), &from_env) else {
        return err;
    };
    let shown = format!("{shown}' from the environment variable '{variable}");
    err.insert(ContextKind::InvalidArg, ContextValue::String(shown));
    err
}

/// The first `Some` that `f` gives for an argument of `cmd` or its subcommands.
fn find_arg<T>(cmd: &clap::Command, f: &impl Fn(&clap::Arg) -> Option<T>) -> Option<T> {
    cmd.get_arguments()
        .find_map(f)
        .or_else(|| cmd.get_subcommands().find_map(|sub| find_arg(sub, f)))
}

/// A Service or KService name: a DNS-1035 label.
fn parse_service_name(text: &str) -> Result<String, String> {
    match crate::admission::naming::dns1035_problem(text) {
        None => Ok(text.to_owned()),
        Some(problem) => Err(format!("{text:?} is not a Service name: it {problem}")),
    }
}

/// The line `main` prints for a failed command: an answer of the API server or a failed
/// connection as kubectl prints it, anything else after `error: ` with each cause once.
pub fn message(err: &anyhow::Error) -> String {
    match err.downcast_ref::<crate::cluster::errors::Error>() {
        Some(worded) if worded.is_verbatim() => worded.to_string(),
        _ => format!("error: {}", crate::report::error_chain(err.as_ref())),
    }
}

/// Admission webhook, sidecar injector and watch loop for Knative Services.
#[derive(Debug, Parser)]
#[command(name = "ksvc-webhook", about, long_about = None,
          version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("KSVC_WEBHOOK_COMMIT"), ")"))]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Mutate manifests offline as admission would: print the result, or the violations and exit 1.
    Mutate(Box<MutateArgs>),
    /// Answer an admission.k8s.io/v1 AdmissionReview (JSON or YAML) exactly as the server would.
    Review(ReviewArgs),
    /// Strip everything the webhook added to manifests (env var, sidecars, annotations, stop
    /// state).
    Uninject(UninjectArgs),
    /// Print the deterministic KService name of an app identity.
    Name(NameArgs),
    /// Print `NAMESPACE/NAME  SHA` for each KService in the manifests (the `flyte.org/spec-sha`
    /// value).
    Sha(ShaArgs),
    /// List, inspect, stop, start or update apps (KServices) in the kubeconfig's cluster.
    App(AppArgs),
    /// Serve admission reviews over HTTPS (plus health and metrics).
    Serve(Box<ServeArgs>),
    /// Generate a CA and a serving certificate for the webhook Service.
    Certs(CertsArgs),
    /// Check that the install in the kubeconfig's cluster is healthy: a ✓ or × line per check.
    Check(Box<check::CheckArgs>),
    /// Report which KServices admission would change today, and why (exit 1 when any has
    /// drifted): the server's report, or a file judged here.
    Drift(Box<DriftArgs>),
    /// Say why admission would (not) change or refuse a KService: the namespace, the rules and
    /// sidecars that apply, each step's changes and each refusal, with field paths.
    Explain(Box<explain::ExplainArgs>),
    /// Print a shell completion script (bash, zsh or fish).
    Completion(CompletionArgs),
}

/// What `completion --help` shows after the flags.
const COMPLETION_HELP: &str = "\
Environment:
  NO_COLOR     any value: no colour in help and errors

Examples:
  source <(ksvc-webhook completion bash)
  ksvc-webhook completion zsh > \"${fpath[1]}/_ksvc-webhook\"
  ksvc-webhook completion fish > ~/.config/fish/completions/ksvc-webhook.fish";

/// Arguments of `completion`.
#[derive(Debug, Clone, Args)]
#[command(after_help = COMPLETION_HELP)]
pub struct CompletionArgs {
    /// The shell to write the completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// A shell `completion` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
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

    /// Every subcommand's `--help` names the environment variables it reads beyond its flags'
    /// and gives an example of itself that names it in full.
    #[test]
    fn every_subcommand_has_environment_and_examples_in_its_help() {
        fn walk(cmd: &mut clap::Command, path: &str) {
            let path = format!("{path} {}", cmd.get_name()).trim_start().to_owned();
            if cmd.get_name() == "help" {
                return; // clap's own
            }
            let help = cmd.render_help().to_string();
            if path != "ksvc-webhook" {
                assert!(help.contains("\nEnvironment:\n  "), "{path}: {help}");
                assert!(help.contains("NO_COLOR"), "{path}: {help}");
                let examples = help.split("\nExamples:\n").nth(1).unwrap_or_default();
                assert!(
                    examples.lines().any(|l| l.contains(&path)),
                    "{path} has no example of itself: {help}"
                );
            }
            if path.starts_with("ksvc-webhook app") || path == "ksvc-webhook serve" {
                assert!(help.contains("KUBECONFIG"), "{path}: {help}");
            }
            for sub in cmd.get_subcommands_mut() {
                walk(sub, &path);
            }
        }
        let mut cli = Cli::command();
        cli.build();
        walk(&mut cli, "");
        let serve = Cli::command()
            .find_subcommand_mut("serve")
            .unwrap()
            .render_help();
        assert!(serve.to_string().contains("RUST_LOG"), "{serve}");
    }

    #[test]
    fn serve_defaults() {
        let cli = Cli::try_parse_from(["ksvc-webhook", "serve"]).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(args.listen.to_string(), "0.0.0.0:8443");
        assert_eq!(args.drain_period, Duration::from_secs(5));
        assert_eq!(args.shutdown_timeout, Duration::from_secs(10));
        assert_eq!(args.request_timeout, Duration::from_secs(10));
        assert_eq!(
            (args.body_budget, args.small_body_reserve),
            (64 << 20, 16 << 20)
        );
        assert_eq!(
            (args.max_connections, args.max_connections_per_ip),
            (256, 64)
        );
        assert!(!args.http2);
        assert!(args.policy.policy().is_ok());
    }

    /// The Lease lands in the webhook's namespace (where its Role grants leases), not in the
    /// kubeconfig context's, unless `--lease-namespace` says otherwise.
    #[test]
    fn the_lease_is_in_the_webhook_namespace() {
        let lease = |extra: &[&str]| {
            let args = ["ksvc-webhook", "serve"].iter().chain(extra);
            match Cli::try_parse_from(args).unwrap().command {
                Command::Serve(args) => args.lease.in_namespace(&args.certs.namespace),
                _ => panic!("not serve"),
            }
        };
        assert_eq!(
            lease(&["--webhook-namespace", "hooks"])
                .lease_namespace
                .as_deref(),
            Some("hooks")
        );
        assert_eq!(lease(&[]).lease_namespace.as_deref(), Some("ksvc-system"));
        let named = lease(&[
            "--webhook-namespace",
            "hooks",
            "--lease-namespace",
            "leases",
        ]);
        assert_eq!(named.lease_namespace.as_deref(), Some("leases"));
    }

    /// `serve`'s arguments from `extra` flags.
    fn serve_args(extra: &[&str]) -> serve::ServeArgs {
        let args = ["ksvc-webhook", "serve"].iter().chain(extra);
        match Cli::try_parse_from(args).unwrap().command {
            Command::Serve(args) => *args,
            _ => panic!("not serve"),
        }
    }

    /// Self-managed certificates outside a cluster go to a directory of their own, never over
    /// the `./certs` pair that `make run` serves.
    #[test]
    fn self_managed_certificates_outside_a_cluster_never_go_to_certs() {
        use serve::CertMode;
        let laptop = serve_args(&["--self-managed-certs"]);
        let mode = CertMode::of(&laptop, false);
        assert_eq!(mode, CertMode::SelfManaged);
        let dir = mode.dir_outside_cluster(&laptop, false, 42).unwrap();
        assert!(dir.starts_with(std::env::temp_dir()), "{}", dir.display());
        assert!(dir.ends_with("ksvc-webhook/certs-42"), "{}", dir.display());
        assert_eq!(mode.dir_outside_cluster(&laptop, true, 42), None, "a pod's");
        let named = serve_args(&["--self-managed-certs", "--tls-dir", "mine"]);
        assert_eq!(
            CertMode::of(&named, false).dir_outside_cluster(&named, false, 42),
            None
        );
        let files = serve_args(&[]);
        assert_eq!(
            CertMode::of(&files, false).dir_outside_cluster(&files, false, 42),
            None
        );
    }

    /// `--cert-manager` serves the mounted files and keeps the failurePolicy switch (its Lease
    /// and the mutating configuration, no Secret); plain files switch nothing and elect nobody
    /// in the admission part.
    #[test]
    fn cert_manager_serves_files_and_keeps_the_policy_switch() {
        use crate::server::role::Role;
        use serve::{CertMode, api_calls};
        let cases: [(&[&str], bool, CertMode); 5] = [
            (&["--cert-manager"], true, CertMode::CertManager),
            (
                &[
                    "--cert-manager",
                    "--self-managed-certs=false",
                    "--tls-dir",
                    "x",
                ],
                true,
                CertMode::CertManager,
            ),
            (&["--tls-dir", "x"], true, CertMode::Files),
            (&[], true, CertMode::SelfManaged),
            (&[], false, CertMode::Files),
        ];
        for (flags, in_cluster, mode) in cases {
            assert_eq!(
                CertMode::of(&serve_args(flags), in_cluster),
                mode,
                "{flags:?}"
            );
        }
        let resources = |mode| -> Vec<&str> {
            let calls = api_calls(Role::Admission, mode);
            calls
                .iter()
                .flat_map(|c| c.iter())
                .map(|c| c.resource)
                .collect()
        };
        let cert_manager = resources(CertMode::CertManager);
        assert!(!cert_manager.contains(&"secrets"), "{cert_manager:?}");
        assert!(cert_manager.contains(&"leases"), "{cert_manager:?}");
        assert!(cert_manager.contains(&"mutatingwebhookconfigurations"));
        let files = resources(CertMode::Files);
        assert!(!files.contains(&"leases"), "{files:?}");
        assert!(
            !files.contains(&"mutatingwebhookconfigurations"),
            "{files:?}"
        );
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
        let serve = |extra: &[&str]| serve_args(extra).status_api;
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
