//! Reading one admission request body: at most [`BODY_LIMIT`] bytes, inside the byte budget
//! ([`super::budget`], reserved in steps as the bytes arrive, never past the declared length),
//! and at a pace: the first byte within [`FIRST_BYTE`], no pause over [`STALL`], at least
//! [`MIN_RATE`] on average after the first second, and all of it by the request's deadline.
//! While it waits for bytes its connection counts as waiting on its client
//! ([`super::conns`]), and the budget may cut it for a body whose bytes are arriving.
//!
//! A body with a declared length (kube-apiserver always declares it) is read into one buffer of
//! that size, whose pages become resident only as the bytes arrive; one without grows its
//! buffer with its reservation. A body that arrives in one chunk (the usual case) is not
//! copied. Owns no decisions: the route turns each [`Error`] into its status code.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body_util::BodyExt;
use hyper::body::Body as _;
use tokio::time::Instant;

use super::activity::{Clock, Peer};
use super::budget::{BodyBudget, OverBudget, Reservation};

/// The largest request body accepted: an UPDATE review carries two objects of up to 3 MiB each.
pub const BODY_LIMIT: usize = 7 * 1024 * 1024;
/// Longest wait for a body's first byte after its headers.
pub const FIRST_BYTE: Duration = Duration::from_secs(1);
/// Longest pause between two chunks of a body.
pub const STALL: Duration = Duration::from_secs(2);
/// Slowest average a body may arrive at, counted from [`FIRST_BYTE`] after its headers, in
/// bytes per second (kube-apiserver sends at the network's speed).
pub const MIN_RATE: usize = 64 * 1024;

/// The reservation's smallest step.
const STEP: usize = 16 * 1024;

/// Why a body was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("request body is over the 7 MiB limit")]
    TooLarge,
    #[error(transparent)]
    OverBudget(#[from] OverBudget),
    #[error("the server cut this request body, which had stopped arriving, to read others; retry")]
    Cut,
    #[error("the request body did not arrive within the request timeout")]
    TimedOut,
    #[error(
        "the request body arrived too slowly (first byte within 1 s, no pause over 2 s, \
         64 KiB/s on average)"
    )]
    TooSlow,
    #[error("cannot read the request body")]
    Unreadable,
}

/// A body read whole, and the bytes it holds in the budget until dropped.
#[derive(Debug)]
pub struct Read {
    pub bytes: Bytes,
    pub reservation: Reservation,
}

/// Marks the connection as waiting on its client while a body is read.
struct Reading<'a>(Option<&'a Peer>);

impl<'a> Reading<'a> {
    fn new(peer: Option<&'a Peer>) -> Self {
        if let Some(peer) = peer {
            peer.tracker.reading(true);
        }
        Self(peer)
    }

    fn progressed(&self, now: u64) {
        if let Some(peer) = self.0 {
            peer.tracker.progressed(now);
        }
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        if let Some(peer) = self.0 {
            peer.tracker.reading(false);
        }
    }
}

/// Read `body` whole within `budget` (its times on `clock`), at the pace above, by `deadline`;
/// `peer` is the connection it came on, if any.
pub async fn read(
    body: Body,
    budget: &Arc<BodyBudget>,
    clock: Clock,
    deadline: Instant,
    peer: Option<&Peer>,
) -> Result<Read, Error> {
    let declared = body
        .size_hint()
        .exact()
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    if declared.is_some_and(|n| n > BODY_LIMIT) {
        return Err(Error::TooLarge);
    }
    let most = declared.unwrap_or(BODY_LIMIT);
    let reading = Reading::new(peer);
    let mut reservation = budget.open(peer.map(|p| p.ip), clock.now_ms());
    let mut buf = Buf::Empty;
    let mut body = body;
    let started = Instant::now();
    let mut last = started;
    loop {
        let slow_at = pace(started, last, buf.len());
        let until = deadline.min(slow_at);
        let frame = tokio::select! {
            biased;
            () = reservation.cut() => return Err(Error::Cut),
            frame = tokio::time::timeout_at(until, body.frame()) => frame,
        };
        let frame = match frame {
            Err(_) if until < deadline => return Err(Error::TooSlow),
            Err(_) => return Err(Error::TimedOut),
            Ok(None) => break,
            Ok(Some(Err(_))) => return Err(Error::Unreadable),
            Ok(Some(Ok(frame))) => frame,
        };
        // Trailers carry nothing an AdmissionReview needs.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let len = buf.len() + data.len();
        if len > most {
            return Err(Error::TooLarge);
        }
        last = Instant::now();
        let now = clock.now_ms();
        reading.progressed(now);
        let next = match len > reservation.bytes() {
            true => len.max(reservation.bytes() * 2).max(STEP).min(most),
            false => len,
        };
        reservation.grow_to(next, now)?;
        buf.push(data, declared.unwrap_or(reservation.bytes()));
    }
    reservation.read_whole();
    Ok(Read {
        bytes: buf.into_bytes(),
        reservation,
    })
}

/// When a body whose headers came at `started`, whose last bytes came at `last`, and of which
/// `received` bytes came, is too slow.
fn pace(started: Instant, last: Instant, received: usize) -> Instant {
    if received == 0 {
        return started + FIRST_BYTE;
    }
    let average = started + FIRST_BYTE + Duration::from_secs_f64(received as f64 / MIN_RATE as f64);
    (last + STALL).min(average)
}

/// The body read so far.
enum Buf {
    Empty,
    One(Bytes),
    Many(Vec<u8>),
}

impl Buf {
    fn len(&self) -> usize {
        match self {
            Self::Empty => 0,
            Self::One(bytes) => bytes.len(),
            Self::Many(vec) => vec.len(),
        }
    }

    /// Append `data`; the buffer is made `capacity` bytes large (the declared length, or the
    /// reservation of a body without one).
    fn push(&mut self, data: Bytes, capacity: usize) {
        match std::mem::replace(self, Self::Empty) {
            Self::Empty => *self = Self::One(data),
            Self::One(first) => {
                let mut vec = Vec::with_capacity(capacity);
                vec.extend_from_slice(&first);
                vec.extend_from_slice(&data);
                *self = Self::Many(vec);
            }
            Self::Many(mut vec) => {
                vec.reserve_exact(capacity.saturating_sub(vec.len()));
                vec.extend_from_slice(&data);
                *self = Self::Many(vec);
            }
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Self::Empty => Bytes::new(),
            Self::One(bytes) => bytes,
            Self::Many(vec) => Bytes::from(vec),
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt as _;
    use prometheus_client::metrics::gauge::Gauge;

    use super::*;

    fn budget(total: usize) -> Arc<BodyBudget> {
        BodyBudget::new(total, 0, Gauge::default())
    }

    fn chunked(chunks: Vec<&'static [u8]>) -> Body {
        let stream = futures::stream::iter(chunks).map(|c| Ok::<_, std::io::Error>(Bytes::from(c)));
        Body::from_stream(stream)
    }

    /// `head`, then nothing for ever.
    fn stalled(head: Vec<Bytes>) -> Body {
        let head = futures::stream::iter(head.into_iter().map(Ok::<_, std::io::Error>));
        Body::from_stream(head.chain(futures::stream::pending()))
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    async fn read_by(body: Body, b: &Arc<BodyBudget>, deadline: Instant) -> Result<Read, Error> {
        read(body, b, Clock::start(), deadline, None).await
    }

    #[tokio::test]
    async fn a_body_is_read_whole_and_releases_its_reservation() {
        let b = budget(1 << 20);
        let read = read_by(Body::from("one chunk"), &b, soon()).await.unwrap();
        assert_eq!((&read.bytes[..], b.reserved()), (&b"one chunk"[..], 9));
        drop(read);
        let read = read_by(chunked(vec![b"a", b"bc", b"def"]), &b, soon()).await;
        let read = read.unwrap();
        assert_eq!(&read.bytes[..], b"abcdef");
        assert_eq!(b.reserved(), STEP);
        drop(read);
        assert_eq!(b.reserved(), 0);
    }

    #[tokio::test]
    async fn declared_lengths_are_checked_before_reading() {
        let b = budget(1 << 20);
        let huge = Body::from(vec![b' '; BODY_LIMIT + 1]);
        assert_eq!(
            read_by(huge, &b, soon()).await.unwrap_err(),
            Error::TooLarge
        );
        let over = Body::from(vec![b' '; (1 << 20) + 1]);
        let refused = read_by(over, &b, soon()).await.unwrap_err();
        assert_eq!(refused, Error::OverBudget(OverBudget));
        assert_eq!(b.reserved(), 0);
    }

    #[tokio::test]
    async fn a_growing_body_stops_at_the_budget() {
        let b = budget(STEP * 2);
        let big: &'static [u8] = Box::leak(vec![b'x'; STEP].into_boxed_slice());
        let refused = read_by(chunked(vec![big, big, b"x"]), &b, soon()).await;
        assert_eq!(refused.unwrap_err(), Error::OverBudget(OverBudget));
        assert_eq!(b.reserved(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_never_starts_holds_nothing_and_is_cut_after_a_second() {
        let b = budget(1 << 20);
        let started = Instant::now();
        let reading = read_by(stalled(vec![]), &b, soon());
        tokio::pin!(reading);
        tokio::select! {
            _ = &mut reading => panic!("ended early"),
            () = tokio::time::sleep(FIRST_BYTE / 2) => assert_eq!(b.reserved(), 0),
        }
        assert_eq!(reading.await.unwrap_err(), Error::TooSlow);
        assert_eq!(started.elapsed(), FIRST_BYTE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_is_cut_after_its_pause_or_at_the_deadline() {
        let b = budget(1 << 20);
        // Fast enough on average for 4 s more: the pause ends it.
        let head = || vec![Bytes::from(vec![b' '; 4 * MIN_RATE])];
        let started = Instant::now();
        let cut = read_by(stalled(head()), &b, soon()).await;
        assert_eq!(cut.unwrap_err(), Error::TooSlow);
        assert_eq!(started.elapsed(), STALL);
        assert_eq!(b.reserved(), 0);
        let deadline = Instant::now() + STALL / 2;
        let cut = read_by(stalled(head()), &b, deadline).await;
        assert_eq!(cut.unwrap_err(), Error::TimedOut);
        assert_eq!(Instant::now(), deadline);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_waiting_for_its_bytes_is_cut_for_one_whose_bytes_arrive() {
        let b = budget(1 << 20);
        let clock = Clock::start();
        let held = stalled(vec![Bytes::from(vec![b' '; 1 << 20])]);
        let waiting = tokio::spawn({
            let b = b.clone();
            async move { read(held, &b, clock, soon(), None).await.map(|_| ()) }
        });
        tokio::time::sleep(STALL / 2).await;
        assert_eq!(b.reserved(), 1 << 20);
        let arriving = read(Body::from("{}"), &b, clock, soon(), None).await;
        assert_eq!(&arriving.unwrap().bytes[..], b"{}");
        assert_eq!(waiting.await.unwrap().unwrap_err(), Error::Cut);
    }
}
