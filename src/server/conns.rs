//! The connection caps of one listener: at most `--max-connections` open at once, and at most
//! `--max-connections-per-ip` of them from one peer address.
//!
//! The per-address share is one layer among several (docs/reliability.md): behind a proxy, or on
//! one node, an attacker and kube-apiserver may share an address, so nothing else relies on it.
//! The accept loop closes a refused connection at once. No I/O, no clock.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::metrics::gauge::Gauge;

/// Why a connection was refused (the `reason` label of the refusal counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The listener holds `--max-connections`.
    Full,
    /// This peer address holds `--max-connections-per-ip`.
    PerIp,
}

impl Refused {
    /// Every reason, so each counter exists from the first scrape on.
    pub const ALL: [Self; 2] = [Self::Full, Self::PerIp];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Full => "max_connections",
            Self::PerIp => "max_connections_per_ip",
        }
    }
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    /// Only addresses with an open connection: at most `max` entries.
    by_ip: HashMap<IpAddr, usize>,
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

    /// Count a new connection from `ip`, or refuse it.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnSlot, Refused> {
        let ip = ip.to_canonical();
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.total >= self.max {
            return Err(Refused::Full);
        }
        let from_ip = open.by_ip.entry(ip).or_default();
        if *from_ip >= self.per_ip {
            return Err(Refused::PerIp);
        }
        *from_ip += 1;
        open.total += 1;
        self.gauge.set(gauge_value(open.total));
        Ok(ConnSlot {
            limits: self.clone(),
            ip,
        })
    }
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// One counted connection; dropping it frees its place.
#[derive(Debug)]
pub struct ConnSlot {
    limits: Arc<ConnLimits>,
    ip: IpAddr,
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut open = self
            .limits
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.by_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.by_ip.remove(&self.ip);
            }
        }
        self.limits.gauge.set(gauge_value(open.total));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_overall_and_per_address() {
        let limits = ConnLimits::new(3, 2, Gauge::default());
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = limits.admit(a).unwrap();
        // The same address written as IPv4-mapped IPv6 counts as the same peer.
        let a2 = limits.admit("::ffff:10.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(limits.admit(a).unwrap_err(), Refused::PerIp);
        let b1 = limits.admit(b).unwrap();
        assert_eq!(limits.admit(b).unwrap_err(), Refused::Full);
        assert_eq!(
            (limits.open.lock().unwrap().total, limits.gauge.get()),
            (3, 3)
        );
        drop(a1);
        let b2 = limits.admit(b).unwrap();
        drop((a2, b1, b2));
        assert_eq!(limits.open.lock().unwrap().total, 0);
        assert!(limits.open.lock().unwrap().by_ip.is_empty());
    }
}
