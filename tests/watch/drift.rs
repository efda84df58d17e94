//! The drift report in the watch loop, against the in-test API: KServices that were there before
//! the webhook are reported with the right reasons on `/apps` and on the gauge, a catalogue
//! bump and a namespace's opt-out are seen within one evaluation, and reporting writes nothing.

#![allow(clippy::unwrap_used)] // a test: a failed step should panic loudly

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use ksvc_webhook::admission::drift::Reason;
use ksvc_webhook::admission::sidecars::Catalogue;
use ksvc_webhook::admission::{Policy, Request, decide};
use ksvc_webhook::watch::hub::AppRecord;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use support::status_api::{self, get};
use support::{FakeApi, Replica, poll};

pub(crate) const SHIPPER: &str = "default: [log-shipper]\ntemplates:\n  log-shipper:\n    containers:\n      - name: log-shipper\n        image: fluent/fluent-bit:3.1.9\n";

pub(crate) fn catalogue(text: &str) -> Policy {
    Policy {
        sidecars: Arc::new(Catalogue::parse(text).unwrap()),
        ..Policy::default()
    }
}

/// A managed app `app` of proj/dev in `ns`, as someone applied it before the webhook existed.
pub(crate) fn before_the_webhook(ns: &str, app: &str) -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {
            "name": format!("{app}-proj-dev"), "namespace": ns, "generation": 1,
            "labels": {"flyte.org/project": "proj", "flyte.org/domain": "dev", "flyte.org/app-name": app},
            "annotations": {"serving.knative.dev/creator": "alice", "serving.knative.dev/lastModifier": "alice"}
        },
        "spec": {"template": {"spec": {"containers": [{
            "name": "user-container", "image": "registry.example/app:1",
            "ports": [{"containerPort": 8080}], "env": [{"name": "LOG_LEVEL", "value": "info"}]
        }]}}},
        "status": {"observedGeneration": 1, "latestCreatedRevisionName": format!("{app}-proj-dev-00001"),
                   "latestReadyRevisionName": format!("{app}-proj-dev-00001"),
                   "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// A managed app admission refuses today: its identity lost its domain, and it carries the
/// managed annotation of an older release.
pub(crate) fn would_reject(ns: &str, app: &str) -> Value {
    let mut refused = before_the_webhook(ns, app);
    let labels = &mut refused["metadata"]["labels"];
    labels.as_object_mut().unwrap().remove("flyte.org/domain");
    labels["flyte.org/app-managed"] = json!("true");
    refused
}

/// `object` as admission writes it under `policy`.
pub(crate) fn admitted(object: Value, policy: &Policy) -> Value {
    let ns = object["metadata"]["namespace"].as_str().unwrap().to_owned();
    let decision = decide(Request::kservice("u", "CREATE", &ns, object, None), policy);
    assert!(decision.allowed, "{}", decision.message());
    decision.object_json().unwrap()
}

pub(crate) fn reasons(record: &AppRecord) -> Vec<Reason> {
    record.drift.drift.iter().map(|f| f.reason).collect()
}

pub(crate) fn scrape(replica: &Replica) -> String {
    let mut registry = Registry::default();
    replica.metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text
}

fn gauge(text: &str, reason: Reason) -> i64 {
    let series = format!("ksvc_webhook_drift_apps{{reason=\"{}\"}} ", reason.as_str());
    let line = text.lines().find(|l| l.starts_with(&series)).unwrap();
    line[series.len()..].parse().unwrap()
}

fn last_evaluation(text: &str) -> f64 {
    let series = "ksvc_webhook_drift_last_evaluation_timestamp_seconds ";
    let line = text.lines().find(|l| l.starts_with(series)).unwrap();
    line[series.len()..].parse().unwrap()
}

fn no_service_writes(fake: &FakeApi) {
    for method in [Method::PUT, Method::PATCH, Method::POST, Method::DELETE] {
        assert!(
            fake.requests_to(method.clone(), "services").is_empty(),
            "reporting wrote a KService ({method})"
        );
    }
}

#[tokio::test]
async fn apps_there_before_the_webhook_are_reported_on_apps_and_the_gauge_and_nothing_is_written() {
    let fake = status_api::fake().await;
    let policy = catalogue(SHIPPER);
    fake.put("namespaces", json!({"metadata": {"name": "apps"}}));
    fake.put(
        "namespaces",
        json!({"metadata": {"name": "opted", "labels": {"ksvc-webhook.flyte.org/inject": "disabled"}}}),
    );
    fake.put("services", before_the_webhook("apps", "old"));
    fake.put(
        "services",
        admitted(before_the_webhook("apps", "current"), &policy),
    );
    let refused = would_reject("apps", "refused");
    fake.put("services", refused);
    let mut named = admitted(before_the_webhook("apps", "named"), &Policy::default());
    named["spec"]["template"]["metadata"] = json!({"name": "named-proj-dev-v1"});
    fake.put("services", named);
    fake.put("services", before_the_webhook("opted", "elsewhere"));
    let mut plain = before_the_webhook("apps", "plain");
    plain["metadata"]["labels"] = json!({});
    fake.put("services", plain);

    let (_tx, leading) = tokio::sync::watch::channel(true);
    let replica = Replica::start_with_policy(&fake, "r1", leading, policy);
    replica.wait_synced().await;

    let old = replica.app("old-proj-dev").unwrap();
    assert_eq!(
        reasons(&old),
        [
            Reason::MissingSpecSha,
            Reason::MissingEndpointEnv,
            Reason::StaleSidecars,
            Reason::Other
        ],
        "{old:#?}"
    );
    assert!(old.drift.drift_new_revision);
    assert_eq!(reasons(&replica.app("current-proj-dev").unwrap()), []);
    let refused = replica.app("refused-proj-dev").unwrap();
    assert_eq!(reasons(&refused), [Reason::WouldReject]);
    assert!(refused.drift.drift[0].detail.contains("flyte.org/domain"));
    assert_eq!(
        reasons(&replica.app("named-proj-dev").unwrap()),
        [Reason::StaleSidecars, Reason::BlockedRevisionName]
    );
    let elsewhere = replica.hub.get(&ksvc_webhook::watch::hub::AppKey {
        namespace: "opted".into(),
        name: "elsewhere-proj-dev".into(),
    });
    assert_eq!(reasons(&elsewhere.unwrap()), [Reason::Excluded]);
    assert!(replica.app("plain-proj-dev").is_none(), "not a managed app");

    // The gauge counts every KService in the cache, managed or not.
    let text = scrape(&replica);
    let expected = [
        (Reason::MissingSpecSha, 2),
        (Reason::MissingEndpointEnv, 2),
        (Reason::StaleEndpointEnv, 0),
        (Reason::StaleSidecars, 3),
        (Reason::ManagedAnnotation, 0),
        (Reason::Other, 1),
        (Reason::WouldReject, 1),
        (Reason::Excluded, 1),
        (Reason::BlockedRevisionName, 1),
    ];
    for (reason, count) in expected {
        assert_eq!(gauge(&text, reason), count, "{reason}\n{text}");
    }
    assert!(last_evaluation(&text) > 1.7e9, "{text}");

    // `/apps` serves the report under its authorization: who may read the namespace sees it.
    let s = status_api::setup(fake.client(), std::time::Duration::from_secs(10), (8, 8));
    s.hub.upsert(old);
    let (code, body) = get(&s.app, "/apps/apps/old-proj-dev", Some("t-admin")).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["drift"][0]["reason"], "missing-spec-sha", "{body}");
    assert_eq!(body["drift_new_revision"], true, "{body}");
    let (code, _) = get(&s.app, "/apps/apps/old-proj-dev", Some("t-alice")).await;
    assert_eq!(code, StatusCode::FORBIDDEN);

    no_service_writes(&fake);
}

#[tokio::test]
async fn a_catalogue_bump_and_an_opt_out_are_seen_within_one_evaluation() {
    let fake = FakeApi::start().await;
    let v1 = catalogue(SHIPPER);
    fake.put("namespaces", json!({"metadata": {"name": "apps"}}));
    fake.put(
        "services",
        admitted(before_the_webhook("apps", "shipped"), &v1),
    );
    let mut without = before_the_webhook("apps", "without");
    without["metadata"]["annotations"]["sidecar.flyte.org/inject"] = json!("none");
    fake.put("services", admitted(without, &v1));
    let (_tx, leading) = tokio::sync::watch::channel(true);
    let replica = Replica::start_with_policy(&fake, "r1", leading, v1);
    replica.wait_synced().await;
    for app in ["shipped-proj-dev", "without-proj-dev"] {
        assert_eq!(reasons(&replica.app(app).unwrap()), [], "{app}");
    }
    let first = last_evaluation(&scrape(&replica));

    replica
        .policy
        .store(Arc::new(catalogue(&SHIPPER.replace("3.1.9", "3.2.0"))));
    poll::until("the bumped sidecar is stale", poll::LIMIT, || {
        reasons(&replica.app("shipped-proj-dev").unwrap()) == [Reason::StaleSidecars]
    })
    .await;
    let shipped = replica.app("shipped-proj-dev").unwrap();
    assert_eq!(shipped.drift.drift[0].detail, "upgrade log-shipper");
    assert!(shipped.drift.drift_new_revision);
    assert_eq!(reasons(&replica.app("without-proj-dev").unwrap()), []);
    let text = scrape(&replica);
    assert_eq!(gauge(&text, Reason::StaleSidecars), 1, "{text}");
    assert!(last_evaluation(&text) >= first);

    fake.put(
        "namespaces",
        json!({"metadata": {"name": "apps", "labels": {"ksvc-webhook.flyte.org/inject": "disabled"}}}),
    );
    poll::until(
        "the opted-out namespace's apps are excluded",
        poll::LIMIT,
        || reasons(&replica.app("shipped-proj-dev").unwrap()) == [Reason::Excluded],
    )
    .await;
    assert_eq!(gauge(&scrape(&replica), Reason::Excluded), 2);
    no_service_writes(&fake);
}
