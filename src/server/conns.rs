//! The connection caps of one listener: at most `--max-connections` open at once, and at most
//! `--max-connections-per-ip` of them from one peer address, and what happens at a cap.
//!
//! A full listener does not refuse the newcomer: it closes a connection that waits on its client
//! (in its handshake, idle between requests, or whose requests all wait for body bytes), from the
//! address that holds the most (connections and open requests, so HTTP/2 streams count), the one
//! that has waited longest first. So nobody can hold the slots by opening connections and
//! keeping them quiet: whoever holds the most loses first, and kube-apiserver's new connection
//! gets in. Only when every connection is busy on the server's side is the newcomer refused.
//! An address at its share gives up its own longest-waiting connection the same way.
//!
//! The same share bounds the requests open at once from one address, over all its connections:
//! with HTTP/1.1 a connection carries one at a time, so only HTTP/2 streams can reach it; the
//! service wrapper ([`super::activity`]) answers a stream beyond it 503 at once.
//!
//! The per-address share is one layer among several (docs/reliability.md): behind a proxy, or on
//! one node, an attacker and kube-apiserver may share an address, so nothing else relies on it.
//! No I/O; time comes in as an argument.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use prometheus_client::metrics::gauge::Gauge;
use tokio::task::AbortHandle;

use crate::locks::lock;

/// Why a connection was refused or closed early (the `reason` label of the counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The listener holds `--max-connections`, all busy.
    Full,
    /// This peer address holds `--max-connections-per-ip`, all busy.
    PerIp,
    /// A waiting connection closed to make room for a newcomer.
    Evicted,
}

impl Refused {
    /// Every reason, so each counter exists from the first scrape on.
    pub const ALL: [Self; 3] = [Self::Full, Self::PerIp, Self::Evicted];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Full => "max_connections",
            Self::PerIp => "max_connections_per_ip",
            Self::Evicted => "evicted",
        }
    }
}

/// What one connection is doing, as its requests and the body reader report it. Atomics: the
/// request path never takes the listener's lock.
#[derive(Debug)]
pub struct Tracker {
    /// Requests open (HTTP/2: streams); a request stays open until its answer is handed over.
    open: AtomicU32,
    /// Of those, the ones waiting for body bytes from the client.
    reading: AtomicU32,
    /// When the client last made progress (accepted, a request began or ended, body bytes
    /// arrived), in milliseconds of the listener's clock.
    progress: AtomicU64,
    /// Requests begun on this connection.
    begun: AtomicU64,
    /// Requests open from this connection's peer address, over all its connections.
    address: Arc<AtomicU32>,
    /// The most the address may have open (`--max-connections-per-ip`).
    share: u32,
    /// Answers handed over but not yet taken by the protocol (an HTTP/2 stream waiting on the
    /// client's flow-control window), and since when there have been some.
    unsent: AtomicU32,
    unsent_since: AtomicU64,
    /// Whether a request ended before its body had arrived whole (an early answer): the
    /// client may still be sending, so the socket lingers as it closes ([`super::linger`]).
    unread: AtomicBool,
    /// The connection's task, aborted to evict it.
    task: OnceLock<AbortHandle>,
}

impl Default for Tracker {
    /// A connection whose address has no share (tests).
    fn default() -> Self {
        Self::new(0, Arc::default(), u32::MAX)
    }
}

impl Tracker {
    fn new(now_ms: u64, address: Arc<AtomicU32>, share: u32) -> Self {
        Self {
            open: AtomicU32::new(0),
            reading: AtomicU32::new(0),
            progress: AtomicU64::new(now_ms),
            begun: AtomicU64::new(0),
            address,
            share,
            unsent: AtomicU32::new(0),
            unsent_since: AtomicU64::new(0),
            unread: AtomicBool::new(false),
            task: OnceLock::new(),
        }
    }

    /// A request begins; returns how many have begun on this connection so far.
    pub fn begin(&self, now_ms: u64) -> u64 {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.address.fetch_add(1, Ordering::Relaxed);
        self.progress.store(now_ms, Ordering::Relaxed);
        self.begun.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A request's answer has been handed over (it may still wait to be sent: [`Self::sent`]).
    pub fn end(&self, now_ms: u64) {
        self.open.fetch_sub(1, Ordering::Relaxed);
        self.address.fetch_sub(1, Ordering::Relaxed);
        self.progress.store(now_ms, Ordering::Relaxed);
        if self.unsent.fetch_add(1, Ordering::Relaxed) == 0 {
            self.unsent_since.store(now_ms, Ordering::Relaxed);
        }
    }

    /// An answer handed over has been taken by the protocol, or dropped.
    pub fn sent(&self) {
        self.unsent.fetch_sub(1, Ordering::Relaxed);
    }

    /// Whether the peer address has more requests open than its share.
    pub fn address_over_share(&self) -> bool {
        self.address.load(Ordering::Relaxed) > self.share
    }

    /// Since when answers have waited to be taken, if some do.
    pub fn unsent_since(&self) -> Option<u64> {
        match self.unsent.load(Ordering::Relaxed) {
            0 => None,
            _ => Some(self.unsent_since.load(Ordering::Relaxed)),
        }
    }

    /// A request starts (`true`) or stops (`false`) waiting for body bytes.
    pub fn reading(&self, waiting: bool) {
        match waiting {
            true => self.reading.fetch_add(1, Ordering::Relaxed),
            false => self.reading.fetch_sub(1, Ordering::Relaxed),
        };
    }

    /// Body bytes arrived.
    pub fn progressed(&self, now_ms: u64) {
        self.progress.store(now_ms, Ordering::Relaxed);
    }

    /// Requests open now.
    pub fn open(&self) -> u32 {
        self.open.load(Ordering::Relaxed)
    }

    /// When the client last made progress.
    pub fn progress(&self) -> u64 {
        self.progress.load(Ordering::Relaxed)
    }

    /// A request ended before its body had arrived whole.
    pub fn left_unread(&self) {
        self.unread.store(true, Ordering::Relaxed);
    }

    /// Whether some request ended before its body had arrived whole.
    pub fn any_unread(&self) -> bool {
        self.unread.load(Ordering::Relaxed)
    }

    /// Requests begun so far.
    pub fn begun(&self) -> u64 {
        self.begun.load(Ordering::Relaxed)
    }

    /// Whether the connection waits on its client only.
    fn waiting(&self) -> bool {
        self.open.load(Ordering::Relaxed) <= self.reading.load(Ordering::Relaxed)
    }

    /// Name the task that serves this connection (once, right after it is spawned).
    pub fn serve_in(&self, task: AbortHandle) {
        let _ = self.task.set(task);
    }

    fn evict(&self) {
        if let Some(task) = self.task.get() {
            task.abort();
        }
    }
}

#[derive(Debug)]
struct Entry {
    ip: IpAddr,
    tracker: Arc<Tracker>,
}

/// One address's connections, and the requests open on them.
#[derive(Debug, Default)]
struct PerIp {
    conns: usize,
    requests: Arc<AtomicU32>,
}

#[derive(Debug, Default)]
struct Open {
    /// Only addresses with an open connection: at most `max` entries.
    by_ip: HashMap<IpAddr, PerIp>,
    conns: HashMap<u64, Entry>,
    next_id: u64,
}

impl Open {
    /// The connection to close for a newcomer: among those waiting on their client (from `ip`
    /// only, if given), from the address holding the most, the longest waiting.
    fn victim(&self, ip: Option<IpAddr>) -> Option<u64> {
        let mut held: HashMap<IpAddr, u64> = HashMap::new();
        for entry in self.conns.values() {
            *held.entry(entry.ip).or_default() += 1 + u64::from(entry.tracker.open());
        }
        self.conns
            .iter()
            .filter(|(_, e)| ip.is_none_or(|ip| e.ip == ip) && e.tracker.waiting())
            .max_by_key(|(_, e)| (held[&e.ip], u64::MAX - e.tracker.progress()))
            .map(|(&id, _)| id)
    }

    /// Free `id`'s place now and end its task (its slot's drop then finds nothing to free).
    fn evict(&mut self, id: u64) {
        if let Some(entry) = self.remove(id) {
            entry.tracker.evict();
        }
    }

    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.conns.remove(&id)?;
        if let Some(per_ip) = self.by_ip.get_mut(&entry.ip) {
            per_ip.conns -= 1;
            if per_ip.conns == 0 {
                self.by_ip.remove(&entry.ip);
            }
        }
        Some(entry)
    }
}

/// The open connections of one listener.
#[derive(Debug)]
pub struct ConnLimits {
    max: usize,
    per_ip: usize,
    open: Mutex<Open>,
    /// Open connections, exported as `ksvc_webhook_connections{listener}`.
    gauge: Gauge<i64, AtomicI64>,
}

/// A newcomer's place, and whether another connection was closed to make it.
#[derive(Debug)]
pub struct Admitted {
    pub slot: ConnSlot,
    pub evicted: bool,
}

impl ConnLimits {
    /// Caps of `max` connections, `per_ip` from one address; `gauge` follows the open ones.
    pub fn new(max: usize, per_ip: usize, gauge: Gauge<i64, AtomicI64>) -> Arc<Self> {
        Arc::new(Self {
            max,
            per_ip,
            open: Mutex::default(),
            gauge,
        })
    }

    /// Count a new connection from `ip` at `now_ms`, closing a waiting one if a cap is reached,
    /// or refuse it when every connection in the way is busy.
    pub fn admit(self: &Arc<Self>, ip: IpAddr, now_ms: u64) -> Result<Admitted, Refused> {
        let ip = ip.to_canonical();
        let mut open = lock(&self.open);
        let mut evicted = false;
        if open.by_ip.get(&ip).map_or(0, |p| p.conns) >= self.per_ip {
            let victim = open.victim(Some(ip)).ok_or(Refused::PerIp)?;
            open.evict(victim);
            evicted = true;
        } else if open.conns.len() >= self.max {
            let victim = open.victim(None).ok_or(Refused::Full)?;
            open.evict(victim);
            evicted = true;
        }
        let id = open.next_id;
        open.next_id += 1;
        let per_ip = open.by_ip.entry(ip).or_default();
        per_ip.conns += 1;
        let share = u32::try_from(self.per_ip).unwrap_or(u32::MAX);
        let tracker = Arc::new(Tracker::new(now_ms, per_ip.requests.clone(), share));
        let entry = Entry {
            ip,
            tracker: tracker.clone(),
        };
        open.conns.insert(id, entry);
        self.gauge.set(gauge_value(open.conns.len()));
        let slot = ConnSlot {
            limits: self.clone(),
            id,
            tracker,
        };
        Ok(Admitted { slot, evicted })
    }
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// One counted connection; dropping it frees its place.
#[derive(Debug)]
pub struct ConnSlot {
    limits: Arc<ConnLimits>,
    id: u64,
    tracker: Arc<Tracker>,
}

impl ConnSlot {
    /// What the connection is doing.
    pub fn tracker(&self) -> &Arc<Tracker> {
        &self.tracker
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut open = lock(&self.limits.open);
        // An evicted connection's place is already free.
        open.remove(self.id);
        self.limits.gauge.set(gauge_value(open.conns.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn total(limits: &ConnLimits) -> usize {
        limits.open.lock().unwrap().conns.len()
    }

    #[test]
    fn busy_connections_are_never_closed_for_a_newcomer() {
        let limits = ConnLimits::new(3, 2, Gauge::default());
        let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
        let held: Vec<_> = [a, a, b]
            .into_iter()
            .map(|ip| limits.admit(ip, 0).unwrap().slot)
            .collect();
        for slot in &held {
            slot.tracker().begin(1);
        }
        // The same address written as IPv4-mapped IPv6 counts as the same peer.
        let mapped = ip("::ffff:10.0.0.1");
        assert_eq!(limits.admit(mapped, 2).unwrap_err(), Refused::PerIp);
        assert_eq!(limits.admit(b, 2).unwrap_err(), Refused::Full);
        assert_eq!((total(&limits), limits.gauge.get()), (3, 3));
        drop(held);
        assert_eq!(total(&limits), 0);
        assert!(limits.open.lock().unwrap().by_ip.is_empty());
    }

    #[test]
    fn a_full_listener_closes_the_longest_waiting_connection_of_the_heaviest_address() {
        let limits = ConnLimits::new(4, 3, Gauge::default());
        let (a, b, kube) = (ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.9"));
        let a1 = limits.admit(a, 0).unwrap().slot;
        let b1 = limits.admit(b, 1).unwrap().slot;
        let a2 = limits.admit(a, 2).unwrap().slot;
        let a3 = limits.admit(a, 3).unwrap().slot;
        // a1 is busy; a2 waits for body bytes since 5, a3 is idle since 3: a3 goes first,
        // though b1 has waited longer, because a holds the most.
        a1.tracker().begin(4);
        a2.tracker().begin(5);
        a2.tracker().reading(true);
        let admitted = limits.admit(kube, 10).unwrap();
        assert!(admitted.evicted);
        let open = limits.open.lock().unwrap();
        assert!(!open.conns.contains_key(&a3.id));
        assert_eq!((open.by_ip[&a].conns, open.by_ip[&kube].conns), (2, 1));
        drop(open);
        // The evicted slot's drop frees nothing twice.
        drop(a3);
        assert_eq!(total(&limits), 4);
        // a still holds the most (two connections, a1's request counted): a2 goes; then every
        // address holds one, and the longest waiting goes: b1.
        let next = limits.admit(ip("10.0.0.3"), 11).unwrap();
        assert!(!limits.open.lock().unwrap().conns.contains_key(&a2.id));
        let last = limits.admit(ip("10.0.0.4"), 12).unwrap();
        assert!(!limits.open.lock().unwrap().conns.contains_key(&b1.id));
        drop((a1, a2, b1, admitted, next, last));
        assert_eq!(total(&limits), 0);
    }

    #[test]
    fn an_address_at_its_share_gives_up_its_own_waiting_connection() {
        let limits = ConnLimits::new(8, 2, Gauge::default());
        let a = ip("10.0.0.1");
        let first = limits.admit(a, 0).unwrap().slot;
        let second = limits.admit(a, 1).unwrap().slot;
        second.tracker().begin(2);
        let third = limits.admit(a, 3).unwrap();
        assert!(third.evicted);
        let open = limits.open.lock().unwrap();
        assert!(!open.conns.contains_key(&first.id));
        assert_eq!(open.by_ip[&a].conns, 2);
        drop(open);
        drop((first, second, third));
    }

    #[test]
    fn an_address_may_have_as_many_requests_open_as_connections_over_all_of_them() {
        let limits = ConnLimits::new(8, 2, Gauge::default());
        let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
        let (a1, a2) = (
            limits.admit(a, 0).unwrap().slot,
            limits.admit(a, 0).unwrap().slot,
        );
        let b1 = limits.admit(b, 0).unwrap().slot;
        a1.tracker().begin(1);
        a1.tracker().begin(1);
        assert!(!a2.tracker().address_over_share());
        a2.tracker().begin(2);
        assert!(a1.tracker().address_over_share() && a2.tracker().address_over_share());
        assert!(!b1.tracker().address_over_share());
        a2.tracker().end(3);
        assert!(!a1.tracker().address_over_share());
        // The ended answer waits to be sent until the protocol takes it.
        assert_eq!(a2.tracker().unsent_since(), Some(3));
        a2.tracker().sent();
        assert_eq!(a2.tracker().unsent_since(), None);
        drop((a1, a2, b1));
    }
}
