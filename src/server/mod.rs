//! The admission server: HTTPS `POST /mutate` over the pure core, probes, metrics, certificate
//! reload and graceful shutdown. I/O only; every decision is [`crate::admission::review`]'s.
//!
//! Lifecycle: [`Server::new`] → wire the extension points → [`Server::bind`] (loads the
//! certificates, binds the sockets) → [`Bound::run`] until [`Shutdown::trigger`].
//!
//! Extension points, to be wired before `bind`:
//! - [`Server::policy`]: the `Arc<ArcSwap<Policy>>` every review reads; `store` a new policy
//!   to hot-reload it (the next request sees it).
//! - [`Server::merge_routes`]: extra axum routes served on both the TLS and the plain listener.
//! - [`Server::readiness`] → [`Readiness::gate`]: a named flag `/readyz` waits for.
//! - [`Server::registry_mut`]: the Prometheus registry `/metrics` encodes.
//! - [`Server::guard_metrics`]: an access check `/metrics` requests pass first.
//! - [`Server::revision_owners`]: the watch cache's view of a revision's Service, for the
//!   revision guard (without it every owner is unknown).

pub mod catalogue;
mod listen;
pub mod metrics;
pub mod process;
pub mod readiness;
pub mod routes;
pub mod shutdown;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admission::Policy;
use crate::admission::guard::OwnerView;
use metrics::{Exposition, Metrics};
pub use readiness::Readiness;
pub use shutdown::Shutdown;
use tls::{CertPaths, Certificates, Reloader};

/// Errors that keep the server from starting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot load the serving certificate")]
    Tls(#[from] tls::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the server listens; `serve`'s flags (`cli::serve::ServeArgs`) say what each field means.
#[derive(Debug, Clone)]
pub struct Options {
    pub listen: SocketAddr,
    pub metrics_listen: Option<SocketAddr>,
    pub certs: CertPaths,
    pub cert_reload_interval: Duration,
    pub http2: bool,
    pub header_read_timeout: Duration,
    pub drain_period: Duration,
}

/// A server being wired, not yet listening.
#[derive(Debug)]
pub struct Server {
    options: Options,
    policy: Arc<ArcSwap<Policy>>,
    readiness: Readiness,
    registry: Registry,
    metrics: Metrics,
    extra_routes: Router,
    metrics_guard: Option<Arc<dyn routes::Guard>>,
    revision_owners: Option<OwnerView>,
}

impl Server {
    /// A server for `options` deciding with `policy`.
    pub fn new(options: Options, policy: Policy) -> Self {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        registry.register_collector(Box::new(process::ProcessCollector));
        Self {
            options,
            policy: Arc::new(ArcSwap::from_pointee(policy)),
            readiness: Readiness::default(),
            registry,
            metrics,
            extra_routes: Router::new(),
            metrics_guard: None,
            revision_owners: None,
        }
    }

    /// The live policy: `server.policy().store(Arc::new(new_policy))` swaps it at runtime.
    pub fn policy(&self) -> Arc<ArcSwap<Policy>> {
        self.policy.clone()
    }

    /// The readiness gates; `readiness().gate("name")` adds one that `/readyz` waits for.
    pub fn readiness(&self) -> Readiness {
        self.readiness.clone()
    }

    /// The registry `/metrics` serves; register metrics here before [`Server::bind`].
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Serve `routes` too, on the TLS listener and the plain one. Paths must not clash with
    /// `/mutate`, `/healthz`, `/readyz` or `/metrics` (axum panics at wiring time if they do).
    pub fn merge_routes(&mut self, routes: Router) {
        let current = std::mem::take(&mut self.extra_routes);
        self.extra_routes = current.merge(routes);
    }

    /// Check every `/metrics` request with `guard` first (on both listeners).
    pub fn guard_metrics(&mut self, guard: Arc<dyn routes::Guard>) {
        self.metrics_guard = Some(guard);
    }

    /// Let the revision guard ask `view` about a revision's Service (gone, being deleted, where
    /// its traffic goes).
    pub fn revision_owners(&mut self, view: OwnerView) {
        self.revision_owners = Some(view);
    }

    /// Load the certificates and bind the listeners.
    pub async fn bind(self) -> Result<Bound> {
        let (certs, reloader) =
            Certificates::load(self.options.certs.clone(), self.metrics.clone()).await?;
        let tls = certs.server_config(self.options.http2)?;
        self.readiness
            .gate("certificates")
            .store(true, Ordering::SeqCst);
        let tls_listener = bind(self.options.listen).await?;
        let plain_listener = match self.options.metrics_listen {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        };
        let state = routes::AppState {
            policy: self.policy,
            metrics: self.metrics,
            readiness: self.readiness.clone(),
            exposition: Exposition::new(self.registry),
            metrics_guard: self.metrics_guard,
            revision_owners: self.revision_owners,
        };
        let serving = |router, tls| listen::Serving {
            router,
            tls,
            header_read_timeout: self.options.header_read_timeout,
        };
        Ok(Bound {
            tls_serving: serving(
                routes::admission_router(state.clone(), self.extra_routes.clone()),
                Some(tokio_rustls::TlsAcceptor::from(tls)),
            ),
            plain_serving: serving(routes::probe_router(state, self.extra_routes), None),
            tls_listener,
            plain_listener,
            reloader,
            shutdown: Shutdown::new(self.readiness),
            options: self.options,
        })
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })
}

/// A server with its sockets bound, ready to [`run`](Bound::run).
pub struct Bound {
    tls_listener: TcpListener,
    plain_listener: Option<TcpListener>,
    tls_serving: listen::Serving,
    plain_serving: listen::Serving,
    reloader: Reloader,
    shutdown: Shutdown,
    options: Options,
}

impl Bound {
    /// The address the HTTPS listener is bound to (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tls_listener.local_addr()
    }

    /// The address of the plain-HTTP probe listener, if any.
    pub fn metrics_addr(&self) -> Option<std::io::Result<SocketAddr>> {
        self.plain_listener.as_ref().map(TcpListener::local_addr)
    }

    /// The handle that starts a graceful shutdown (wire SIGTERM to it).
    pub fn shutdown_handle(&self) -> Shutdown {
        self.shutdown.clone()
    }

    /// Serve until shut down: after [`Shutdown::trigger`], keep answering for the drain period,
    /// then stop accepting and return once every in-flight request has been answered.
    pub async fn run(self) {
        let reload = tokio::spawn(self.reloader.run(self.options.cert_reload_interval));
        let (stop_tx, stop_rx) = watch::channel(false);
        let stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|&stop| stop).await;
        };
        let drain = self.options.drain_period;
        let shutdown = self.shutdown;
        let stopper = async move {
            shutdown.triggered().await;
            tracing::info!(
                drain_ms = drain.as_millis() as u64,
                "shutdown: readiness failed, draining"
            );
            tokio::time::sleep(drain).await;
            tracing::info!("shutdown: no longer accepting, finishing in-flight requests");
            stop_tx.send_replace(true);
        };
        let tls = listen::serve(
            self.tls_listener,
            self.tls_serving,
            stopped(stop_rx.clone()),
        );
        let plain = async {
            if let Some(listener) = self.plain_listener {
                listen::serve(listener, self.plain_serving, stopped(stop_rx)).await;
            }
        };
        tokio::join!(stopper, tls, plain);
        reload.abort();
        tracing::info!("shutdown complete");
    }
}
