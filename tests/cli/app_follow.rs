//! `app list`, `-o`, `--context`, `-w`, `--until` and `--wait --timeout`, `--dry-run=server`: the
//! real binary against the fake API, as a kubectl user runs them.
#![allow(clippy::unwrap_used)]

use axum::http::Method;
use serde_json::Value;
use support::cli::{Ran, run};
use support::{FakeApi, ksvc, poll, revision};

/// Apps `a` and `b` in `apps`, ACTIVE; `c` in `other`.
async fn three_apps() -> FakeApi {
    let fake = FakeApi::start().await;
    for name in ["a", "b"] {
        put_app(&fake, name, false);
    }
    let mut other = ksvc("c", false, false, 1, &["c-00001"], "c-00001");
    other["metadata"]["namespace"] = "other".into();
    fake.put("services", other);
    fake
}

fn ok(ran: &Ran) -> &str {
    assert_eq!(ran.code, Some(0), "{ran:?}");
    &ran.stdout
}

/// Column `n` of a table's rows (a message under a row is not a row).
fn column(text: &str, n: usize) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.starts_with("  "))
        .map(|l| l.split_whitespace().nth(n).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_a_namespace_or_all_and_filters_by_label() {
    let fake = three_apps().await;
    let table = run(&fake, &["app", "list", "-n", "apps"]).await;
    assert_eq!(column(ok(&table), 0), ["NAME", "a", "b"]);
    assert_eq!(column(ok(&table), 1), ["PHASE", "ACTIVE", "ACTIVE"]);
    let all = run(&fake, &["app", "list", "-A"]).await;
    assert_eq!(column(ok(&all), 0), ["NAMESPACE", "apps", "apps", "other"]);
    assert_eq!(column(ok(&all), 1), ["NAME", "a", "b", "c"]);
    let one = run(
        &fake,
        &["app", "list", "-n", "apps", "-l", "flyte.org/app-name=b"],
    )
    .await;
    assert_eq!(column(ok(&one), 0), ["NAME", "b"]);
    let conflict = run(&fake, &["app", "list", "-A", "-n", "apps"]).await;
    assert_eq!(conflict.code, Some(2), "{conflict:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_formats_print_what_scripts_read() {
    let fake = three_apps().await;
    let name = run(&fake, &["app", "list", "-n", "apps", "-o", "name"]).await;
    assert_eq!(
        ok(&name),
        "service.serving.knative.dev/a\nservice.serving.knative.dev/b\n"
    );
    let path = run(
        &fake,
        &words("app list -n apps -o jsonpath={.items[*].name}"),
    )
    .await;
    assert_eq!(ok(&path), "a b");
    let range = "jsonpath={range .items[*]}{.name}={.status.replicas}{\"\\n\"}{end}";
    let path = run(&fake, &["app", "list", "-n", "apps", "-o", range]).await;
    assert_eq!(ok(&path), "a=1\nb=1\n");
    let json = run(&fake, &["app", "list", "-n", "apps", "-o", "json"]).await;
    assert!(
        ok(&json).starts_with("{\n  \""),
        "pretty-printed: {}",
        json.stdout
    );
    let list: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"][1]["app_name"], "b");
    assert!(list["items"][1].get("drift").is_none(), "{list:#}");
    assert_eq!(
        list["items"][1]["status"]["last_transition_time"],
        "2026-11-29T00:00:00Z"
    );
    let one = run(&fake, &["app", "status", "a", "-n", "apps", "-o", "yaml"]).await;
    assert!(ok(&one).contains("\napp_name: a\n"), "{}", one.stdout);
    let wide = run(&fake, &["app", "status", "a", "-n", "apps", "-o", "wide"]).await;
    assert_eq!(column(ok(&wide), 5), ["APP", "proj/dev/a"]);
    let bad = run(&fake, &["app", "list", "-o", "jsonpath={..name}"]).await;
    assert_eq!(bad.code, Some(2));
    assert!(
        bad.stderr.contains("recursive descent `..`"),
        "{}",
        bad.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_picks_the_kubeconfig_context_and_its_namespace() {
    let fake = three_apps().await;
    // The current context's namespace is `system`, which has no apps.
    let empty = run(&fake, &["app", "list"]).await;
    assert_eq!(
        (ok(&empty), empty.stderr.as_str()),
        ("", "No apps found in system namespace.\n")
    );
    let other = run(&fake, &["app", "list", "--context", "other"]).await;
    assert_eq!(column(ok(&other), 0), ["NAME", "a", "b"]);
    let missing = run(&fake, &["app", "list", "--context", "nope"]).await;
    assert_eq!(missing.code, Some(1));
    assert!(
        missing.stderr.contains("context \"nope\" does not exist"),
        "{}",
        missing.stderr
    );
}

/// The arguments of a command line written out with single spaces.
fn words(line: &str) -> Vec<&str> {
    line.split(' ').collect()
}

/// Wait until the binary watches services (so a change made now reaches it as an event).
async fn watching(fake: &FakeApi) {
    poll::until("the binary watches services", poll::LIMIT, || {
        fake.requests_to(Method::GET, "services").iter().any(|r| {
            r.query
                .get("watch")
                .is_some_and(|w| w == "true" || w == "1")
        })
    })
    .await;
}

/// App `name` in `apps` with its one revision as Knative reports them: serving one pod, or
/// stopped (stop edits observed, no pods left).
fn put_app(fake: &FakeApi, name: &str, stopped: bool) {
    let revision_name = format!("{name}-00001");
    let service = ksvc(name, stopped, stopped, 1, &[&revision_name], &revision_name);
    fake.put("services", service);
    let pods = if stopped { 0 } else { 1 };
    fake.put("revisions", revision(name, &revision_name, pods, false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_prints_a_line_when_the_app_is_deleted_and_ends() {
    let fake = three_apps().await;
    let (ran, ()) = tokio::join!(
        run(&fake, &["app", "status", "a", "-n", "apps", "-w"]),
        async {
            watching(&fake).await;
            fake.remove("services", "apps", "a");
        }
    );
    let out = ok(&ran);
    assert_eq!(column(out, 1)[..2], ["PHASE", "ACTIVE"], "{out}");
    assert_eq!(out.lines().last(), Some("apps/a deleted"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_until_ends_at_the_phase_or_fails_after_the_timeout() {
    let fake = three_apps().await;
    let args = words("app status a -n apps --until stopped --timeout 1m30s");
    let (ran, ()) = tokio::join!(run(&fake, &args), async {
        watching(&fake).await;
        put_app(&fake, "a", true);
    });
    assert_eq!(column(ok(&ran), 1).last(), Some(&"STOPPED"), "{ran:?}");

    let late = run(
        &fake,
        &words("app status b -n apps --until STOPPED --timeout 1.5s"),
    )
    .await;
    assert_eq!(late.code, Some(1));
    assert_eq!(
        late.stderr,
        "error: timed out after 1s waiting for apps/b to be STOPPED; it is ACTIVE (Service is ready)\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_waits_until_stopped_and_start_until_active() {
    let fake = three_apps().await;
    let (ran, ()) = tokio::join!(
        run(
            &fake,
            &[
                "app",
                "stop",
                "a",
                "-n",
                "apps",
                "--wait",
                "--timeout",
                "30s"
            ]
        ),
        async {
            watching(&fake).await;
            put_app(&fake, "a", true);
        }
    );
    let out = ok(&ran);
    assert!(out.starts_with("apps/a: updated\n"), "{out}");
    assert_eq!(
        out.lines().last(),
        Some("apps/a: STOPPED (App scaled to zero)"),
        "{out}"
    );
    // Already running: nothing to write, and ACTIVE at once.
    let start = run(&fake, &["app", "start", "b", "-n", "apps", "--wait"]).await;
    assert_eq!(
        ok(&start),
        "apps/b: unchanged\napps/b: ACTIVE (Service is ready)\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_server_asks_the_server_for_a_dry_run() {
    let fake = three_apps().await;
    for args in [
        &["app", "stop", "a", "-n", "apps", "--dry-run=server"][..],
        &words("app update a -n apps --image x:2 --dry-run server")[..],
    ] {
        let ran = run(&fake, args).await;
        assert_eq!(ok(&ran), "apps/a: updated (server dry run)\n");
        let put = fake.requests_to(Method::PUT, "services").pop().unwrap();
        assert_eq!(
            put.query.get("dryRun").map(String::as_str),
            Some("All"),
            "{args:?}"
        );
    }
    let both = run(&fake, &words("app start a -n apps --dry-run=server --wait")).await;
    assert_eq!(both.code, Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_wait_ends_at_failed_with_the_reason() {
    let fake = three_apps().await;
    let _knative = fake.knative(std::time::Duration::from_millis(50));
    let ran = run(
        &fake,
        &words("app update a -n apps --image registry.example/broken:2 --wait --timeout 2m"),
    )
    .await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(ran.stdout.starts_with("apps/a: updated\n"), "{ran:?}");
    assert_eq!(
        ran.stderr,
        "error: apps/a is FAILED, not ACTIVE: RevisionFailed: Revision \"a-00002\" failed: the \
         image cannot be pulled\n"
    );
}

/// A large list is read as kubectl reads it: `--chunk-size` objects a page, following the
/// `continue` token of each page until the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_reads_page_by_page() {
    let fake = three_apps().await;
    fake.page_lists(true);
    let all = run(&fake, &["app", "list", "-A", "--chunk-size", "1"]).await;
    assert_eq!(column(ok(&all), 1), ["NAME", "a", "b", "c"]);
    let lists: Vec<_> = fake
        .requests_to(Method::GET, "services")
        .into_iter()
        .filter(|r| r.name.is_none())
        .collect();
    let pages: Vec<(Option<&str>, Option<&str>)> = lists
        .iter()
        .map(|r| {
            (
                r.query.get("limit").map(String::as_str),
                r.query.get("continue").map(String::as_str),
            )
        })
        .collect();
    assert_eq!(
        pages,
        [
            (Some("1"), None),
            (Some("1"), Some("1")),
            (Some("1"), Some("2"))
        ]
    );
    let default = run(&fake, &["app", "list", "-A"]).await;
    assert_eq!(column(ok(&default), 1), ["NAME", "a", "b", "c"]);
}
