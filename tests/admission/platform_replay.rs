//! The Flyte platform's client calls, replayed in order as its `app_client.go` makes them, against
//! the in-test Kubernetes API with admission in the write path (the webhook's decision on KService
//! writes, the revision guard on Revision deletes) and the watch loop running.
#![allow(clippy::unwrap_used)]

use ksvc_webhook::admission::Policy;
use ksvc_webhook::admission::writers::Principals;
use ksvc_webhook::watch::status::Phase;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use support::{FakeApi, Replica, poll};

const PLATFORM: &str = "system:serviceaccount:flyte:flyteadmin";
const NS: &str = "apps";
const NAME: &str = "myapp-proj-dev";
const PLATFORM_SHA: &str = "0123456789abcdef";

/// A client acting as the platform's controller (kube impersonation headers).
fn platform_client(fake: &FakeApi) -> Api<DynamicObject> {
    let uri: axum::http::Uri = format!("http://{}", fake.addr).parse().unwrap();
    let mut config = kube::Config::new(uri);
    config.auth_info.impersonate = Some(PLATFORM.into());
    let client = kube::Client::try_from(config).unwrap();
    let gvk = GroupVersionKind::gvk("serving.knative.dev", "v1", "Service");
    Api::namespaced_with(
        client,
        NS,
        &ApiResource::from_gvk_with_plural(&gvk, "services"),
    )
}

fn revisions(fake: &FakeApi) -> Api<DynamicObject> {
    let uri: axum::http::Uri = format!("http://{}", fake.addr).parse().unwrap();
    let mut config = kube::Config::new(uri);
    config.auth_info.impersonate = Some(PLATFORM.into());
    let client = kube::Client::try_from(config).unwrap();
    let gvk = GroupVersionKind::gvk("serving.knative.dev", "v1", "Revision");
    Api::namespaced_with(
        client,
        NS,
        &ApiResource::from_gvk_with_plural(&gvk, "revisions"),
    )
}

/// The KService the platform's `buildKService` makes, with its own SHA.
fn built() -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"name": NAME, "namespace": NS,
            "labels": {"flyte.org/project": "proj", "flyte.org/domain": "dev",
                       "flyte.org/app-name": "myapp", "flyte.org/app-managed": "true"},
            "annotations": {"flyte.org/spec-sha": PLATFORM_SHA, "flyte.org/app-id": "proj/dev/myapp"}},
        "spec": {"template": {
            "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1",
                                         "autoscaling.knative.dev/max-scale": "2"}},
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                                     "ports": [{"name": "http1", "containerPort": 8080}]}],
                     "enableServiceLinks": false}}}
    })
}

/// Knative's side: a revision, its pods and the route's routing-state label.
fn revision(name: &str, replicas: i32, routed: bool) -> Value {
    let state = if routed { "active" } else { "reserve" };
    json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Revision",
        "metadata": {"name": name, "namespace": NS,
                     "labels": {"serving.knative.dev/service": NAME,
                                "serving.knative.dev/routingState": state}},
        "status": {"actualReplicas": replicas,
                   "conditions": [{"type": "Ready", "status": "True"},
                                  {"type": "Active", "status": if replicas > 0 { "True" } else { "False" }}]}
    })
}

/// Knative reports the Service: observed, ready, traffic on `serving`, latest `latest`.
fn knative_reports(fake: &FakeApi, serving: &str, latest: &str) {
    let mut svc = fake.get("services", NS, NAME).unwrap();
    svc["status"] = json!({
        "observedGeneration": svc["metadata"]["generation"],
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T00:00:00Z"}],
        "latestCreatedRevisionName": latest, "latestReadyRevisionName": serving,
        "url": format!("http://{NAME}.{NS}.svc.cluster.local"),
        "traffic": [{"revisionName": serving, "percent": 100, "latestRevision": serving == latest}]
    });
    fake.put("services", svc);
}

fn template_meta(obj: &Value) -> (Value, Value) {
    (
        obj["spec"]["template"]["metadata"]["annotations"].clone(),
        obj["metadata"]["labels"].clone(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_platforms_create_deploy_stop_and_start_agree_with_the_webhook() {
    let fake = FakeApi::start().await;
    fake.admit_with(Policy {
        platform_writers: Principals::parse(&[PLATFORM]).unwrap(),
        ..Policy::default()
    });
    let replica = Replica::start(&fake, "replica-a", true);
    replica.wait_synced().await;
    let api = platform_client(&fake);

    // Deploy of a new app: Get (NotFound), Create with its own SHA.
    assert!(api.get_opt(NAME).await.unwrap().is_none());
    let obj: DynamicObject = serde_json::from_value(built()).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
    fake.put("revisions", revision("myapp-proj-dev-00001", 1, true));
    knative_reports(&fake, "myapp-proj-dev-00001", "myapp-proj-dev-00001");

    // Deploy again, unchanged: the stored SHA is the platform's, so no Update is needed.
    let existing = api.get(NAME).await.unwrap();
    assert_eq!(
        existing.metadata.annotations.as_ref().unwrap()["flyte.org/spec-sha"],
        PLATFORM_SHA
    );
    let running = fake.get("services", NS, NAME).unwrap();
    assert_eq!(
        running["metadata"]["labels"]["flyte.org/app-managed"],
        "true"
    );

    // Stop: one merge patch, then at once a delete of the latest ready revision.
    let stop = json!({"metadata": {"labels": {"flyte.org/app-stopped": "true",
                                              "networking.knative.dev/visibility": "cluster-local"}},
                      "spec": {"template": {"metadata": {"annotations": {
                          "autoscaling.knative.dev/min-scale": "0",
                          "autoscaling.knative.dev/initial-scale": "0"}}}}});
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(&stop))
        .await
        .unwrap();
    // Knative rolls a new revision for the stopped template; the route still serves the old one.
    fake.put("revisions", revision("myapp-proj-dev-00002", 0, false));
    knative_reports(&fake, "myapp-proj-dev-00001", "myapp-proj-dev-00002");
    let current = api.get(NAME).await.unwrap();
    let latest_ready = current.data["status"]["latestReadyRevisionName"]
        .as_str()
        .unwrap()
        .to_owned();
    let early = revisions(&fake)
        .delete(&latest_ready, &DeleteParams::default())
        .await;
    // The platform ignores the error; the guard refused it, naming the revision.
    assert!(early.is_err(), "the serving revision must not go yet");
    let refused = fake.refused_deletes();
    assert_eq!(refused.len(), 1);
    assert!(refused[0].contains(&latest_ready), "{}", refused[0]);
    assert!(
        refused[0].contains("once traffic has left it"),
        "{}",
        refused[0]
    );
    assert!(fake.get("revisions", NS, &latest_ready).is_some());

    // Knative moves traffic to the stopped revision: the watch loop finishes the teardown.
    fake.put("revisions", revision("myapp-proj-dev-00001", 1, false));
    fake.put("revisions", revision("myapp-proj-dev-00002", 0, true));
    knative_reports(&fake, "myapp-proj-dev-00002", "myapp-proj-dev-00002");
    poll::until("the old revision is deleted", poll::LIMIT, || {
        fake.get("revisions", NS, "myapp-proj-dev-00001").is_none()
    })
    .await;
    poll::until("the app is STOPPED", poll::LIMIT, || {
        replica
            .app(NAME)
            .is_some_and(|a| a.status.phase == Phase::Stopped)
    })
    .await;
    assert!(
        fake.deleted_in_traffic().is_empty(),
        "{:?}",
        fake.deleted_in_traffic()
    );
    let stopped = fake.get("services", NS, NAME).unwrap();
    assert_eq!(
        stopped["metadata"]["annotations"]["flyte.org/spec-sha"],
        PLATFORM_SHA
    );
    assert!(
        stopped["spec"]["template"]["metadata"]["annotations"]
            .get("autoscaling.knative.dev/initial-scale")
            .is_none(),
        "Knative would refuse initial-scale 0 without allow-zero-initial-scale"
    );

    // Start: the stop label removed. The running template and labels come back exactly.
    let start = json!({"metadata": {"labels": {"flyte.org/app-stopped": null}}});
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(&start))
        .await
        .unwrap();
    let started = fake.get("services", NS, NAME).unwrap();
    assert_eq!(template_meta(&started), template_meta(&running));
    assert_eq!(
        started["metadata"]["annotations"]["flyte.org/spec-sha"],
        PLATFORM_SHA
    );
    assert!(
        started["metadata"]["annotations"]
            .get("flyte.org/stop-restore")
            .is_none()
    );
}
