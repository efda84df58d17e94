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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
