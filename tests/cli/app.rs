//! `ksvc-webhook app …` and `watch::spawn` against the fake API server.
// Test helpers outside #[test] fns panic on a failed setup step, as the tests would.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::Ordering;

use axum::http::Method;
use ksvc_webhook::cli::app::run_with_client;
use ksvc_webhook::cli::app::{
    AppAction, AppStatusArgs, AppTarget, AppUpdateArgs, AppWriteArgs, OutputArgs,
};
use ksvc_webhook::cli::output::Output;
use ksvc_webhook::watch::args::WatchArgs;
use serde_json::{Value, json};
use support::cli::kubeconfig_for;
use support::watched::{client_args, election, watch_args};
use support::{FakeApi, ksvc, poll, revision};

fn target(name: &str) -> AppTarget {
    AppTarget {
        name: name.into(),
        namespace: Some("apps".into()),
        cluster: Default::default(),
    }
}

fn write(name: &str) -> AppWriteArgs {
    AppWriteArgs {
        target: target(name),
        wait: Default::default(),
    }
}

fn status_args(name: &str, watch: bool, output: Output) -> AppStatusArgs {
    AppStatusArgs {
        target: target(name),
        watch,
        until: None,
        timeout: std::time::Duration::from_secs(60),
        output: OutputArgs { output },
    }
}

async fn run(fake: &FakeApi, action: AppAction) -> anyhow::Result<String> {
    let mut out = Vec::new();
    run_with_client(fake.client(), "apps", action, &mut out).await?;
    Ok(String::from_utf8(out).unwrap())
}

#[tokio::test]
async fn stop_and_start_toggle_the_label() {
    let fake = FakeApi::start().await;
    fake.put(
        "services",
        ksvc("app", false, false, 1, &["app-00001"], "app-00001"),
    );
    assert_eq!(
        run(&fake, AppAction::Stop(write("app"))).await.unwrap(),
        "apps/app: updated\n"
    );
    let svc = fake.get("services", "apps", "app").unwrap();
    assert_eq!(svc["metadata"]["labels"]["flyte.org/app-stopped"], "true");
    assert_eq!(
        run(&fake, AppAction::Stop(write("app"))).await.unwrap(),
        "apps/app: unchanged\n"
    );
    run(&fake, AppAction::Start(write("app"))).await.unwrap();
    let svc = fake.get("services", "apps", "app").unwrap();
    assert!(
        svc["metadata"]["labels"]
            .get("flyte.org/app-stopped")
            .is_none()
    );
    assert_eq!(svc["metadata"]["annotations"]["user/keep"], "me");
    let err = run(&fake, AppAction::Stop(write("missing")))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("no KService apps/missing"),
        "{err}"
    );
}

#[tokio::test]
async fn update_changes_only_the_given_fields_and_retries_conflicts() {
    let fake = FakeApi::start().await;
    fake.put(
        "services",
        ksvc("app", false, false, 1, &["app-00001"], "app-00001"),
    );
    fake.fail_puts("services", 1);
    let update = AppUpdateArgs {
        target: target("app"),
        image: Some("registry.example/app:2".into()),
        min_scale: None,
        max_scale: Some(3),
        wait: Default::default(),
    };
    run(&fake, AppAction::Update(update)).await.unwrap();
    let svc = fake.get("services", "apps", "app").unwrap();
    let template = &svc["spec"]["template"];
    assert_eq!(
        template["spec"]["containers"][0]["image"],
        "registry.example/app:2"
    );
    assert_eq!(
        template["metadata"]["annotations"]["autoscaling.knative.dev/max-scale"],
        "3"
    );
    assert!(
        template["metadata"]["annotations"]
            .get("autoscaling.knative.dev/min-scale")
            .is_none()
    );
    assert_eq!(
        svc["metadata"]["annotations"]["fake/concurrent-writes"],
        "1"
    );
    assert_eq!(fake.requests_to(Method::PUT, "services").len(), 2);

    let empty = AppUpdateArgs {
        target: target("app"),
        image: None,
        min_scale: None,
        max_scale: None,
        wait: Default::default(),
    };
    assert!(
        run(&fake, AppAction::Update(empty))
            .await
            .unwrap_err()
            .to_string()
            .contains("nothing to update")
    );
    let bad = AppUpdateArgs {
        target: target("app"),
        image: None,
        min_scale: Some(5),
        max_scale: None,
        wait: Default::default(),
    };
    let err = run(&fake, AppAction::Update(bad)).await.unwrap_err();
    assert!(
        format!("{err:#}").contains("max-scale 3 is below min-scale 5"),
        "{err:#}"
    );
}

#[tokio::test]
async fn status_prints_the_mapped_status() {
    let fake = FakeApi::start().await;
    fake.put(
        "services",
        ksvc("app", false, false, 1, &["app-00001"], "app-00001"),
    );
    fake.put("revisions", revision("app", "app-00001", 4, false));
    let out = run(
        &fake,
        AppAction::Status(status_args("app", false, Output::Json)),
    )
    .await
    .unwrap();
    let record: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(record["status"]["phase"], "ACTIVE");
    assert_eq!(record["status"]["replicas"], 4);
    assert_eq!(record["project"], "proj");
}

#[tokio::test]
async fn status_prints_a_table_for_a_person_by_default() {
    let fake = FakeApi::start().await;
    let mut app = ksvc("app", true, true, 2, &["app-00001"], "app-00002");
    app["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    fake.put("services", app);
    fake.put("revisions", revision("app", "app-00001", 1, false));
    let out = run(
        &fake,
        AppAction::Status(status_args("app", false, Output::default())),
    )
    .await
    .unwrap();
    let lines: Vec<&str> = out.lines().collect();
    let columns = |line: &str| {
        line.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        columns(lines[0]),
        ["NAME", "PHASE", "REPLICAS", "URL", "AGE"]
    );
    let row = columns(lines[1]);
    // Replicas are the latest ready revision's, which has not reported yet.
    assert_eq!(row[..3], ["app", "STOPPING", "-"], "{out}");
    // AGE is kubectl's, from the creation time (such as 337d), not "-".
    assert!(row[4].starts_with(|c: char| c.is_ascii_digit()), "{out}");
    // Not ACTIVE: the message that says why is on the next line, indented.
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[2].starts_with("  ") && !lines[2].trim().is_empty(),
        "{out}"
    );
}

/// A `Write` the test can read while the command still runs.
#[derive(Clone, Default)]
struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    /// The phases of the pretty-printed JSON records written so far.
    fn phases(&self) -> Vec<String> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        serde_json::Deserializer::from_str(&text)
            .into_iter::<Value>()
            .map(|record| {
                record.unwrap()["status"]["phase"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }
}

#[tokio::test]
async fn status_watch_follows_changes() {
    let fake = FakeApi::start().await;
    fake.put(
        "services",
        ksvc("app", false, false, 1, &["app-00001"], "app-00001"),
    );
    fake.put("revisions", revision("app", "app-00001", 1, false));
    let out = Shared::default();
    let mut writer = out.clone();
    let action = AppAction::Status(status_args("app", true, Output::Json));
    let follow = run_with_client(fake.client(), "apps", action, &mut writer);
    let drive = async {
        poll::until("the first status is printed", poll::LIMIT, || {
            out.phases() == ["ACTIVE"]
        })
        .await;
        // The user stops the app; Knative has not caught up yet: STOPPING.
        fake.put(
            "services",
            ksvc("app", true, true, 2, &["app-00001"], "app-00001"),
        );
        poll::until("the stop is printed", poll::LIMIT, || {
            out.phases() == ["ACTIVE", "STOPPING"]
        })
        .await;
    };
    tokio::select! {
        result = follow => panic!("status --watch ended: {result:?}"),
        () = drive => {}
    }
}

/// The API timeout of the loops these tests spawn.
const FIVE: std::time::Duration = std::time::Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_connects_syncs_and_leads() {
    let fake = FakeApi::start().await;
    fake.put(
        "services",
        ksvc("app", false, false, 1, &["app-00001"], "app-00001"),
    );
    let dir = tempfile::tempdir().unwrap();
    let client = client_args(kubeconfig_for(&format!("http://{}", fake.addr), &dir), FIVE);
    let mut election = election("pod-1", None);
    let handle = ksvc_webhook::watch::spawn(&watch_args(), &client, &election, Default::default());
    election.start(&client, Default::default());
    poll::until("the cache synced", poll::LIMIT, || {
        handle.synced.load(Ordering::Acquire)
    })
    .await;
    poll::until("this replica leads", poll::LIMIT, || {
        *handle.leader.borrow()
    })
    .await;
    let lease = fake.get("leases", "system", "ksvc-webhook-watch").unwrap();
    assert_eq!(
        lease["spec"]["holderIdentity"], "pod-1",
        "the lease lives in the context's namespace"
    );
    assert_eq!(handle.hub.list(&Default::default()).len(), 1);
    let mut registry = prometheus_client::registry::Registry::default();
    handle.register_metrics(&mut registry);

    let mut handle = handle;
    handle.shutdown().await;
    election.shutdown().await;
    assert!(
        !*handle.leader.borrow(),
        "leadership is dropped on shutdown"
    );
    let lease = fake.get("leases", "system", "ksvc-webhook-watch").unwrap();
    assert!(
        lease["spec"]["holderIdentity"].is_null(),
        "the lease is released: {lease}"
    );
}

#[tokio::test]
async fn spawn_returns_at_once_without_a_cluster() {
    // Nothing listens on port 9 of localhost: the loop keeps retrying in the background.
    let dir = tempfile::tempdir().unwrap();
    let client = client_args(kubeconfig_for("http://127.0.0.1:9", &dir), FIVE);
    let handle = ksvc_webhook::watch::spawn(
        &watch_args(),
        &client,
        &election("pod-1", None),
        Default::default(),
    );
    tokio::task::yield_now().await;
    assert!(!handle.synced.load(Ordering::Acquire));
    assert!(!*handle.leader.borrow());
    assert!(handle.task.as_ref().is_some_and(|t| !t.is_finished()));
    let disabled = ksvc_webhook::watch::spawn(
        &WatchArgs {
            no_watch: true,
            ..watch_args()
        },
        &client_args("/nonexistent".into(), FIVE),
        &election("pod-1", None),
        Default::default(),
    );
    assert!(disabled.task.is_none());
}
