//! Every way an `app` command can fail against a cluster, as the user sees it: the real binary
//! against the fake API, one message printed once in kubectl's words, and the exit code.
#![allow(clippy::unwrap_used)]

use ksvc_webhook::admission::Policy;
use support::cli::{Ran, run, run_against, run_bin};
use support::fake_api::Fault;
use support::{FakeApi, ksvc};

/// The one sentence of admission's fix for an incomplete identity.
const FIX: &str = "set all three identity labels to make a managed app, or none of them";

fn assert_once(ran: &Ran, needle: &str) {
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert_eq!(ran.stderr.matches(needle).count(), 1, "{}", ran.stderr);
    for dump in ["Status {", "ApiError", "ListMeta", "Some("] {
        assert!(!ran.stderr.contains(dump), "{}", ran.stderr);
    }
}

#[tokio::test]
async fn our_webhooks_denial_is_printed_once_as_kubectl_prints_it() {
    let fake = FakeApi::start().await;
    fake.admit_with(Policy::default());
    let mut bad = ksvc("bad1", false, false, 1, &["bad1-00001"], "bad1-00001");
    bad["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("flyte.org/domain");
    fake.put("services", bad);
    let ran = run(
        &fake,
        &["app", "update", "bad1", "-n", "apps", "--min-scale", "1"],
    )
    .await;
    assert_once(&ran, FIX);
    assert!(
        ran.stderr.starts_with(
            "Error from server (BadRequest): admission webhook \"zz-ksvc-webhook.flyte.org\" \
             denied the request: "
        ),
        "{}",
        ran.stderr
    );
    assert!(ran.stdout.is_empty());
}

#[tokio::test]
async fn knatives_validation_is_printed_as_the_server_said_it() {
    const REFUSAL: &str = "admission webhook \"validation.webhook.serving.knative.dev\" denied the \
        request: validation failed: must not set the field(s): spec.template.spec.containers[0].image";
    let fake = FakeApi::start().await;
    fake.put("services", ksvc("app", false, false, 1, &[], ""));
    fake.inject(
        "update",
        "services",
        None,
        Fault::Refusal(400, "BadRequest", REFUSAL),
        1,
    );
    let ran = run(
        &fake,
        &["app", "update", "app", "-n", "apps", "--image", "x:2"],
    )
    .await;
    assert_eq!(ran.code, Some(1));
    assert_eq!(
        ran.stderr,
        format!("Error from server (BadRequest): {REFUSAL}\n")
    );
}

#[tokio::test]
async fn a_403_is_printed_once_by_every_command() {
    const FORBIDDEN: &str = "services.serving.knative.dev \"app\" is forbidden: User \"bob\" \
        cannot get resource \"services\" in API group \"serving.knative.dev\" in the namespace \"apps\"";
    let fake = FakeApi::start().await;
    fake.put("services", ksvc("app", false, false, 1, &[], ""));
    let commands: [&[&str]; 4] = [
        &["app", "stop", "app", "-n", "apps"],
        &["app", "start", "app", "-n", "apps"],
        &["app", "status", "app", "-n", "apps"],
        &["app", "update", "app", "-n", "apps", "--max-scale", "3"],
    ];
    for args in commands {
        fake.inject(
            "get",
            "services",
            None,
            Fault::Refusal(403, "Forbidden", FORBIDDEN),
            1,
        );
        let ran = run(&fake, args).await;
        assert_eq!(ran.code, Some(1), "{args:?}");
        assert_eq!(
            ran.stderr,
            format!("Error from server (Forbidden): {FORBIDDEN}\n"),
            "{args:?}"
        );
    }
}

#[tokio::test]
async fn a_refused_connection_names_the_server_and_asks_about_it() {
    // A port nobody listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ran = run_against(
        &format!("http://127.0.0.1:{port}"),
        &["app", "stop", "app", "-n", "apps"],
    )
    .await;
    assert_eq!(ran.code, Some(1));
    assert_eq!(
        ran.stderr,
        format!(
            "The connection to the server 127.0.0.1:{port} was refused - did you specify the \
             right host or port?\n"
        )
    );
}

#[test]
fn a_missing_kubeconfig_names_the_path_tried_and_how_to_give_one() {
    let how = "name one with --kubeconfig FILE or the KUBECONFIG environment variable";
    let home = tempfile::tempdir().unwrap();
    let default = home.path().join(".kube/config");
    // (flags, environment, the whole of stderr)
    type Case<'a> = (&'a [&'a str], Vec<(&'a str, &'a str)>, String);
    let cases: [Case; 3] = [
        (
            &["--kubeconfig", "/nonexistent/config"],
            vec![],
            format!("error: no kubeconfig at /nonexistent/config (named by --kubeconfig); {how}\n"),
        ),
        (
            &[],
            vec![("KUBECONFIG", "/nonexistent/kc")],
            format!("error: no kubeconfig at /nonexistent/kc (named by KUBECONFIG); {how}\n"),
        ),
        (
            &[],
            vec![("HOME", home.path().to_str().unwrap())],
            format!(
                "error: no kubeconfig at {} (the default, and not running in a cluster); {how}\n",
                default.display()
            ),
        ),
    ];
    for (flags, env, want) in cases {
        let args = [&["app", "status", "app", "-n", "apps"], flags].concat();
        let ran = run_bin(&args, &env, b"");
        assert_eq!((ran.code, ran.stderr), (Some(1), want), "{flags:?} {env:?}");
    }
}

#[tokio::test]
async fn a_namespace_with_a_space_is_refused_by_value_before_any_call() {
    let fake = FakeApi::start().await;
    for args in [
        ["app", "stop", "app", "-n", "team x"],
        ["app", "status", "app", "-n", "team x"],
    ] {
        let ran = run(&fake, &args).await;
        assert_eq!(ran.code, Some(2), "{ran:?}");
        assert_once(
            &Ran {
                code: Some(1),
                ..ran.clone()
            },
            "invalid value 'team x' for '--namespace <NAMESPACE>': \"team x\" is not a DNS-1123 label",
        );
    }
    let ran = run(&fake, &["app", "stop", "My_App", "-n", "apps"]).await;
    assert_eq!(ran.code, Some(2), "{ran:?}");
    assert!(
        ran.stderr.contains("\"My_App\" is not a Service name"),
        "{}",
        ran.stderr
    );
    assert!(fake.requests().is_empty(), "no call was made");
}
