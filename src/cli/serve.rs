//! `serve`: build the runtime, wire SIGTERM/SIGINT to a graceful shutdown, run the server.
//!
//! Thin: translates [`ServeArgs`] into [`server::Options`], owns process-level concerns (worker
//! threads, log format) and wires the parts together: the sidecar catalogue reload, the watch
//! loop (routes, metrics, leadership; never readiness) and the self-managed certificates, which
//! are in place before the server loads them. Everything else lives in the modules it wires.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use crate::admission::Policy;
use crate::config::ServeArgs;
use crate::server::catalogue::CatalogueReloader;
use crate::server::{self, Server, tls::CertPaths};
use crate::{certmgr, watch};

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
    runtime.block_on(serve(args, policy))
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

async fn serve(args: ServeArgs, policy: Policy) -> anyhow::Result<()> {
    let options = options(&args);
    let mut server = Server::new(options.clone(), policy);
    let reload_catalogue = args.policy.sidecars.clone().map(|path| {
        let reloader = CatalogueReloader::new(path, server.policy(), server.registry_mut());
        tokio::spawn(reloader.run(options.cert_reload_interval))
    });
    // The watch loop never holds admission up: it connects (and retries) in the background, and
    // its sync gates `/apps` and its own metric, never `/readyz`. With `failurePolicy: Fail` a
    // loop that cannot list would otherwise refuse every KService write in the cluster.
    let mut watch = watch::spawn(&args.watch);
    if !args.watch.no_watch {
        server.merge_routes(watch.router());
        watch.register_metrics(server.registry_mut());
    }
    let certificates = manage_certificates(&args, &options, &watch).await?;
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
    watch.shutdown().await;
    for task in [certificates, reload_catalogue].into_iter().flatten() {
        task.abort();
    }
    Ok(())
}

/// With `--self-managed-certs`, find or create the certificates in the cluster and write them
/// where the server reads them, before it loads them. The leader publishes the CA bundle; without
/// a watch loop (no election) every replica may, which is safe: they publish the same Secret.
async fn manage_certificates(
    args: &ServeArgs,
    options: &server::Options,
    watch: &watch::WatchHandle,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    if !args.certs.self_managed_certs {
        return Ok(None);
    }
    let timeout = Duration::from_secs(args.watch.api_timeout_seconds.max(1));
    let client = watch::connect(&args.watch, timeout).await.map_err(|e| {
        anyhow::anyhow!(
            "self-managed certificates need the cluster (pass --self-managed-certs=false to \
                 serve the files in --tls-dir/--tls-cert instead): {e}"
        )
    })?;
    let leader = if args.watch.no_watch {
        tokio::sync::watch::channel(true).1
    } else {
        watch.leader.clone()
    };
    let dir = options
        .certs
        .cert
        .parent()
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    let task = certmgr::start(client, &args.certs, leader, dir)
        .await
        .context("cannot set up the self-managed certificates")?;
    Ok(task)
}
