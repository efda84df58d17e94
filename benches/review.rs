//! The `review` path — bytes in, bytes out — on KServices of ~2 KB, ~20 KB and ~200 KB.
//!
//! Run: `cargo bench --bench review`. Throughput is in bytes of review body, so linear cost
//! shows as a flat MiB/s across sizes.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ksvc_webhook::admission::{Policy, review};
use serde_json::{Value, json};
use std::hint::black_box;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A CREATE review of a managed KService padded with env vars to about `target` bytes, with a
/// `last-applied-configuration` annotation as `kubectl apply` leaves one.
fn review_body(target: usize) -> Vec<u8> {
    let mut env = vec![json!({"name": "LOG_LEVEL", "value": "info"})];
    let mut obj = kservice(&env);
    let mut i = 0;
    while serde_json::to_vec(&obj).map_or(0, |b| b.len()) * 2 + 1200 < target {
        for _ in 0..16 {
            env.push(json!({"name": format!("SETTING_{i}"), "value": format!("value-{i}-{}", "x".repeat(i % 24))}));
            i += 1;
        }
        obj = kservice(&env);
    }
    if target > 2_000 {
        let applied = serde_json::to_string(&obj).unwrap_or_default();
        obj["metadata"]["annotations"] =
            json!({"kubectl.kubernetes.io/last-applied-configuration": applied});
    }
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "2f1b1d4e-8d1c-4b5e-9a0f-6c7d8e9f0a1b",
            "kind": {"group": "serving.knative.dev", "version": "v1", "kind": "Service"},
            "resource": {"group": "serving.knative.dev", "version": "v1", "resource": "services"},
            "requestKind": {"group": "serving.knative.dev", "version": "v1", "kind": "Service"},
            "requestResource": {"group": "serving.knative.dev", "version": "v1", "resource": "services"},
            "name": "", "namespace": "team-a", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:flyte:flyteadmin", "uid": "a1b2", "groups": ["system:serviceaccounts", "system:authenticated"]},
            "object": obj, "oldObject": null, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions", "fieldManager": "flyte"}
        }
    }))
    .unwrap_or_default()
}

fn kservice(env: &[Value]) -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {
            "namespace": "team-a",
            "labels": {"flyte.org/project": "analytics", "flyte.org/domain": "production", "flyte.org/app-name": "forecast-api", "team": "data"},
        },
        "spec": {"template": {
            "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1", "autoscaling.knative.dev/max-scale": "10", "autoscaling.knative.dev/target": "50"}},
            "spec": {
                "serviceAccountName": "forecast",
                "containerConcurrency": 0,
                "timeoutSeconds": 300,
                "containers": [{
                    "name": "app",
                    "image": "ghcr.io/example/forecast-api@sha256:4b8e5d2c1f0a9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d",
                    "ports": [{"containerPort": 8080, "name": "http1"}],
                    "env": env,
                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": 0}, "successThreshold": 1},
                    "volumeMounts": [{"name": "config", "mountPath": "/etc/forecast", "readOnly": true}]
                }],
                "volumes": [{"name": "config", "configMap": {"name": "forecast-config"}}]
            }
        }}
    })
}

fn bench_review(c: &mut Criterion) {
    let policy = Policy::default();
    let mut group = c.benchmark_group("review");
    for target in [2_000, 20_000, 200_000] {
        let body = review_body(target);
        assert!(review(&body, &policy).is_ok_and(|r| r.summary.allowed && r.summary.patch_ops > 0));
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(format!("{}B", body.len())),
            &body,
            |b, body| {
                b.iter(|| review(black_box(body), &policy));
            },
        );
        // The floor: only parsing the body into a JSON tree, and dropping it.
        group.bench_with_input(
            BenchmarkId::new("parse-only", body.len()),
            &body,
            |b, body| {
                b.iter(|| serde_json::from_slice::<Value>(black_box(body)).map(drop));
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench_review);
criterion_main!(benches);
