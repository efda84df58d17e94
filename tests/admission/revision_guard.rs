//! The revision guard through the real route: the server over TLS, wired as `serve`
//! wires it to a real watch loop whose cache a fake API server fills. Each owner state the cache
//! knows (present and routing to the revision or not, stopped, being deleted, gone) and the one
//! it cannot know, the always-allowed deleters and their flag, the wording per case and the
//! administrator's override, all as AdmissionReview v1 bodies kube-apiserver would send. The
//! admission role's Service projection (`serve --role admission`) decides every owner state as
//! the cache does.

#![allow(clippy::unwrap_used)] // test helpers may panic

// The server harness of tests/server: a server on 127.0.0.1 with generated certificates and a
// client that connects as kube-apiserver does.
#[allow(dead_code)]
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use clap::Parser as _;
use hyper::StatusCode;
use ksvc_webhook::admission::{Policy, guard};
use ksvc_webhook::cli::{Cli, Command};
use ksvc_webhook::watch::WatchHandle;
use serde_json::{Value, json};
use support::harness;
use support::watched::{client_args, election, watch_args};
use support::{FakeApi, ksvc, poll};

const PLATFORM: &str = "system:serviceaccount:flyte:flyteadmin";

/// A fake cluster with four apps in `apps`, a watch loop over it, and the server reading its
/// cache as `serve` wires it.
struct Cluster {
    _fake: FakeApi,
    _dir: tempfile::TempDir,
    watch: WatchHandle,
    /// The admission role's projection, when the server reads it instead of the cache.
    projection: Option<ksvc_webhook::watch::projection::Handle>,
    server: harness::Running,
    /// The live policy of the server.
    policy: Arc<ArcSwap<Policy>>,
}

async fn cluster() -> Cluster {
    cluster_read_through(false).await
}

/// The cluster, with the server reading the admission role's projection when `projection`.
async fn cluster_read_through(projection: bool) -> Cluster {
    let fake = FakeApi::start().await;
    let mut live = ksvc("live", false, false, 1, &["live-00002"], "live-00002");
    live["status"]["traffic"]
        .as_array_mut()
        .unwrap()
        .push(json!({"revisionName": "live-00001", "percent": 0, "tag": "canary"}));
    fake.put("services", live);
    fake.put(
        "services",
        ksvc("quiet", true, true, 1, &["quiet-00001"], "quiet-00001"),
    );
    let mut leaving = ksvc(
        "leaving",
        false,
        false,
        1,
        &["leaving-00001"],
        "leaving-00001",
    );
    leaving["metadata"]["deletionTimestamp"] = json!("2026-11-30T00:00:00Z");
    fake.put("services", leaving);
    let dir = tempfile::tempdir().unwrap();
    let client = client_args(fake.kubeconfig(dir.path()), Duration::from_secs(3));
    // The cache is all this needs: an election that never starts (no replica leads).
    let election = election("replica-a", Some("system"));
    let args = watch_args();
    let watch = ksvc_webhook::watch::spawn(&args, &client, &election, Default::default());
    let projection = projection.then(|| ksvc_webhook::watch::projection::spawn(&client, None));
    let view = match &projection {
        Some(projection) => projection.revision_owners(),
        None => watch.revision_owners(),
    };
    let mut policy = None;
    let server = harness::start(
        |_| {},
        |server| {
            policy = Some(server.policy());
            server.revision_owners(view);
        },
    )
    .await;
    Cluster {
        _fake: fake,
        _dir: dir,
        watch,
        projection,
        server,
        policy: policy.unwrap(),
    }
}

/// A Revision DELETE as kube-apiserver sends it to the guard.
fn delete_review(
    revision: &str,
    service: Option<&str>,
    routing_state: &str,
    user: &str,
    annotations: Value,
) -> Vec<u8> {
    let mut labels = json!({"serving.knative.dev/routingState": routing_state});
    if let Some(service) = service {
        labels["serving.knative.dev/service"] = json!(service);
    }
    let gvk = json!({"group": "serving.knative.dev", "version": "v1", "kind": "Revision"});
    let gvr = json!({"group": "serving.knative.dev", "version": "v1", "resource": "revisions"});
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "uid-guard", "kind": gvk, "resource": gvr, "requestKind": gvk,
            "requestResource": gvr, "name": revision, "namespace": "apps",
            "operation": "DELETE",
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": null,
            "oldObject": {"apiVersion": "serving.knative.dev/v1", "kind": "Revision",
                "metadata": {"name": revision, "namespace": "apps", "labels": labels,
                             "annotations": annotations}},
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"}
        }
    }))
    .unwrap()
}

/// POST a review to the guard's path; the `response` of the answer.
async fn ask(server: &harness::Running, body: Vec<u8>) -> Value {
    let mut conn = harness::h1(server).await;
    let request = hyper::Request::post(format!("{}?timeout=10s", guard::PATH))
        .header("host", harness::SERVER_NAME)
        .header("content-type", "application/json")
        .body(harness::full(body))
        .unwrap();
    let (status, body) = conn.send(request).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["response"]["uid"], "uid-guard");
    answer["response"].clone()
}

fn message(response: &Value) -> &str {
    response["status"]["message"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_decides_on_what_the_watch_cache_knows() {
    let c = cluster().await;
    poll::until("the cache synced", poll::LIMIT, || {
        c.watch.synced.load(Ordering::Acquire)
    })
    .await;
    every_owner_state_is_decided(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admission_roles_projection_decides_as_the_cache_does() {
    let c = cluster_read_through(true).await;
    assert!(c.projection.is_some());
    // Until the projection has listed, a missing Service is unknown, not gone: refused by its
    // routing-state label.
    let gone = || delete_review("gone-00001", Some("gone"), "active", PLATFORM, json!({}));
    let listed = || async { ask(&c.server, gone()).await["allowed"] == true };
    poll::until_async("the projection listed", poll::LIMIT, listed).await;
    every_owner_state_is_decided(&c).await;
}

async fn every_owner_state_is_decided(c: &Cluster) {
    let none = json!({});
    #[rustfmt::skip]
    let cases: [(&str, Option<&str>, &str, bool, &str); 8] = [
        // A running app's serving revision: its traffic entry is named.
        ("live-00002", Some("live"), "active", false,
         "remove its traffic or tag first (100% of the traffic in the spec.traffic of Service \"live\""),
        // Routed by its tag only.
        ("live-00001", Some("live"), "active", false, "tag \"canary\" (0%)"),
        // The routing-state label lags, the Service's status routes to it: refused.
        ("live-00002", Some("live"), "pending", false, "\"live\" routes traffic to it (status.traffic)"),
        // Neither the label nor the status routes to it: allowed.
        ("live-00000", Some("live"), "reserve", true, ""),
        // A stopped app's: removed once traffic has left it.
        ("quiet-00001", Some("quiet"), "active", false,
         "it will be removed once traffic has left it (ksvc-webhook deletes the old revisions of a stopped app then); nothing to do"),
        // Its Service is being deleted, or gone: its revisions go with it.
        ("leaving-00001", Some("leaving"), "active", true, ""),
        ("gone-00001", Some("gone"), "active", true, ""),
        // No Service to look up: only the label speaks, worded for either case.
        ("orphan-00001", None, "active", false,
         "if its app is being stopped, ksvc-webhook removes it once traffic has left it"),
    ];
    for (revision, service, routing_state, allowed, words) in cases {
        let body = delete_review(revision, service, routing_state, PLATFORM, none.clone());
        let response = ask(&c.server, body).await;
        assert_eq!(
            response["allowed"],
            allowed,
            "{revision}: {}",
            message(&response)
        );
        assert!(
            message(&response).contains(words),
            "{revision}: {}",
            message(&response)
        );
        if !allowed {
            assert!(
                message(&response).contains("ksvc-webhook.flyte.org/allow-delete=true"),
                "{}",
                message(&response)
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_the_flag_names_and_the_override_may_delete_a_serving_revision() {
    let c = cluster().await;
    poll::until("the cache synced", poll::LIMIT, || {
        c.watch.synced.load(Ordering::Acquire)
    })
    .await;
    let serving = |user: &str, annotations: Value| {
        delete_review("live-00002", Some("live"), "active", user, annotations)
    };
    for user in guard::DEFAULT_ALLOWED_DELETERS {
        let response = ask(&c.server, serving(user, json!({}))).await;
        assert_eq!(response["allowed"], true, "{user}");
    }
    // The administrator's override: allowed, with a warning saying what it cost.
    let flagged = json!({"ksvc-webhook.flyte.org/allow-delete": "true"});
    let response = ask(&c.server, serving("kubernetes-admin", flagged)).await;
    assert_eq!(response["allowed"], true);
    let warning = response["warnings"][0].as_str().unwrap();
    assert!(
        warning.contains("deleted anyway") && warning.contains("requests in flight may be lost"),
        "{warning}"
    );
    let response = ask(
        &c.server,
        serving(
            "kubernetes-admin",
            json!({"ksvc-webhook.flyte.org/allow-delete": "yes"}),
        ),
    )
    .await;
    assert_eq!(response["allowed"], false, "only \"true\" overrides");

    // `--guard-allowed-deleters` replaces the list.
    let cli = Cli::parse_from([
        "ksvc-webhook",
        "serve",
        "--guard-allowed-deleters",
        "group:janitors, system:kube-controller-manager",
    ]);
    let Command::Serve(args) = cli.command else {
        panic!("not serve");
    };
    let policy = args.policy.policy().unwrap();
    c.policy.store(Arc::new(policy));
    let mut janitor = serde_json::from_slice::<Value>(&serving("jan", json!({}))).unwrap();
    janitor["request"]["userInfo"]["groups"] = json!(["janitors"]);
    let response = ask(&c.server, serde_json::to_vec(&janitor).unwrap()).await;
    assert_eq!(response["allowed"], true, "{}", message(&response));
    let gc = ask(&c.server, serving(guard::GARBAGE_COLLECTOR, json!({}))).await;
    assert_eq!(gc["allowed"], false, "no longer named");
    let kcm = ask(
        &c.server,
        serving(guard::KUBE_CONTROLLER_MANAGER, json!({})),
    )
    .await;
    assert_eq!(kcm["allowed"], true);
}
