//! The watch loop against the real API: an app whose Revisions this test makes Ready (playing
//! Knative's controllers) is stopped and started again; the teardown waits for traffic to leave
//! the old Revision before deleting it; the events API takes the loop's Events, a repeat as a
//! series; `/apps` and `ksvc-webhook app` show each phase.

use serde_json::Value;
use std::time::Duration;
use support::cli::run_bin;
use support::control_plane::{ControlPlane, Webhook};
use support::poll;

use crate::knative;
use crate::objects::create_managed_app;
use crate::status_api::{get, reader};

/// The phase `/apps/{ns}/{name}` reports, read with `token`.
fn phase(plane: &ControlPlane, token: &str, ns: &str, name: &str) -> String {
    let (code, body) = get(plane, token, &format!("/apps/{ns}/{name}"));
    if code != 200 {
        return format!("HTTP {code}");
    }
    let app: Value = serde_json::from_str(&body).unwrap();
    app.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

fn wait_phase(plane: &ControlPlane, token: &str, ns: &str, name: &str, want: &str) {
    let mut last = String::new();
    poll::blocking(
        &format!("/apps says {ns}/{name} is {want}"),
        Duration::from_secs(60),
        || {
            last = phase(plane, token, ns, name);
            (last == want).then_some(())
        },
    );
}

fn revisions(plane: &ControlPlane, ns: &str) -> Vec<String> {
    let list = plane.get_json(&["revisions", "-n", ns]);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The loop's Events in `ns` (events.k8s.io/v1) as (reason, series count).
fn events(plane: &ControlPlane, ns: &str) -> Vec<(String, i64)> {
    let list = plane.get_json(&["events.v1.events.k8s.io", "-n", ns]);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reportingController"] != "" && e["reason"].is_string())
        .map(|e| {
            let reason = e["reason"].as_str().unwrap().to_owned();
            (reason, e["series"]["count"].as_i64().unwrap_or(1))
        })
        .collect()
}

/// The app under test: where it is, and a reader's token for `/apps`.
struct App<'a> {
    plane: &'a ControlPlane,
    ns: String,
    name: String,
    token: String,
}

impl App<'_> {
    /// `ksvc-webhook app <verb> <name> -n <ns> <extra>` as the admin, as a user runs it.
    fn cli(&self, verb: &str, extra: &[&str]) -> support::cli::Ran {
        let kubeconfig = self.plane.kubeconfig.display().to_string();
        let mut args = vec![
            "app",
            verb,
            &self.name,
            "-n",
            &self.ns,
            "--kubeconfig",
            &kubeconfig,
        ];
        args.extend_from_slice(extra);
        run_bin(&args, &[], b"")
    }

    fn wait_phase(&self, want: &str) {
        wait_phase(self.plane, &self.token, &self.ns, &self.name, want);
    }
}

/// A managed app, created through admission, with one Ready revision serving all traffic.
fn active_app(plane: &ControlPlane) -> (App<'_>, String) {
    let ns = plane.namespace("watch");
    reader(plane, &ns);
    let name = create_managed_app(plane, &ns, "create a managed app");
    let token = plane.token(&ns, "reader", None);
    let app = App {
        plane,
        ns,
        name,
        token,
    };
    knative::configuration(plane, &app.ns, &app.name);
    let first = knative::revision(plane, &app.ns, &app.name, 1, 1);
    knative::route(plane, &app.ns, &app.name, &first, &[(&first, 100)]);
    app.wait_phase("ACTIVE");
    (app, first)
}

/// `app stop --wait`, as a user runs it (admission applies the stop edits), while this test
/// plays Knative: a stopped revision whose route first still sends everything to `first`, then
/// moves. The loop must wait for the route, then delete `first`. What `app stop` printed.
fn stop_and_tear_down(app: &App, first: &str) -> support::cli::Ran {
    let (plane, ns, name) = (app.plane, app.ns.as_str(), app.name.as_str());
    let first = first.to_owned();
    std::thread::scope(|scope| {
        let stop = scope.spawn(|| app.cli("stop", &["--wait", "--timeout", "90s"]));
        poll::blocking("the stop label is stored", Duration::from_secs(30), || {
            let ksvc = plane.get_json(&["ksvc", name, "-n", ns]);
            (ksvc["metadata"]["labels"]["flyte.org/app-stopped"] == "true").then_some(())
        });
        // Knative makes the stopped revision, but the route still sends everything to the first.
        let second = knative::revision(plane, ns, name, 2, 0);
        knative::route(plane, ns, name, &second, &[(&first, 100)]);
        app.wait_phase("STOPPING");
        assert!(
            revisions(plane, ns).contains(&first),
            "the serving revision was deleted while traffic was on it"
        );
        // The route moves; Knative's labeler takes the first out of the route; the loop tears
        // it down.
        knative::route(plane, ns, name, &second, &[(&second, 100)]);
        knative::routing_state(plane, ns, &first, "reserve");
        poll::blocking(
            "the loop has deleted the old revision",
            Duration::from_secs(60),
            || (!revisions(plane, ns).contains(&first)).then_some(()),
        );
        app.wait_phase("STOPPED");
        stop.join().unwrap()
    })
}

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn stop_waits_for_traffic_to_leave_then_deletes_the_old_revision_and_start_brings_it_back() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let _webhook = Webhook::start(plane, "watch", &[]);
    let (app, first) = active_app(plane);
    let (ns, name) = (app.ns.as_str(), app.name.as_str());

    let stop = stop_and_tear_down(&app, &first);
    assert_eq!(
        stop.code,
        Some(0),
        "app stop --wait: {}{}",
        stop.stdout,
        stop.stderr
    );

    // Start again: a new revision with pods takes the traffic.
    let started = app.cli("start", &[]);
    assert_eq!(started.code, Some(0), "app start: {}", started.stderr);
    let third = knative::revision(plane, ns, name, 3, 1);
    knative::route(plane, ns, name, &third, &[(&third, 100)]);
    app.wait_phase("ACTIVE");
    let status = app.cli("status", &[]);
    assert!(
        status.stdout.contains("ACTIVE"),
        "app status: {}{}",
        status.stdout,
        status.stderr
    );
    let kubeconfig = plane.kubeconfig.display().to_string();
    let listed = run_bin(
        &["app", "list", "-A", "--kubeconfig", &kubeconfig],
        &[],
        b"",
    );
    assert!(
        listed
            .stdout
            .lines()
            .any(|l| l.contains(name) && l.contains("ACTIVE")),
        "app list -A: {}{}",
        listed.stdout,
        listed.stderr
    );

    // Every transition is an Event the real events API accepted; ACTIVE twice is one series.
    let recorded = poll::blocking(
        "the Events of both ACTIVE transitions",
        Duration::from_secs(30),
        || {
            let all = events(plane, ns);
            all.iter()
                .any(|(reason, count)| reason == "AppActive" && *count >= 2)
                .then_some(all)
        },
    );
    for reason in ["AppStopping", "AppStopped"] {
        assert!(
            recorded.iter().any(|(r, _)| r == reason),
            "no {reason}: {recorded:?}"
        );
    }
}
