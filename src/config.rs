//! Command-line and environment configuration: the only place that reads args and env.
//!
//! Every flag has a `KSVC_WEBHOOK_…` env var and a doc comment that `--help` shows.

use std::path::PathBuf;
use std::sync::Arc;

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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
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
