//! The monitoring component against a real Prometheus (Debian's `prometheus` package): `serve`
//! runs against the fake API with self-managed certificates and the watch loop, takes a short
//! load (allowed, denied and undecodable reviews, status calls), and Prometheus scrapes it. Then
//! every dashboard panel's query and every alert's expression goes through Prometheus's HTTP
//! API: each must parse, and each panel must return data unless every series it names is
//! kube-apiserver's or kube-state-metrics' (absent here, see [`FOREIGN`]). A second test checks,
//! without Prometheus, that every metric an expression names is one the server exports from its
//! first scrape on, before any event, or one of [`FOREIGN`].
//!
//! Without `prometheus` on the PATH the first test says loudly that it was skipped (under
//! `CI=true` it fails instead: `.ci/run` installs the package).
//!
//! [`queries`] reads the dashboard and the rules and names the metrics an expression uses;
//! [`processes`] runs `serve` and Prometheus and talks to them.

#![allow(clippy::unwrap_used)] // a failed setup step should panic loudly

mod processes;
mod queries;

use std::process::Command;

use processes::{Prometheus, Serve};
use queries::{FOREIGN, alert_exprs, dashboard_queries, exported, metric_names};
use support::FakeApi;

#[test]
fn every_metric_the_dashboard_and_the_alerts_name_is_exported_from_the_start_or_foreign() {
    // What the server exports, from its first scrape, before any review or status call (no
    // Prometheus needed, so this check runs everywhere): a series that appears only at its
    // first event shows "no data" until then, and an absent-series alert could not tell a
    // broken exporter from a quiet one.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let served = rt.block_on(async {
        let fake = FakeApi::start().await;
        let server = Serve::start(&fake).await;
        let text = server.scrape().await;
        drop(server);
        text
    });
    let exported = exported(&served);
    let mut unknown = Vec::new();
    let queries = dashboard_queries()
        .into_iter()
        .flat_map(|(title, exprs)| exprs.into_iter().map(move |e| (title.clone(), e)))
        .chain(alert_exprs());
    for (what, expr) in queries {
        for name in metric_names(&expr) {
            if !exported.contains(&name) && !FOREIGN.contains(&name.as_str()) {
                unknown.push(format!("{what}: {name}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "names neither exported nor foreign:\n{}",
        unknown.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_panel_and_alert_query_runs_against_a_real_prometheus() {
    if Command::new("prometheus")
        .arg("--version")
        .output()
        .is_err()
    {
        let banner = "SKIPPED: the real-Prometheus test: `prometheus` is not on the PATH. \
                      Get it with: apt-get install prometheus";
        eprintln!("{banner}");
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "{banner}");
        return;
    }
    let fake = FakeApi::start().await;
    let server = Serve::start(&fake).await;
    let prometheus = Prometheus::start(server.metrics).await;
    server.load().await;
    // Enough scrapes (every 500ms) after the load for rates over 20s to have two samples.
    prometheus
        .wait_for("ksvc_webhook_admission_requests_total", 6)
        .await;
    let mut failures = Vec::new();
    for (title, exprs) in dashboard_queries() {
        let mut has_data = false;
        for expr in &exprs {
            match prometheus.query(expr).await {
                Ok(n) => has_data |= n > 0,
                Err(e) => failures.push(format!("panel {title:?}: {expr}: {e}")),
            }
        }
        let only_foreign = exprs.iter().all(|e| {
            let names = metric_names(e);
            !names.is_empty() && names.iter().all(|n| FOREIGN.contains(&n.as_str()))
        });
        if !has_data && !only_foreign {
            failures.push(format!("panel {title:?} returned no data: {exprs:?}"));
        }
    }
    for (alert, expr) in alert_exprs() {
        if let Err(e) = prometheus.query(&expr).await {
            failures.push(format!("alert {alert}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
