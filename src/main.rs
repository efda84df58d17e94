//! The `ksvc-webhook` binary: parse the command line, run it, print the error once and exit 1.

// mimalloc: admission allocates many small JSON nodes per request; it halves their cost.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = ksvc_webhook::cli::parse();
    match ksvc_webhook::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{}", ksvc_webhook::cli::message(&err));
            std::process::ExitCode::FAILURE
        }
    }
}
