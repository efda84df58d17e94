//! The write queue (`watch::write_queue`) against the in-test API: one job per app at a time, at most
//! `limit` jobs at once, leadership read before every write, Events seen meanwhile kept, and an
//! app that flaps is one Event with a growing series, not a flood.
// Test helpers outside #[test] fns panic on a failed setup step, as the tests would.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use ksvc_webhook::cluster::call::Backoff;
use ksvc_webhook::watch::hub::{AppKey, AppRecord};
use ksvc_webhook::watch::metrics::Metrics;
use ksvc_webhook::watch::plan::Action;
use ksvc_webhook::watch::status::{AppStatus, Phase};
use ksvc_webhook::watch::view::KService;
use ksvc_webhook::watch::write_queue::Writes;
use ksvc_webhook::watch::writes::{Job, Transition, Writer};
use support::{FakeApi, ksvc, poll, revision};
use tokio::sync::watch;

const HELD: Duration = Duration::from_millis(300);

/// A stopped app whose stop edits are missing (the webhook was bypassed), every write to it held.
fn bypassed(fake: &FakeApi, name: &str) -> Arc<KService> {
    let revision_name = format!("{name}-00001");
    fake.put(
        "services",
        ksvc(name, true, false, 1, &[&revision_name], &revision_name),
    );
    fake.delay_writes("services", "apps", name, HELD);
    Arc::new(serde_json::from_value(fake.get("services", "apps", name).unwrap()).unwrap())
}

fn key(name: &str) -> AppKey {
    AppKey {
        namespace: "apps".into(),
        name: name.into(),
    }
}

fn job(ksvc: &Arc<KService>, actions: Vec<Action>, transition: Option<Transition>) -> Job {
    Job {
        key: key(ksvc.name()),
        ksvc: ksvc.clone(),
        transition,
        actions,
    }
}

fn queue(fake: &FakeApi, limit: usize, leader: watch::Receiver<bool>) -> (Writes, Metrics) {
    let metrics = Metrics::default();
    let writer = Writer::new(
        fake.client(),
        Duration::from_secs(10),
        Backoff::default(),
        "replica-a".into(),
        metrics.clone(),
    );
    (Writes::new(writer, leader, limit), metrics)
}

fn transition(name: &str, previous: Phase, phase: Phase) -> Transition {
    Transition {
        previous,
        record: Box::new(AppRecord {
            namespace: "apps".into(),
            name: name.into(),
            project: None,
            domain: None,
            app_name: None,
            status: AppStatus {
                phase,
                message: format!("now {}", phase.as_str()),
                last_transition_time: "2026-12-01T00:00:00Z".into(),
                replicas: None,
                url: None,
                substate: None,
            },
            drift: Default::default(),
        }),
    }
}

/// Dispatch the stop edits of `app` and wait until the API holds their write.
async fn hold_stop_edits(writes: &mut Writes, fake: &FakeApi, app: &Arc<KService>) {
    writes.dispatch(
        &key(app.name()),
        Some(job(app, vec![Action::ApplyStopEdits], None)),
    );
    poll::until("the write is held by the API", poll::LIMIT, || {
        !fake.requests_to(Method::PUT, "services").is_empty()
    })
    .await;
}

/// `(method, name)` of every request to `resource`, in arrival order.
fn calls(fake: &FakeApi, resource: &str) -> Vec<(Method, String)> {
    fake.requests()
        .into_iter()
        .filter(|r| r.resource == resource)
        .map(|r| (r.method, r.name.unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_dirtied_while_its_job_runs_gets_no_second_job_but_comes_back() {
    let fake = FakeApi::start().await;
    let app = bypassed(&fake, "app");
    let (mut writes, metrics) = queue(&fake, 4, watch::channel(true).1);

    hold_stop_edits(&mut writes, &fake, &app).await;
    // The loop reconciles the app again while the write is held: no second job starts.
    writes.dispatch(
        &key("app"),
        Some(job(&app, vec![Action::ApplyStopEdits], None)),
    );
    assert!(writes.is_running(&key("app")));
    assert_eq!(metrics.writes_in_flight.get(), 1);

    let done = writes.next_done().await;
    assert_eq!(done.key, key("app"));
    assert!(done.result.is_ok(), "{:?}", done.result);
    assert!(done.again, "dirtied while running: reconcile it again");
    assert!(!writes.is_running(&key("app")));
    assert_eq!(metrics.writes_in_flight.get(), 0);
    assert_eq!(fake.requests_to(Method::PUT, "services").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_of_one_runs_the_apps_jobs_one_after_the_other() {
    let fake = FakeApi::start().await;
    let (a, b) = (bypassed(&fake, "a"), bypassed(&fake, "b"));
    let (mut writes, _) = queue(&fake, 1, watch::channel(true).1);
    writes.dispatch(&key("a"), Some(job(&a, vec![Action::ApplyStopEdits], None)));
    writes.dispatch(&key("b"), Some(job(&b, vec![Action::ApplyStopEdits], None)));
    let first = writes.next_done().await;
    let second = writes.next_done().await;
    assert!(first.result.is_ok() && second.result.is_ok());

    // Each job is a read and a held write; with one slot the second read waits for the first
    // write to be answered.
    let (x, y) = (first.key.name.to_string(), second.key.name.to_string());
    assert_eq!(
        calls(&fake, "services"),
        [
            (Method::GET, x.clone()),
            (Method::PUT, x),
            (Method::GET, y.clone()),
            (Method::PUT, y)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_loses_the_lease_mid_job_stops_writing() {
    let fake = FakeApi::start().await;
    let app = bypassed(&fake, "app");
    fake.put("revisions", revision("app", "app-00000", 0, false));
    let doomed = fake.get("revisions", "apps", "app-00000").unwrap();
    let (leader_tx, leader) = watch::channel(true);
    let (mut writes, _) = queue(&fake, 4, leader);
    let delete = Action::DeleteRevision {
        name: "app-00000".into(),
        uid: doomed["metadata"]["uid"].as_str().map(str::to_owned),
        resource_version: doomed["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_owned),
    };
    writes.dispatch(
        &key("app"),
        Some(job(&app, vec![Action::ApplyStopEdits, delete], None)),
    );
    poll::until("the first write is held by the API", poll::LIMIT, || {
        !fake.requests_to(Method::PUT, "services").is_empty()
    })
    .await;
    leader_tx.send_replace(false);
    let done = writes.next_done().await;
    assert!(done.result.is_ok(), "{:?}", done.result);
    assert!(
        fake.requests_to(Method::DELETE, "revisions").is_empty(),
        "no write after the lease was lost"
    );
    assert!(fake.get("revisions", "apps", "app-00000").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phase_change_seen_while_the_app_is_busy_is_recorded_by_its_next_job() {
    let fake = FakeApi::start().await;
    let app = bypassed(&fake, "app");
    let (mut writes, _) = queue(&fake, 4, watch::channel(true).1);
    hold_stop_edits(&mut writes, &fake, &app).await;
    // Two phase changes while busy: recorded as one Event, from the first phase to the last.
    let busy = [
        transition("app", Phase::Active, Phase::Stopping),
        transition("app", Phase::Stopping, Phase::Stopped),
    ];
    for t in busy {
        writes.dispatch(&key("app"), Some(job(&app, Vec::new(), Some(t))));
    }
    assert!(fake.all("events").is_empty(), "nothing recorded while busy");
    let done = writes.next_done().await;
    assert!(done.again);

    // The loop reconciles it again: nothing new to write, but the held Event goes out.
    writes.dispatch(&key("app"), Some(job(&app, Vec::new(), None)));
    let done = writes.next_done().await;
    assert!(done.result.is_ok() && !done.again);
    let events = fake.all("events");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["reason"], "AppStopped");
    assert_eq!(
        events[0]["note"],
        "app is STOPPED (was ACTIVE): now STOPPED"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_app_is_one_event_whose_series_counts_the_repeats() {
    let fake = FakeApi::start().await;
    let app = bypassed(&fake, "app");
    let (mut writes, _) = queue(&fake, 4, watch::channel(true).1);
    // ACTIVE → FAILED five times over, and one ACTIVE → STOPPING.
    let flaps = (0..5).map(|_| transition("app", Phase::Active, Phase::Failed));
    for t in flaps.chain([transition("app", Phase::Active, Phase::Stopping)]) {
        writes.dispatch(&key("app"), Some(job(&app, Vec::new(), Some(t))));
        let done = writes.next_done().await;
        assert!(done.result.is_ok(), "{:?}", done.result);
    }
    let creates = fake.requests_to(Method::POST, "events");
    let patches = fake.requests_to(Method::PATCH, "events");
    assert_eq!(creates.len(), 2, "one AppFailed and one AppStopping");
    assert_eq!(
        patches.len(),
        4,
        "the four repeats patch the first AppFailed"
    );
    let events = fake.all("events");
    let failed = events.iter().find(|e| e["reason"] == "AppFailed").unwrap();
    assert_eq!(failed["type"], "Warning");
    assert_eq!(failed["series"]["count"], 5, "{failed}");
    assert_eq!(failed["regarding"]["name"], "app");
    assert_eq!(failed["reportingInstance"], "replica-a");
    let stopping = events
        .iter()
        .find(|e| e["reason"] == "AppStopping")
        .unwrap();
    assert!(stopping["series"].is_null(), "{stopping}");
}
