//! Re-admission through faults, against the in-test API with admission in its write path: a
//! leader killed mid-wave (its real Lease election aborted with it) leaves the other replica to
//! finish without writing an app twice; a leader whose cache is behind never writes an app
//! again; an API server that cannot be reached holds the wave and loses nothing in flight; a
//! webhook in the chain that cannot be called refuses the writes and trips the breaker.

#![allow(clippy::unwrap_used)] // a test: a failed step should panic loudly

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::http::Method;
use ksvc_webhook::admission::Policy;
use ksvc_webhook::watch::readmit::args::ReadmitArgs;
use ksvc_webhook::watch::readmit::wave::{Mode, Settings};
use serde_json::json;
use support::fake_api::Fault;
use support::{FakeApi, Replica, poll};

use super::drift::{before_the_webhook, reasons, scrape};
use super::readmit::{CONVERGED, counter, leading, puts, settings, written};

/// The stored writes, after checking that `apps`, and only they, were each written once.
fn written_once_each(fake: &FakeApi, apps: &[&str]) -> BTreeMap<String, Vec<Instant>> {
    let writes = written(fake);
    assert_eq!(writes.keys().collect::<Vec<_>>(), apps, "{writes:?}");
    assert!(
        writes.values().all(|at| at.len() == 1),
        "written twice: {writes:?}"
    );
    writes
}

#[tokio::test]
async fn a_leader_killed_mid_wave_leaves_the_other_replica_to_finish_without_writing_an_app_twice()
{
    let fake = FakeApi::start().await;
    let policy = Policy::default();
    fake.admit_with(policy.clone());
    fake.put("namespaces", json!({"metadata": {"name": "apps"}}));
    let apps = ["l1-proj-dev", "l2-proj-dev", "l3-proj-dev"];
    for app in ["l1", "l2", "l3"] {
        fake.put("services", before_the_webhook("apps", app));
    }
    // Two replicas as `serve` runs them, each with its election on a 2 s Lease.
    let dir = tempfile::tempdir().unwrap();
    let readmit = ReadmitArgs {
        mode: Mode::All,
        interval: Duration::from_millis(20),
        ready_timeout: Duration::from_secs(20),
        ..ReadmitArgs::default()
    };
    let lease = Duration::from_secs(2);
    let serve = |pod| {
        Replica::serve(
            &fake,
            dir.path(),
            pod,
            policy.clone(),
            readmit.clone(),
            lease,
        )
    };
    let first = serve("replica-a");
    poll::until("replica-a leads", poll::LIMIT, || *first.leader.borrow()).await;
    let second = serve("replica-b");
    second.wait_synced().await;
    // No Knative yet: the app the first leader writes stays not Ready.
    poll::until("the first leader wrote an app", poll::LIMIT, || {
        !written(&fake).is_empty()
    })
    .await;
    let (in_flight, _) = written(&fake).into_iter().next().unwrap();
    poll::until(
        "the other replica's cache shows the write",
        poll::LIMIT,
        || {
            second
                .app(&in_flight)
                .is_some_and(|r| reasons(&r).is_empty())
        },
    )
    .await;

    first.kill();
    let held = fake.get("leases", "system", "ksvc-webhook-watch").unwrap();
    assert_eq!(
        held["spec"]["holderIdentity"], "replica-a",
        "a kill releases nothing"
    );
    poll::until(
        "replica-b leads once the Lease expired",
        poll::LIMIT,
        || *second.leader.borrow(),
    )
    .await;
    // It takes the unsettled app in flight from what the cluster says, and starts nothing else
    // while that app's Revision is not Ready.
    poll::until("replica-b counts the app in flight", poll::LIMIT, || {
        second.metrics.readmit_in_flight.get() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let writes = written(&fake);
    assert_eq!(
        writes.keys().collect::<Vec<_>>(),
        [&in_flight],
        "started beside the app in flight"
    );
    assert_eq!(writes[&in_flight].len(), 1, "written again: {writes:?}");

    let knative = fake.knative(Duration::from_millis(50));
    poll::until("replica-b converged every app", poll::LIMIT, || {
        apps.iter()
            .all(|app| second.app(app).is_some_and(|r| reasons(&r).is_empty()))
            && counter(&scrape(&second), CONVERGED) >= 3
    })
    .await;
    assert_eq!(counter(&scrape(&second), CONVERGED), 3);
    let writes = written_once_each(&fake, &apps);
    // The others started only once the app in flight was Ready.
    let ready = knative.ready.lock().unwrap()[&format!("{in_flight}-00002")];
    for (app, at) in &writes {
        assert!(
            *app == in_flight || at[0] >= ready,
            "{app} started before {in_flight} was Ready"
        );
    }
}

#[tokio::test]
async fn an_unreachable_api_server_holds_the_wave_and_loses_nothing_in_flight() {
    let fake = FakeApi::start().await;
    let policy = Policy::default();
    fake.admit_with(policy.clone());
    fake.put("namespaces", json!({"metadata": {"name": "apps"}}));
    let apps = ["o1-proj-dev", "o2-proj-dev", "o3-proj-dev"];
    for app in ["o1", "o2", "o3"] {
        fake.put("services", before_the_webhook("apps", app));
    }
    // Room for two in flight: only the outage holds the second start back.
    let interval = Duration::from_millis(500);
    let paced = Settings {
        max_in_flight: 2,
        ..settings(500)
    };
    let (_tx, replica) = leading(&fake, "r1", policy, paced);
    replica.wait_synced().await;
    // No Knative yet: the app written stays not Ready.
    poll::until("an app written", poll::LIMIT, || !written(&fake).is_empty()).await;
    fake.unreachable(true);
    let down = Instant::now();
    let (in_flight, _) = written(&fake).into_iter().next().unwrap();
    // Down for longer than the interval: the second start falls due meanwhile.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        replica.metrics.readmit_in_flight.get(),
        1,
        "the app in flight is kept"
    );
    fake.unreachable(false);
    let up = Instant::now();
    let knative = fake.knative(Duration::from_millis(100));
    poll::until("every app converged", poll::LIMIT, || {
        counter(
            &scrape(&replica),
            "ksvc_webhook_readmit_total{result=\"converged\"}",
        ) == 3
    })
    .await;

    let asked: Vec<_> = fake
        .requests_to(Method::GET, "services")
        .into_iter()
        .chain(fake.requests_to(Method::PUT, "services"))
        .filter(|r| r.name.is_some() && r.at >= down && r.at < up)
        .collect();
    assert!(asked.is_empty(), "an app started while down: {asked:?}");
    written_once_each(&fake, &apps);
    // The app in flight settled once the API server was back, and the wave went on at its
    // pace: an interval after the API server answered again.
    let ready = knative.ready.lock().unwrap()[&format!("{in_flight}-00002")];
    assert!(ready > up);
    for app in apps.iter().filter(|a| **a != in_flight) {
        let started = puts(&fake)[*app][0].1;
        assert!(
            started >= up + interval,
            "{app} started {:?} after the API server was back",
            started - up
        );
    }
    let text = scrape(&replica);
    for result in ["failed", "timed_out", "refused"] {
        let series = format!("ksvc_webhook_readmit_total{{result=\"{result}\"}}");
        assert_eq!(counter(&text, &series), 0, "{result}");
    }
}

#[tokio::test]
async fn a_leader_whose_cache_is_behind_never_writes_an_app_again() {
    let fake = FakeApi::start().await;
    let policy = Policy::default();
    fake.admit_with(policy.clone());
    fake.put("namespaces", json!({"metadata": {"name": "apps"}}));
    fake.put("services", before_the_webhook("apps", "s1"));
    let (first_tx, first) = leading(&fake, "r1", policy.clone(), settings(20));
    let (second_tx, second) = leading(&fake, "r2", policy, settings(20));
    second_tx.send_replace(false);
    first_tx.send_replace(false);
    first.wait_synced().await;
    second.wait_synced().await;
    // Both caches stop here: no watch is served from now on.
    fake.block_watches(true);
    fake.disconnect_watches();
    first_tx.send_replace(true);
    poll::until("the first leader wrote an app", poll::LIMIT, || {
        written(&fake).len() == 1
    })
    .await;
    let (app, _) = written(&fake).into_iter().next().unwrap();
    first_tx.send_replace(false);
    first.task.abort();
    // The new leader still sees that app as drifted: its write must not happen.
    second_tx.send_replace(true);
    // It reads the app fresh for its dry run, sees it changed since its cache's view, and
    // writes nothing.
    let reads = |fake: &FakeApi| {
        fake.requests_to(Method::GET, "services")
            .iter()
            .filter(|r| r.name.as_deref() == Some(app.as_str()))
            .count()
    };
    let before = reads(&fake);
    poll::until("the new leader tried it", poll::LIMIT, || {
        reads(&fake) >= before + 2
    })
    .await;
    assert_eq!(written(&fake)[&app].len(), 1, "written twice");
    let _knative = fake.knative(Duration::from_millis(10));
    fake.block_watches(false);
    poll::until("the new leader sees it converged", poll::LIMIT, || {
        second
            .app("s1-proj-dev")
            .is_some_and(|r| reasons(&r).is_empty())
    })
    .await;
    assert_eq!(written(&fake)[&app].len(), 1, "written twice");
}

#[tokio::test]
async fn a_webhook_in_the_chain_that_cannot_be_called_trips_the_breaker() {
    let fake = FakeApi::start().await;
    let policy = Policy::default();
    fake.admit_with(policy.clone());
    // In four namespaces: one namespace's failures would pause only that one.
    for (i, app) in ["w1", "w2", "w3", "w4"].iter().enumerate() {
        let namespace = format!("team-{i}");
        fake.put("namespaces", json!({"metadata": {"name": namespace}}));
        fake.put("services", before_the_webhook(&namespace, app));
    }
    // kube-apiserver's answer when a webhook with failurePolicy Fail times out.
    let broken = Fault::Refusal(
        500,
        "InternalError",
        "Internal error occurred: failed calling webhook \"policy.example.com\": failed to call \
         webhook: Post \"https://policy.example.svc:443/validate\": context deadline exceeded",
    );
    fake.inject("update", "services", None, broken, 100);
    let (_tx, replica) = leading(&fake, "r1", policy, settings(20));
    replica.wait_synced().await;
    poll::until("the wave paused", poll::LIMIT, || {
        replica.metrics.readmit_paused.get() == 1
    })
    .await;
    let refused = "ksvc_webhook_readmit_total{result=\"refused\"}";
    assert_eq!(counter(&scrape(&replica), refused), 3);
    poll::until("a ReadmitFailed Event on each", poll::LIMIT, || {
        fake.all("events")
            .iter()
            .filter(|e| e["reason"] == "ReadmitFailed")
            .count()
            == 3
    })
    .await;
    let note = fake
        .all("events")
        .into_iter()
        .find(|e| e["reason"] == "ReadmitFailed")
        .unwrap()["note"]
        .clone();
    assert!(
        note.as_str().unwrap().contains("failed calling webhook"),
        "{note}"
    );
    // Three apps, one dry run each: nothing stored, none tried twice, nothing after the pause.
    assert!(written(&fake).is_empty(), "{:?}", written(&fake));
    let tried = puts(&fake);
    assert_eq!(tried.len(), 3, "{tried:?}");
    assert!(tried.values().all(|dry| dry.len() == 1), "{tried:?}");
}
