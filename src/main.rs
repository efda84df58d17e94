//! The `ksvc-webhook` binary: parse the command line, run it, print an error chain and exit 1.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = ksvc_webhook::config::Cli::parse();
    match ksvc_webhook::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
