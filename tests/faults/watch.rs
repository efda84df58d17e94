//! The watch loop with every call it makes failing first: the KService and Revision lists and
//! watches, the KService update (the stop edits), the Revision delete and the Event create.
//!
//! Bounds: a list or watch is retried by kube-runtime's backoff (0.8 s doubling to 30 s, plus up
//! to as much again of jitter); a list or watch that never answers ends at the client's read
//! timeout (production: 90 s; 3 s here). A failed write is retried by the loop's own backoff
//! (`Backoff::default()`: 100 ms doubling to 5 s); a conflict re-reads at once and retries with
//! the same backoff. An Event is best effort: a failed one is logged and not retried.
//!
//! The loop lists by streaming (a watch with `sendInitialEvents`); the `list` rows run against a
//! server that refuses that, so their faults meet the paged lists the loop then falls back to.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use ksvc_webhook::cluster::call::Backoff;
use ksvc_webhook::watch::controller::{self, LoopOptions, Shared};
use ksvc_webhook::watch::hub::{AppKey, Hub};
use ksvc_webhook::watch::metrics::Metrics;
use tokio::sync::watch;
use tracing::instrument::WithSubscriber;

use crate::common::{Logs, Outcome, report};
use support::fake_api::Fault;
use support::poll::until;
use support::{FakeApi, ksvc, revision};

const TIMES: u32 = 2;
/// The client's read timeout in rows where a list or watch never answers.
const READ_TIMEOUT: Duration = Duration::from_secs(3);
/// The API timeout of every other call: well above a throttled call's two waits for
/// `Retry-After: 1`, so a loaded machine does not turn a 429 into a timeout.
pub const API_TIMEOUT: Duration = Duration::from_secs(6);
/// The n-th (1-based) step of kube-runtime's watcher backoff, jitter included.
fn watcher_step(n: u32) -> Duration {
    Duration::from_millis(800) * 2u32.pow(n - 1) * 2
}

/// One replica's loop, logging into `logs`.
pub struct Loop {
    pub hub: Arc<Hub>,
    pub synced: Arc<AtomicBool>,
    synced_at: Arc<Mutex<Option<Instant>>>,
    pub task: tokio::task::JoinHandle<()>,
    probe: tokio::task::JoinHandle<()>,
}

impl Loop {
    pub fn spawn(
        client: kube::Client,
        identity: &str,
        leader: watch::Receiver<bool>,
        logs: &Logs,
        resync: Duration,
    ) -> Self {
        let hub = Hub::new();
        let synced = Arc::new(AtomicBool::new(false));
        let shared = Shared {
            hub: hub.clone(),
            synced: synced.clone(),
            leader,
            metrics: Metrics::default(),
            services: Default::default(),
            policy: Default::default(),
        };
        let opts = LoopOptions {
            namespace: None,
            api_timeout: API_TIMEOUT,
            backoff: Backoff::default(),
            resync_every: resync,
            identity: identity.to_owned(),
            write_concurrency: 4,
            readmit: Default::default(),
        };
        let run = controller::run(client, opts, shared).with_subscriber(logs.dispatch());
        let task = tokio::spawn(run);
        // The loop's sync as `/apps` sees it: when the flag first turned true.
        let synced_at = Arc::new(Mutex::new(None));
        let (flag, at) = (synced.clone(), synced_at.clone());
        let probe = tokio::spawn(async move {
            while !flag.load(Ordering::Acquire) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            *at.lock().unwrap() = Some(Instant::now());
        });
        Self {
            hub,
            synced,
            synced_at,
            task,
            probe,
        }
    }

    /// When the loop first reported ready.
    pub fn synced_at(&self) -> Option<Instant> {
        *self.synced_at.lock().unwrap()
    }

    pub fn app(&self, name: &str) -> bool {
        self.hub
            .get(&AppKey {
                namespace: "apps".into(),
                name: name.into(),
            })
            .is_some()
    }

    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        self.task.abort();
        self.probe.abort();
    }
}

/// A client of the fake with a read timeout, as `serve` configures its own.
pub fn client(fake: &FakeApi, read_timeout: Option<Duration>) -> kube::Client {
    let mut config = kube::Config::new(format!("http://{}", fake.addr).parse().unwrap());
    config.read_timeout = read_timeout;
    kube::Client::try_from(config).unwrap()
}

/// A stop in progress whose traffic has moved: the leader deletes app-00001 and records Events.
pub fn stop_ready_for_teardown(fake: &FakeApi) {
    fake.put(
        "services",
        ksvc("app", true, true, 2, &["app-00002"], "app-00002"),
    );
    fake.put("revisions", revision("app", "app-00001", 2, false));
    fake.put("revisions", revision("app", "app-00002", 0, false));
}

fn event_reasons(fake: &FakeApi) -> Vec<String> {
    let reasons = fake.all("events").into_iter();
    reasons
        .map(|e| e["reason"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The row's retry line, and whether the fault fails the step that made the call.
fn expectation(verb: &str, fault: Fault) -> (&'static [&'static str], bool) {
    let failing = match (verb, fault) {
        (_, Fault::Throttled) => false,
        // A conflict is re-read and retried inside the write (update), or means the object
        // changed and its watch event plans again (delete).
        ("update" | "delete", Fault::Status(409)) => false,
        // The API's word that the object is gone: nothing to retry until the next resync.
        ("delete", Fault::Status(404)) => false,
        _ => true,
    };
    let line: &[&str] = match verb {
        "create" => &["event not recorded"],
        "update" | "delete" => &["reconcile failed; retrying", "delay"],
        _ => &["watch failed; resuming with backoff"],
    };
    (line, failing)
}

/// One row: a call, its fault, and how often the fault is served.
struct Row {
    verb: &'static str,
    resource: &'static str,
    fault: Fault,
    times: u32,
    /// `resource verb × fault`, for messages.
    name: String,
}

impl Row {
    fn new(verb: &'static str, resource: &'static str, fault: Fault) -> Self {
        // Events are best effort: one is lost, the next one must get through.
        let times = match (verb, fault) {
            ("create", _) | (_, Fault::Hang) => 1,
            _ => TIMES,
        };
        let name = format!("{resource} {verb} × {fault:?}");
        Self {
            verb,
            resource,
            fault,
            times,
            name,
        }
    }

    fn writes(&self) -> bool {
        matches!(self.verb, "update" | "delete" | "create")
    }

    /// The objects the row starts from.
    fn seed(&self, fake: &FakeApi) {
        match self.verb {
            "update" => fake.put(
                "services",
                ksvc("app", true, false, 1, &["app-00001"], "app-00001"),
            ),
            "delete" | "create" => stop_ready_for_teardown(fake),
            _ => {
                let first = ksvc("first", false, false, 1, &["first-00001"], "first-00001");
                fake.put("services", first);
                fake.put("revisions", revision("first", "first-00001", 1, false));
            }
        }
    }

    /// Resync period: only a Revision the API called gone waits for it.
    fn resync(&self) -> Duration {
        match (self.verb, self.fault) {
            ("delete", Fault::Status(404)) => Duration::from_secs(2),
            _ => Duration::from_secs(3600),
        }
    }

    /// Wait until the loop did what the faulted call was for; when it did.
    async fn recovered(&self, fake: &FakeApi, replica: &Loop, stopped: Instant) -> Instant {
        let limit = Duration::from_secs(30);
        let what = |goal: &str| format!("{}: {goal}", self.name);
        match self.verb {
            "list" => {
                until(&what("the cache synced"), limit, || {
                    replica.synced_at().is_some()
                })
                .await;
                let synced_at = replica.synced_at().unwrap();
                assert!(
                    synced_at > stopped,
                    "{}: ready before the lists succeeded",
                    self.name
                );
                synced_at
            }
            "watch" => {
                // The first `times` watches were the faulted ones.
                let resource = self.resource;
                let reopened = || watches(fake, resource) > self.times as usize;
                let rewatched = until(&what("the watch is open again"), limit, reopened).await;
                if resource == "services" {
                    fake.put("services", ksvc("late", false, false, 1, &[], ""));
                    until(&what("the late app is served"), limit, || {
                        replica.app("late")
                    })
                    .await;
                }
                rewatched
            }
            "update" => {
                let edited = || {
                    fake.get("services", "apps", "app").is_some_and(|s| {
                        s["metadata"]["labels"]["networking.knative.dev/visibility"]
                            == "cluster-local"
                    })
                };
                until(&what("the stop edits are applied"), limit, edited).await
            }
            "delete" => {
                let gone = || fake.get("revisions", "apps", "app-00001").is_none();
                until(&what("app-00001 is deleted"), limit, gone).await
            }
            _ => {
                let later = || event_reasons(fake).contains(&"AppStopped".to_owned());
                until(&what("a later event is recorded"), limit, later).await
            }
        }
    }

    /// The retry lines logged for this call; checks one per failed attempt.
    fn check_logs(&self, logs: &Logs) -> usize {
        let (line, failing) = expectation(self.verb, self.fault);
        let mut needles = line.to_vec();
        let field = format!("resource=\"{}\"", self.resource);
        if !self.writes() {
            needles.push(&field);
        }
        let warns = logs.warns(&needles).len();
        let expected = if failing { self.times as usize } else { 0 };
        let text = logs.text();
        match self.fault {
            // An idle healthy watch also ends at this short read timeout and is logged too.
            Fault::Hang if !self.writes() => assert!(warns >= expected, "{}\n{text}", self.name),
            _ => assert_eq!(warns, expected, "{}\n{text}", self.name),
        }
        warns
    }

    /// The backoff step (or timeout) after which the loop must have recovered.
    fn bound(&self) -> Duration {
        let (_, failing) = expectation(self.verb, self.fault);
        let steps = Backoff::default();
        match (self.verb, self.fault, failing) {
            (_, Fault::Throttled, _) => Duration::from_secs(1),
            ("list" | "watch", Fault::Hang, _) => READ_TIMEOUT + watcher_step(1),
            ("list" | "watch", _, _) => watcher_step(self.times),
            ("delete", Fault::Status(404), _) => self.resync(),
            (_, Fault::Hang, _) => API_TIMEOUT + steps.delay(0),
            ("create", _, _) => Duration::ZERO,
            (_, _, _) => steps.delay(self.times - 1),
        }
    }
}

async fn row(verb: &'static str, resource: &'static str, fault: Fault) -> Outcome {
    let row = Row::new(verb, resource, fault);
    let fake = FakeApi::start().await;
    let logs = Logs::default();
    row.seed(&fake);
    if verb == "list" {
        fake.refuse_streaming_lists();
    }
    fake.inject(verb, resource, None, fault, row.times);
    // Only a list or watch waits for the read timeout; a write's own API timeout ends first.
    let read_timeout = (fault == Fault::Hang && !row.writes()).then_some(READ_TIMEOUT);
    let leader = watch::channel(row.writes()).1;
    let client = client(&fake, read_timeout);
    let replica = Loop::spawn(client, "me", leader, &logs, row.resync());
    let limit = Duration::from_secs(30);
    let served = format!("{}: the fault is served", row.name);
    until(&served, limit, || fake.faults_left() == 0).await;
    let stopped = fake.last_fault_at().unwrap();
    let recovered = row.recovered(&fake, &replica, stopped).await;
    if row.writes() {
        // Ready once the first round of reconciles (writes included) is done.
        let ready = format!("{}: the loop is ready", row.name);
        until(&ready, limit, || replica.synced()).await;
        assert!(replica.app("app"), "{}: status is still served", row.name);
    }
    let (call, warns) = (format!("{resource} {verb}"), row.check_logs(&logs));
    Outcome::measured(call, fault, &fake, recovered, row.bound(), warns)
}

/// Watch requests made on `resource`.
fn watches(fake: &FakeApi, resource: &str) -> usize {
    let requests = fake.requests();
    requests
        .iter()
        .filter(|r| r.resource == resource && r.query.contains_key("watch"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_loop_recovers_from_every_fault_of_every_call() {
    let calls = [
        ("list", "services"),
        ("watch", "services"),
        ("list", "revisions"),
        ("watch", "revisions"),
        ("update", "services"),
        ("delete", "revisions"),
        ("create", "events"),
    ];
    let rows = calls
        .iter()
        .flat_map(|(verb, resource)| Fault::ALL.map(|fault| row(verb, resource, fault)));
    let outcomes = join_all(rows.map(tokio::spawn)).await;
    let outcomes: Vec<_> = outcomes.into_iter().map(Result::unwrap).collect();
    report("watch loop", &outcomes);
}

/// Requests to `resource` that start a streaming list, and plain lists (pages).
fn listings(fake: &FakeApi, resource: &str) -> (usize, Vec<String>) {
    let requests = fake.requests();
    let of = || requests.iter().filter(|r| r.resource == resource);
    let streaming = of()
        .filter(|r| {
            r.query
                .get("sendInitialEvents")
                .is_some_and(|s| s == "true")
        })
        .count();
    let pages = of()
        .filter(|r| r.name.is_none() && !r.query.contains_key("watch"))
        .map(|r| r.query.get("limit").cloned().unwrap_or_default())
        .collect();
    (streaming, pages)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_refusing_streaming_lists_is_listed_in_pages_from_then_on_said_once() {
    let fake = FakeApi::start().await;
    fake.refuse_streaming_lists();
    let logs = Logs::default();
    let replica = paged_replica(&fake, &logs, 2).await;
    // Forced to list again: the history compacted under a cut watch (410).
    let rewatched = || watches(&fake, "services") >= 3;
    relist_after_a_410(&fake, &replica).await;
    assert!(rewatched());
    for resource in ["services", "revisions", "namespaces"] {
        let (streaming, pages) = listings(&fake, resource);
        assert_eq!(
            streaming, 1,
            "{resource}: one streaming list, refused, then never again"
        );
        assert!(!pages.is_empty(), "{resource}: listed in pages");
        let page = ksvc_webhook::watch::listing::PAGE_SIZE.to_string();
        assert!(
            pages.iter().all(|l| *l == page),
            "{resource}: pages of {page}: {pages:?}"
        );
    }
    assert!(
        listings(&fake, "services").1.len() >= 2,
        "the 410 listed again, in pages"
    );
    let text = logs.text();
    let said: Vec<_> = text
        .lines()
        .filter(|l| l.contains("refused a streaming list"))
        .collect();
    assert_eq!(said.len(), 3, "once per resource:\n{text}");
    assert!(
        said.iter().all(|l| l.trim_start().starts_with("INFO")),
        "{text}"
    );
    assert!(
        logs.warns(&["watch failed", "sendInitialEvents"])
            .is_empty(),
        "a refusal is no failure:\n{text}"
    );
}

/// A follower over `fake` told to list in pages, once its cache has synced and the services
/// watch has been opened `watches_open` times.
async fn paged_replica(fake: &FakeApi, logs: &Logs, watches_open: usize) -> Loop {
    fake.page_lists(true);
    Row::new("list", "services", Fault::Drop).seed(fake);
    let leader = watch::channel(false).1;
    let hour = Duration::from_secs(3600);
    let replica = Loop::spawn(client(fake, None), "me", leader, logs, hour);
    until("the cache synced", Duration::from_secs(30), || {
        replica.synced() && replica.app("first")
    })
    .await;
    until(
        "the services watch is open",
        Duration::from_secs(30),
        || watches(fake, "services") >= watches_open,
    )
    .await;
    replica
}

/// Force `replica` to list again (the history compacted under a cut watch: 410) and wait until
/// it serves the app put meanwhile.
async fn relist_after_a_410(fake: &FakeApi, replica: &Loop) {
    fake.block_watches(true);
    fake.disconnect_watches();
    fake.put("services", ksvc("late", false, false, 1, &[], ""));
    fake.compact();
    fake.block_watches(false);
    until("the late app is served", Duration::from_secs(30), || {
        replica.app("late")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_taking_streaming_lists_is_never_asked_for_pages() {
    let fake = FakeApi::start().await;
    let logs = Logs::default();
    let replica = paged_replica(&fake, &logs, 1).await;
    relist_after_a_410(&fake, &replica).await;
    assert!(
        listings(&fake, "services").0 >= 2,
        "the 410 listed again, by streaming"
    );
    for resource in ["services", "revisions", "namespaces"] {
        let (streaming, pages) = listings(&fake, resource);
        assert!(streaming >= 1, "{resource}: listed by streaming");
        assert!(pages.is_empty(), "{resource}: no page asked for: {pages:?}");
    }
    assert!(!logs.text().contains("refused a streaming list"));
}
