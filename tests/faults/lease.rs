//! Leader election with every Lease call failing first: get, create, and update (a renewal).
//!
//! Bound: a replica whose round failed (or lost a race) is not leading and tries again after
//! `retry_every` (production: a fifth of `--lease-duration`, 3 s); a call that never
//! answers costs the API timeout first. Any failed renewal drops leadership at once: a replica
//! that cannot prove it leads must not write.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use ksvc_webhook::cluster::lease::{self, LeaseOptions};
use tokio::sync::watch;
use tracing::instrument::WithSubscriber;

use crate::common::{Logs, Outcome, report};
use support::FakeApi;
use support::fake_api::Fault;
use support::poll::until;

const TIMES: u32 = 2;

pub fn options(identity: &str) -> LeaseOptions {
    LeaseOptions {
        namespace: "system".into(),
        name: "ksvc-webhook-watch".into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(2),
        renew_every: Duration::from_millis(500),
        retry_every: Duration::from_millis(500),
        // Well above a throttled call's wait for `Retry-After: 1`, so a loaded machine does not
        // turn a 429 into a timeout.
        api_timeout: Duration::from_secs(6),
    }
}

/// Every leadership value the elector published, with when.
#[derive(Clone, Default)]
struct Leadership(Arc<Mutex<Vec<(Instant, bool)>>>);

impl Leadership {
    fn follow(&self, mut rx: watch::Receiver<bool>) {
        let seen = self.clone();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let leading = *rx.borrow_and_update();
                seen.0.lock().unwrap().push((Instant::now(), leading));
            }
        });
    }

    fn now(&self) -> bool {
        self.0.lock().unwrap().last().is_some_and(|(_, l)| *l)
    }

    /// When leadership was last dropped after `since`.
    fn dropped_after(&self, since: Instant) -> Option<Instant> {
        let seen = self.0.lock().unwrap();
        seen.iter()
            .rev()
            .find(|(at, l)| !*l && *at >= since)
            .map(|(at, _)| *at)
    }

    /// When leadership was first claimed.
    fn first_led(&self) -> Option<Instant> {
        let seen = self.0.lock().unwrap();
        seen.iter().find(|(_, l)| *l).map(|(at, _)| *at)
    }
}

fn fails_round(verb: &str, fault: Fault) -> bool {
    match fault {
        Fault::Throttled => false,
        // A Lease that reads as missing is created.
        Fault::Status(404) => verb != "get",
        _ => true,
    }
}

async fn row(verb: &'static str, fault: Fault) -> Outcome {
    let fake = FakeApi::start().await;
    let logs = Logs::default();
    let (tx, rx) = watch::channel(false);
    let seen = Leadership::default();
    seen.follow(rx);
    let stop = watch::channel(false).1;
    let times = if fault == Fault::Hang { 1 } else { TIMES };
    if verb != "update" {
        fake.inject(verb, "leases", None, fault, times);
    }
    let elector = lease::run_elector(fake.client(), options("me"), tx, Default::default(), stop);
    let elector = tokio::spawn(elector.with_subscriber(logs.dispatch()));
    let call = format!("leases {verb}");
    if verb == "update" {
        // A renewal: lead first, then every renewal fails for a while.
        until("the first lease is won", Duration::from_secs(10), || {
            seen.now()
        })
        .await;
        fake.inject(verb, "leases", None, fault, times);
    }
    let injected = Instant::now();
    let limit = Duration::from_secs(20);
    until("the fault is served", limit, || fake.faults_left() == 0).await;
    let stopped = fake.last_fault_at().unwrap();
    let failing = fails_round(verb, fault);
    let conflict = fault == Fault::Status(409) && verb != "get";
    // A failed renewal must drop leadership before it is regained.
    let must_drop = verb == "update" && failing;
    let recovered = until("leading again", limit, || {
        seen.now() && (!must_drop || seen.dropped_after(injected).is_some())
    })
    .await;
    elector.abort();
    // (A Lease that reads as missing is created at once, so a 404 get leads in between.)
    if verb != "update" && failing {
        let first = seen.first_led().unwrap();
        assert!(
            first >= stopped,
            "{call} × {fault:?}: not leading while the Lease cannot be written"
        );
    }
    let warns = logs.warns(&["lease round failed", "retry_in"]).len();
    // A conflict means another replica won the round: not an error, no warning.
    let expected = if failing && !conflict {
        times as usize
    } else {
        0
    };
    assert_eq!(warns, expected, "{call} × {fault:?}\n{}", logs.text());
    let opts = options("me");
    let bound = match (failing, fault) {
        (true, Fault::Hang) => opts.api_timeout + opts.retry_every,
        (true, _) => opts.retry_every,
        (false, Fault::Throttled) => Duration::from_secs(1),
        // A 404 on a renewal's read makes it create, and the create's AlreadyExists drops
        // leadership for one round.
        (false, Fault::Status(404)) => opts.retry_every,
        (false, _) => Duration::ZERO,
    };
    Outcome::measured(call, fault, &fake, recovered, bound, warns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_recovers_from_every_fault_of_every_lease_call() {
    let rows = ["get", "create", "update"]
        .iter()
        .flat_map(|verb| Fault::ALL.map(|fault| row(verb, fault)));
    let outcomes = join_all(rows.map(tokio::spawn)).await;
    let outcomes: Vec<_> = outcomes.into_iter().map(Result::unwrap).collect();
    report("lease", &outcomes);
}
