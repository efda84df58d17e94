//! Watch-loop benchmarks: status fan-out to 1,000 `/apps/watch` subscribers, and the read half of
//! a reconcile (status + plan + hub update) for 10,000 KServices from the cache, on objects as a
//! real cluster holds them (`support::realistic`). Prints resident memory (VmRSS) before and
//! after building each fixture, and per app; and, counted by the allocator, the bytes each part
//! of the cache holds per app (views, Revisions, stores, status records, drift).
#![allow(clippy::unwrap_used)]

use std::alloc::System;
use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use ksvc_webhook::admission::Policy;
use ksvc_webhook::watch::cache::{Cache, service_key};
use ksvc_webhook::watch::drift::DriftIndex;
use ksvc_webhook::watch::hub::{DEFAULT_SUBSCRIBER_BUFFER, Filter, Hub};
use ksvc_webhook::watch::names::Names;
use ksvc_webhook::watch::status::{AppStatus, Phase};
use ksvc_webhook::watch::store::Cached;
use ksvc_webhook::watch::view::{KService, Revision};
use serde_json::{Value, json};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use support::realistic;

// Counts the bytes live at any moment (the system allocator underneath).
#[global_allocator]
static ALLOC: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn live() -> usize {
    let stats = ALLOC.stats();
    // A reallocation is counted in both of these already.
    stats.bytes_allocated - stats.bytes_deallocated
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn record(i: usize, phase: Phase) -> ksvc_webhook::watch::hub::AppRecord {
    ksvc_webhook::watch::hub::AppRecord {
        namespace: "apps".into(),
        name: format!("app-{i}").into(),
        project: Some("proj".into()),
        domain: Some("dev".into()),
        app_name: Some(format!("app-{i}")),
        status: AppStatus {
            phase,
            message: "Service is ready".into(),
            last_transition_time: "2026-11-30T00:00:00Z".into(),
            replicas: Some(1),
            url: Some(format!("http://app-{i}.apps.example")),
            substate: None,
        },
        drift: Default::default(),
    }
}

fn fanout(c: &mut Criterion) {
    let before = rss_kib();
    let hub = Hub::new();
    let mut subs: Vec<_> = (0..1000)
        .map(|_| hub.subscribe(Filter::default(), DEFAULT_SUBSCRIBER_BUFFER))
        .collect();
    eprintln!(
        "fanout: 1000 subscribers, RSS {before} KiB -> {} KiB",
        rss_kib()
    );
    let mut n = 0usize;
    c.bench_function(
        "fanout: one status change to 1,000 subscribers, delivered",
        |b| {
            b.iter(|| {
                n += 1;
                hub.upsert(record(
                    0,
                    if n.is_multiple_of(2) {
                        Phase::Active
                    } else {
                        Phase::Deploying
                    },
                ));
                for sub in &mut subs {
                    black_box(sub.try_next());
                }
            })
        },
    );
}

/// `n` apps as a real cluster holds them (`support::realistic`: managedFields, last-applied,
/// two containers, Revisions with Knative's labels and annotations); every fourth stopped, with
/// its old revision's pods still up.
fn fixture(n: usize) -> (Vec<KService>, Vec<Revision>) {
    let mut services = Vec::with_capacity(n);
    let mut revisions = Vec::with_capacity(2 * n);
    for i in 0..n {
        let stopped = i.is_multiple_of(4);
        let mut ksvc: Value = serde_json::from_str(&realistic::kservice(i)).unwrap();
        if stopped {
            let labels = &mut ksvc["metadata"]["labels"];
            labels["flyte.org/app-stopped"] = json!("true");
            labels["networking.knative.dev/visibility"] = json!("cluster-local");
            ksvc["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] =
                json!("0");
        }
        services.push(serde_json::from_value(ksvc).unwrap());
        for (rev, replicas) in [(1, i32::from(stopped)), (2, 1 - i32::from(stopped))] {
            let mut r: Value = serde_json::from_str(&realistic::revision(i, rev)).unwrap();
            r["status"]["actualReplicas"] = json!(replicas);
            r["status"]["desiredReplicas"] = json!(replicas);
            r["status"]["conditions"][0]["status"] =
                json!(if replicas > 0 { "True" } else { "False" });
            revisions.push(serde_json::from_value(r).unwrap());
        }
    }
    (services, revisions)
}

fn reconcile_planning(c: &mut Criterion) {
    let before = rss_kib();
    let (services, revisions) = fixture(10_000);
    let cache = Cache::from_objects(services, revisions);
    let hub = Hub::new();
    let keys: Vec<_> = cache.keys().into_iter().collect();
    for key in &keys {
        hub.upsert(cache.evaluate(key, "2026-11-30T00:00:00Z").unwrap().record);
    }
    let after = rss_kib();
    eprintln!(
        "reconcile: 10,000 realistic KServices + 20,000 Revisions cached and statused, RSS {before} KiB -> {after} KiB ({} B per app)",
        (after.saturating_sub(before)) * 1024 / 10_000
    );
    let mut group = c.benchmark_group("reconcile");
    group.sample_size(10);
    group.bench_function(
        "status + plan + hub update of 10,000 KServices from the cache",
        |b| {
            b.iter(|| {
                let mut deletes = 0;
                for key in &keys {
                    let eval = cache.evaluate(key, "2026-11-30T00:00:01Z").unwrap();
                    deletes += eval.plan.actions.len();
                    black_box(hub.upsert(eval.record));
                }
                assert_eq!(deletes, 2500, "one old revision of every stopped app");
            })
        },
    );
    group.finish();
}

/// Where a cached app's bytes go: each part built in turn from `n` realistic apps, the live heap
/// counted before and after (sizes as asked of the allocator, before its rounding).
fn cache_bytes(_: &mut Criterion) {
    let n = 10_000;
    let per_app = |before: usize| (live() - before) / n;
    let decode = |i: usize| serde_json::from_str::<KService>(&realistic::kservice(i)).unwrap();
    let start = live();
    // As the loop does: each Service's drift evaluated from the text its event carries, which
    // is then dropped with the event, and the view without its text kept.
    let mut drift = DriftIndex::new(Arc::new(Policy::default()));
    let names = Names::default();
    let mut text = 0;
    let (mut drifts, mut views) = (0, live());
    let mut services: Vec<KService> = Vec::with_capacity(n);
    views = live() - views;
    for i in 0..n {
        let mut ksvc = decode(i);
        ksvc.share(&names);
        text += ksvc.stored.text().unwrap_or_default().len();
        let at = live();
        drift.update(&service_key(&ksvc), Some(&ksvc));
        drifts += live() - at;
        let at = live();
        services.push(ksvc.cached());
        views += live() - at;
    }
    let (drifts, views) = (drifts / n, views / n);
    let at = live();
    let revisions: Vec<Revision> = (0..2 * n)
        .map(|j| serde_json::from_str(&realistic::revision(j / 2, j % 2 + 1)).unwrap())
        .collect();
    let revs = per_app(at);
    let at = live();
    let cache = Cache::from_named(&names, services, revisions);
    let stores = per_app(at);
    let at = live();
    let hub = Hub::new();
    let keys: Vec<_> = cache.keys().into_iter().collect();
    for key in &keys {
        // As the loop does: the record carries the drift index's findings.
        let mut record = cache.evaluate(key, "2026-11-30T00:00:00Z").unwrap().record;
        record.drift = drift.shared(key).map(Into::into).unwrap_or_default();
        hub.upsert(record);
    }
    let records = per_app(at);
    eprintln!(
        "cache bytes per app ({n} realistic apps, live heap): Service view {views} B (its stored \
         text of {} B evaluated and dropped), two Revisions {revs} B, stores and revision index \
         {stores} B, status record {records} B, drift {drifts} B; in all {} B",
        text / n,
        per_app(start) - keys.len() * std::mem::size_of::<ksvc_webhook::watch::hub::AppKey>() / n,
    );
    black_box((cache, hub, drift, keys));
}

criterion_group!(benches, cache_bytes, fanout, reconcile_planning);
criterion_main!(benches);
