//! The subcommands: thin shells over the pure core.

pub mod app;
pub mod app_print;
pub mod certs;
mod logs;
mod offline;
pub mod serve;

use crate::config::{Cli, Command};

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
    }
}
