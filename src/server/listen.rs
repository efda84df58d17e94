//! The accept loops: TCP → (TLS) → hyper connection serving an axum router.
//!
//! One task per connection, each watched by a [`GracefulShutdown`] so that stopping the loop
//! lets every in-flight request finish. The TLS handshake and the request headers must arrive
//! within the header-read timeout (slowloris cut-off). HTTP/2 is used only when ALPN chose it,
//! which the TLS config offers only when enabled. Owns sockets, never request semantics.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// How one listener serves its connections.
#[derive(Clone)]
pub struct Serving {
    pub router: Router,
    /// `None` for the plain-HTTP probe listener.
    pub tls: Option<TlsAcceptor>,
    pub header_read_timeout: Duration,
}

/// HTTP/1.1 and HTTP/2 connection builders, configured once.
struct Builders {
    http1: auto::Builder<TokioExecutor>,
    http2: auto::Builder<TokioExecutor>,
}

impl Builders {
    fn new(header_read_timeout: Duration) -> Self {
        let mut http1 = auto::Builder::new(TokioExecutor::new()).http1_only();
        http1
            .http1()
            .keep_alive(true)
            .timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout);
        let mut http2 = auto::Builder::new(TokioExecutor::new()).http2_only();
        http2
            .http2()
            .timer(TokioTimer::new())
            // Bounds per-connection work (rapid-reset style abuse).
            .max_concurrent_streams(128)
            .max_pending_accept_reset_streams(20);
        Self { http1, http2 }
    }
}

/// Accept on `listener` until `stop` resolves, then wait for every connection to finish its
/// in-flight requests. The listener is closed (new connects refused) as soon as `stop` resolves.
pub async fn serve(listener: TcpListener, serving: Serving, stop: impl Future<Output = ()>) {
    let builders = Arc::new(Builders::new(serving.header_read_timeout));
    let graceful = GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            biased;
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(err) => {
                    // EMFILE and friends: back off a little instead of spinning.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY");
        }
        let watcher = graceful.watcher();
        let serving = serving.clone();
        let builders = builders.clone();
        tokio::spawn(async move {
            let done = connection(tcp, &serving, &builders, watcher).await;
            if let Err(err) = done {
                tracing::debug!(%peer, error = %err, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

type ConnResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Handshake (if TLS), then serve HTTP on one connection, watched for graceful shutdown.
async fn connection(
    tcp: TcpStream,
    serving: &Serving,
    builders: &Builders,
    watcher: Watcher,
) -> ConnResult {
    let service = TowerToHyperService::new(serving.router.clone());
    let Some(acceptor) = &serving.tls else {
        let conn = builders.http1.serve_connection(TokioIo::new(tcp), service);
        return watcher.watch(conn).await;
    };
    let tls = tokio::time::timeout(serving.header_read_timeout, acceptor.accept(tcp))
        .await
        .map_err(|_| "TLS handshake timed out")??;
    let builder = match tls.get_ref().1.alpn_protocol() == Some(b"h2") {
        true => &builders.http2,
        false => &builders.http1,
    };
    watcher
        .watch(builder.serve_connection(TokioIo::new(tls), service))
        .await
}
