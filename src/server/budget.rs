//! The budget of buffered request bodies: every admission body holds the bytes that have
//! arrived of it (reserved in steps as they arrive, never more than its `Content-Length`) and
//! gives them back when it is dropped, so the bodies being read or decided never hold more than
//! `--body-budget` bytes together. A request that has sent no body byte holds nothing.
//!
//! Part of the budget, `--small-body-reserve`, is kept for small bodies (at most [`SMALL_BODY`]
//! bytes; kube-apiserver's KService reviews are 2 to 30 KB): large bodies together may hold only
//! the rest, so uploads of large bodies that stall can never starve the small ones. One peer
//! address may hold only a share of the reserve ([`RESERVE_SHARES`]): its small bodies beyond
//! that share count against the rest of the budget, as large ones do, so that one address
//! sending many small bodies cannot fill the reserve either.
//!
//! When a body's next bytes do not fit, the body that has waited longest for its own next bytes
//! (at least [`CUT_AFTER`]) is cut to make room, rather than the one whose bytes are arriving:
//! holding the budget means sending, not waiting. docs/reliability.md ("Admission under hostile
//! load") gives the reasoning. No I/O; time comes in as an argument; the caller decides what a
//! refusal or a cut becomes (a 503).

use std::collections::HashMap;
use std::net::IpAddr;
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
/// One peer address may hold this fraction of the small-body reserve (an eighth: 2 MiB of the
/// Deployment's 16 MiB, a thousand ordinary reviews); so four pods leave half of it.
pub const RESERVE_SHARES: usize = 8;

/// The budget is spent: answer 503 and let the client retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the server is reading too many request bodies; retry shortly")]
pub struct OverBudget;

/// One body being held.
#[derive(Debug)]
struct Held {
    /// The peer address that sent it (`None`: not over a socket).
    ip: Option<IpAddr>,
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
    /// Small bytes held per peer address (only addresses holding some).
    small_by_ip: HashMap<IpAddr, usize>,
    /// Of `small`, the bytes beyond their address's share of the reserve.
    over_share: usize,
    held: HashMap<u64, Held>,
    next_id: u64,
}

impl Used {
    fn add(&mut self, ip: Option<IpAddr>, bytes: usize, share: usize) {
        if bytes > SMALL_BODY {
            self.large += bytes;
            return;
        }
        self.small += bytes;
        // A body not read from a socket has no address, and no share to keep to.
        let Some(ip) = ip else { return };
        let of_ip = self.small_by_ip.entry(ip).or_default();
        let before = of_ip.saturating_sub(share);
        *of_ip += bytes;
        self.over_share += of_ip.saturating_sub(share) - before;
    }

    fn sub(&mut self, ip: Option<IpAddr>, bytes: usize, share: usize) {
        if bytes > SMALL_BODY {
            self.large = self.large.saturating_sub(bytes);
            return;
        }
        self.small = self.small.saturating_sub(bytes);
        let Some(ip) = ip else { return };
        let Some(of_ip) = self.small_by_ip.get_mut(&ip) else {
            return;
        };
        let before = of_ip.saturating_sub(share);
        *of_ip = of_ip.saturating_sub(bytes);
        self.over_share -= before - of_ip.saturating_sub(share);
        if *of_ip == 0 {
            self.small_by_ip.remove(&ip);
        }
    }

    /// Whether cutting `held` frees bytes counted against the large bodies' part: a large body,
    /// or a small one from an address over its share.
    fn frees_large_part(&self, held: &Held, share: usize) -> bool {
        held.bytes > SMALL_BODY
            || held
                .ip
                .and_then(|ip| self.small_by_ip.get(&ip))
                .is_some_and(|&of_ip| of_ip > share)
    }
}

/// The shared budget; reservations hold an `Arc` to it.
#[derive(Debug)]
pub struct BodyBudget {
    total: usize,
    small_reserve: usize,
    /// What one address may hold of the reserve.
    share: usize,
    used: Mutex<Used>,
    /// Reserved bytes, exported as `ksvc_webhook_admission_body_bytes`.
    gauge: Gauge<i64, AtomicI64>,
}

impl BodyBudget {
    /// A budget of `total` bytes of which `small_reserve` only small bodies may use, each peer
    /// address [`RESERVE_SHARES`]'th of it; `gauge` follows the reserved bytes.
    pub fn new(total: usize, small_reserve: usize, gauge: Gauge<i64, AtomicI64>) -> Arc<Self> {
        let small_reserve = small_reserve.min(total);
        Arc::new(Self {
            total,
            small_reserve,
            share: small_reserve / RESERVE_SHARES,
            used: Mutex::default(),
            gauge,
        })
    }

    /// A reservation of nothing yet for a body from `ip` whose reading starts at `now`.
    pub fn open(self: &Arc<Self>, ip: Option<IpAddr>, now: u64) -> Reservation {
        let mut used = lock(&self.used);
        let id = used.next_id;
        used.next_id += 1;
        let cut = Arc::new(Notify::new());
        let held = Held {
            ip: ip.map(|ip| ip.to_canonical()),
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
        let large_fits = used.large + used.over_share <= self.total - self.small_reserve;
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
        let ip = held.ip;
        let share = self.share;
        used.sub(ip, from, share);
        used.add(ip, to, share);
        loop {
            let (total_fits, large_fits) = self.fits(used);
            if to <= from || (total_fits && large_fits) {
                break;
            }
            // While the large bodies' part is over, only a body counted in it makes room (for
            // both): a large one, or a small one from an address over its share.
            let helps = |held: &Held| large_fits || used.frees_large_part(held, share);
            let victim = used
                .held
                .iter()
                .filter(|&(&other, h)| other != id && h.reading && h.bytes > 0 && helps(h))
                .filter(|(_, h)| now.saturating_sub(h.progress) >= CUT_AFTER)
                .min_by_key(|(_, h)| h.progress)
                .map(|(&other, _)| other);
            let Some(victim) = victim.and_then(|v| used.held.remove(&v)) else {
                used.sub(ip, to, share);
                used.add(ip, from, share);
                return Err(OverBudget);
            };
            used.sub(victim.ip, victim.bytes, share);
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
            used.sub(held.ip, held.bytes, self.share);
        }
        self.gauge
            .set(i64::try_from(used.small + used.large).unwrap_or(i64::MAX));
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
        reserve_from(b, None, bytes, now)
    }

    fn reserve_from(
        b: &Arc<BodyBudget>,
        ip: Option<&str>,
        bytes: usize,
        now: u64,
    ) -> Result<Reservation, OverBudget> {
        let mut r = b.open(ip.map(|ip| ip.parse().unwrap()), now);
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
        let waiting: Vec<_> = (0..1000).map(|_| b.open(None, 0)).collect();
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

    #[test]
    fn one_address_holds_only_its_share_of_the_reserve() {
        // 16 MiB, 8 of them the reserve: an address may hold 1 MiB of it.
        let b = budget(16 * MI, 8 * MI);
        let large = reserve(&b, 7 * MI, 600).unwrap();
        // The large part (8 MiB) holds 7: one address's small bodies get its 1 MiB share and the
        // 1 MiB the large ones left, no more.
        let attacker: Vec<_> = (0..8)
            .map(|_| reserve_from(&b, Some("10.0.0.2"), SMALL_BODY, 0).unwrap())
            .collect();
        assert!(reserve_from(&b, Some("10.0.0.2"), SMALL_BODY, 0).is_err());
        // The same address written as IPv4-mapped IPv6 is the same peer.
        assert!(reserve_from(&b, Some("::ffff:10.0.0.2"), 1, 0).is_err());
        // Another address still has its share, and the large part takes no more.
        let kube: Vec<_> = (0..4)
            .map(|_| reserve_from(&b, Some("10.0.0.1"), SMALL_BODY, 0).unwrap())
            .collect();
        assert!(reserve(&b, MI + 1, 0).is_err());
        assert_eq!(b.reserved(), 7 * MI + 3 * MI);
        // A large newcomer cuts the attacker's waiting bodies beyond its share (four), not the
        // other address's, nor the large body that has not waited long enough.
        let newcomer = reserve(&b, MI, 1000).unwrap();
        assert_eq!(b.reserved(), 7 * MI + MI + MI + MI);
        drop((large, attacker, kube, newcomer));
        assert_eq!(b.reserved(), 0);
        let used = b.used.lock().unwrap();
        assert!(used.small_by_ip.is_empty());
        assert_eq!(used.over_share, 0);
    }
}
