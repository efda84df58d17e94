//! Reading one admission request body: at most [`BODY_LIMIT`] bytes, inside the byte budget
//! ([`super::budget`], reserved before the bytes are read) and before the request's deadline.
//!
//! A body with a declared length (kube-apiserver always declares it) reserves that length up
//! front and is read into one buffer of that size; one without grows its reservation and its
//! buffer together, doubling. A body that arrives in one chunk (the usual case) is not copied.
//! Owns no decisions: the route turns each [`Error`] into its status code.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use http_body_util::BodyExt;
use hyper::body::Body as _;
use tokio::time::Instant;

use super::budget::{BodyBudget, OverBudget, Reservation};

/// The largest request body accepted: an UPDATE review carries two objects of up to 3 MiB each.
pub const BODY_LIMIT: usize = 7 * 1024 * 1024;

/// The first reservation of a body of unknown length.
const FIRST_STEP: usize = 16 * 1024;

/// Why a body was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("request body is over the 7 MiB limit")]
    TooLarge,
    #[error(transparent)]
    OverBudget(#[from] OverBudget),
    #[error("the request body did not arrive within the request timeout")]
    TimedOut,
    #[error("cannot read the request body")]
    Unreadable,
}

/// A body read whole; it holds its reservation until dropped.
#[derive(Debug)]
pub struct Read {
    pub bytes: Bytes,
    _reservation: Reservation,
}

/// Read `body` whole within `budget`, by `deadline`.
pub async fn read(body: Body, budget: &Arc<BodyBudget>, deadline: Instant) -> Result<Read, Error> {
    let declared = body
        .size_hint()
        .exact()
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    if declared.is_some_and(|n| n > BODY_LIMIT) {
        return Err(Error::TooLarge);
    }
    let mut reservation = budget.reserve(declared.unwrap_or(FIRST_STEP))?;
    let mut buf = Buf::Empty;
    let mut body = body;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
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
        if len > BODY_LIMIT {
            return Err(Error::TooLarge);
        }
        if len > reservation.bytes() {
            let next = len.max(reservation.bytes() * 2).min(BODY_LIMIT);
            reservation.grow_to(next)?;
        }
        buf.push(data, reservation.bytes());
    }
    Ok(Read {
        bytes: buf.into_bytes(),
        _reservation: reservation,
    })
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

    /// Append `data`; a buffer is never larger than the `reserved` bytes.
    fn push(&mut self, data: Bytes, reserved: usize) {
        match std::mem::replace(self, Self::Empty) {
            Self::Empty => *self = Self::One(data),
            Self::One(first) => {
                let mut vec = Vec::with_capacity(reserved);
                vec.extend_from_slice(&first);
                vec.extend_from_slice(&data);
                *self = Self::Many(vec);
            }
            Self::Many(mut vec) => {
                vec.reserve_exact(reserved.saturating_sub(vec.len()));
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
    use std::time::Duration;

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

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    #[tokio::test]
    async fn a_body_is_read_whole_and_releases_its_reservation() {
        let b = budget(1 << 20);
        let read = read(Body::from("one chunk"), &b, soon()).await.unwrap();
        assert_eq!((&read.bytes[..], b.reserved()), (&b"one chunk"[..], 9));
        drop(read);
        let read = super::read(chunked(vec![b"a", b"bc", b"def"]), &b, soon()).await;
        let read = read.unwrap();
        assert_eq!(&read.bytes[..], b"abcdef");
        assert_eq!(b.reserved(), FIRST_STEP);
        drop(read);
        assert_eq!(b.reserved(), 0);
    }

    #[tokio::test]
    async fn declared_lengths_are_checked_before_reading() {
        let b = budget(1 << 20);
        let huge = Body::from(vec![b' '; BODY_LIMIT + 1]);
        assert_eq!(read(huge, &b, soon()).await.unwrap_err(), Error::TooLarge);
        let over = Body::from(vec![b' '; (1 << 20) + 1]);
        let refused = read(over, &b, soon()).await.unwrap_err();
        assert_eq!(refused, Error::OverBudget(OverBudget));
        assert_eq!(b.reserved(), 0);
    }

    #[tokio::test]
    async fn a_growing_body_stops_at_the_budget() {
        let b = budget(FIRST_STEP * 2);
        let big: &'static [u8] = Box::leak(vec![b'x'; FIRST_STEP].into_boxed_slice());
        let refused = read(chunked(vec![big, big, b"x"]), &b, soon()).await;
        assert_eq!(refused.unwrap_err(), Error::OverBudget(OverBudget));
        assert_eq!(b.reserved(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_is_cut_at_the_deadline() {
        let b = budget(1 << 20);
        let head = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from("{"))]);
        let stalled = Body::from_stream(head.chain(futures::stream::pending()));
        let deadline = Instant::now() + Duration::from_secs(3);
        assert_eq!(
            read(stalled, &b, deadline).await.unwrap_err(),
            Error::TimedOut
        );
        assert!(Instant::now() >= deadline);
        assert_eq!(b.reserved(), 0);
    }
}
