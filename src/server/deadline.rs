//! The write deadline of a connection's answers: once a write to the socket would block (the
//! client is not reading), everything the server has queued must be written within the
//! deadline (`--request-timeout`), or the connection fails and is dropped, with what it buffered.
//! A client that reads slowly but steadily is held to the same bound: only a flush that empties
//! the queue ends the wait. A socket that never blocks costs no timer.
//!
//! Owns the socket below TLS, nothing above it; knows nothing of requests.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// A socket whose blocked writes must finish by a deadline.
#[derive(Debug)]
pub struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    /// Armed when a write first blocks; disarmed when a flush empties the queue.
    blocked: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteDeadline<S> {
    pub fn new(inner: S, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            blocked: None,
        }
    }

    /// After a write or flush returned `polled`: arm the deadline if it blocked, and fail once
    /// the deadline has passed.
    fn check<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            return polled;
        }
        let limit = self.limit;
        let blocked = self
            .blocked
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match blocked.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not read the answer within the request timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.check(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.check(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        if let Poll::Ready(Ok(())) = polled {
            // Everything queued has reached the socket: the client is keeping up.
            self.blocked = None;
        }
        self.check(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    const LIMIT: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_reads_fails_the_write_at_the_deadline() {
        let (server, _client) = tokio::io::duplex(1024);
        let mut server = WriteDeadline::new(server, LIMIT);
        let started = tokio::time::Instant::now();
        let err = server.write_all(&[b' '; 4096]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), LIMIT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_keeps_up_is_never_cut() {
        let (server, mut client) = tokio::io::duplex(1024);
        let mut server = WriteDeadline::new(server, LIMIT);
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut buf = [0u8; 512];
            while got < 64 * 1024 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                got += client.read(&mut buf).await.unwrap();
            }
            got
        });
        // 64 writes of 1 KiB, each flushed: each blocks, and each flush empties the queue.
        for _ in 0..64 {
            server.write_all(&[b' '; 1024]).await.unwrap();
            server.flush().await.unwrap();
        }
        assert_eq!(reader.await.unwrap(), 64 * 1024);
    }
}
