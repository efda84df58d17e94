//! Process faults: a leader killed mid-stop, the certificate Secret deleted while running, the
//! webhook configuration's caBundle emptied by someone else.

use std::time::{Duration, Instant};

use axum::http::Method;
use ksvc_webhook::certmgr::Manager;
use ksvc_webhook::cluster::lease;
use ksvc_webhook::watch::hub::AppKey;
use ksvc_webhook::watch::status::Phase;
use serde_json::json;
use tokio::sync::watch;
use tracing::instrument::WithSubscriber;

use crate::certs::{
    CONFIG, CONFIGS, NS, SECRET, args, bundles, serves_a_trusted_chain, webhook_config,
};
use crate::common::{Logs, SLACK};
use crate::lease::options;
use crate::watch::Loop;
use support::poll::until;
use support::{FakeApi, ksvc, revision};

/// A replica as `serve` runs it: an elector and a loop following it.
struct Replica {
    elector: tokio::task::JoinHandle<()>,
    leader: watch::Receiver<bool>,
    watch_loop: Loop,
}

impl Replica {
    fn start(fake: &FakeApi, identity: &str, logs: &Logs) -> Self {
        let (tx, leader) = watch::channel(false);
        let stop = watch::channel(false).1;
        let elector = lease::run_elector(
            fake.client(),
            options(identity),
            tx,
            Default::default(),
            stop,
        );
        let elector = tokio::spawn(elector.with_subscriber(logs.dispatch()));
        let hour = Duration::from_secs(3600);
        let watch_loop = Loop::spawn(fake.client(), identity, leader.clone(), logs, hour);
        Self {
            elector,
            leader,
            watch_loop,
        }
    }

    fn leads(&self) -> bool {
        *self.leader.borrow()
    }

    fn phase(&self) -> Option<Phase> {
        let key = AppKey {
            namespace: "apps".into(),
            name: "app".into(),
        };
        self.watch_loop.hub.get(&key).map(|a| a.status.phase)
    }

    /// SIGKILL: every task of the replica ends where it is; the Lease is not released.
    fn kill(self) {
        self.elector.abort();
        drop(self.watch_loop);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_within_the_lease_duration_and_the_stop_finishes() {
    let fake = FakeApi::start().await;
    // A stop in progress: the route still sends everything to app-00001, which has pods.
    let mut svc = ksvc("app", true, true, 2, &["app-00001"], "app-00002");
    svc["status"]["latestReadyRevisionName"] = json!("app-00001");
    fake.put("services", svc);
    fake.put("revisions", revision("app", "app-00001", 2, false));
    fake.put("revisions", revision("app", "app-00002", 0, false));
    let logs = Logs::default();
    let limit = Duration::from_secs(20);
    let a = Replica::start(&fake, "replica-a", &logs);
    until("replica-a leads", limit, || a.leads()).await;
    let b = Replica::start(&fake, "replica-b", &logs);
    until("both serve the stop in progress", limit, || {
        a.phase() == Some(Phase::Stopping) && b.phase() == Some(Phase::Stopping)
    })
    .await;
    assert!(!b.leads());
    // The follower says once what it waits for.
    let following = logs.text();
    let following = following
        .lines()
        .filter(|l| l.contains("following the leader"));
    assert_eq!(
        following.filter(|l| l.contains("holder=replica-a")).count(),
        1,
        "{}",
        logs.text()
    );

    a.kill();
    let killed = Instant::now();
    let lease = fake.get("leases", "system", "ksvc-webhook-watch").unwrap();
    assert_eq!(
        lease["spec"]["holderIdentity"], "replica-a",
        "a kill releases nothing"
    );
    // Knative finishes the rollout while nobody leads.
    fake.put(
        "services",
        ksvc("app", true, true, 2, &["app-00002"], "app-00002"),
    );

    let took_over = until("replica-b leads", limit, || b.leads()).await;
    until("replica-b deletes app-00001", limit, || {
        fake.get("revisions", "apps", "app-00001").is_none()
    })
    .await;
    until("replica-b reports the app stopped", limit, || {
        b.phase() == Some(Phase::Stopped)
    })
    .await;
    let opts = options("replica-b");
    let bound = opts.lease_duration + opts.retry_every;
    let takeover = took_over - killed;
    println!(
        "process: leader killed mid-stop | takeover after {:.2}s | bound {:.1}s",
        takeover.as_secs_f64(),
        bound.as_secs_f64()
    );
    assert!(takeover <= bound + SLACK, "took over after {takeover:?}");
    let lease = fake.get("leases", "system", "ksvc-webhook-watch").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "replica-b");
    assert_eq!(fake.requests_to(Method::DELETE, "revisions").len(), 1);
}

/// Round period of the certificate loops here (production: `--cert-sync-interval`, 60 s).
const PERIOD: Duration = Duration::from_millis(500);

/// A leader's and a follower's certificate managers, bootstrapped and running.
async fn two_certificate_managers(
    fake: &FakeApi,
    logs: &Logs,
) -> (Vec<tempfile::TempDir>, Vec<tokio::task::JoinHandle<()>>) {
    fake.put(CONFIGS, webhook_config());
    let mut dirs = Vec::new();
    let mut tasks = Vec::new();
    for leading in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let manager = Manager::new(fake.client(), &args(), dir.path());
        manager
            .sync(time::OffsetDateTime::now_utc(), leading)
            .await
            .unwrap();
        let leader = watch::channel(leading).1;
        let run = manager.run(leader, PERIOD).with_subscriber(logs.dispatch());
        tasks.push(tokio::spawn(run));
        dirs.push(dir);
    }
    (dirs, tasks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_certificate_secret_is_recreated_and_the_served_certificate_still_chains() {
    let fake = FakeApi::start().await;
    let logs = Logs::default();
    let (dirs, tasks) = two_certificate_managers(&fake, &logs).await;
    let before = fake.get("secrets", NS, SECRET).unwrap();
    for dir in &dirs {
        assert!(serves_a_trusted_chain(&fake, dir.path()));
    }

    fake.remove("secrets", NS, SECRET);
    let deleted = Instant::now();
    assert!(fake.get("secrets", NS, SECRET).is_none());
    // The files stay: admission goes on with the certificate it has.
    for dir in &dirs {
        assert!(dir.path().join("tls.crt").exists());
    }
    let recovered = until(
        "a new Secret is served and published",
        Duration::from_secs(20),
        || {
            fake.get("secrets", NS, SECRET)
                .is_some_and(|s| s["data"] != before["data"])
                && dirs.iter().all(|d| serves_a_trusted_chain(&fake, d.path()))
        },
    )
    .await;
    for task in tasks {
        task.abort();
    }
    let took = recovered - deleted;
    println!(
        "process: certificate Secret deleted | served and published again after {:.2}s | bound {:.1}s (two rounds)",
        took.as_secs_f64(),
        (PERIOD * 2).as_secs_f64()
    );
    // One round recreates the Secret (whoever is first), the leader's next at most publishes.
    assert!(took <= PERIOD * 2 + SLACK, "{took:?}");
    assert_eq!(bundles(&fake).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_ca_bundle_is_published_again_on_the_leaders_next_round() {
    let fake = FakeApi::start().await;
    let logs = Logs::default();
    let (dirs, tasks) = two_certificate_managers(&fake, &logs).await;
    until("the bundle is published", Duration::from_secs(10), || {
        dirs.iter().all(|d| serves_a_trusted_chain(&fake, d.path()))
    })
    .await;

    // A GitOps sync puts back the configuration as it is in git: no caBundle.
    fake.put(CONFIGS, webhook_config());
    let emptied = Instant::now();
    assert!(bundles(&fake).iter().all(Vec::is_empty));
    let recovered = until(
        "the bundle is published again",
        Duration::from_secs(10),
        || {
            bundles(&fake).iter().all(|b| !b.is_empty())
                && dirs.iter().all(|d| serves_a_trusted_chain(&fake, d.path()))
        },
    )
    .await;
    // The manager logs once the API server has answered the patch, so after the test can see it.
    let logged = || logs.text().contains("CA bundle published");
    until("the publication is logged", Duration::from_secs(5), logged).await;
    for task in tasks {
        task.abort();
    }
    let took = recovered - emptied;
    println!(
        "process: caBundle emptied | published again after {:.2}s | bound {:.1}s (one round)",
        took.as_secs_f64(),
        PERIOD.as_secs_f64()
    );
    assert!(took <= PERIOD + SLACK, "{took:?}");
    let patches = fake.requests_to(Method::PATCH, CONFIGS);
    assert!(patches.iter().all(|p| p.name.as_deref() == Some(CONFIG)));
}
