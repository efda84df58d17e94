//! The soak (`make soak`; `#[ignore]` otherwise): every attack of `hostile/` at once against the
//! built binary for `SOAK_SECS` (default 60) seconds, while a well-formed client sends reviews
//! as kube-apiserver does. Prints a summary (docs/reliability.md reports it) and checks that
//! every review succeeded and the resident memory stayed under the bound.
//!
//! The attackers connect from 127.0.0.2–127.0.0.9 (other pods); the well-formed client from
//! 127.0.0.1 (kube-apiserver). Attacks: stalled 7 MiB uploads over HTTP/1.1 and over HTTP/2
//! streams; distinct long names on `/apps/{ns}/{name}` with a valid token without rights;
//! distinct garbage tokens on `/apps`; forged stop-restore records on `/mutate`; open
//! `/apps/watch` streams.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::StatusCode;
use ksvc_webhook::server::memory::OTHERS;
use ksvc_webhook::server::routes::BODY_LIMIT;
use serde_json::json;

use super::attack::{self, one_review};
use super::served::{Served, mib};
use support::harness::Conn;
use support::poll;
use support::{FakeApi, ksvc};

/// Answers by attack and status, shared by the attackers.
#[derive(Clone, Default)]
struct Tally(Arc<Mutex<BTreeMap<(&'static str, String), usize>>>);

impl Tally {
    fn add(&self, attack: &'static str, outcome: impl Into<String>) {
        *self
            .0
            .lock()
            .unwrap()
            .entry((attack, outcome.into()))
            .or_default() += 1;
    }
}

fn attacker(i: usize) -> Option<IpAddr> {
    Some(IpAddr::from([127, 0, 0, 2 + u8::try_from(i % 8).unwrap()]))
}

/// Run `one` (with a fresh connection from attacker `i` whenever the last one broke) until `end`.
async fn flood<F, Fut>(served: Arc<Served>, i: usize, h2: bool, end: Instant, mut one: F)
where
    F: FnMut(Conn, u64) -> Fut,
    Fut: Future<Output = Option<Conn>>,
{
    let alpn: &[&[u8]] = if h2 { &[b"h2"] } else { &[b"http/1.1"] };
    let mut conn = None;
    let mut n = 0;
    while Instant::now() < end {
        n += 1;
        let c = match conn.take() {
            Some(c) => c,
            None => match served.connect(attacker(i), alpn).await {
                Ok(c) => c,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        conn = one(c, n).await;
    }
}

/// A start of a stopped managed app whose stop-restore record was written by the user: it
/// would rename the app's project.
fn forged_start(uid: &str) -> Vec<u8> {
    let labels = json!({"flyte.org/project": "proj", "flyte.org/domain": "dev",
                        "flyte.org/app-name": "app"});
    let record = json!({"labels": {"flyte.org/project": "victim"}}).to_string();
    let object = |stopped: bool| {
        let mut labels = labels.clone();
        if stopped {
            labels["flyte.org/app-stopped"] = json!("true");
        }
        json!({"apiVersion": "serving.knative.dev/v1", "kind": "Service",
               "metadata": {"name": "app-proj-dev", "namespace": "apps", "labels": labels,
                            "annotations": {"flyte.org/stop-restore": record}},
               "spec": {"template": {"spec": {"containers": [{"image": "registry.example/app:1"}]}}}})
    };
    let gvk = json!({"group": "serving.knative.dev", "version": "v1", "kind": "Service"});
    let gvr = json!({"group": "serving.knative.dev", "version": "v1", "resource": "services"});
    serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk,
            "requestResource": gvr, "name": "app-proj-dev", "namespace": "apps",
            "operation": "UPDATE", "userInfo": {"username": "tenant"},
            "object": object(false), "oldObject": object(true), "dryRun": false}}),
    )
    .unwrap()
}

/// What became of a forged start: refused, or allowed with the project label kept (the record's
/// keys that are not the stop's are dropped), or, the hole this soak guards, rewritten.
fn forged_outcome(response: &serde_json::Value) -> String {
    use base64::Engine as _;
    if response["allowed"] != true {
        return "refused".into();
    }
    let patch = response["patch"].as_str().unwrap_or_default();
    let patch = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .unwrap_or_default();
    let patch = String::from_utf8_lossy(&patch);
    match patch.contains("flyte.org~1project") {
        true => "allowed, PROJECT REWRITTEN".into(),
        false => "allowed, identity kept".into(),
    }
}

/// `count` attackers (`i` = 0..count, each from its own address), each running the attack
/// `attacker(i)` makes on its connection until `end`.
fn floods<F, Fut>(
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    served: &Arc<Served>,
    count: usize,
    h2: bool,
    end: Instant,
    attacker: impl Fn(usize) -> F,
) where
    F: FnMut(Conn, u64) -> Fut + Send + 'static,
    Fut: Future<Output = Option<Conn>> + Send + 'static,
{
    for i in 0..count {
        tasks.push(tokio::spawn(flood(served.clone(), i, h2, end, attacker(i))));
    }
}

/// Every attack, each until `end`.
fn attacks(served: &Arc<Served>, end: Instant, tally: &Tally) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    floods(&mut tasks, served, 16, false, end, |_| {
        let t = tally.clone();
        move |c, _| {
            let t = t.clone();
            async move {
                let ended = attack::stalled(c, BODY_LIMIT).await;
                t.add("stalled upload, HTTP/1.1", ended.outcome());
                None
            }
        }
    });
    floods(&mut tasks, served, 2, true, end, |_| {
        let t = tally.clone();
        move |mut c, _| {
            let t = t.clone();
            async move {
                // Once the settings are known, streams beyond the limit queue.
                c.get("/healthz").await;
                let streams: Vec<_> = (0..20)
                    .map(|_| tokio::spawn(attack::stalled(c.stream(), BODY_LIMIT)))
                    .collect();
                for stream in streams {
                    let ended = stream.await.unwrap();
                    t.add("stalled upload, HTTP/2 stream", ended.outcome());
                }
                None
            }
        }
    });
    floods(&mut tasks, served, 2, false, end, |i| {
        let t = tally.clone();
        move |mut c, n| {
            let t = t.clone();
            async move {
                let name = format!("{}{n}", "n".repeat(8 * 1024));
                let answer = c
                    .send(attack::get(&format!("/apps/ns-{i}/{name}"), "t-nobody"))
                    .await;
                t.add("long name on /apps/{ns}/{name}", status(&answer));
                tokio::time::sleep(Duration::from_millis(20)).await;
                answer.ok().map(|_| c)
            }
        }
    });
    floods(&mut tasks, served, 2, false, end, |i| {
        let t = tally.clone();
        move |mut c, n| {
            let t = t.clone();
            async move {
                let answer = c
                    .send(attack::get("/apps", &format!("garbage-{i}-{n}")))
                    .await;
                t.add("garbage token on /apps", status(&answer));
                tokio::time::sleep(Duration::from_millis(5)).await;
                answer.ok().map(|_| c)
            }
        }
    });
    floods(&mut tasks, served, 2, false, end, |i| {
        let t = tally.clone();
        move |mut c, n| {
            let t = t.clone();
            async move {
                let answer = c.review(forged_start(&format!("forged-{i}-{n}"))).await;
                let outcome = match &answer {
                    Ok((StatusCode::OK, body)) => {
                        let v: serde_json::Value = serde_json::from_slice(body).unwrap();
                        forged_outcome(&v["response"])
                    }
                    _ => status(&answer),
                };
                t.add("forged stop-restore on /mutate", outcome);
                answer.ok().map(|_| c)
            }
        }
    });
    floods(&mut tasks, served, 8, false, end, |_| {
        let t = tally.clone();
        move |mut c, _| {
            let t = t.clone();
            async move {
                let stream = c.send(attack::get("/apps/watch", "t-viewer"));
                let until = tokio::time::Instant::from_std(end);
                let outcome = match tokio::time::timeout_at(until, stream).await {
                    Err(_) => "open to the end".to_owned(),
                    Ok(answer) => format!("ended: {}", status(&answer)),
                };
                t.add("/apps/watch stream", outcome);
                None
            }
        }
    });
    tasks
}

/// `p50 … ms, p99 … ms` of some latencies.
fn percentiles(mut latencies: Vec<Duration>) -> String {
    latencies.sort();
    let at = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1e3;
    format!("p50 {:.2} ms, p99 {:.2} ms", at(0.5), at(0.99))
}

fn status<E>(answer: &Result<(StatusCode, bytes::Bytes), E>) -> String {
    match answer {
        Ok((status, _)) => status.as_u16().to_string(),
        Err(_) => "dropped".into(),
    }
}

/// The well-formed client: sequential reviews over keep-alive, reconnecting when needed. A
/// connection the server retired (its last answer said `Connection: close`: 1,000 requests, or
/// 10 minutes) is left for a new one before a review is sent on it, as kube-apiserver's pool
/// does; only a review sent and not answered 200 is a failure.
async fn kube_apiserver(served: Arc<Served>, id: usize, end: Instant) -> (Vec<Duration>, usize) {
    let (mut ok, mut failed) = (Vec::new(), 0);
    let mut conn: Option<Conn> = None;
    let mut n = 0;
    while Instant::now() < end {
        n += 1;
        let reusable = match conn.take() {
            Some(mut c) => c.ready().await.then_some(c),
            None => None,
        };
        let mut c = match reusable {
            Some(c) => c,
            None => match served.connect(None, &[b"http/1.1"]).await {
                Ok(c) => c,
                Err(_) => {
                    failed += 1;
                    continue;
                }
            },
        };
        match one_review(&mut c, &format!("kube-{id}-{n}")).await {
            Some(took) => {
                ok.push(took);
                conn = Some(c);
            }
            None => failed += 1,
        }
    }
    (ok, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a minute long: run with `make soak`"]
async fn soak_every_attack_at_once_while_reviews_keep_succeeding() {
    let secs: u64 = std::env::var("SOAK_SECS").map_or(60, |s| s.parse().unwrap());
    let fake = FakeApi::start().await;
    for i in 0..20 {
        fake.put(
            "services",
            ksvc(&format!("app-{i}"), false, false, 1, &[], ""),
        );
    }
    fake.add_token("t-viewer", "viewer", &[]);
    fake.add_token("t-nobody", "nobody", &[]);
    for verb in ["get", "list", "watch"] {
        fake.grant("viewer", verb, None);
    }
    // With HTTP/2 a connection may buffer more: fewer of them (docs/reliability.md).
    let args = ["--http2", "--max-connections=64", "--pod-name=soak"];
    let served = Served::start(&args, Some(&fake));
    let s = &served;
    let synced = || async move {
        s.h1()
            .await
            .send(attack::get("/apps", "t-viewer"))
            .await
            .unwrap()
            .0
            == StatusCode::OK
    };
    let start = Duration::from_secs(30);
    poll::until_async("the status API serves the cache", start, synced).await;
    let baseline = served.warm_up().await;
    let served = Arc::new(served);
    // The same client without attackers, for comparison.
    let (quiet, quiet_failed) =
        kube_apiserver(served.clone(), 9, Instant::now() + Duration::from_secs(5)).await;
    let reviews_before = fake.requests().len();
    let cpu_before = served.cpu();
    let end = Instant::now() + Duration::from_secs(secs);
    let tally = Tally::default();
    let attackers = attacks(&served, end, &tally);
    let clients: Vec<_> = (0..2)
        .map(|id| tokio::spawn(kube_apiserver(served.clone(), id, end)))
        .collect();
    let mut peak_sampled = 0;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(250)).await;
        peak_sampled = peak_sampled.max(served.memory("VmRSS"));
    }
    let (mut latencies, mut failed) = (Vec::new(), 0);
    for client in clients {
        let (ok, f) = client.await.unwrap();
        latencies.extend(ok);
        failed += f;
    }
    let cpu = served.cpu() - cpu_before;
    for task in attackers {
        task.abort();
    }
    let peak = served.memory("VmHWM");
    let bound = served.memory_bound(baseline) + OTHERS;
    let api_calls = fake.requests().len() - reviews_before;
    let total = latencies.len() + failed;
    let success = latencies.len() as f64 / total as f64;
    println!("\nsoak: {secs} s, every attack at once");
    for ((attack, outcome), n) in tally.0.lock().unwrap().iter() {
        println!("soak: {attack}: {outcome} × {n}");
    }
    println!(
        "soak: API calls by the server meanwhile (TokenReview, SubjectAccessReview, watch): {api_calls}"
    );
    println!(
        "soak: server CPU {:.1} s in {secs} s; load average {}",
        cpu.as_secs_f64(),
        std::fs::read_to_string("/proc/loadavg").unwrap().trim()
    );
    println!(
        "soak: well-formed reviews without attack (5 s): {} ok, {quiet_failed} failed, {}",
        quiet.len(),
        percentiles(quiet)
    );
    println!(
        "soak: well-formed reviews under attack: {} of {total} succeeded ({:.2} %), {}",
        latencies.len(),
        success * 100.0,
        percentiles(latencies),
    );
    println!(
        "soak: RSS idle {:.1} MiB, peak sampled {:.1} MiB, VmHWM {:.1} MiB, bound {:.1} MiB",
        mib(baseline),
        mib(peak_sampled),
        mib(peak),
        mib(bound)
    );
    assert_eq!(failed, 0, "{failed} of {total} well-formed reviews failed");
    let rewritten = tally
        .0
        .lock()
        .unwrap()
        .iter()
        .any(|((_, outcome), _)| outcome.contains("REWRITTEN"));
    assert!(
        !rewritten,
        "a forged stop-restore record rewrote an identity label"
    );
    assert!(peak <= bound, "peak {peak} over {bound}");
}
