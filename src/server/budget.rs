//! The budget of buffered request bodies: every admission request reserves its body's bytes
//! before reading them and gives them back when the body is dropped, so the bodies being read or
//! decided never hold more than `--body-budget` bytes together.
//!
//! Part of the budget, `--small-body-reserve`, is kept for small bodies (at most [`SMALL_BODY`]
//! bytes; kube-apiserver's KService reviews are 2 to 30 KB): large bodies together may hold only
//! the rest, so uploads of large bodies that stall can never starve the small ones.
//! docs/reliability.md ("Admission under hostile load") gives the reasoning. No I/O, no clock;
//! the caller decides what a refusal becomes (a 503).

use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::metrics::gauge::Gauge;

/// The largest body that may use the small-body reserve.
pub const SMALL_BODY: usize = 256 * 1024;

/// The budget is spent: answer 503 and let the client retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the server is reading too many request bodies; retry shortly")]
pub struct OverBudget;

/// Bytes reserved by small and by large bodies.
#[derive(Debug, Default)]
struct Used {
    small: usize,
    large: usize,
}

/// The shared budget; reservations hold an `Arc` to it.
#[derive(Debug)]
pub struct BodyBudget {
    total: usize,
    small_reserve: usize,
    used: Mutex<Used>,
    /// Reserved bytes, exported as `ksvc_webhook_admission_body_bytes`.
    gauge: Gauge<i64, AtomicI64>,
}

impl BodyBudget {
    /// A budget of `total` bytes of which `small_reserve` only small bodies may use; `gauge`
    /// follows the reserved bytes.
    pub fn new(total: usize, small_reserve: usize, gauge: Gauge<i64, AtomicI64>) -> Arc<Self> {
        Arc::new(Self {
            total,
            small_reserve: small_reserve.min(total),
            used: Mutex::default(),
            gauge,
        })
    }

    /// Reserve `bytes` for one body, or refuse if they do not fit.
    pub fn reserve(self: &Arc<Self>, bytes: usize) -> Result<Reservation, OverBudget> {
        let mut reservation = Reservation {
            budget: self.clone(),
            bytes: 0,
        };
        reservation.grow_to(bytes)?;
        Ok(reservation)
    }

    /// Bytes reserved now.
    #[cfg(test)]
    pub(crate) fn reserved(&self) -> usize {
        let used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        used.small + used.large
    }

    /// Move one body's reservation from `from` to `to` bytes if the budget allows it.
    fn resize(&self, from: usize, to: usize) -> Result<(), OverBudget> {
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        let mut next = Used {
            small: used.small,
            large: used.large,
        };
        *slot(&mut next, from) -= from;
        *slot(&mut next, to) += to;
        let growing = to > from;
        let fits =
            next.small + next.large <= self.total && next.large <= self.total - self.small_reserve;
        if growing && !fits {
            return Err(OverBudget);
        }
        *used = next;
        self.gauge
            .set(i64::try_from(used.small + used.large).unwrap_or(i64::MAX));
        Ok(())
    }
}

/// The counter a body of `bytes` is kept in.
fn slot(used: &mut Used, bytes: usize) -> &mut usize {
    match bytes <= SMALL_BODY {
        true => &mut used.small,
        false => &mut used.large,
    }
}

/// Bytes held for one body; released when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<BodyBudget>,
    bytes: usize,
}

impl Reservation {
    /// The bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Hold `bytes` instead (a body without a declared length grows chunk by chunk); on
    /// refusal the reservation keeps what it had.
    pub fn grow_to(&mut self, bytes: usize) -> Result<(), OverBudget> {
        if bytes <= self.bytes {
            return Ok(());
        }
        self.budget.resize(self.bytes, bytes)?;
        self.bytes = bytes;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // Shrinking always fits.
        let _ = self.budget.resize(self.bytes, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: usize = 1 << 20;

    fn budget(total: usize, reserve: usize) -> Arc<BodyBudget> {
        BodyBudget::new(total, reserve, Gauge::default())
    }

    #[test]
    fn large_bodies_never_take_the_small_reserve() {
        let b = budget(16 * MI, 4 * MI);
        let large: Vec<_> = (0..2).map(|_| b.reserve(6 * MI).unwrap()).collect();
        assert!(b.reserve(MI).is_err());
        // 12 MiB large are held; 4 MiB remain, and only small bodies may have them.
        let small: Vec<_> = (0..16).map(|_| b.reserve(SMALL_BODY).unwrap()).collect();
        assert!(b.reserve(1).is_err());
        assert_eq!(b.reserved(), 16 * MI);
        drop(small);
        drop(large);
        assert_eq!(b.reserved(), 0);
        assert_eq!(b.gauge.get(), 0);
    }

    #[test]
    fn small_bodies_may_use_the_whole_budget() {
        let b = budget(2 * MI, MI);
        let held: Vec<_> = (0..8).map(|_| b.reserve(SMALL_BODY).unwrap()).collect();
        assert_eq!(b.reserved(), 2 * MI);
        assert!(b.reserve(1).is_err());
        assert_eq!(b.gauge.get(), i64::try_from(2 * MI).unwrap());
        drop(held);
    }

    #[test]
    fn a_growing_body_turns_large_and_must_then_fit_beside_the_reserve() {
        let b = budget(4 * MI, 3 * MI);
        let mut growing = b.reserve(64 * 1024).unwrap();
        growing.grow_to(SMALL_BODY).unwrap();
        growing.grow_to(MI).unwrap();
        // Past the large share (1 MiB): refused, and the reservation keeps what it had.
        assert!(growing.grow_to(MI + 1).is_err());
        assert_eq!(growing.bytes(), MI);
        assert_eq!(b.reserved(), MI);
        // Shrinking requests are no-ops.
        growing.grow_to(10).unwrap();
        assert_eq!(growing.bytes(), MI);
        drop(growing);
        assert_eq!(b.reserved(), 0);
    }
}
