//! `serve`: build the runtime, wire SIGTERM/SIGINT to a graceful shutdown, run the server.
//!
//! Thin: translates [`ServeArgs`] into [`server::Options`] and owns process-level concerns
//! (worker threads, log format). Everything else lives in [`crate::server`].

use anyhow::Context;

use crate::admission::Policy;
use crate::config::ServeArgs;
use crate::server::{self, Server, tls::CertPaths};

/// Run the admission server until SIGTERM or SIGINT.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    // Dropped last: the remaining log lines are written after the server has stopped.
    let _logs = super::logs::init(args.log_format);
    let workers = match args.workers {
        Some(n) => n.get(),
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    // One worker: the current-thread scheduler does the same work without cross-thread
    // wake-ups and work-stealing queues.
    let mut builder = match workers {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(n);
            builder
        }
    };
    let runtime = builder
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let policy = args
        .policy
        .policy()
        .context("invalid admission policy flags")?;
    runtime.block_on(serve(options(&args), policy))
}

/// The server options the flags describe.
pub fn options(args: &ServeArgs) -> server::Options {
    let certs = match &args.tls_dir {
        Some(dir) => CertPaths::in_dir(dir),
        None => CertPaths {
            cert: args.tls_cert.clone(),
            key: args.tls_key.clone(),
        },
    };
    server::Options {
        listen: args.listen,
        metrics_listen: args.metrics_listen,
        certs,
        cert_reload_interval: args.cert_reload_interval,
        http2: args.http2,
        header_read_timeout: args.header_read_timeout,
        drain_period: args.drain_period,
    }
}

async fn serve(options: server::Options, policy: Policy) -> anyhow::Result<()> {
    // Extension points (policy hot reload, extra routes, readiness gates, metrics) are wired
    // here, before `bind`: see the `server` module docs.
    let server = Server::new(options, policy);
    let bound = server.bind().await?;
    tracing::info!(
        listen = %bound.local_addr()?,
        metrics = ?bound.metrics_addr().transpose()?,
        "serving admission reviews"
    );
    let shutdown = bound.shutdown_handle();
    tokio::spawn(async move {
        match server::shutdown::signal().await {
            Ok(()) => shutdown.trigger(),
            Err(err) => tracing::error!(error = %err, "cannot listen for signals"),
        }
    });
    bound.run().await;
    Ok(())
}
