//! The admission server: HTTPS `POST /mutate` over the pure core, probes, metrics, certificate
//! reload and graceful shutdown. I/O only; every decision is [`crate::admission::review`]'s.
//!
//! Lifecycle: [`Server::new`] → wire the extension points → [`Server::bind`] (loads the
//! certificates, binds the sockets) → [`Bound::run`] until [`Shutdown::trigger`].
//!
//! Extension points, to be wired before `bind`:
//! - [`Server::policy`]: the `Arc<ArcSwap<Policy>>` every review reads; `store` a new policy
//!   to hot-reload it (the next request sees it).
//! - [`Server::merge_routes`]: extra axum routes served on the TLS listener (the plain one serves
//!   only probes and metrics, under its own small cap: an attack on the admission port never
//!   fails the probes pointed at it).
//! - [`Server::readiness`] → [`Readiness::gate`]: a named flag `/readyz` waits for.
//! - [`Server::registry_mut`]: the Prometheus registry `/metrics` encodes.
//! - [`Server::guard_metrics`]: an access check `/metrics` requests pass first.
//! - [`Server::revision_owners`]: the watch cache's view of a revision's Service, for the
//!   revision guard (without it every owner is unknown).
//! - [`Server::review_spans`]: one `tracing` span per review ([`trace`]), for the OpenTelemetry
//!   layer of `--otlp-endpoint` (without it a review makes no span).
//! - [`Server::without_admission`]: serve no admission routes (the controller role's listener
//!   serves only the status API, probes and metrics).
//! - [`Server::local_routes`]: routes served on one more plain-HTTP listener, the loopback status
//!   listener (`--local-status-listen`), under the probe listener's small cap.

pub mod activity;
mod body;
pub mod budget;
pub mod catalogue;
mod conns;
mod deadline;
mod linger;
mod listen;
pub mod memory;
pub mod metrics;
pub mod process;
pub mod readiness;
pub mod reload;
pub mod role;
pub mod routes;
pub mod shutdown;
pub mod tls;
pub mod trace;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::admission::Policy;
use crate::admission::guard::OwnerView;
use budget::BodyBudget;
use conns::ConnLimits;
use metrics::{Exposition, Metrics};
pub use readiness::Readiness;
use reload::Reload as _;
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
    #[error("invalid limits: {0}")]
    Limits(&'static str),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Open connections of the plain probe and metrics listener: the kubelet's probes and a
/// Prometheus scrape need a few; waiting ones make room for newcomers as on the admission port.
pub const PROBE_CONNECTIONS: usize = 32;

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
    /// After the drain: how long connections get to finish before they are dropped.
    pub shutdown_timeout: Duration,
    pub limits: Limits,
}

/// What one client may make the server hold (docs/reliability.md has the arithmetic).
#[derive(Debug, Clone)]
pub struct Limits {
    /// An admission request's body must have arrived by then (answer 408 otherwise).
    pub request_timeout: Duration,
    /// Bytes of admission bodies being read or decided, all together (503 beyond).
    pub body_budget: usize,
    /// Part of `body_budget` only bodies of at most [`budget::SMALL_BODY`] bytes may use.
    pub small_body_reserve: usize,
    /// Open connections per listener.
    pub max_connections: usize,
    /// Open connections per listener from one peer address.
    pub max_connections_per_ip: usize,
}

impl Limits {
    fn check(&self) -> Result<()> {
        let problem = match () {
            () if self.small_body_reserve >= self.body_budget => {
                "--small-body-reserve must be below --body-budget"
            }
            () if self.max_connections == 0 => "--max-connections must be at least 1",
            () if self.max_connections_per_ip == 0 => "--max-connections-per-ip must be at least 1",
            () if self.max_connections_per_ip > self.max_connections => {
                "--max-connections-per-ip must not exceed --max-connections"
            }
            () => return Ok(()),
        };
        Err(Error::Limits(problem))
    }
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
    review_spans: bool,
    admission: bool,
    local: Option<(SocketAddr, Router)>,
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
            review_spans: false,
            admission: true,
            local: None,
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

    /// Serve `routes` too, on the TLS listener only. Paths must not clash with `/mutate`,
    /// `/healthz`, `/readyz` or `/metrics` (axum panics at wiring time if they do). Requests
    /// carry a [`shutdown::Stopping`] extension: long-lived answers end when it resolves.
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

    /// Make one span per review ([`trace::review_span`]), for the OpenTelemetry layer that
    /// exports them.
    pub fn review_spans(&mut self) {
        self.review_spans = true;
    }

    /// Serve neither `/mutate` nor `/validate-revision-delete`: the TLS listener then serves only
    /// the merged routes, probes and metrics.
    pub fn without_admission(&mut self) {
        self.admission = false;
    }

    /// Serve `routes` on a plain-HTTP listener at `addr` too, under [`PROBE_CONNECTIONS`];
    /// requests carry a [`shutdown::Stopping`] extension as on the TLS listener. Whoever wires
    /// it decides who may reach `addr` (the status API's is loopback only).
    pub fn local_routes(&mut self, addr: SocketAddr, routes: Router) {
        self.local = Some((addr, routes));
    }

    /// Check the limits, load the certificates and bind the listeners.
    pub async fn bind(self) -> Result<Bound> {
        let limits = &self.options.limits;
        limits.check()?;
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
        let local_listener = match &self.local {
            Some((addr, _)) => Some(bind(*addr).await?),
            None => None,
        };
        let shutdown = Shutdown::new(self.readiness.clone());
        let budget = BodyBudget::new(
            limits.body_budget,
            limits.small_body_reserve,
            self.metrics.body_bytes(),
        );
        let state = routes::AppState {
            policy: self.policy,
            metrics: self.metrics.clone(),
            readiness: self.readiness,
            exposition: Exposition::new(self.registry),
            metrics_guard: self.metrics_guard,
            revision_owners: self.revision_owners,
            budget,
            request_timeout: limits.request_timeout,
            clock: activity::Clock::start(),
            deciders: Arc::new(tokio::sync::Semaphore::new(routes::DECIDERS)),
            stopping: shutdown.stopping(),
            review_spans: self.review_spans,
        };
        let serving = |router, tls, name, (max, per_ip)| listen::Serving {
            router,
            tls,
            header_read_timeout: self.options.header_read_timeout,
            finish_timeout: limits.request_timeout,
            write_timeout: limits.request_timeout,
            conns: ConnLimits::new(max, per_ip, self.metrics.connections(name)),
            metrics: self.metrics.clone(),
            name,
        };
        let admission_caps = (limits.max_connections, limits.max_connections_per_ip);
        let local = self
            .local
            .zip(local_listener)
            .map(|((_, routes), listener)| {
                let routes = routes.layer(axum::Extension(shutdown.stopping()));
                let caps = (PROBE_CONNECTIONS, PROBE_CONNECTIONS);
                (listener, serving(routes, None, "local", caps))
            });
        Ok(Bound {
            tls_serving: serving(
                routes::admission_router(state.clone(), self.extra_routes, self.admission),
                Some(tokio_rustls::TlsAcceptor::from(tls)),
                "admission",
                admission_caps,
            ),
            plain_serving: serving(
                routes::probe_router(state),
                None,
                "plain",
                (PROBE_CONNECTIONS, PROBE_CONNECTIONS),
            ),
            tls_listener,
            plain_listener,
            local,
            reloader,
            shutdown,
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
    local: Option<(TcpListener, listen::Serving)>,
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

    /// The address of the local listener ([`Server::local_routes`]), if any.
    pub fn local_routes_addr(&self) -> Option<std::io::Result<SocketAddr>> {
        self.local
            .as_ref()
            .map(|(listener, _)| listener.local_addr())
    }

    /// The handle that starts a graceful shutdown (wire SIGTERM to it).
    pub fn shutdown_handle(&self) -> Shutdown {
        self.shutdown.clone()
    }

    /// Serve until shut down: after [`Shutdown::trigger`], keep answering for the drain period,
    /// then stop accepting, end long-lived answers, and return once every connection has
    /// finished, or after `--shutdown-timeout`, dropping the ones still open.
    pub async fn run(self) {
        let reload = tokio::spawn(self.reloader.run(self.options.cert_reload_interval));
        let drain = self.options.drain_period;
        let bound = self.options.shutdown_timeout;
        let shutdown = self.shutdown;
        let stopper = async {
            shutdown.triggered().await;
            if shutdown.skips_drain() {
                tracing::info!("shutdown: interrupted, readiness failed, not draining");
            } else {
                tracing::info!(
                    drain_ms = drain.as_millis() as u64,
                    "shutdown: readiness failed, draining"
                );
                // A stop asked for during the drain cuts it short.
                let mut stopping = shutdown.stopping();
                tokio::select! {
                    () = tokio::time::sleep(drain) => {}
                    () = stopping.wait() => {}
                }
            }
            tracing::info!(
                bound_ms = bound.as_millis() as u64,
                "shutdown: no longer accepting, finishing in-flight requests"
            );
            shutdown.stop();
        };
        let stopped = || {
            let mut stopping = shutdown.stopping();
            async move { stopping.wait().await }
        };
        let tls = listen::serve(self.tls_listener, self.tls_serving, stopped(), bound);
        let plain = async {
            if let Some(listener) = self.plain_listener {
                listen::serve(listener, self.plain_serving, stopped(), bound).await;
            }
        };
        let local = async {
            if let Some((listener, serving)) = self.local {
                listen::serve(listener, serving, stopped(), bound).await;
            }
        };
        tokio::join!(stopper, tls, plain, local);
        reload.abort();
        tracing::info!("shutdown complete");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_that_contradict_each_other_are_refused() {
        let ok = Limits {
            request_timeout: Duration::from_secs(10),
            body_budget: 64 << 20,
            small_body_reserve: 16 << 20,
            max_connections: 256,
            max_connections_per_ip: 64,
        };
        assert!(ok.check().is_ok());
        type Break = fn(&mut Limits);
        let cases: [(Break, &str); 4] = [
            (
                |l| l.small_body_reserve = l.body_budget,
                "--small-body-reserve",
            ),
            (|l| l.max_connections = 0, "--max-connections must"),
            (
                |l| l.max_connections_per_ip = 0,
                "--max-connections-per-ip must be",
            ),
            (|l| l.max_connections_per_ip = 257, "must not exceed"),
        ];
        for (break_it, want) in cases {
            let mut limits = ok.clone();
            break_it(&mut limits);
            let err = limits.check().unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }
}
