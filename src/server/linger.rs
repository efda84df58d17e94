//! The graceful close of a connection, as Go's server and nginx close: when the server shuts
//! its side after an answer that did not wait for the whole body (413, 503, 408), the socket's
//! write side is shut first, then what the client still sends is read and discarded for a short
//! bounded time, and only then is the socket closed. Closed at once, the kernel would answer the
//! client's next bytes with a reset, and a client still sending (one without
//! `Expect: 100-continue`, such as Go's or Python's) would read that reset instead of the answer.
//! A connection whose request bodies all arrived whole (its [`Tracker`] says so) closes at once
//! after shutting its side, as any server does: nothing is left in flight, and waiting for the
//! client's close would cost every connection a wake-up and a timer.
//!
//! Bounded: at most [`LINGER`] and [`LINGER_BYTES`] per close, into a small buffer on the stack
//! (nothing is kept); the connection keeps its place under the listener's caps meanwhile, as one
//! waiting on its client. Owns the socket below TLS, nothing above it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use super::conns::Tracker;

/// Longest the server keeps reading after it has shut its side.
pub const LINGER: Duration = Duration::from_secs(2);
/// Most bytes it reads and discards then: the largest body and then some.
pub const LINGER_BYTES: usize = 16 << 20;
/// The discard buffer, on the stack of each poll.
const SCRATCH: usize = 4096;

/// A socket that lingers when shut, if its connection left a request body unread.
#[derive(Debug)]
pub struct Linger<S> {
    inner: S,
    state: State,
    tracker: Arc<Tracker>,
}

#[derive(Debug)]
enum State {
    Open,
    /// The write side is shut; discarding until EOF, the deadline or the byte limit.
    Draining {
        deadline: Pin<Box<Sleep>>,
        left: usize,
    },
    Closed,
}

impl<S> Linger<S> {
    /// `inner`, the socket of the connection `tracker` follows.
    pub fn new(inner: S, tracker: Arc<Tracker>) -> Self {
        Self {
            inner,
            state: State::Open,
            tracker,
        }
    }
}

impl<S: AsyncRead + Unpin> Linger<S> {
    /// Discard what arrives until the client closes, or the time or bytes run out.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let State::Draining { deadline, left } = &mut self.state else {
            return Poll::Ready(());
        };
        loop {
            if deadline.as_mut().poll(cx).is_ready() || *left == 0 {
                return Poll::Ready(());
            }
            let mut scratch = [0u8; SCRATCH];
            let mut buf = ReadBuf::new(&mut scratch[..SCRATCH.min(*left)]);
            match ready!(Pin::new(&mut self.inner).poll_read(cx, &mut buf)) {
                Ok(()) if buf.filled().is_empty() => return Poll::Ready(()),
                Ok(()) => *left -= buf.filled().len(),
                Err(_) => return Poll::Ready(()),
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Linger<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Linger<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let State::Open = this.state {
            ready!(Pin::new(&mut this.inner).poll_shutdown(cx))?;
            if !this.tracker.any_unread() {
                this.state = State::Closed;
                return Poll::Ready(Ok(()));
            }
            this.state = State::Draining {
                deadline: Box::pin(tokio::time::sleep(LINGER)),
                left: LINGER_BYTES,
            };
        }
        ready!(this.poll_drain(cx));
        this.state = State::Closed;
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    /// The tracker of a connection that answered before a request's body had arrived.
    fn answered_early() -> Arc<Tracker> {
        let tracker = Arc::new(Tracker::default());
        tracker.left_unread();
        tracker
    }

    #[tokio::test]
    async fn a_shut_socket_reads_what_the_client_still_sends_then_closes() {
        let (server, mut client) = tokio::io::duplex(64 * 1024);
        let mut server = Linger::new(server, answered_early());
        server.write_all(b"413").await.unwrap();
        // The client is still sending 1 MiB, more than the pipe holds, when the server shuts.
        let sender = tokio::spawn(async move {
            client.write_all(&vec![b' '; 1 << 20]).await.unwrap();
            let mut answer = Vec::new();
            client.read_to_end(&mut answer).await.unwrap();
            answer
        });
        server.shutdown().await.unwrap();
        drop(server);
        assert_eq!(sender.await.unwrap(), b"413");
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_closes_is_given_up_on_after_the_linger() {
        let (server, _client) = tokio::io::duplex(1024);
        let mut server = Linger::new(server, answered_early());
        let started = tokio::time::Instant::now();
        server.shutdown().await.unwrap();
        assert_eq!(started.elapsed(), LINGER);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_read_every_body_whole_closes_at_once() {
        let (server, mut client) = tokio::io::duplex(1024);
        let mut server = Linger::new(server, Arc::new(Tracker::default()));
        let started = tokio::time::Instant::now();
        server.shutdown().await.unwrap();
        assert_eq!(started.elapsed(), Duration::ZERO);
        // Nothing was read after the shutdown: what the client sends is left to the close.
        client.write_all(b"late").await.unwrap();
        let mut late = [0u8; 4];
        server.read_exact(&mut late).await.unwrap();
        assert_eq!(&late, b"late");
    }
}
