//! The drift report's cost: a full re-evaluation of 10,000 cached KServices after a sidecar
//! catalogue bump (every app decided on again by admission, every app stale), with the memory
//! it takes: the stored text the cache keeps per KService, the report's entries, and the peak of
//! one full evaluation (VmHWM, reset through `/proc/self/clear_refs`). The server's allocator.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use ksvc_webhook::admission::drift::Reason;
use ksvc_webhook::admission::sidecars::Catalogue;
use ksvc_webhook::admission::{Policy, Request, decide};
use ksvc_webhook::watch::drift::DriftIndex;
use ksvc_webhook::watch::hub::AppKey;
use ksvc_webhook::watch::view::KService;
use serde_json::{Value, json};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const APPS: usize = 10_000;

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

/// This thread's time on a CPU so far, in nanoseconds (`/proc/thread-self/schedstat`): what a
/// run costs, apart from the time other processes of a shared machine held the CPU.
fn cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    stat.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Reset the peak (VmHWM) to the current RSS (Linux ≥ 4.0).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn policy(catalogue: &str) -> Arc<Policy> {
    Arc::new(Policy {
        sidecars: Arc::new(Catalogue::parse(catalogue).unwrap()),
        ..Policy::default()
    })
}

/// App `i`, as the API server stores it: a managed app with ten env vars, probes and
/// resources, `kubectl apply`'s annotation, managed fields and status. Three in four were
/// admitted under `admitted_by`, the rest were there before the webhook.
fn stored(i: usize, admitted_by: &Policy) -> Value {
    let app = format!("app{i}");
    let env: Vec<Value> = (0..10)
        .map(|n| json!({"name": format!("SETTING_{n}"), "value": format!("value-{n}-{i}")}))
        .collect();
    let object = json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {
            "name": format!("{app}-proj-dev"), "namespace": format!("team-{}", i % 50),
            "uid": format!("4c2a8a3e-5d55-4a8e-9d0c-{i:012}"), "resourceVersion": "81723", "generation": 3,
            "labels": {"flyte.org/project": "proj", "flyte.org/domain": "dev", "flyte.org/app-name": app},
            "annotations": {
                "serving.knative.dev/creator": "alice@example.com",
                "serving.knative.dev/lastModifier": "alice@example.com",
                "kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"serving.knative.dev/v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"app\"},\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"image\":\"ghcr.io/acme/app:1.4.2\"}]}}}}"
            },
            "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update",
                               "apiVersion": "serving.knative.dev/v1", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:spec": {"f:template": {}}}}]
        },
        "spec": {
            "template": {
                "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1"}},
                "spec": {
                    "containerConcurrency": 0, "enableServiceLinks": false, "timeoutSeconds": 300,
                    "containers": [{
                        "name": "user-container", "image": "ghcr.io/acme/app:1.4.2",
                        "ports": [{"containerPort": 8080, "protocol": "TCP"}], "env": env,
                        "readinessProbe": {"successThreshold": 1, "tcpSocket": {"port": 0}},
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}
                    }]
                }
            },
            "traffic": [{"latestRevision": true, "percent": 100}]
        },
        "status": {
            "observedGeneration": 3, "url": format!("http://{app}-proj-dev.team.example.com"),
            "latestCreatedRevisionName": format!("{app}-proj-dev-00003"),
            "latestReadyRevisionName": format!("{app}-proj-dev-00003"),
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-12T09:31:00Z"}],
            "traffic": [{"revisionName": format!("{app}-proj-dev-00003"), "percent": 100, "latestRevision": true}]
        }
    });
    if i % 4 == 3 {
        return object;
    }
    let ns = object["metadata"]["namespace"].as_str().unwrap().to_owned();
    let status = object["status"].clone();
    let decision = decide(
        Request::kservice("u", "CREATE", &ns, object, None),
        admitted_by,
    );
    let mut admitted = decision.object_json().unwrap();
    admitted["status"] = status;
    admitted
}

fn report(c: &mut Criterion) {
    let catalogue = std::fs::read_to_string("examples/sidecars.yaml").unwrap();
    let v1 = policy(&catalogue);
    let v2 = policy(&catalogue.replace("fluent-bit:3.1.9", "fluent-bit:3.2.0"));
    let v3 = policy(&catalogue.replace("fluent-bit:3.1.9", "fluent-bit:3.2.1"));
    // Built one at a time, so the RSS growth is the views' (typed fields and stored text).
    let before = rss_kib();
    let services: Vec<(AppKey, KService)> = (0..APPS)
        .map(|i| {
            let ksvc: KService = serde_json::from_value(stored(i, &v1)).unwrap();
            let key = AppKey {
                namespace: ksvc.namespace().into(),
                name: ksvc.name().into(),
            };
            (key, ksvc)
        })
        .collect();
    let text: usize = services
        .iter()
        .map(|(_, k)| k.stored.text().unwrap_or_default().len())
        .sum();
    eprintln!(
        "drift: {APPS} cached views, RSS {before} KiB -> {} KiB; stored text {} KiB ({} B per KService)",
        rss_kib(),
        text / 1024,
        text / APPS
    );

    let before = rss_kib();
    let mut index = DriftIndex::new(v1.clone());
    for (key, ksvc) in &services {
        index.update(key, Some(ksvc));
    }
    eprintln!(
        "drift: report of {APPS} KServices, RSS {before} KiB -> {} KiB; {:?}",
        rss_kib(),
        index.counts()
    );

    // One full re-evaluation after the catalogue bump, timed once and its peak memory read.
    let before = rss_kib();
    reset_peak();
    let (started, cpu) = (Instant::now(), cpu_ns());
    index.set_policy(v2.clone());
    for (key, ksvc) in &services {
        index.update(key, Some(ksvc));
    }
    let (took, cpu) = (started.elapsed(), cpu_ns() - cpu);
    eprintln!(
        "drift: one full re-evaluation after the bump in {took:?} ({:.1} ms on the CPU); RSS {before} KiB, peak {} KiB (+{} KiB); stale-sidecars {}",
        cpu as f64 / 1e6,
        status_kib("VmHWM:"),
        status_kib("VmHWM:").saturating_sub(before),
        index.counts()[&Reason::StaleSidecars]
    );

    let mut group = c.benchmark_group("drift");
    group.sample_size(10);
    let mut n = 0usize;
    group.bench_function(
        "full re-evaluation of 10,000 KServices after a catalogue change",
        |b| {
            b.iter(|| {
                n += 1;
                // Each one a bump: every app carries a sidecar the catalogue now upgrades.
                let next = if n.is_multiple_of(2) { &v2 } else { &v3 };
                assert!(index.set_policy(next.clone()));
                for (key, ksvc) in &services {
                    black_box(index.update(key, Some(ksvc)));
                }
            })
        },
    );
    // The yardstick, measured in the same run: what admission itself costs to review the same
    // 10,000 KServices written again (decode, decide, encode of an UPDATE review each).
    let reviews: Vec<Vec<u8>> = services
        .iter()
        .map(|(key, ksvc)| {
            let text = ksvc.stored.text().unwrap_or_default();
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","kind":{{"group":"serving.knative.dev","version":"v1","kind":"Service"}},"operation":"UPDATE","namespace":"{}","userInfo":{{"username":"alice@example.com"}},"object":{text},"oldObject":{text}}}}}"#,
                key.namespace
            )
            .into_bytes()
        })
        .collect();
    let mut n = 0usize;
    group.bench_function(
        "yardstick: admission reviews the same 10,000 KServices written again",
        |b| {
            b.iter(|| {
                n += 1;
                let policy = if n.is_multiple_of(2) { &v2 } else { &v3 };
                for body in &reviews {
                    black_box(ksvc_webhook::admission::review(body, policy).unwrap());
                }
            })
        },
    );
    group.finish();
}

criterion_group!(benches, report);
criterion_main!(benches);
