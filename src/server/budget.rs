//! The budget of buffered request bodies: every admission body holds the bytes that have
//! arrived of it (reserved in steps as they arrive, never more than its `Content-Length`) and
//! gives them back when it is dropped, so the bodies being read or decided never hold more than
//! `--body-budget` bytes together. A request that has sent no body byte holds nothing.
//!
//! Part of the budget, `--small-body-reserve`, is kept for small bodies (at most [`SMALL_BODY`]
//! bytes; kube-apiserver's KService reviews are 2 to 30 KB): large bodies together may hold only
//! the rest, so uploads of large bodies that stall can never starve the small ones.
//!
//! When a body's next bytes do not fit, the body that has waited longest for its own next bytes
//! (at least [`CUT_AFTER`]) is cut to make room, rather than the one whose bytes are arriving:
//! holding the budget means sending, not waiting. docs/reliability.md ("Admission under hostile
//! load") gives the reasoning. No I/O; time comes in as an argument; the caller decides what a
//! refusal or a cut becomes (a 503).

use std::collections::HashMap;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

use crate::locks::lock;

/// The largest body that may use the small-body reserve.
pub const SMALL_BODY: usize = 256 * 1024;
/// A body must have waited this long for its next bytes before it may be cut for another's
/// (milliseconds): one that is arriving is never cut.
pub const CUT_AFTER: u64 = 500;

/// The budget is spent: answer 503 and let the client retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the server is reading too many request bodies; retry shortly")]
pub struct OverBudget;

/// One body being held.
#[derive(Debug)]
struct Held {
    bytes: usize,
    /// When its last bytes arrived (the caller's milliseconds).
    progress: u64,
    /// Still reading: it may be cut for another.
    reading: bool,
    cut: Arc<Notify>,
}

/// Bytes reserved by small and by large bodies, and the bodies.
#[derive(Debug, Default)]
struct Used {
    small: usize,
    large: usize,
    held: HashMap<u64, Held>,
    next_id: u64,
}

impl Used {
    fn add(&mut self, bytes: usize) {
        *slot(self, bytes) += bytes;
    }

    fn sub(&mut self, bytes: usize) {
        let slot = slot(self, bytes);
        *slot = slot.saturating_sub(bytes);
    }
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

    /// A reservation of nothing yet for a body whose reading starts at `now`.
    pub fn open(self: &Arc<Self>, now: u64) -> Reservation {
        let mut used = lock(&self.used);
        let id = used.next_id;
        used.next_id += 1;
        let cut = Arc::new(Notify::new());
        let held = Held {
            bytes: 0,
            progress: now,
            reading: true,
            cut: cut.clone(),
        };
        used.held.insert(id, held);
        Reservation {
            budget: self.clone(),
            id,
            bytes: 0,
            cut,
        }
    }

    /// Bytes reserved now.
    #[cfg(test)]
    pub(crate) fn reserved(&self) -> usize {
        let used = lock(&self.used);
        used.small + used.large
    }

    fn fits(&self, used: &Used) -> (bool, bool) {
        let total_fits = used.small + used.large <= self.total;
        let large_fits = used.large <= self.total - self.small_reserve;
        (total_fits, large_fits)
    }

    /// Move body `id` from `from` to `to` bytes at `now`, cutting bodies that wait for their
    /// bytes if it does not fit; if it still does not, nothing changes.
    fn resize(&self, id: u64, from: usize, to: usize, now: u64) -> Result<(), OverBudget> {
        let mut used = lock(&self.used);
        let resized = self.make_room(&mut used, id, from, to, now);
        self.gauge
            .set(i64::try_from(used.small + used.large).unwrap_or(i64::MAX));
        resized
    }

    fn make_room(
        &self,
        used: &mut Used,
        id: u64,
        from: usize,
        to: usize,
        now: u64,
    ) -> Result<(), OverBudget> {
        // A body cut for another holds nothing more.
        let Some(held) = used.held.get_mut(&id) else {
            return Err(OverBudget);
        };
        held.progress = now;
        used.sub(from);
        used.add(to);
        loop {
            let (total_fits, large_fits) = self.fits(used);
            if to <= from || (total_fits && large_fits) {
                break;
            }
            // While large bodies are over their share only a large one makes room (for both).
            let helps = |held: &Held| large_fits || held.bytes > SMALL_BODY;
            let victim = used
                .held
                .iter()
                .filter(|&(&other, h)| other != id && h.reading && h.bytes > 0 && helps(h))
                .filter(|(_, h)| now.saturating_sub(h.progress) >= CUT_AFTER)
                .min_by_key(|(_, h)| h.progress)
                .map(|(&other, _)| other);
            let Some(victim) = victim.and_then(|v| used.held.remove(&v)) else {
                used.sub(to);
                used.add(from);
                return Err(OverBudget);
            };
            used.sub(victim.bytes);
            victim.cut.notify_one();
        }
        if let Some(held) = used.held.get_mut(&id) {
            held.bytes = to;
        }
        Ok(())
    }

    fn progressed(&self, id: u64, now: u64) {
        let mut used = lock(&self.used);
        if let Some(held) = used.held.get_mut(&id) {
            held.progress = now;
        }
    }

    fn read_whole(&self, id: u64) {
        let mut used = lock(&self.used);
        if let Some(held) = used.held.get_mut(&id) {
            held.reading = false;
        }
    }

    /// Give back body `id`'s bytes, unless it was cut (then they are given back already).
    fn release(&self, id: u64) {
        let mut used = lock(&self.used);
        if let Some(held) = used.held.remove(&id) {
            used.sub(held.bytes);
        }
        self.gauge
            .set(i64::try_from(used.small + used.large).unwrap_or(i64::MAX));
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
    id: u64,
    bytes: usize,
    cut: Arc<Notify>,
}

impl Reservation {
    /// The bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Hold `bytes` instead, the body's bytes having arrived at `now`; on refusal the
    /// reservation keeps what it had. Bodies waiting for their bytes may be cut for it.
    pub fn grow_to(&mut self, bytes: usize, now: u64) -> Result<(), OverBudget> {
        if bytes <= self.bytes {
            self.budget.progressed(self.id, now);
            return Ok(());
        }
        self.budget.resize(self.id, self.bytes, bytes, now)?;
        self.bytes = bytes;
        Ok(())
    }

    /// The body is read whole: it can no longer be cut for another.
    pub fn read_whole(&self) {
        self.budget.read_whole(self.id);
    }

    /// Resolves once this body has been cut to make room for another (its bytes are given back
    /// already).
    pub async fn cut(&self) {
        self.cut.notified().await;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.release(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: usize = 1 << 20;

    fn budget(total: usize, reserve: usize) -> Arc<BodyBudget> {
        BodyBudget::new(total, reserve, Gauge::default())
    }

    fn reserve(b: &Arc<BodyBudget>, bytes: usize, now: u64) -> Result<Reservation, OverBudget> {
        let mut r = b.open(now);
        r.grow_to(bytes, now)?;
        Ok(r)
    }

    #[test]
    fn large_bodies_never_take_the_small_reserve() {
        let b = budget(16 * MI, 4 * MI);
        let large: Vec<_> = (0..2).map(|_| reserve(&b, 6 * MI, 0).unwrap()).collect();
        assert!(reserve(&b, MI, 0).is_err());
        // 12 MiB large are held; 4 MiB remain, and only small bodies may have them.
        let small: Vec<_> = (0..16)
            .map(|_| reserve(&b, SMALL_BODY, 0).unwrap())
            .collect();
        assert!(reserve(&b, 1, 0).is_err());
        assert_eq!(b.reserved(), 16 * MI);
        drop(small);
        drop(large);
        assert_eq!(b.reserved(), 0);
        assert_eq!(b.gauge.get(), 0);
    }

    #[test]
    fn a_body_that_sent_nothing_holds_nothing() {
        let b = budget(MI, 0);
        let waiting: Vec<_> = (0..1000).map(|_| b.open(0)).collect();
        assert_eq!(b.reserved(), 0);
        assert!(reserve(&b, MI, 0).is_ok());
        drop(waiting);
    }

    #[test]
    fn a_growing_body_turns_large_and_must_then_fit_beside_the_reserve() {
        let b = budget(4 * MI, 3 * MI);
        let mut growing = reserve(&b, 64 * 1024, 0).unwrap();
        growing.grow_to(SMALL_BODY, 0).unwrap();
        growing.grow_to(MI, 0).unwrap();
        // Past the large share (1 MiB): refused, and the reservation keeps what it had.
        assert!(growing.grow_to(MI + 1, 0).is_err());
        assert_eq!(growing.bytes(), MI);
        assert_eq!(b.reserved(), MI);
        // Shrinking requests are no-ops.
        growing.grow_to(10, 0).unwrap();
        assert_eq!(growing.bytes(), MI);
        drop(growing);
        assert_eq!(b.reserved(), 0);
    }

    #[tokio::test]
    async fn the_body_waiting_longest_for_its_bytes_is_cut_for_a_newcomer() {
        let b = budget(2 * MI, 0);
        // Two bodies hold the budget; the first last got bytes at 0, the second at 300.
        let first = reserve(&b, MI, 0).unwrap();
        let mut second = reserve(&b, 0, 0).unwrap();
        second.grow_to(MI, 300).unwrap();
        // At 400 neither has waited long enough to be cut.
        assert!(reserve(&b, 1, 400).is_err());
        // At 600 the first has: it is cut, and told so; its bytes are free at once.
        let newcomer = reserve(&b, MI, 600).unwrap();
        first.cut().await;
        assert_eq!(b.reserved(), 2 * MI);
        drop(first);
        assert_eq!(b.reserved(), 2 * MI);
        // A body read whole is never cut: it is being decided.
        second.read_whole();
        newcomer.read_whole();
        assert!(reserve(&b, 1, 10_000).is_err());
        drop((second, newcomer));
        assert_eq!(b.reserved(), 0);
    }

    #[test]
    fn only_large_bodies_are_cut_for_a_large_one() {
        let b = budget(3 * MI, MI);
        let small = reserve(&b, SMALL_BODY, 0).unwrap();
        let large = reserve(&b, 2 * MI, 0).unwrap();
        // The large share (2 MiB) is full: a large newcomer cuts the large body, not the small.
        let newcomer = reserve(&b, MI + 1, 1000).unwrap();
        assert_eq!(b.reserved(), SMALL_BODY + MI + 1);
        drop((small, large, newcomer));
        assert_eq!(b.reserved(), 0);
    }
}
