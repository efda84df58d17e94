//! The subcommands: thin shells over the pure core.

pub mod certs;
pub mod serve;

use crate::config::{Cli, Command};

/// Run the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Name(args) => {
            println!("{}-{}-{}", args.name, args.project, args.domain);
            Ok(())
        }
        Command::Serve(args) => serve::run(args),
        Command::Certs(args) => certs::run(args),
    }
}
