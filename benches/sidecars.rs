//! The review path on a ~2 KB KService: with no sidecar, with two sidecars injected on CREATE,
//! with the same two when the auth proxy fronts the app (the serving port and the readiness
//! probe handed over), and re-admitting objects that already carry them (the UPDATE that
//! changes nothing).

#![allow(clippy::unwrap_used)] // benchmark setup may panic

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use ksvc_webhook::admission::sidecars::{Catalogue, Knative};
use ksvc_webhook::admission::{self, Policy};
use serde_json::{Value, json};

// The server's allocator (src/main.rs), so the figures are what the server pays.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A managed app of about 2 KB: env, resources, annotations, labels.
fn kservice(inject: &str) -> Value {
    let env: Vec<Value> = (0..15)
        .map(|i| json!({"name": format!("SETTING_{i:02}"), "value": format!("value-number-{i:02}-of-the-app")}))
        .collect();
    json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {
            "namespace": "flyte",
            "labels": {"flyte.org/project": "proj", "flyte.org/domain": "dev", "flyte.org/app-name": "myapp", "team": "search"},
            "annotations": {"sidecar.flyte.org/inject": inject, "owner": "search-team@example.com"},
        },
        "spec": {"template": {
            "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1", "autoscaling.knative.dev/max-scale": "10"}},
            "spec": {
                "containerConcurrency": 50,
                "timeoutSeconds": 300,
                "containers": [{
                    "name": "app",
                    "image": "ghcr.io/example/myapp@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                    "ports": [{"containerPort": 8080}],
                    "env": env,
                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/healthz"}, "periodSeconds": 5},
                }],
            },
        }},
    })
}

fn review_body(op: &str, object: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "serving.knative.dev", "version": "v1", "kind": "Service"},
            "resource": {"group": "serving.knative.dev", "version": "v1", "resource": "services"},
            "operation": op,
            "namespace": "flyte",
            "object": object,
        }
    }))
    .unwrap()
}

fn bench(c: &mut Criterion) {
    let text = std::fs::read_to_string("examples/sidecars.yaml").unwrap();
    // The example's auth proxy as an ordinary sidecar (not on the request path).
    let ordinary = text
        .replace("    fronts:\n      port: 4180\n", "")
        .replace("{{ .AppPort }}", "8080");
    let with = Policy {
        sidecars: Arc::new(Catalogue::parse(&ordinary).unwrap()),
        ..Policy::default()
    };
    let fronting = Policy {
        sidecars: Arc::new(Catalogue::parse(&text).unwrap()),
        // The app has a readiness probe: fronting it needs Knative's multi-container probing.
        knative: Knative {
            multi_container_probing: true,
        },
        ..Policy::default()
    };
    let without = Policy::default();
    let none_body = review_body("CREATE", &kservice("none"));
    let two_body = review_body("CREATE", &kservice("auth-proxy"));
    let plain_body = {
        let mut obj = kservice("");
        obj["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove("sidecar.flyte.org/inject");
        review_body("CREATE", &obj)
    };
    let injected = admission::decide(admission::decode(&two_body).unwrap(), &with)
        .object_json()
        .unwrap();
    let readmit_body = review_body("UPDATE", &injected);
    let fronted = admission::decide(admission::decode(&two_body).unwrap(), &fronting);
    assert!(fronted.allowed, "{}", fronted.message());
    let fronted_readmit_body = review_body("UPDATE", &fronted.object_json().unwrap());
    eprintln!(
        "review bodies: no sidecar {} B, two sidecars {} B, re-admission {} B, fronted \
         re-admission {} B",
        plain_body.len(),
        two_body.len(),
        readmit_body.len(),
        fronted_readmit_body.len()
    );
    let mut g = c.benchmark_group("review_2kb");
    g.bench_function("no_sidecars", |b| {
        b.iter(|| admission::review(black_box(&plain_body), &without).unwrap())
    });
    g.bench_function("opted_out", |b| {
        b.iter(|| admission::review(black_box(&none_body), &with).unwrap())
    });
    g.bench_function("two_sidecars", |b| {
        b.iter(|| admission::review(black_box(&two_body), &with).unwrap())
    });
    g.bench_function("two_sidecars_readmit", |b| {
        b.iter(|| admission::review(black_box(&readmit_body), &with).unwrap())
    });
    g.bench_function("fronted", |b| {
        b.iter(|| admission::review(black_box(&two_body), &fronting).unwrap())
    });
    g.bench_function("fronted_readmit", |b| {
        b.iter(|| admission::review(black_box(&fronted_readmit_body), &fronting).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
