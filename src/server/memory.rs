//! PURE. How much memory the server can be made to hold, from its options: the arithmetic of
//! docs/reliability.md ("Memory arithmetic") as code, so that tests/manifests.rs checks the
//! Deployment's memory limit against it and the hostile-load tests check the measured RSS.
//!
//! Every term is a bound a client cannot push past: the byte budget of bodies (times the
//! allocator's overhead), the connection caps times the most one connection can buffer, the
//! answers' encrypted bytes waiting on their clients, the decisions' working memory, and what
//! the rest of the process holds. Per `--role`: the parts that run the watch loop add its
//! cache per app through a re-list; the admission part alone adds only the revision guard's
//! projection per app, and only the parts that admit add the decisions. Reads no clock, does
//! no I/O.

use super::listen::{H1_MAX_BUF, H2_CONN_WINDOW, H2_MAX_HEADER_LIST, H2_MAX_STREAMS, H2_SEND_BUF};
use super::role::Role;
use super::routes::{DECIDERS, INLINE_BODY};
use super::{Options, PROBE_CONNECTIONS};
use crate::admission::request::MAX_VALUES;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// Resident memory of a started server with a synced watch cache of a few apps: code, runtime,
/// TLS configuration, policy, metrics, log writer (measured: docs/reliability.md).
pub const BASELINE: u64 = 48 * MIB;
/// Room for what grows beside admission: the watch cache with its statuses, and the status
/// API's caches and streams (each bounded by its own flags).
pub const OTHERS: u64 = 64 * MIB;
/// Resident bytes per body byte held under the budget, in percent: the allocator's page
/// rounding and freed memory not yet returned (measured: docs/reliability.md).
pub const BODY_OVERHEAD_PERCENT: u64 = 125;
/// What a TLS connection buffers in rustls: one incoming record (16 KiB and its header) and up
/// to 16 KiB of decrypted plaintext not yet read.
pub const TLS_BUFFERS: u64 = 34 * KIB;
/// A connection's task, hyper's state and the socket bookkeeping.
pub const CONN_STATE: u64 = 8 * KIB;

/// What rustls holds of an answer a TLS client has not read: its outgoing buffer of encrypted
/// records (rustls' default limit, 64 KiB) and the headers of the records that fill it. The
/// answer itself is held under the body budget until written.
pub const TLS_SEND_BUF: u64 = 66 * KIB;
/// Working memory of one decision on a body of [`MAX_VALUES`] values, its tree and its edits
/// (measured in the debug build the tests run: a 7 MiB review whose labels are 130,000 empty
/// values, 260,000 counted, raised the peak by 43 MiB beside its body; docs/reliability.md).
pub const DECISION_AT_CAP: u64 = 24 * MIB;
/// Small bodies decided at once on the runtime's worker threads, one a thread: the Deployment
/// runs one, two are counted.
pub const INLINE_DECISIONS: u64 = 2;

/// Resident memory of one cached app at rest, with its two Revisions, status and drift report,
/// on objects as a real cluster holds them (measured: tests/server/scale.rs, 3,653 B at 20,000
/// apps listed by streaming, 3,787 B in pages; docs/performance.md).
pub const CACHE_PER_APP: u64 = 3840;
/// A re-list's peak over the cache at rest, in percent (measured at 20,000 apps: 108 % listed by
/// streaming, 115 % in pages of 250, 4,396 B an app; the store applies the list in place, so it
/// never holds two copies). In pages the extra is a fixed 11 MiB or so whatever N (the pages
/// being decoded), so this share over-counts it past 20,000 apps.
pub const RELIST_PERCENT: u64 = 120;

/// Resident memory of one app in the admission role's Service projection (namespace, name,
/// stop and deletion flags, the `status.traffic` entries), through a re-list, which updates it
/// in place (measured: tests/server/scale.rs; docs/performance.md).
pub const PROJECTION_PER_APP: u64 = 512;

/// The terms of the bound, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arithmetic {
    pub baseline: u64,
    /// Room for the status API's caches and streams (none in the admission role).
    pub others: u64,
    /// The body budget times the allocator's overhead.
    pub bodies: u64,
    /// The listeners' connection caps (TLS, probe, and the loopback status listener of the
    /// parts that run the loop) times the most one connection buffers.
    pub connections: u64,
    /// Encrypted answer bytes waiting on clients that do not read, every TLS connection's.
    pub answers: u64,
    /// Working memory of the decisions that may run at once: the large ones on the blocking
    /// pool ([`DECIDERS`]) and the small ones on the worker threads.
    pub decisions: u64,
    /// What one app costs at a re-list's peak: the watch cache's, or the projection's in the
    /// admission role.
    pub per_app: u64,
}

impl Arithmetic {
    /// The bound for a server running every part (`--role all`) with `options`.
    pub fn of(options: &Options) -> Self {
        Self::of_role(options, Role::All)
    }

    /// The bound for a server of `role` started with `options`.
    pub fn of_role(options: &Options, role: Role) -> Self {
        let limits = &options.limits;
        let budget = limits.body_budget as u64;
        let tls = per_connection(options.http2, true) * limits.max_connections as u64;
        let probe = match options.metrics_listen {
            Some(_) => PROBE_CONNECTIONS as u64,
            None => 0,
        };
        // The parts that run the loop also serve the loopback status listener
        // (`--local-status-listen`, on by default) under the probe listener's cap.
        let (others, per_app, local) = match role {
            Role::All | Role::Controller => (
                OTHERS,
                CACHE_PER_APP * RELIST_PERCENT / 100,
                PROBE_CONNECTIONS as u64,
            ),
            Role::Admission => (0, PROJECTION_PER_APP, 0),
        };
        let plain = per_connection(false, false) * (probe + local);
        Self {
            baseline: BASELINE,
            others,
            bodies: budget * BODY_OVERHEAD_PERCENT / 100,
            connections: tls + plain,
            per_app,
            answers: TLS_SEND_BUF * limits.max_connections as u64,
            decisions: if role.admits() { decisions() } else { 0 },
        }
    }

    /// The whole bound.
    pub fn total(&self) -> u64 {
        self.baseline + self.others + self.admission()
    }

    /// How many apps the part can hold under a memory `limit` at a re-list's peak (the watch
    /// cache, or the projection), beside the baseline and what its listeners may hold (bodies,
    /// connections): the supported number of apps of docs/performance.md.
    pub fn supported_apps(&self, limit: u64) -> u64 {
        let fixed = self.baseline + self.admission();
        limit.saturating_sub(fixed) / self.per_app
    }

    /// The memory limit `apps` apps need: the sizing formula of docs/performance.md.
    pub fn limit_for(&self, apps: u64) -> u64 {
        self.baseline + self.admission() + apps * self.per_app
    }

    /// What admission alone may add to the baseline: bodies, connections, answers and
    /// decisions.
    pub fn admission(&self) -> u64 {
        self.bodies + self.connections + self.answers + self.decisions
    }
}

/// The decisions' working memory: a small body holds at most one value per two bytes, so its
/// tree is at most that share of one at the cap.
fn decisions() -> u64 {
    let inline = DECISION_AT_CAP * (INLINE_BODY as u64 / 2) / MAX_VALUES as u64;
    DECIDERS as u64 * DECISION_AT_CAP + INLINE_DECISIONS * inline
}

/// The most one connection buffers outside the body budget: HTTP/1.1 its read and write
/// buffers; HTTP/2 its connection window of received data not yet read, and per stream its
/// header block and queued answer bytes.
pub fn per_connection(http2: bool, tls: bool) -> u64 {
    let tls = if tls { TLS_BUFFERS } else { 0 };
    let http = match http2 {
        false => 2 * H1_MAX_BUF as u64,
        true => {
            let per_stream = u64::from(H2_MAX_HEADER_LIST) + H2_SEND_BUF as u64;
            u64::from(H2_CONN_WINDOW) + u64::from(H2_MAX_STREAMS) * per_stream
        }
    };
    tls + http + CONN_STATE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_supported_apps_and_the_limit_they_need_agree() {
        let a = Arithmetic {
            baseline: BASELINE,
            others: OTHERS,
            bodies: 80 * MIB,
            connections: 42 * MIB,
            per_app: CACHE_PER_APP * RELIST_PERCENT / 100,
            answers: 16 * MIB,
            decisions: 60 * MIB,
        };
        let projection = Arithmetic {
            others: 0,
            per_app: PROJECTION_PER_APP,
            ..a
        };
        for a in [a, projection] {
            for apps in [0, 1, 3000, 5000, 50_000] {
                assert!(a.supported_apps(a.limit_for(apps)) >= apps, "{apps}");
                assert!(a.supported_apps(a.limit_for(apps)) <= apps + 1, "{apps}");
            }
            assert_eq!(a.supported_apps(a.baseline), 0);
        }
        // 50,000 apps add less than 32 MiB to the admission part's bound.
        assert!(projection.limit_for(50_000) - projection.limit_for(0) < 32 * MIB);
    }

    #[test]
    fn one_large_and_two_small_decisions_are_counted() {
        assert_eq!(decisions(), 24 * MIB + 2 * 6 * MIB);
    }

    #[test]
    fn http2_connections_cost_more_than_http1() {
        assert_eq!(per_connection(false, true), 170 * KIB);
        assert_eq!(per_connection(false, false), 136 * KIB);
        assert_eq!(per_connection(true, true), 938 * KIB);
    }
}
