//! The subcommands: thin shells over the pure core.

pub mod app;

use crate::config::{Cli, Command};

/// Run the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Name(args) => {
            println!("{}-{}-{}", args.name, args.project, args.domain);
            Ok(())
        }
        Command::App(args) => app::run(args),
    }
}
