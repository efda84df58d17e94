//! The `ksvc-webhook` binary: parse the command line, run it, print the error once and exit 1
//! (or exit with the status a command chose, as `drift` does).

// mimalloc: admission allocates many small JSON nodes per request; it halves their cost.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = ksvc_webhook::cli::parse();
    match ksvc_webhook::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            if let Some(exit) = err.downcast_ref::<ksvc_webhook::cli::drift::Exit>() {
                // The command has printed all it had to say; only its status is left.
                return std::process::ExitCode::from(exit.0);
            }
            eprintln!("{}", ksvc_webhook::cli::message(&err));
            std::process::ExitCode::FAILURE
        }
    }
}
