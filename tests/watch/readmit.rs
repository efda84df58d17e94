//! Re-admission against the in-test API, with admission in its write path and Knative's
//! controller making Revisions that become Ready or fail: every fixable app converges once and
//! through admission, at the pace set; the apps it must leave alone are never written; a
//! catalogue bump converges too; failures pause the wave; a conflict is retried. Leaders that
//! die or lag and API servers that cannot be reached are in [`super::readmit_faults`].

#![allow(clippy::unwrap_used)] // a test: a failed step should panic loudly

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::Method;
use ksvc_webhook::admission::Policy;
use ksvc_webhook::watch::readmit::wave::{Mode, Settings};
use serde_json::{Value, json};
use support::{FakeApi, Replica, poll};

use super::drift::{
    SHIPPER, admitted, before_the_webhook, catalogue, reasons, scrape, would_reject,
};

pub(crate) fn settings(interval_ms: u64) -> Settings {
    Settings {
        mode: Mode::All,
        interval: Duration::from_millis(interval_ms),
        ready_timeout: Duration::from_secs(20),
        ..Settings::default()
    }
}

pub(crate) fn leading(
    fake: &FakeApi,
    identity: &str,
    policy: Policy,
    readmit: Settings,
) -> (tokio::sync::watch::Sender<bool>, Replica) {
    let (tx, rx) = tokio::sync::watch::channel(true);
    let replica = Replica::start_readmitting(fake, identity, rx, policy, readmit);
    (tx, replica)
}

/// The stored (not dry-run) and dry-run PUTs on each KService, in order, with their times.
pub(crate) fn puts(fake: &FakeApi) -> BTreeMap<String, Vec<(bool, Instant)>> {
    let mut by_app: BTreeMap<String, Vec<(bool, Instant)>> = BTreeMap::new();
    for put in fake.requests_to(Method::PUT, "services") {
        let dry = put.query.get("dryRun").is_some_and(|v| v == "All");
        let name = put.name.unwrap_or_default();
        by_app.entry(name).or_default().push((dry, put.at));
    }
    by_app
}

/// The apps written for real, each with the times of its stored writes.
pub(crate) fn written(fake: &FakeApi) -> BTreeMap<String, Vec<Instant>> {
    puts(fake)
        .into_iter()
        .map(|(app, puts)| {
            (
                app,
                puts.iter()
                    .filter(|(dry, _)| !dry)
                    .map(|(_, at)| *at)
                    .collect::<Vec<_>>(),
            )
        })
        .filter(|(_, at)| !at.is_empty())
        .collect()
}

pub(crate) const CONVERGED: &str = "ksvc_webhook_readmit_total{result=\"converged\"}";

pub(crate) fn counter(text: &str, series: &str) -> i64 {
    let line = text.lines().find(|l| l.starts_with(series)).unwrap();
    line[series.len()..].trim().parse().unwrap()
}

fn events(fake: &FakeApi, reason: &str) -> usize {
    fake.requests_to(Method::POST, "events")
        .iter()
        .filter(|e| e.body["reason"] == reason)
        .count()
}

#[tokio::test]
async fn every_fixable_app_converges_once_through_admission_at_the_pace_set() {
    let fake = FakeApi::start().await;
    let policy = Policy::default();
    fake.admit_with(policy.clone());
    fake.put("namespaces", json!({"metadata": {"name": "apps"}}));
    fake.put(
        "namespaces",
        json!({"metadata": {"name": "opted", "labels": {"ksvc-webhook.flyte.org/inject": "disabled"}}}),
    );
    for app in ["fix-a", "fix-b", "fix-c"] {
        fake.put("services", before_the_webhook("apps", app));
    }
    let refused = would_reject("apps", "refused");
    let mut named = before_the_webhook("apps", "named");
    named["spec"]["template"]["metadata"] = json!({"name": "named-proj-dev-v1"});
    // Stopped as the webhook stops apps, so the loop has no stop edits to make.
    let mut stopped = before_the_webhook("apps", "stopped");
    stopped["metadata"]["labels"]["flyte.org/app-stopped"] = json!("true");
    stopped["metadata"]["labels"]["networking.knative.dev/visibility"] = json!("cluster-local");
    stopped["spec"]["template"]["metadata"] =
        json!({"annotations": {"autoscaling.knative.dev/min-scale": "0"}});
    let mut never = before_the_webhook("apps", "never");
    never["metadata"]["annotations"]["ksvc-webhook.flyte.org/readmit"] = json!("never");
    for app in [
        refused,
        named,
        stopped,
        never,
        before_the_webhook("opted", "elsewhere"),
    ] {
        fake.put("services", app);
    }
    let knative = fake.knative(Duration::from_millis(300));
    let interval = Duration::from_millis(150);
    let (_tx, replica) = leading(&fake, "r1", policy, settings(150));
    replica.wait_synced().await;

    let mut most_in_flight = 0;
    let mut states = std::collections::BTreeSet::new();
    let fixed = ["fix-a-proj-dev", "fix-b-proj-dev", "fix-c-proj-dev"];
    poll::until("every fixable app converged", poll::LIMIT, || {
        most_in_flight = most_in_flight.max(replica.metrics.readmit_in_flight.get());
        let records = replica.hub.list(&Default::default());
        states.extend(records.into_iter().filter_map(|r| r.drift.readmit));
        counter(
            &scrape(&replica),
            "ksvc_webhook_readmit_total{result=\"converged\"}",
        ) == 3
    })
    .await;
    assert!(
        most_in_flight <= 1,
        "{most_in_flight} apps unsettled at once"
    );
    assert!(
        states.contains("waiting-for-ready"),
        "/apps showed {states:?}"
    );

    // Each fixable app was written once, after its dry run, and through admission.
    let writes = written(&fake);
    assert_eq!(writes.keys().collect::<Vec<_>>(), fixed, "{writes:?}");
    assert!(writes.values().all(|at| at.len() == 1), "{writes:?}");
    for app in fixed {
        let stored = fake.get("services", "apps", app).unwrap();
        let annotations = &stored["metadata"]["annotations"];
        assert!(annotations["flyte.org/spec-sha"].is_string(), "{stored}");
        assert!(annotations["ksvc-webhook.flyte.org/readmitted"].is_string());
        let env = stored["spec"]["template"]["spec"]["containers"][0]["env"].to_string();
        assert!(env.contains("INTERNAL_APP_ENDPOINT_PATTERN"), "{env}");
        assert_eq!(reasons(&replica.app(app).unwrap()), []);
        let puts = &puts(&fake)[app];
        assert!(puts[0].0, "a dry run first: {puts:?}");
    }
    // Paced: a start only once the previous app's Revision was Ready, and at least the
    // interval after the previous start.
    let mut starts: Vec<(Instant, &str)> = fixed
        .iter()
        .map(|app| (puts(&fake)[*app][0].1, *app))
        .collect();
    starts.sort();
    let ready = knative.ready.lock().unwrap().clone();
    for pair in starts.windows(2) {
        let ((before, app), (next, _)) = (pair[0], pair[1]);
        assert!(next - before >= interval, "{starts:?}");
        let settled = ready[&format!("{app}-00002")];
        assert!(next >= settled, "started before {app} was Ready");
    }
    // Events are recorded off the loop, after the step that counted the app converged.
    poll::until("an Event on each", poll::LIMIT, || {
        events(&fake, "Readmitted") == 3
    })
    .await;
    assert_eq!(events(&fake, "ReadmitFailed"), 0);
}

#[tokio::test]
async fn a_catalogue_bump_converges_the_apps_with_the_old_sidecar() {
    let fake = FakeApi::start().await;
    let v1 = catalogue(SHIPPER);
    fake.admit_with(v1.clone());
    fake.put("namespaces", json!({"metadata": {"name": "apps"}}));
    for app in ["one", "two"] {
        fake.put("services", admitted(before_the_webhook("apps", app), &v1));
    }
    let _knative = fake.knative(Duration::from_millis(50));
    let (_tx, replica) = leading(&fake, "r1", v1, settings(50));
    replica.wait_synced().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        written(&fake).is_empty(),
        "nothing drifted, nothing written"
    );

    let v2 = catalogue(&SHIPPER.replace("3.1.9", "3.2.0"));
    fake.admit_with(v2.clone());
    replica.policy.store(Arc::new(v2));
    poll::until("both apps carry the new sidecar", poll::LIMIT, || {
        ["one", "two"].iter().all(|app| {
            let stored = fake
                .get("services", "apps", &format!("{app}-proj-dev"))
                .unwrap();
            stored["spec"]["template"]["spec"]["containers"]
                .to_string()
                .contains("fluent-bit:3.2.0")
                && stored["status"]["observedGeneration"] == stored["metadata"]["generation"]
        })
    })
    .await;
    assert!(written(&fake).values().all(|at| at.len() == 1));
}

#[tokio::test]
async fn failing_revisions_pause_the_wave_until_the_policy_changes() {
    let fake = FakeApi::start().await;
    let policy = Policy::default();
    fake.admit_with(policy.clone());
    // In four namespaces: one namespace's failures would pause only that one.
    for (i, app) in ["b1", "b2", "b3", "b4"].iter().enumerate() {
        let namespace = format!("team-{i}");
        fake.put("namespaces", json!({"metadata": {"name": namespace}}));
        let mut broken = before_the_webhook(&namespace, app);
        broken["spec"]["template"]["spec"]["containers"][0]["image"] =
            json!("registry.example/broken:1");
        fake.put("services", broken);
    }
    let _knative = fake.knative(Duration::from_millis(10));
    let (_tx, replica) = leading(&fake, "r1", policy, settings(20));
    replica.wait_synced().await;
    poll::until("the wave paused", poll::LIMIT, || {
        replica.metrics.readmit_paused.get() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let writes = written(&fake);
    assert_eq!(
        writes.len(),
        3,
        "nothing more after the third failure: {writes:?}"
    );
    assert_eq!(
        counter(
            &scrape(&replica),
            "ksvc_webhook_readmit_total{result=\"failed\"}"
        ),
        3
    );
    poll::until("an Event on each", poll::LIMIT, || {
        events(&fake, "ReadmitFailed") == 3
    })
    .await;

    replica.policy.store(Arc::new(Policy::default()));
    poll::until("the wave resumed", poll::LIMIT, || {
        written(&fake).len() == 4
    })
    .await;
}

#[tokio::test]
async fn a_conflict_is_retried_and_a_platform_writers_sha_survives() {
    let fake = FakeApi::start().await;
    let policy = Policy::default();
    fake.admit_with(policy.clone());
    fake.put("namespaces", json!({"metadata": {"name": "apps"}}));
    let mut platform = before_the_webhook("apps", "platform");
    platform["metadata"]["annotations"]["flyte.org/spec-sha"] = json!("platform00000sha");
    platform["metadata"]["annotations"]["serving.knative.dev/lastModifier"] =
        json!("system:serviceaccount:flyte:flyteadmin");
    fake.put("services", platform);
    fake.fail_puts("services", 1);
    let _knative = fake.knative(Duration::from_millis(10));
    let (_tx, replica) = leading(&fake, "r1", policy, settings(20));
    replica.wait_synced().await;
    poll::until("the app converged", poll::LIMIT, || {
        replica
            .app("platform-proj-dev")
            .is_some_and(|r| reasons(&r).is_empty())
            && counter(
                &scrape(&replica),
                "ksvc_webhook_readmit_total{result=\"converged\"}",
            ) == 1
    })
    .await;
    let stored: Value = fake.get("services", "apps", "platform-proj-dev").unwrap();
    assert_eq!(
        stored["metadata"]["annotations"]["flyte.org/spec-sha"],
        "platform00000sha"
    );
    assert_eq!(
        stored["metadata"]["annotations"]["fake/concurrent-writes"], "1",
        "raced once"
    );
    assert_eq!(
        written(&fake)["platform-proj-dev"].len(),
        2,
        "the lost race, then the write"
    );
}

#[tokio::test]
async fn labelled_acts_only_in_namespaces_labelled_for_it() {
    let fake = FakeApi::start().await;
    let policy = Policy::default();
    fake.admit_with(policy.clone());
    fake.put(
        "namespaces",
        json!({"metadata": {"name": "in", "labels": {"ksvc-webhook.flyte.org/readmit": "enabled"}}}),
    );
    fake.put("namespaces", json!({"metadata": {"name": "out"}}));
    for ns in ["in", "out"] {
        fake.put("services", before_the_webhook(ns, "app"));
    }
    let _knative = fake.knative(Duration::from_millis(10));
    let labelled = Settings {
        mode: Mode::Labelled,
        ..settings(20)
    };
    let (_tx, replica) = leading(&fake, "r1", policy, labelled);
    replica.wait_synced().await;
    poll::until(
        "the labelled namespace's app converged",
        poll::LIMIT,
        || {
            fake.get("services", "in", "app-proj-dev").unwrap()["metadata"]["annotations"]
            ["flyte.org/spec-sha"]
            .is_string()
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let out = fake.get("services", "out", "app-proj-dev").unwrap();
    assert!(
        out["metadata"]["annotations"]["flyte.org/spec-sha"].is_null(),
        "{out}"
    );
    assert_eq!(written(&fake).len(), 1);
}
