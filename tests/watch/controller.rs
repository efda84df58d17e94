//! The watch loop against a Kubernetes API the tests control (tests/support/fake_api.rs).
// Test helpers outside #[test] fns panic on a failed setup step, as the tests would.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use axum::http::Method;
use ksvc_webhook::cluster::lease::{self, LeaseOptions};
use ksvc_webhook::watch::status::Phase;
use serde_json::json;
use support::{FakeApi, Replica, ksvc, poll, revision};
use tokio::sync::watch;

/// The stop scenario right after the webhook's edits: Knative rolled app-00002 (min-scale 0) but
/// the route still sends everything to app-00001, which still has pods.
fn stopped_before_traffic_moves(fake: &FakeApi, no_gc: bool) {
    let mut svc = ksvc("app", true, true, 2, &["app-00001"], "app-00002");
    svc["status"]["latestReadyRevisionName"] = json!("app-00001");
    fake.put("services", svc);
    fake.put("revisions", revision("app", "app-00001", 2, no_gc));
    fake.put("revisions", revision("app", "app-00002", 0, false));
}

/// Knative finishes the rollout: traffic moves to app-00002.
fn traffic_moves(fake: &FakeApi) {
    fake.put(
        "services",
        ksvc("app", true, true, 2, &["app-00002"], "app-00002"),
    );
}

/// Every call the fake recorded is declared in `watch::API_CALLS` (what the RBAC test checks).
fn assert_calls_declared(fake: &FakeApi) {
    for r in fake.requests() {
        let group = match r.resource.as_str() {
            "services" | "revisions" => "serving.knative.dev",
            "leases" => "coordination.k8s.io",
            "events" => "events.k8s.io",
            "namespaces" => "",
            other => panic!("unexpected resource {other}"),
        };
        let verb = match (&r.method, &r.name) {
            (&Method::GET, Some(_)) => "get",
            (&Method::GET, None) if r.query.contains_key("watch") => "watch",
            (&Method::GET, None) => "list",
            (&Method::PUT, _) => "update",
            (&Method::POST, _) => "create",
            (&Method::PATCH, _) => "patch",
            (&Method::DELETE, _) => "delete",
            (m, _) => panic!("unexpected method {m}"),
        };
        // The loop's calls, and the election's that the test runs beside it.
        let declared = [
            ksvc_webhook::watch::API_CALLS,
            ksvc_webhook::cluster::election::API_CALLS,
        ];
        assert!(
            declared
                .iter()
                .copied()
                .flatten()
                .any(|c| c.group == group && c.resource == r.resource && c.verb == verb),
            "{verb} {group}/{} is not in API_CALLS",
            r.resource
        );
    }
}

/// A request that lists: a page, or a watch that starts with every object (a streaming list).
fn lists(r: &&support::fake_api::Request) -> bool {
    !r.query.contains_key("watch")
        || r.query
            .get("sendInitialEvents")
            .is_some_and(|s| s == "true")
}

fn event_reasons(fake: &FakeApi) -> Vec<String> {
    fake.all("events")
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_waits_for_traffic_to_move_then_deletes_the_old_revision() {
    let fake = FakeApi::start().await;
    stopped_before_traffic_moves(&fake, false);
    let replica = Replica::start(&fake, "replica-a", true);
    replica.wait_synced().await;
    replica.settle(&fake, "zz-marker-1").await;

    // Traffic is still on app-00001: it must survive, and the app is STOPPING, not STOPPED.
    assert!(fake.get("revisions", "apps", "app-00001").is_some());
    assert!(fake.requests_to(Method::DELETE, "revisions").is_empty());
    let status = replica.app("app").unwrap().status;
    assert_eq!(status.phase, Phase::Stopping);
    assert_eq!(
        status.message,
        "Stopping: traffic still goes to revision app-00001"
    );

    traffic_moves(&fake);
    poll::until("app-00001 is deleted", poll::LIMIT, || {
        fake.get("revisions", "apps", "app-00001").is_none()
    })
    .await;
    let deletes = fake.requests_to(Method::DELETE, "revisions");
    assert_eq!(deletes.len(), 1);
    assert_eq!(deletes[0].name.as_deref(), Some("app-00001"));
    assert!(
        deletes[0].body["preconditions"]["uid"].is_string(),
        "delete carries a uid precondition"
    );
    assert!(
        fake.get("revisions", "apps", "app-00002").is_some(),
        "the revision in traffic stays"
    );

    poll::until("the app is STOPPED", poll::LIMIT, || {
        replica
            .app("app")
            .is_some_and(|a| a.status.phase == Phase::Stopped)
    })
    .await;
    poll::until("events are recorded", poll::LIMIT, || {
        let reasons = event_reasons(&fake);
        reasons.contains(&"RevisionDeleted".to_owned())
            && reasons.contains(&"AppStopped".to_owned())
    })
    .await;
    let event = fake
        .all("events")
        .into_iter()
        .find(|e| e["reason"] == "RevisionDeleted")
        .unwrap();
    assert_eq!(event["regarding"]["kind"], "Service");
    assert_eq!(event["regarding"]["name"], "app");
    assert_eq!(event["reportingController"], "ksvc-webhook");
    assert_calls_declared(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_delete_backs_off_and_is_retried() {
    let fake = FakeApi::start().await;
    stopped_before_traffic_moves(&fake, false);
    traffic_moves(&fake);
    fake.fail_requests(Method::DELETE, "revisions", 2);
    let replica = Replica::start(&fake, "replica-a", true);
    poll::until("app-00001 is deleted", poll::LIMIT, || {
        fake.get("revisions", "apps", "app-00001").is_none()
    })
    .await;
    assert_eq!(
        fake.requests_to(Method::DELETE, "revisions").len(),
        3,
        "two failures, then success"
    );
    let mut text = String::new();
    let mut registry = prometheus_client::registry::Registry::default();
    replica.metrics.register(&mut registry);
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(r#"ksvc_webhook_watch_errors_total{kind="write"} 2"#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_gc_revisions_are_never_deleted() {
    let fake = FakeApi::start().await;
    stopped_before_traffic_moves(&fake, true);
    let replica = Replica::start(&fake, "replica-a", true);
    replica.wait_synced().await;
    traffic_moves(&fake);
    poll::until("the loop saw the traffic move", poll::LIMIT, || {
        replica
            .app("app")
            .is_some_and(|a| a.status.message == "Stopping: revision app-00001 still has pods")
    })
    .await;
    replica.settle(&fake, "zz-marker-1").await;
    assert!(fake.get("revisions", "apps", "app-00001").is_some());
    assert!(fake.requests_to(Method::DELETE, "revisions").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_write_is_retried_on_a_fresh_read_and_succeeds() {
    let fake = FakeApi::start().await;
    // The webhook was bypassed: the stop label is there, the stop edits are not.
    fake.put(
        "services",
        ksvc("app", true, false, 1, &["app-00001"], "app-00001"),
    );
    fake.fail_puts("services", 2);
    let replica = Replica::start(&fake, "replica-a", true);
    poll::until("the stop edits are applied", poll::LIMIT, || {
        fake.get("services", "apps", "app").is_some_and(|s| {
            s["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"]
                == "0"
        })
    })
    .await;
    let svc = fake.get("services", "apps", "app").unwrap();
    assert_eq!(
        svc["metadata"]["labels"]["networking.knative.dev/visibility"],
        "cluster-local"
    );
    // The concurrent writer's change and the user's fields survived: each retry re-read the object.
    assert_eq!(
        svc["metadata"]["annotations"]["fake/concurrent-writes"],
        "2"
    );
    assert_eq!(svc["metadata"]["annotations"]["user/keep"], "me");
    let puts = fake.requests_to(Method::PUT, "services");
    assert_eq!(puts.len(), 3, "two conflicts, then success");
    assert!(
        puts.iter()
            .all(|p| p.body["metadata"]["resourceVersion"].is_string()),
        "every PUT is conditional"
    );
    drop(replica);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_watch_resumes_from_its_resource_version() {
    let fake = FakeApi::start().await;
    fake.put(
        "services",
        ksvc("first", false, false, 1, &["first-00001"], "first-00001"),
    );
    let replica = Replica::start(&fake, "replica-a", false);
    replica.wait_synced().await;
    poll::until("the first app is served", poll::LIMIT, || {
        replica.app("first").is_some()
    })
    .await;
    let watches = || {
        fake.requests_to(Method::GET, "services")
            .iter()
            .filter(|r| r.query.contains_key("watch"))
            .count()
    };
    poll::until("the services watch is open", poll::LIMIT, || watches() >= 1).await;
    let watches_before = watches();

    // The watch breaks and cannot reconnect for a while; meanwhile an app is created.
    fake.block_watches(true);
    fake.disconnect_watches();
    fake.put(
        "services",
        ksvc("late", false, false, 1, &["late-00001"], "late-00001"),
    );
    fake.block_watches(false);
    poll::until(
        "the app created during the break is served",
        poll::LIMIT,
        || replica.app("late").is_some(),
    )
    .await;

    let gets = fake.requests_to(Method::GET, "services");
    let (lists, resumed): (Vec<_>, Vec<_>) = gets.iter().partition(lists);
    assert!(watches() > watches_before, "the watch was re-established");
    assert_eq!(
        lists.len(),
        1,
        "resumed from the last resourceVersion instead of relisting"
    );
    let resumed_at: u64 = resumed.last().unwrap().query["resourceVersion"]
        .parse()
        .unwrap();
    assert!(resumed_at > 0);
    assert_eq!(
        replica.app("first").unwrap().status.phase,
        Phase::Active,
        "state kept across the break"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_break_relists_and_forgets_apps_deleted_meanwhile() {
    let fake = FakeApi::start().await;
    fake.put(
        "services",
        ksvc("kept", false, false, 1, &["kept-00001"], "kept-00001"),
    );
    fake.put(
        "services",
        ksvc("gone", false, false, 1, &["gone-00001"], "gone-00001"),
    );
    let replica = Replica::start(&fake, "replica-a", false);
    replica.wait_synced().await;
    poll::until("both apps are served", poll::LIMIT, || {
        replica.app("kept").is_some() && replica.app("gone").is_some()
    })
    .await;
    let watching = || {
        fake.requests_to(Method::GET, "services")
            .iter()
            .any(|r| r.query.contains_key("watch"))
    };
    poll::until("the services watch is open", poll::LIMIT, watching).await;

    // The watch breaks; while it cannot reconnect, an app is deleted and history is compacted.
    fake.block_watches(true);
    fake.disconnect_watches();
    fake.remove("services", "apps", "gone");
    fake.compact();
    fake.block_watches(false);

    poll::until(
        "the deleted app is forgotten after the relist",
        poll::LIMIT,
        || replica.app("gone").is_none(),
    )
    .await;
    assert!(replica.app("kept").is_some());
    let lists = fake
        .requests_to(Method::GET, "services")
        .iter()
        .filter(lists)
        .count();
    assert_eq!(lists, 2, "410 Gone forced exactly one relist");
}

fn lease_options(identity: &str) -> LeaseOptions {
    LeaseOptions {
        namespace: "system".into(),
        name: "ksvc-webhook-watch".into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(30),
        renew_every: Duration::from_millis(50),
        retry_every: Duration::from_millis(50),
        api_timeout: Duration::from_secs(5),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_and_every_replica_serves_status() {
    let fake = FakeApi::start().await;
    let now = k8s_openapi::jiff::Timestamp::now();
    let held = |renewed: String| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "ksvc-webhook-watch", "namespace": "system"},
               "spec": {"holderIdentity": "old-pod", "leaseDurationSeconds": 3600, "renewTime": renewed}})
    };
    fake.put("leases", held(now.to_string()));
    fake.put(
        "services",
        ksvc("app", true, false, 1, &["app-00001"], "app-00001"),
    );

    let mut replicas = Vec::new();
    for id in ["replica-a", "replica-b"] {
        let (tx, rx) = watch::channel(false);
        let stop = watch::channel(false).1;
        tokio::spawn(lease::run_elector(
            fake.client(),
            lease_options(id),
            tx,
            Default::default(),
            stop,
        ));
        replicas.push(Replica::start_with(&fake, id, rx));
    }
    for r in &replicas {
        r.wait_synced().await;
        r.settle(&fake, "zz-marker-1").await;
        assert_eq!(
            r.app("app").unwrap().status.phase,
            Phase::Stopping,
            "every replica serves status"
        );
    }
    // A live lease held by another pod: nobody here leads, nobody writes.
    assert!(replicas.iter().all(|r| !*r.leader.borrow()));
    assert!(fake.requests_to(Method::PUT, "services").is_empty());
    assert!(fake.requests_to(Method::POST, "events").is_empty());

    // The old holder's lease expires: exactly one replica takes over and finishes the stop.
    fake.put("leases", held("2020-01-01T00:00:00Z".to_owned()));
    poll::until(
        "the stop edits are applied by the new leader",
        poll::LIMIT,
        || {
            fake.get("services", "apps", "app").is_some_and(|s| {
                s["metadata"]["labels"]["networking.knative.dev/visibility"] == "cluster-local"
            })
        },
    )
    .await;
    let leaders: Vec<bool> = replicas.iter().map(|r| *r.leader.borrow()).collect();
    assert_eq!(leaders.iter().filter(|l| **l).count(), 1, "{leaders:?}");
    let holder =
        fake.get("leases", "system", "ksvc-webhook-watch").unwrap()["spec"]["holderIdentity"]
            .clone();
    let expected = if leaders[0] { "replica-a" } else { "replica-b" };
    assert_eq!(holder, expected);
    assert_eq!(fake.requests_to(Method::PUT, "services").len(), 1);
    assert_calls_declared(&fake);
}

/// Read one NDJSON line from a streaming `/apps/watch` body.
async fn next_line(body: &mut axum::body::Body, buf: &mut String) -> serde_json::Value {
    use http_body_util::BodyExt;
    loop {
        if let Some((line, rest)) = buf.split_once('\n') {
            let event = serde_json::from_str(line).unwrap();
            *buf = rest.to_owned();
            return event;
        }
        let frame = body.frame().await.unwrap().unwrap();
        buf.push_str(std::str::from_utf8(frame.data_ref().unwrap()).unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_write_for_one_app_does_not_hold_back_another_apps_status() {
    use tower::ServiceExt;
    let fake = FakeApi::start().await;
    // `slow` was stopped bypassing the webhook: the leader must apply the stop edits, and every
    // write to it takes the API 5 s.
    fake.put(
        "services",
        ksvc("slow", true, false, 1, &["slow-00001"], "slow-00001"),
    );
    fake.put(
        "services",
        ksvc("fast", false, false, 1, &["fast-00001"], "fast-00001"),
    );
    fake.delay_writes("services", "apps", "slow", Duration::from_secs(5));
    let replica = Replica::start(&fake, "replica-a", true);
    replica.wait_synced().await;
    poll::until("the write to slow is held by the API", poll::LIMIT, || {
        !fake.requests_to(Method::PUT, "services").is_empty()
    })
    .await;

    let app = ksvc_webhook::apps::http::router_with_buffer(
        replica.hub.clone(),
        replica.synced.clone(),
        256,
    );
    let request = axum::http::Request::get("/apps/watch?name=fast")
        .body(axum::body::Body::empty())
        .unwrap();
    let mut body = app.oneshot(request).await.unwrap().into_body();
    let mut buf = String::new();
    let first = next_line(&mut body, &mut buf).await;
    assert_eq!(
        (&first["type"], &first["app"]["status"]["phase"]),
        (&json!("CREATED"), &json!("ACTIVE"))
    );

    // Knative reports `fast` failing while the write to `slow` is still held.
    let mut failing = ksvc("fast", false, false, 1, &["fast-00001"], "fast-00001");
    failing["status"]["conditions"][0] = json!({"type": "Ready", "status": "False",
        "reason": "RevisionFailed", "message": "image pull failed",
        "lastTransitionTime": "2026-11-30T00:00:00Z"});
    fake.put("services", failing);
    let update = tokio::time::timeout(Duration::from_secs(1), next_line(&mut body, &mut buf))
        .await
        .expect("fast's status change reached /apps/watch within 1 s");
    assert_eq!(update["type"], "UPDATED");
    assert_eq!(update["app"]["status"]["phase"], "FAILED");
    let slow = fake.get("services", "apps", "slow").unwrap();
    assert!(
        slow["metadata"]["labels"]["networking.knative.dev/visibility"].is_null(),
        "the write to slow was still held when fast's change was served"
    );

    // The held write still lands, once.
    poll::until("slow's stop edits land", poll::LIMIT, || {
        fake.get("services", "apps", "slow").is_some_and(|s| {
            s["metadata"]["labels"]["networking.knative.dev/visibility"] == "cluster-local"
        })
    })
    .await;
    assert_eq!(fake.requests_to(Method::PUT, "services").len(), 1);
}
