//! An install cannot block the cluster (docs/install.md): the manifests register the webhook
//! with `failurePolicy: Ignore`, and the leader writes the configured policy only once the
//! configuration carries its CA bundle and its own listener has answered through TLS. The
//! certificate Secret it creates is owned by the webhook configuration, so an uninstall removes
//! it. A re-applied `Ignore` is put back at once, and with cert-manager the switch waits for
//! cainjector's bundle. Against the in-test API server (`support::FakeApi`), with the manager and
//! with `serve`.

// A test crate: its helpers may panic on a broken fixture too.
#![allow(clippy::unwrap_used)]

use std::process::Stdio;

use ksvc_webhook::certmgr::{CertArgs, FailurePolicy, Manager};
use serde_json::{Value, json};
use support::FakeApi;
use support::certs::{CONFIG, CONFIGS, NS, SECRET, cert_args, webhook_config};
use support::harness::KillOnDrop;
use support::poll;
use time::OffsetDateTime;
use tokio::sync::watch;

/// The configuration as the manifests install it: one webhook, `Ignore`, no caBundle.
async fn installed() -> FakeApi {
    let api = FakeApi::start().await;
    let mut config = webhook_config(&[CONFIG]);
    config["webhooks"][0]["failurePolicy"] = "Ignore".into();
    api.put(CONFIGS, config);
    api
}

fn args(policy: FailurePolicy) -> CertArgs {
    CertArgs {
        failure_policy: policy,
        ..cert_args()
    }
}

/// `serve` with `flags`, its output dropped; killed when the guard drops.
fn quiet(mut serve: std::process::Command, flags: &[&str]) -> KillOnDrop {
    let child = serve
        .args(flags)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    KillOnDrop(Some(child))
}

fn policy(api: &FakeApi) -> Value {
    api.get(CONFIGS, "", CONFIG).unwrap()["webhooks"][0]["failurePolicy"].clone()
}

fn bundle(api: &FakeApi) -> Value {
    api.get(CONFIGS, "", CONFIG).unwrap()["webhooks"][0]["clientConfig"]["caBundle"].clone()
}

#[tokio::test]
async fn fail_is_written_only_after_the_bundle_is_published_and_the_replica_answered() {
    let api = installed().await;
    let dir = tempfile::tempdir().unwrap();
    let (answer, answered) = watch::channel(false);
    let manager =
        Manager::new(api.client(), &args(FailurePolicy::Fail), dir.path()).with_answered(answered);
    let now = OffsetDateTime::now_utc();
    // A replica that does not lead never touches the policy, answered or not.
    let follower = manager.sync(now, false).await.unwrap();
    assert!(!follower.policy_set);
    assert_eq!(policy(&api), "Ignore");
    // The leader publishes the bundle but has not answered yet: still Ignore.
    let first = manager.sync(now, true).await.unwrap();
    assert!(first.bundle_published && !first.policy_set, "{first:?}");
    assert!(bundle(&api).is_string());
    assert_eq!(policy(&api), "Ignore");
    // Its listener answered: the configured policy holds from the next round.
    answer.send_replace(true);
    let second = manager.sync(now, true).await.unwrap();
    assert!(second.policy_set, "{second:?}");
    assert_eq!(policy(&api), "Fail");
    // A re-applied manifest puts Ignore back; the next round restores Fail.
    api.edit(CONFIGS, "", CONFIG, |c| {
        c["webhooks"][0]["failurePolicy"] = json!("Ignore")
    });
    assert!(manager.sync(now, true).await.unwrap().policy_set);
    assert_eq!(policy(&api), "Fail");
    // Nothing left to write.
    assert!(!manager.sync(now, true).await.unwrap().policy_set);
}

#[tokio::test]
async fn a_configured_ignore_is_written_without_waiting() {
    let api = installed().await;
    api.edit(CONFIGS, "", CONFIG, |c| {
        c["webhooks"][0]["failurePolicy"] = json!("Fail")
    });
    let dir = tempfile::tempdir().unwrap();
    let manager = Manager::new(api.client(), &args(FailurePolicy::Ignore), dir.path())
        .with_answered(watch::channel(false).1);
    let synced = manager.sync(OffsetDateTime::now_utc(), true).await.unwrap();
    assert!(synced.policy_set, "{synced:?}");
    assert_eq!(policy(&api), "Ignore");
}

/// The Secret after one sync round, not as the leader.
async fn secret_of_a_follower_sync(api: &FakeApi) -> Value {
    let dir = tempfile::tempdir().unwrap();
    Manager::new(api.client(), &args(FailurePolicy::Fail), dir.path())
        .sync(OffsetDateTime::now_utc(), false)
        .await
        .unwrap();
    api.get("secrets", NS, SECRET).unwrap()
}

#[tokio::test]
async fn the_secret_it_creates_is_owned_by_the_webhook_configuration() {
    let api = installed().await;
    let uid = api.get(CONFIGS, "", CONFIG).unwrap()["metadata"]["uid"].clone();
    let secret = secret_of_a_follower_sync(&api).await;
    let owners = secret["metadata"]["ownerReferences"].as_array().unwrap();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(owners[0]["kind"], "MutatingWebhookConfiguration");
    assert_eq!(owners[0]["name"], CONFIG);
    assert_eq!(owners[0]["uid"], uid);
    assert!(owners[0].get("blockOwnerDeletion").is_none());
}

#[tokio::test]
async fn without_the_configuration_the_secret_has_no_owner_and_the_server_still_starts() {
    let api = FakeApi::start().await;
    let secret = secret_of_a_follower_sync(&api).await;
    assert!(secret["metadata"].get("ownerReferences").is_none());
}

/// `serve` as the Deployment runs it: the configuration stays `Ignore` until the process has
/// published the bundle and its own TLS probe of `/readyz` passed, then becomes `Fail`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_switches_to_fail_once_its_own_listener_answers() {
    let api = installed().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.kubeconfig(dir.path());
    let serve = support::cli::self_managed_serve(&kubeconfig, &dir.path().join("certs"));
    let server = quiet(serve, &["--failure-policy=Fail"]);
    let switched = || async { policy(&api) == "Fail" };
    poll::until_async(
        "the leader writes failurePolicy Fail",
        poll::LIMIT,
        switched,
    )
    .await;
    drop(server);
    // The bundle was there first: Fail never points kube-apiserver at an untrusted server.
    assert!(bundle(&api).is_string());
    let patches: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| r.resource == CONFIGS && r.method == hyper::Method::PATCH)
        .collect();
    assert_eq!(patches.len(), 2, "the bundle, then the policy: {patches:?}");
}

/// A re-applied manifest that puts `Ignore` back: the leader sees the change on its watch of the
/// configuration and writes `Fail` again at once, long before its periodic round (5 minutes
/// here) would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_puts_fail_back_when_a_reapply_sets_ignore() {
    let api = installed().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.kubeconfig(dir.path());
    let serve = support::cli::self_managed_serve(&kubeconfig, &dir.path().join("certs"));
    let _server = quiet(serve, &["--failure-policy=Fail", "--cert-sync-interval=5m"]);
    let switched = || async { policy(&api) == "Fail" };
    poll::until_async("the leader writes Fail", poll::LIMIT, switched).await;
    api.edit(CONFIGS, "", CONFIG, |c| {
        c["webhooks"][0]["failurePolicy"] = json!("Ignore")
    });
    poll::until_async("the leader writes Fail again", poll::LIMIT, switched).await;
}

/// With cert-manager (`--cert-manager`, the Secret's files mounted): the server writes no
/// Secret and no bundle; it switches to `Fail` only once cainjector has published the CA of the
/// served certificate (`ca.crt` beside it), and keeps it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_cert_manager_fail_waits_for_cainjectors_bundle() {
    use base64::Engine as _;
    let api = installed().await;
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let made = std::process::Command::new(support::cli::bin())
        .args([
            "certs",
            "--service",
            "ksvc-webhook",
            "--service-namespace",
            NS,
            "--out",
        ])
        .arg(&certs)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let kubeconfig = api.kubeconfig(dir.path());
    let serve = support::cli::serve_in_cluster(&kubeconfig, &certs);
    let flags = [
        "--cert-manager",
        "--failure-policy=Fail",
        "--cert-sync-interval=5m",
    ];
    let _server = quiet(serve, &flags);
    // Its own listener answers, but the configuration carries no CA yet: Ignore holds.
    poll::until_async(
        "the leader watches its configuration",
        poll::LIMIT,
        || async { !api.requests_to(hyper::Method::GET, CONFIGS).is_empty() },
    )
    .await;
    assert_eq!(policy(&api), "Ignore");
    // A bundle of another CA is not enough either: the leader reads it and waits.
    let reads = || api.requests_to(hyper::Method::GET, CONFIGS).len();
    let before = reads();
    let other = ksvc_webhook::certmgr::pki::issue_ca(
        "another-ca",
        OffsetDateTime::now_utc(),
        time::Duration::days(30),
    )
    .unwrap();
    let b64 = |pem: &[u8]| base64::engine::general_purpose::STANDARD.encode(pem);
    api.edit(CONFIGS, "", CONFIG, |c| {
        c["webhooks"][0]["clientConfig"]["caBundle"] = json!(b64(other.cert_pem.as_bytes()))
    });
    poll::until_async("the leader reads the new bundle", poll::LIMIT, || async {
        reads() > before
    })
    .await;
    assert_eq!(policy(&api), "Ignore");
    // cainjector publishes the Secret's ca.crt: Fail follows.
    let ca = std::fs::read(certs.join("ca.crt")).unwrap();
    api.edit(CONFIGS, "", CONFIG, |c| {
        c["webhooks"][0]["clientConfig"]["caBundle"] = json!(b64(&ca))
    });
    let switched = || async { policy(&api) == "Fail" };
    poll::until_async("the leader writes Fail", poll::LIMIT, switched).await;
    api.edit(CONFIGS, "", CONFIG, |c| {
        c["webhooks"][0]["failurePolicy"] = json!("Ignore")
    });
    poll::until_async("the leader writes Fail again", poll::LIMIT, switched).await;
    assert!(api.get("secrets", NS, SECRET).is_none());
    let bundles = api
        .requests_to(hyper::Method::PATCH, CONFIGS)
        .into_iter()
        .filter(|r| r.body.to_string().contains("caBundle"))
        .count();
    assert_eq!(bundles, 0, "cainjector owns the bundle");
}
