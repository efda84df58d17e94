//! What one connection is doing, seen from its requests: the service wrapper that reports each
//! request's start and end to the connection's [`Tracker`] and hands the request a [`Peer`]
//! (its address and tracker, for the body reader), and the watchdog that says when the
//! connection should end: no request for the idle limit, or too old, or too many requests.
//!
//! A request ends when its answer has been handed over whole: an answer queued behind a client
//! that does not read (an HTTP/2 stream on a zero window) is not activity. Such an answer must
//! still be taken by the protocol (sent, as far as flow control goes) within the write limit,
//! as a blocked socket write must ([`super::deadline`]): the watchdog ends the connection
//! otherwise. A peer address over its share of open requests (HTTP/2 streams over all its
//! connections, [`super::conns`]) is answered 503 at once. A request whose body is dropped
//! before its end (answered early) tells the tracker, so that the socket lingers as it closes
//! ([`super::linger`]). Owns no sockets.

use std::convert::Infallible;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, Version, header};
use axum::response::{IntoResponse as _, Response};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use tokio::time::Instant;
use tower::ServiceExt as _;

use super::conns::Tracker;

/// Idle time allowed between two requests: above kube-apiserver's 90 s pool, so the client
/// closes first and never sends into a connection the server is closing.
pub const KEEP_ALIVE: Duration = Duration::from_secs(120);
/// Oldest a connection may get; it then finishes its requests and closes.
pub const MAX_LIFE: Duration = Duration::from_secs(600);
/// Most requests one connection may carry; it then finishes them and closes.
pub const MAX_REQUESTS: u64 = 1000;

/// The milliseconds of one listener's clock (the trackers store times as such).
#[derive(Debug, Clone, Copy)]
pub struct Clock(Instant);

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Self {
        Self(Instant::now())
    }

    pub fn now_ms(self) -> u64 {
        u64::try_from(self.0.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn at(self, ms: u64) -> Instant {
        self.0 + Duration::from_millis(ms)
    }
}

/// Who sent a request: its address and its connection's tracker (a request extension).
#[derive(Debug, Clone)]
pub struct Peer {
    pub ip: IpAddr,
    pub tracker: Arc<Tracker>,
    pub clock: Clock,
}

/// `router` as a service that reports each request to `peer`'s tracker and hands it `peer`.
pub fn track(
    router: Router,
    peer: Peer,
) -> impl tower::Service<
    Request<Incoming>,
    Response = Response,
    Error = Infallible,
    Future = impl Future<Output = Result<Response, Infallible>> + Send,
> + Clone {
    tower::service_fn(move |mut request: Request<Incoming>| {
        let begun = peer.tracker.begin(peer.clock.now_ms());
        // HTTP/1.1's last request says so in its answer, so the client opens a new connection
        // rather than sending into this one as it closes (HTTP/2 gets GOAWAY).
        let last = begun >= MAX_REQUESTS && request.version() == Version::HTTP_11;
        let open = Open {
            open: Some(peer.clone()),
            unsent: None,
        };
        let over_share = peer.tracker.address_over_share();
        request.extensions_mut().insert(peer.clone());
        let tracker = peer.tracker.clone();
        let request = request.map(|body| Body::new(UnreadOnDrop::new(body, tracker)));
        let call = (!over_share).then(|| router.clone().oneshot(request));
        async move {
            let Some(call) = call else {
                tracing::debug!(ip = %open.peer_ip(), "a stream over its address's share refused");
                return Ok(over_share_answer());
            };
            let mut response = call.await?;
            if last {
                let close = HeaderValue::from_static("close");
                response.headers_mut().insert(header::CONNECTION, close);
            }
            Ok(response.map(|body| Body::new(Tracked { body, open })))
        }
    })
}

/// The answer to a request over its address's share: 503, retry in a second.
fn over_share_answer() -> Response {
    let message = "this address has too many requests open; retry shortly";
    let retry = [(header::RETRY_AFTER, HeaderValue::from_static("1"))];
    (StatusCode::SERVICE_UNAVAILABLE, retry, message).into_response()
}

/// One open request; ended once, when its answer is handed over or dropped, and then unsent
/// until the answer is dropped (the protocol has taken it).
#[derive(Debug)]
struct Open {
    open: Option<Peer>,
    unsent: Option<Peer>,
}

impl Open {
    fn end(&mut self) {
        if let Some(peer) = self.open.take() {
            peer.tracker.end(peer.clock.now_ms());
            self.unsent = Some(peer);
        }
    }

    fn peer_ip(&self) -> String {
        self.open
            .as_ref()
            .map_or_else(String::new, |peer| peer.ip.to_string())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.end();
        if let Some(peer) = self.unsent.take() {
            peer.tracker.sent();
        }
    }
}

/// An answer's body that keeps its request open until its last frame is handed over.
struct Tracked {
    body: Body,
    open: Open,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.body.is_end_stream() {
            self.open.end();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A request's body that tells its connection's tracker when it is dropped before its end: the
/// answer went out early (413, 503, 408, …) and the client may still be sending it.
struct UnreadOnDrop<B: HttpBody> {
    body: B,
    ended: bool,
    tracker: Arc<Tracker>,
}

impl<B: HttpBody + Unpin> UnreadOnDrop<B> {
    fn new(body: B, tracker: Arc<Tracker>) -> Self {
        Self {
            body,
            ended: false,
            tracker,
        }
    }
}

impl<B: HttpBody + Unpin> HttpBody for UnreadOnDrop<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.ended = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl<B: HttpBody> Drop for UnreadOnDrop<B> {
    fn drop(&mut self) {
        // A body read to its declared length is at its end without the last poll.
        if !self.ended && !self.body.is_end_stream() {
            self.tracker.left_unread();
        }
    }
}

/// Why the watchdog says a connection should end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// No request for the idle limit, and none ever: nothing to finish, drop it.
    NeverUsed,
    /// No request for the idle limit.
    Idle,
    /// Old enough, or enough requests: finish them and close.
    Retired,
    /// Answers handed over have not been taken for the write limit (HTTP/2: the client keeps
    /// its flow-control window shut): drop it.
    Unsent,
}

/// The limits the watchdog applies.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Before the first request (handshake, first headers).
    pub first: Duration,
    /// Between two requests.
    pub keep_alive: Duration,
    pub max_life: Duration,
    pub max_requests: u64,
    /// Longest an answer handed over may wait to be taken.
    pub unsent: Duration,
}

/// Resolves once the connection tracked by `tracker`, opened at `opened_ms`, should end. One
/// timer per connection, re-armed only when it fires: requests cost it nothing.
pub async fn watchdog(tracker: &Tracker, clock: Clock, opened_ms: u64, limits: Limits) -> End {
    let life_ends = opened_ms.saturating_add(ms(limits.max_life));
    loop {
        let now = clock.now_ms();
        if now >= life_ends || tracker.begun() >= limits.max_requests {
            return End::Retired;
        }
        let mut next = life_ends;
        if let Some(since) = tracker.unsent_since() {
            let unsent_ends = since.saturating_add(ms(limits.unsent));
            if now >= unsent_ends {
                return End::Unsent;
            }
            next = next.min(unsent_ends);
        }
        if tracker.open() == 0 {
            let (limit, end) = match tracker.begun() {
                0 => (limits.first, End::NeverUsed),
                _ => (limits.keep_alive, End::Idle),
            };
            let idle_ends = tracker.progress().saturating_add(ms(limit));
            if now >= idle_ends {
                return end;
            }
            next = next.min(idle_ends);
        }
        // A request in flight ends by its own deadlines; look again after the shortest limit.
        next = next.min(now.saturating_add(ms(limits.first.min(limits.keep_alive))));
        tokio::time::sleep_until(clock.at(next)).await;
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        first: Duration::from_secs(5),
        keep_alive: Duration::from_secs(120),
        max_life: Duration::from_secs(600),
        max_requests: 3,
        unsent: Duration::from_secs(10),
    };

    #[tokio::test(start_paused = true)]
    async fn a_connection_ends_when_unused_idle_or_old() {
        let clock = Clock::start();
        let tracker = Tracker::default();
        // Never used: after the first limit.
        let end = watchdog(&tracker, clock, 0, LIMITS).await;
        assert_eq!((end, clock.now_ms()), (End::NeverUsed, 5_000));

        // Used, then idle: the keep-alive limit from the last request's end.
        let started = clock.now_ms();
        tracker.begin(started);
        tracker.end(started + 1);
        tracker.sent();
        let end = watchdog(&tracker, clock, started, LIMITS).await;
        assert_eq!(end, End::Idle);
        assert_eq!(clock.now_ms(), started + 1 + 120_000);

        // A request open for long: the life limit ends it, from when the connection opened.
        let opened = clock.now_ms();
        let busy = Tracker::default();
        busy.begin(opened);
        let end = watchdog(&busy, clock, opened, LIMITS).await;
        assert_eq!((end, clock.now_ms() - opened), (End::Retired, 600_000));
    }

    #[tokio::test]
    async fn a_body_dropped_before_its_end_is_told_to_the_tracker() {
        use http_body_util::{BodyExt as _, Empty, Full};
        let whole = Arc::new(Tracker::default());
        let body = Full::new(Bytes::from_static(b"{}"));
        UnreadOnDrop::new(body, whole.clone())
            .collect()
            .await
            .unwrap();
        drop(UnreadOnDrop::new(Empty::<Bytes>::new(), whole.clone()));
        assert!(!whole.any_unread());
        let early = Arc::new(Tracker::default());
        drop(UnreadOnDrop::new(
            Full::new(Bytes::from_static(b"{}")),
            early.clone(),
        ));
        assert!(early.any_unread());
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_retires_after_its_requests() {
        let clock = Clock::start();
        let tracker = Tracker::default();
        for _ in 0..3 {
            tracker.begin(0);
            tracker.end(0);
        }
        assert_eq!(watchdog(&tracker, clock, 0, LIMITS).await, End::Retired);
        assert_eq!(clock.now_ms(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_the_protocol_never_takes_ends_the_connection_at_the_write_limit() {
        let clock = Clock::start();
        let tracker = Tracker::default();
        tracker.begin(0);
        // Handed over at 1 s, never sent (an HTTP/2 stream on a zero window): not activity,
        // and not allowed to wait for the idle limit either.
        tokio::time::sleep(Duration::from_secs(1)).await;
        tracker.end(clock.now_ms());
        let end = watchdog(&tracker, clock, 0, LIMITS).await;
        assert_eq!((end, clock.now_ms()), (End::Unsent, 11_000));
        // Once taken, the connection is only idle.
        tracker.sent();
        let end = watchdog(&tracker, clock, 0, LIMITS).await;
        assert_eq!((end, clock.now_ms()), (End::Idle, 121_000));
    }
}
