//! The attack table of docs/reliability.md, forged bodies: 7 MiB reviews that cost the most to
//! decide. Six pods, from four addresses, send them in a loop: reviews as dense as the value cap
//! allows (128 Ki values in a container's ports, the rest of the 7 MiB in `status`), reviews far
//! past it (3.6 million values), and stop-restore records of 372,000 keys. The dense ones are
//! decided off the worker threads one at a time; those past the cap are refused with 400 before
//! they are parsed, the records denied without being read; kube-apiserver's reviews on fresh
//! connections are answered 200 within 2 s meanwhile, the probes answer, and the resident memory
//! stays under the arithmetic's bound.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::attack::{self, Answered};
use super::served::{DEPLOYMENT, Served, mib};
use ksvc_webhook::admission::request::MAX_VALUES;

const SEVEN_MIB: usize = 7 << 20;

fn review(spec: serde_json::Value, annotations: serde_json::Value, pad: usize) -> Vec<u8> {
    let ksvc = json!({"apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"name": "app", "namespace": "apps", "annotations": annotations},
        "spec": {"template": {"spec": spec}}, "status": {"pad": "p".repeat(pad)}});
    let gvk = json!({"group": "serving.knative.dev", "version": "v1", "kind": "Service"});
    serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "forged", "kind": gvk, "operation": "CREATE", "namespace": "apps",
                    "name": "app", "userInfo": {"username": "tenant"}, "object": ksvc}}),
    )
    .unwrap()
}

/// `spec` and `annotations`, padded to 7 MiB.
fn seven_mib(spec: serde_json::Value, annotations: serde_json::Value) -> Vec<u8> {
    let bare = review(spec.clone(), annotations.clone(), 0).len();
    review(spec, annotations, SEVEN_MIB.saturating_sub(bare))
}

fn ports(n: usize) -> serde_json::Value {
    json!({"containers": [{"name": "app", "image": "i", "ports": vec![0; n]}]})
}

/// The three forged reviews.
fn forged() -> [Vec<u8>; 3] {
    let record: serde_json::Map<_, _> =
        (0..372_000).map(|i| (format!("{i:x}"), json!(0))).collect();
    let record = serde_json::to_string(&record).unwrap();
    [
        seven_mib(ports(MAX_VALUES - 64), json!({})),
        seven_mib(ports(SEVEN_MIB / 2 - 4096), json!({})),
        seven_mib(ports(1), json!({"flyte.org/stop-restore": record})),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_reviews_costly_to_decide_leave_the_others_answered() {
    let (served, baseline) = Served::warmed(DEPLOYMENT, None).await;
    let bodies = forged().map(Arc::new);
    let end = Instant::now() + Duration::from_secs(12);
    let attackers: Vec<_> = (0..6)
        .map(|i| {
            let (served, body) = (served.clone(), bodies[i % 3].clone());
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                while Instant::now() < end {
                    let Ok(mut conn) = served
                        .connect(Some(attack::attacker(i)), &[b"http/1.1"])
                        .await
                    else {
                        continue;
                    };
                    if let Ok((status, _)) = conn.review(body.to_vec()).await {
                        statuses.push(status.as_u16());
                    }
                }
                statuses
            })
        })
        .collect();
    let probes = tokio::spawn({
        let served = served.clone();
        async move { attack::probes(&served, end).await }
    });
    let reviews: Answered = attack::fresh_reviews(&served, end).await;
    let probes = probes.await.unwrap();
    let mut answered = Vec::new();
    for task in attackers {
        answered.push(task.await.unwrap());
    }
    let peak = served.memory("VmHWM");
    let bound = served.memory_bound(baseline);
    println!(
        "forged 7 MiB reviews: answers {answered:?}; reviews {}/{} answered within 2 s (slowest \
         {:.0} ms), probes {}/{}; RSS {:.1} MiB idle, peak {:.1} MiB, bound {:.1} MiB",
        reviews.ok,
        reviews.total,
        reviews.slowest.as_secs_f64() * 1e3,
        probes.ok,
        probes.total,
        mib(baseline),
        mib(peak),
        mib(bound),
    );
    // The dense review is decided (200), the one past the cap refused before parsing (400).
    assert!(answered[0].contains(&200), "{answered:?}");
    assert!(answered[1].contains(&400), "{answered:?}");
    reviews.assert_kept("forged reviews");
    assert_eq!(probes.ok, probes.total, "a probe failed: {probes:?}");
    assert!(peak <= bound, "peak {peak} over the bound {bound}");
}
