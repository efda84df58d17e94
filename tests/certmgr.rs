//! Certificate self-management against the in-test Kubernetes API (`support::FakeApi`): the
//! real Kubernetes JSON for the calls `certmgr` makes (Secret get/create/replace, webhook
//! configuration get/JSON-patch), with resourceVersion preconditions, AlreadyExists and a failing
//! JSON Patch `test` as the API server answers them, and other writers staged just before a call
//! ([`FakeApi::before_next`]).

// A test crate: its helpers (outside `#[test]` functions) may panic on a broken fixture too.
#![allow(clippy::unwrap_used)]

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response};
use k8s_openapi::api::core::v1::Secret;
use ksvc_webhook::certmgr::pki;
use ksvc_webhook::certmgr::{CertArgs, Manager, Plan, SecretData, Synced, plan::Fresh};
use serde_json::json;
use support::FakeApi;
use support::certs::{CONFIG, CONFIGS, NS, SECRET, bundles, cert_args, webhook_config};
use support::fake_api::Fault;
use support::harness::trusted;
use time::{Duration, OffsetDateTime};

const SECRETS: &str = "secrets";
const GUARD: &str = "ksvc-webhook-revision-guard.flyte.org";
const GUARDS: &str = "validatingwebhookconfigurations";

/// The fake API with the webhook's configuration (two webhooks) stored.
async fn with_config() -> FakeApi {
    let api = FakeApi::start().await;
    api.put(CONFIGS, webhook_config(&[CONFIG, "second.flyte.org"]));
    api
}

fn secret(api: &FakeApi) -> Option<Secret> {
    api.get(SECRETS, NS, SECRET)
        .map(|v| serde_json::from_value(v).unwrap())
}

fn data(api: &FakeApi) -> SecretData {
    SecretData::from_secret(&secret(api).unwrap()).unwrap()
}

/// Every write the fake answered, as `METHOD resource[/name]`.
fn writes(api: &FakeApi) -> Vec<String> {
    api.requests()
        .iter()
        .filter(|r| r.method != Method::GET)
        .map(|r| match &r.name {
            Some(name) => format!("{} {}/{name}", r.method, r.resource),
            None => format!("{} {}", r.method, r.resource),
        })
        .collect()
}

fn args() -> CertArgs {
    CertArgs {
        guard_config_name: GUARD.into(),
        ..cert_args()
    }
}

/// One sync round at [`t0`] into a fresh directory, as the leader or not.
async fn sync_once(api: &FakeApi, leader: bool) -> Synced {
    let dir = tempfile::tempdir().unwrap();
    Manager::new(api.client(), &args(), dir.path())
        .sync(t0(), leader)
        .await
        .unwrap()
}

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

fn read(dir: &std::path::Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap()
}

#[tokio::test]
async fn first_start_creates_the_secret_writes_files_and_publishes_the_bundle() {
    let api = with_config().await;
    let dir = tempfile::tempdir().unwrap();
    let manager = Manager::new(api.client(), &args(), dir.path());
    let synced = manager.sync(t0(), true).await.unwrap();
    assert_eq!(synced.steps, vec![Plan::CreateAll(Fresh::Missing)]);
    assert!(synced.files_changed && synced.bundle_published);

    let secret = secret(&api).unwrap();
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let keys: Vec<_> = secret.data.as_ref().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["ca.crt", "ca.key", "tls.crt", "tls.key"]);
    let data = data(&api);
    assert_eq!(read(dir.path(), "tls.crt"), data.serving.cert_pem);
    assert_eq!(read(dir.path(), "tls.key"), data.serving.key_pem);
    assert_eq!(read(dir.path(), "ca.crt").into_bytes(), data.bundle());
    assert_eq!(
        bundles(&api),
        vec![data.bundle(), data.bundle()],
        "every webhook"
    );
    assert_eq!(
        writes(&api),
        vec![
            format!("POST {SECRETS}"),
            format!("PATCH {CONFIGS}/{CONFIG}"),
        ]
    );

    // A second round finds nothing to do and writes nothing.
    let again = manager
        .sync(t0() + Duration::minutes(1), true)
        .await
        .unwrap();
    assert_eq!(again, Default::default());
    assert_eq!(writes(&api).len(), 2);
}

#[tokio::test]
async fn a_second_replica_reuses_the_secret_and_never_touches_the_configuration() {
    let api = with_config().await;
    let first = tempfile::tempdir().unwrap();
    let second = tempfile::tempdir().unwrap();
    Manager::new(api.client(), &args(), first.path())
        .sync(t0(), true)
        .await
        .unwrap();
    let before = secret(&api).unwrap();
    let config_calls = || {
        let requests = api.requests();
        requests.iter().filter(|r| r.resource == CONFIGS).count()
    };
    let leaders_calls = config_calls();

    let synced = Manager::new(api.client(), &args(), second.path())
        .sync(t0(), false)
        .await
        .unwrap();
    assert!(synced.steps.is_empty() && synced.files_changed && !synced.bundle_published);
    assert_eq!(
        secret(&api).unwrap(),
        before,
        "the Secret is reused as it is"
    );
    for file in ["tls.crt", "tls.key", "ca.crt"] {
        assert_eq!(
            read(first.path(), file),
            read(second.path(), file),
            "{file}"
        );
    }
    assert_eq!(config_calls(), leaders_calls, "only the leader's calls");
}

#[tokio::test]
async fn replicas_racing_at_first_start_converge_on_one_secret() {
    let api = with_config().await;
    // Another replica's Secret lands between our read (404) and our create.
    let other = tempfile::tempdir().unwrap();
    let winner = FakeApi::start().await;
    Manager::new(winner.client(), &args(), other.path())
        .sync(t0(), false)
        .await
        .unwrap();
    let racer = winner.get(SECRETS, NS, SECRET).unwrap();
    api.before_next("create", SECRETS, move |fake| fake.put(SECRETS, racer));

    let dir = tempfile::tempdir().unwrap();
    let synced = Manager::new(api.client(), &args(), dir.path())
        .sync(t0(), false)
        .await
        .unwrap();
    assert!(
        synced.steps.is_empty(),
        "our create lost: nothing of ours was written"
    );
    assert_eq!(data(&api), data(&winner));
    assert_eq!(read(dir.path(), "tls.crt"), read(other.path(), "tls.crt"));
    assert_eq!(writes(&api), vec![format!("POST {SECRETS}")]);
}

#[tokio::test]
async fn serving_certificate_is_rotated_in_the_window_by_the_leader_only() {
    let api = with_config().await;
    let dir = tempfile::tempdir().unwrap();
    let manager = Manager::new(api.client(), &args(), dir.path());
    manager.sync(t0(), true).await.unwrap();
    let first = data(&api);
    let window = t0() + Duration::days(61); // 90-day certificate, 29 days left

    let follower = manager.sync(window, false).await.unwrap();
    assert!(follower.steps.is_empty(), "a follower waits for the leader");
    assert_eq!(data(&api), first);

    let leader = manager.sync(window, true).await.unwrap();
    assert_eq!(leader.steps, vec![Plan::RotateServing]);
    let rotated = data(&api);
    assert_ne!(rotated.serving, first.serving);
    assert_eq!(rotated.ca, first.ca, "same CA: the bundle does not change");
    assert!(!leader.bundle_published);
    assert_eq!(read(dir.path(), "tls.crt"), rotated.serving.cert_pem);
    assert_eq!(
        pki::not_after(&rotated.serving.cert_pem).unwrap(),
        window + Duration::days(90)
    );
}

#[tokio::test]
async fn ca_rotation_keeps_the_old_ca_in_the_bundle_until_it_is_safe_to_drop() {
    let api = with_config().await;
    let dir = tempfile::tempdir().unwrap();
    let manager = Manager::new(api.client(), &args(), dir.path());
    manager.sync(t0(), true).await.unwrap();
    let old = data(&api);
    let pem = |d: &std::path::Path| read(d, "ca.crt");
    let has = |bundle: &[u8], cert: &str| String::from_utf8_lossy(bundle).contains(cert.trim());

    // 1. Within a year of the CA's expiry: stage a new CA; the old one still signs.
    let t1 = t0() + Duration::days(3650 - 364);
    let staged = manager.sync(t1, true).await.unwrap();
    // (the serving certificate is renewed first: it is past two thirds too)
    assert_eq!(staged.steps, vec![Plan::RotateServing, Plan::StageCa]);
    let s1 = data(&api);
    let next = s1.next_ca.clone().unwrap().value;
    assert_eq!(s1.ca, old.ca);
    assert!(staged.bundle_published);
    for bundle in bundles(&api) {
        assert!(has(&bundle, &old.ca.cert_pem) && has(&bundle, &next.cert_pem));
    }
    assert!(has(pem(dir.path()).as_bytes(), &next.cert_pem));
    for bundle in bundles(&api) {
        assert!(
            trusted(&bundle, &s1.serving.cert_pem, t1) == Some(true),
            "the old CA still signs"
        );
    }

    // 2. During the overlap nothing moves; after it, the new CA signs the serving certificate.
    let quiet = manager.sync(t1 + Duration::minutes(9), true).await.unwrap();
    assert!(quiet.steps.is_empty());
    let t2 = t1 + Duration::minutes(10);
    let promoted = manager.sync(t2, true).await.unwrap();
    assert_eq!(promoted.steps, vec![Plan::PromoteCa]);
    let s2 = data(&api);
    assert_eq!(s2.ca, next);
    assert_eq!(s2.previous_ca.as_ref().unwrap().value, old.ca.cert_pem);
    assert_eq!(read(dir.path(), "tls.crt"), s2.serving.cert_pem);
    for bundle in bundles(&api) {
        assert!(
            has(&bundle, &old.ca.cert_pem),
            "replicas may still serve the old certificate"
        );
        assert!(has(&bundle, &next.cert_pem));
    }

    // 3. A follower picks up the new certificate; after the overlap the leader drops the old CA.
    let follower = tempfile::tempdir().unwrap();
    Manager::new(api.client(), &args(), follower.path())
        .sync(t2 + Duration::minutes(1), false)
        .await
        .unwrap();
    assert_eq!(read(follower.path(), "tls.crt"), s2.serving.cert_pem);
    let dropped = manager
        .sync(t2 + Duration::minutes(10), true)
        .await
        .unwrap();
    assert_eq!(dropped.steps, vec![Plan::DropOldCa]);
    assert!(dropped.bundle_published);
    for bundle in bundles(&api) {
        assert!(!has(&bundle, &old.ca.cert_pem));
        assert!(has(&bundle, &next.cert_pem));
        let t3 = t2 + Duration::minutes(10);
        assert_eq!(trusted(&bundle, &s2.serving.cert_pem, t3), Some(true));
        assert_eq!(
            trusted(&bundle, &s1.serving.cert_pem, t3),
            Some(false),
            "the old chain is gone"
        );
    }
    assert_eq!(data(&api).previous_ca, None);
}

#[tokio::test]
async fn the_new_ca_does_not_sign_before_the_bundle_is_published() {
    // No webhook configuration: the staged CA can never be confirmed as published.
    let api = FakeApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let manager = Manager::new(api.client(), &args(), dir.path());
    manager.sync(t0(), true).await.unwrap();
    let t1 = t0() + Duration::days(3650 - 364);
    manager.sync(t1, true).await.unwrap();
    let later = manager.sync(t1 + Duration::hours(5), true).await.unwrap();
    assert!(later.steps.is_empty(), "{:?}", later.steps);
    assert!(data(&api).next_ca.is_some());
}

#[tokio::test]
async fn a_bundle_patch_that_loses_a_race_is_retried() {
    let api = with_config().await;
    // Another writer changes the configuration between our read and our patch.
    api.before_next("patch", CONFIGS, |fake| {
        let config = fake.get(CONFIGS, "", CONFIG).unwrap();
        fake.put(CONFIGS, config);
    });
    let synced = sync_once(&api, true).await;
    assert!(synced.bundle_published);
    let patches = writes(&api)
        .iter()
        .filter(|w| w.starts_with("PATCH"))
        .count();
    assert_eq!(
        patches, 2,
        "the first patch failed its resourceVersion test"
    );
    assert_eq!(bundles(&api)[0], data(&api).bundle());
}

#[tokio::test]
async fn an_unreadable_secret_is_replaced_conditionally() {
    let api = with_config().await;
    api.put(
        SECRETS,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": SECRET, "namespace": NS},
            "data": {"tls.crt": "Z2FyYmFnZQ=="}}),
    );
    let synced = sync_once(&api, false).await;
    assert_eq!(synced.steps, vec![Plan::CreateAll(Fresh::Unreadable)]);
    assert_eq!(writes(&api), vec![format!("PUT {SECRETS}/{SECRET}")]);
    assert!(secret(&api).is_some_and(|s| SecretData::from_secret(&s).is_ok()));
}

#[tokio::test]
async fn start_returns_once_the_files_exist_and_does_nothing_when_turned_off() {
    let api = with_config().await;
    let dir = tempfile::tempdir().unwrap();
    let (_tx, leader) = tokio::sync::watch::channel(true);
    let handle = ksvc_webhook::certmgr::start(
        api.client(),
        &args(),
        leader.clone(),
        dir.path().into(),
        Default::default(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(read(dir.path(), "tls.crt"), data(&api).serving.cert_pem);
    assert_eq!(bundles(&api)[0], data(&api).bundle());
    handle.abort();

    let off = CertArgs {
        self_managed_certs: Some(false),
        ..args()
    };
    let empty = tempfile::tempdir().unwrap();
    let none = ksvc_webhook::certmgr::start(
        api.client(),
        &off,
        leader,
        empty.path().into(),
        Default::default(),
    )
    .await
    .unwrap();
    assert!(none.is_none());
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
}

/// On a paused clock: a transport that never answers (no fake API needed), so the 10 s call
/// timeout passes at once.
#[tokio::test(start_paused = true)]
async fn an_api_server_that_never_answers_times_out() {
    let service = tower::service_fn(|_req: Request<kube::client::Body>| async {
        std::future::pending::<Result<Response<Full<Bytes>>, Infallible>>().await
    });
    let client = kube::Client::new(service, "default");
    let dir = tempfile::tempdir().unwrap();
    let err = Manager::new(client, &args(), dir.path())
        .sync(t0(), true)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ksvc_webhook::certmgr::Error::Timeout {
                call: "get secret",
                secs: 10
            }
        ),
        "{err:?}"
    );
}

/// The start-up hang of a fresh install: the first Secret create fails, and leadership changes
/// while the bootstrap waits to retry. Holding the leadership channel's read lock across that
/// wait blocked the elector's write, and with it the runtime thread: nothing moved again. The
/// whole start runs on one runtime thread in its own OS thread, so a deadlock fails the test
/// instead of hanging it.
#[test]
fn a_leadership_change_during_a_bootstrap_retry_does_not_hang_the_start() {
    // The fake API serves from a runtime of its own, which lives as long as the test.
    let served = tokio::runtime::Runtime::new().unwrap();
    let api = served.block_on(async {
        let api = with_config().await;
        // The first Secret create fails, as while the namespace is being created.
        api.inject("create", SECRETS, None, Fault::Status(404), 1);
        api
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let fake = api.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let result = runtime.block_on(async move {
            let (tx, leader) = tokio::sync::watch::channel(false);
            // The Lease is won while the bootstrap waits to retry its failed create.
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                tx.send_replace(true);
                std::future::pending::<()>().await
            });
            ksvc_webhook::certmgr::start(fake.client(), &args(), leader, path, Default::default())
                .await
                .map(|task| task.is_some())
        });
        let _ = done_tx.send(result.map_err(|e| e.to_string()));
    });
    let outcome = done_rx.recv_timeout(std::time::Duration::from_secs(20));
    assert_eq!(
        outcome,
        Ok(Ok(true)),
        "the start must finish once the namespace exists"
    );
    assert_eq!(read(dir.path(), "tls.crt"), data(&api).serving.cert_pem);
    // The failed create was retried, and the leader it had become published the bundle.
    assert_eq!(bundles(&api)[0], data(&api).bundle());
}

#[tokio::test]
async fn the_leader_publishes_the_bundle_to_the_revision_guard_too() {
    let api = with_config().await;
    let guard = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": GUARD},
        "webhooks": [{
            "name": "revision-guard.ksvc-webhook.flyte.org",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {"service": {"name": "ksvc-webhook", "namespace": NS,
                "path": "/validate-revision-delete", "port": 443}}
        }]
    });
    api.put(GUARDS, guard);
    let synced = sync_once(&api, true).await;
    assert!(synced.bundle_published);
    use base64::Engine as _;
    let stored = api.get(GUARDS, "", GUARD).unwrap()["webhooks"][0]["clientConfig"]["caBundle"]
        .as_str()
        .map(|b| base64::engine::general_purpose::STANDARD.decode(b).unwrap());
    assert_eq!(stored, Some(data(&api).bundle()));
    assert!(
        writes(&api).contains(&format!("PATCH {GUARDS}/{GUARD}")),
        "{:?}",
        writes(&api)
    );
}

#[tokio::test]
async fn a_missing_revision_guard_never_holds_up_the_certificates() {
    // No guard configuration at all (an install without it): the round still succeeds, and the
    // metrics say which configuration lacks the bundle.
    let api = with_config().await;
    let dir = tempfile::tempdir().unwrap();
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = ksvc_webhook::certmgr::metrics::Metrics::register(&mut registry);
    let synced = Manager::new(api.client(), &args(), dir.path())
        .with_metrics(metrics)
        .sync(t0(), true)
        .await
        .unwrap();
    assert!(synced.bundle_published);
    assert_eq!(bundles(&api)[0], data(&api).bundle());
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for line in [
        r#"ksvc_webhook_cabundle_publications_total{config="webhook",result="patched"} 1"#,
        r#"ksvc_webhook_cabundle_publications_total{config="revision-guard",result="missing"} 1"#,
        r#"ksvc_webhook_cabundle_current{config="webhook"} 1"#,
        r#"ksvc_webhook_cabundle_current{config="revision-guard"} 0"#,
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}
