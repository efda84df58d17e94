//! The accept loops: TCP → (TLS) → hyper connection serving an axum router.
//!
//! Every connection takes a place under the listener's caps ([`super::conns`]) or is closed at
//! once. The TLS handshake and, on HTTP/1.1, every request's headers must arrive within the
//! header-read timeout (slowloris cut-off; hyper applies it to idle keep-alive connections too).
//! HTTP/2, used only when ALPN chose it, gets the same cut-off from [`super::idle`]: a connection
//! with no open stream for that long is closed. It also gets keep-alive pings, few streams and
//! small flow-control windows, so one connection cannot buffer much (docs/reliability.md has
//! the arithmetic). Owns sockets, never request semantics.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulConnection;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::conns::ConnLimits;
use super::idle::{self, Activity};
use super::metrics::Metrics;

/// Most concurrent streams of one HTTP/2 connection.
pub const H2_MAX_STREAMS: u32 = 8;
/// Flow-control window of one HTTP/2 stream: what a client may send before the server reads.
pub const H2_STREAM_WINDOW: u32 = 128 * 1024;
/// Flow-control window of one HTTP/2 connection, over all its streams.
pub const H2_CONN_WINDOW: u32 = 256 * 1024;
/// Largest header block of one HTTP/2 request.
pub const H2_MAX_HEADER_LIST: u32 = 16 * 1024;
/// Most answer bytes queued per HTTP/2 stream before the server waits for the client.
pub const H2_SEND_BUF: usize = 64 * 1024;
/// Largest HTTP/1.1 read (and write) buffer: request headers must fit in it.
pub const H1_MAX_BUF: usize = 64 * 1024;
/// HTTP/2 keep-alive: a ping after this long without frames …
const H2_PING_INTERVAL: Duration = Duration::from_secs(20);
/// … must be answered within this, or the connection is closed.
const H2_PING_TIMEOUT: Duration = Duration::from_secs(10);

/// How one listener serves its connections.
#[derive(Clone)]
pub struct Serving {
    pub router: Router,
    /// `None` for the plain-HTTP probe listener.
    pub tls: Option<TlsAcceptor>,
    pub header_read_timeout: Duration,
    /// The listener's connection caps.
    pub conns: Arc<ConnLimits>,
    pub metrics: Metrics,
    /// The `listener` label of its metrics.
    pub name: &'static str,
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
            .max_buf_size(H1_MAX_BUF)
            .timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout);
        let mut http2 = auto::Builder::new(TokioExecutor::new()).http2_only();
        http2
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(H2_MAX_STREAMS)
            // Bounds per-connection work (rapid-reset style abuse).
            .max_pending_accept_reset_streams(20)
            .initial_stream_window_size(H2_STREAM_WINDOW)
            .initial_connection_window_size(H2_CONN_WINDOW)
            .max_header_list_size(H2_MAX_HEADER_LIST)
            .max_send_buf_size(H2_SEND_BUF)
            .keep_alive_interval(H2_PING_INTERVAL)
            .keep_alive_timeout(H2_PING_TIMEOUT);
        Self { http1, http2 }
    }
}

/// Accept on `listener` until `stop` resolves; then close the listener, ask every connection to
/// finish (HTTP/1.1: after its request in flight; HTTP/2: GOAWAY) and drop the ones still open
/// after `bound`.
pub async fn serve(
    listener: TcpListener,
    serving: Serving,
    stop: impl Future<Output = ()>,
    bound: Duration,
) {
    let builders = Arc::new(Builders::new(serving.header_read_timeout));
    let (closing, closed) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            biased;
            () = &mut stop => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
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
        let slot = match serving.conns.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(refused) => {
                serving
                    .metrics
                    .connection_refused(serving.name, refused.label());
                tracing::debug!(%peer, reason = refused.label(), "connection refused");
                continue;
            }
        };
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY");
        }
        let (serving, builders, closed) = (serving.clone(), builders.clone(), closed.clone());
        tasks.spawn(async move {
            let _slot = slot;
            if let Err(err) = connection(tcp, &serving, &builders, closed).await {
                tracing::debug!(%peer, error = %err, "connection ended with an error");
            }
        });
    }
    drop(listener);
    closing.send_replace(true);
    let finished =
        tokio::time::timeout(bound, async { while tasks.join_next().await.is_some() {} });
    if finished.await.is_err() {
        tracing::warn!(
            listener = serving.name,
            connections = tasks.len(),
            bound_ms = bound.as_millis() as u64,
            "shutdown: dropping the connections still open after the bound"
        );
        tasks.shutdown().await;
    }
}

type ConnResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Handshake (if TLS), then serve HTTP on one connection until it ends or `closed` turns true.
async fn connection(
    tcp: TcpStream,
    serving: &Serving,
    builders: &Builders,
    closed: watch::Receiver<bool>,
) -> ConnResult {
    let service = TowerToHyperService::new(serving.router.clone());
    let Some(acceptor) = &serving.tls else {
        let conn = builders.http1.serve_connection(TokioIo::new(tcp), service);
        return drive(conn, closed, None).await;
    };
    let tls = tokio::time::timeout(serving.header_read_timeout, acceptor.accept(tcp))
        .await
        .map_err(|_| "TLS handshake timed out")??;
    if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
        let conn = builders.http1.serve_connection(TokioIo::new(tls), service);
        return drive(conn, closed, None).await;
    }
    let activity = Activity::new();
    let service = TowerToHyperService::new(idle::track(serving.router.clone(), activity.clone()));
    let conn = builders.http2.serve_connection(TokioIo::new(tls), service);
    let idle = Some((activity, serving.header_read_timeout));
    drive(conn, closed, idle).await
}

/// Serve `conn` to its end; once `closed` turns true, or the connection has had no open
/// request for the idle limit, finish it gracefully.
async fn drive<C, E>(
    conn: C,
    mut closed: watch::Receiver<bool>,
    idle: Option<(Arc<Activity>, Duration)>,
) -> ConnResult
where
    C: GracefulConnection<Error = E>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::pin!(conn);
    let idle = async {
        match &idle {
            Some((activity, limit)) => activity.idle_for(*limit).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        done = conn.as_mut() => return done.map_err(Into::into),
        _ = closed.wait_for(|&closed| closed) => {}
        () = idle => tracing::debug!("closing an idle HTTP/2 connection"),
    }
    conn.as_mut().graceful_shutdown();
    conn.await.map_err(Into::into)
}
