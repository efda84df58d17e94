//! The accept loops: TCP → (TLS) → hyper connection serving an axum router.
//!
//! Every connection takes a place under the listener's caps ([`super::conns`]): a full listener
//! closes a connection that waits on its client to make room, and refuses the newcomer only
//! when every connection is busy. The TLS handshake and the first request's headers must arrive
//! within the header-read timeout (slowloris cut-off); afterwards a connection may stay idle
//! between requests for [`KEEP_ALIVE`], longer than kube-apiserver keeps it in its pool, and
//! lives at most [`MAX_LIFE`] or [`MAX_REQUESTS`] ([`super::activity`] watches it); answers
//! the client does not read are dropped with it after the write timeout ([`super::deadline`]).
//! HTTP/2, used only when ALPN chose it, also gets keep-alive pings, few streams and small
//! flow-control windows, so one connection cannot buffer much (docs/reliability.md has the
//! arithmetic). The socket closes gracefully ([`super::linger`]). Owns sockets, never request
//! semantics.

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

use super::activity::{self, Clock, End, KEEP_ALIVE, MAX_LIFE, MAX_REQUESTS, Peer};
use super::conns::{ConnLimits, Refused};
use super::deadline::WriteDeadline;
use super::linger::Linger;
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
    /// How long a connection asked to finish may take before it is dropped.
    pub finish_timeout: Duration,
    /// How long queued answer bytes may wait on a client that does not read
    /// ([`super::deadline`]).
    pub write_timeout: Duration,
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
    fn new() -> Self {
        let mut http1 = auto::Builder::new(TokioExecutor::new()).http1_only();
        // hyper's timer runs from the end of one request to the next one's headers: the
        // keep-alive bound. The first request's is the watchdog's (header-read timeout).
        http1
            .http1()
            .keep_alive(true)
            .max_buf_size(H1_MAX_BUF)
            .timer(TokioTimer::new())
            .header_read_timeout(KEEP_ALIVE);
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
    let builders = Arc::new(Builders::new());
    let clock = Clock::start();
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
        let opened = clock.now_ms();
        let slot = match serving.conns.admit(peer.ip(), opened) {
            Ok(admitted) => {
                if admitted.evicted {
                    let reason = Refused::Evicted.label();
                    serving.metrics.connection_refused(serving.name, reason);
                    tracing::debug!(%peer, "closed a waiting connection to make room");
                }
                admitted.slot
            }
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
        let tracker = slot.tracker().clone();
        let peer = Peer {
            ip: peer.ip(),
            tracker: tracker.clone(),
            clock,
        };
        let (serving, builders, closed) = (serving.clone(), builders.clone(), closed.clone());
        // Boxed: a connection's state (TLS, HTTP/1.1 and HTTP/2, the watchdog) is some KiB,
        // which the runtime would otherwise copy each time it moves the task's future.
        let task = tasks.spawn(Box::pin(async move {
            let _slot = slot;
            let ip = peer.ip;
            if let Err(err) = connection(tcp, &serving, &builders, closed, peer, opened).await {
                tracing::debug!(%ip, error = %err, "connection ended with an error");
            }
        }));
        // Named before the next admission, the only place that evicts.
        tracker.serve_in(task);
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

/// Handshake (if TLS), then serve HTTP on one connection until it ends, its watchdog ends it,
/// or `closed` turns true.
async fn connection(
    tcp: TcpStream,
    serving: &Serving,
    builders: &Builders,
    closed: watch::Receiver<bool>,
    peer: Peer,
    opened: u64,
) -> ConnResult {
    let tcp = Linger::new(
        WriteDeadline::new(tcp, serving.write_timeout),
        peer.tracker.clone(),
    );
    let limits = activity::Limits {
        first: serving.header_read_timeout,
        keep_alive: KEEP_ALIVE,
        max_life: MAX_LIFE,
        max_requests: MAX_REQUESTS,
        unsent: serving.write_timeout,
    };
    let (tracker, clock) = (peer.tracker.clone(), peer.clock);
    let watchdog = activity::watchdog(&tracker, clock, opened, limits);
    let service = TowerToHyperService::new(activity::track(serving.router.clone(), peer));
    let finish = serving.finish_timeout;
    let Some(acceptor) = &serving.tls else {
        let conn = builders.http1.serve_connection(TokioIo::new(tcp), service);
        return drive(conn, closed, watchdog, finish).await;
    };
    tokio::pin!(watchdog);
    let tls = tokio::select! {
        tls = acceptor.accept(tcp) => tls?,
        _ = &mut watchdog => return Err("TLS handshake timed out".into()),
    };
    let builder = match tls.get_ref().1.alpn_protocol() {
        Some(b"h2") => &builders.http2,
        _ => &builders.http1,
    };
    let conn = builder.serve_connection(TokioIo::new(tls), service);
    drive(conn, closed, watchdog, finish).await
}

/// Serve `conn` to its end. Once `closed` turns true, or the `watchdog` says so, finish it
/// gracefully (HTTP/1.1: after the request in flight; HTTP/2: GOAWAY), within `finish` when
/// the watchdog asked; a connection that never carried a request is dropped at once.
async fn drive<C, E>(
    conn: C,
    mut closed: watch::Receiver<bool>,
    watchdog: impl Future<Output = End>,
    finish: Duration,
) -> ConnResult
where
    C: GracefulConnection<Error = E>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::pin!(conn);
    let bounded = tokio::select! {
        done = conn.as_mut() => return done.map_err(Into::into),
        _ = closed.wait_for(|&closed| closed) => false,
        end = watchdog => match end {
            End::NeverUsed => return Err("no request within the header-read timeout".into()),
            End::Unsent => return Err("the client did not take its answers in time".into()),
            End::Idle | End::Retired => {
                tracing::debug!(?end, "finishing a connection");
                true
            }
        },
    };
    conn.as_mut().graceful_shutdown();
    if !bounded {
        return conn.await.map_err(Into::into);
    }
    match tokio::time::timeout(finish, conn).await {
        Ok(done) => done.map_err(Into::into),
        Err(_) => Err("the connection did not finish in time".into()),
    }
}
