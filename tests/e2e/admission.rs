//! Admission through kube-apiserver's real admission chain, as kubectl users meet it: create,
//! apply (client- and server-side), server-side dry runs, diff, updates and refusals.

use ksvc_webhook::keys;
use serde_json::Value;
use support::cli::{name_of, run_bin};
use support::control_plane::{ControlPlane, MUTATING, Webhook};

use crate::objects::{env_var, example, mutated_offline, text};

const SHA: &str = "/metadata/annotations/flyte.org~1spec-sha";

/// The deterministic name `ksvc-webhook name` gives the managed example.
fn managed_name() -> String {
    let ran = name_of("myapp");
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    ran.stdout.trim().to_owned()
}

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn a_nameless_kubectl_create_comes_out_named_stamped_and_wired() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let ns = plane.namespace("create");
    let _webhook = Webhook::start(plane, "create", &[]);
    let yaml = example("managed-ksvc.yaml", &ns);

    let created = plane
        .kubectl_in(&["create", "-f", "-", "-o", "json"], yaml.as_bytes())
        .ok("kubectl create of a KService without a name");
    let created: Value = serde_json::from_str(&created.stdout).unwrap();

    assert_eq!(text(&created, "/metadata/name"), managed_name());
    let offline = mutated_offline(&yaml, &ns, &[]);
    assert_eq!(text(&created, SHA), text(&offline, SHA));
    assert!(!text(&created, SHA).is_empty(), "no spec SHA: {created:#}");
    let pattern = env_var(&created, keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN);
    assert_eq!(
        pattern,
        env_var(&offline, keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN)
    );
    assert!(pattern.is_some(), "no endpoint pattern: {created:#}");
}

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn an_invalid_ksvc_is_refused_with_our_message_as_kubectl_prints_it() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let ns = plane.namespace("invalid");
    let _webhook = Webhook::start(plane, "invalid", &[]);
    let yaml = example("invalid-ksvc.yaml", &ns);
    // The message the core gives for it, offline.
    let offline = run_bin(&["mutate", "-f", "-", "-n", &ns], &[], yaml.as_bytes());
    assert_eq!(offline.code, Some(1), "{}", offline.stdout);
    // `error: Service "My_App" rejected: <the message admission sends>`
    let (_, message) = offline.stderr.trim_end().split_once(" rejected: ").unwrap();

    for verb in [
        &["create", "-f", "-"][..],
        &["apply", "-f", "-"],
        &["apply", "--server-side", "-f", "-"],
        &["create", "--dry-run=server", "-f", "-"],
    ] {
        let refused = plane.kubectl_in(verb, yaml.as_bytes());
        assert_eq!(
            refused.code,
            Some(1),
            "{verb:?} was not refused: {}",
            refused.stdout
        );
        let expected = format!("admission webhook \"{MUTATING}\" denied the request: {message}");
        assert!(
            refused
                .stderr
                .starts_with("Error from server (BadRequest): ")
                && refused.stderr.trim_end().ends_with(&expected),
            "{verb:?} printed\n{}\nnot …{expected}",
            refused.stderr
        );
    }
    let stored = plane
        .kubectl(&["get", "ksvc", "-n", &ns, "-o", "name"])
        .ok("list");
    assert_eq!(stored.stdout, "", "a refused KService was stored");
}

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn apply_server_side_apply_and_dry_run_agree_and_leave_no_diff() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let ns = plane.namespace("apply");
    let _webhook = Webhook::start(plane, "apply", &[]);
    let plain = example("plain-ksvc.yaml", &ns);
    let offline = mutated_offline(&plain, &ns, &[]);

    // A server-side dry run answers with the admitted object and stores nothing.
    let dry = plane
        .kubectl_in(
            &["create", "--dry-run=server", "-o", "json", "-f", "-"],
            plain.as_bytes(),
        )
        .ok("create --dry-run=server");
    let dry: Value = serde_json::from_str(&dry.stdout).unwrap();
    assert_eq!(dry["spec"], offline["spec"]);
    assert_eq!(text(&dry, SHA), text(&offline, SHA));
    let none = plane
        .kubectl(&["get", "ksvc", "-n", &ns, "-o", "name"])
        .ok("list");
    assert_eq!(none.stdout, "", "the dry run stored something");

    plane
        .kubectl_in(&["apply", "-f", "-"], plain.as_bytes())
        .ok("kubectl apply");
    let diff = plane.kubectl_in(&["diff", "-f", "-"], plain.as_bytes());
    assert_eq!(
        diff.code,
        Some(0),
        "kubectl diff after apply:\n{}{}",
        diff.stdout,
        diff.stderr
    );
    let stored = plane.get_json(&["ksvc", "hello", "-n", &ns]);
    assert_eq!(stored["spec"], offline["spec"]);
    assert_eq!(text(&stored, SHA), text(&offline, SHA));

    // The same file again, server-side, taking over the fields: still nothing to change.
    plane
        .kubectl_in(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            plain.as_bytes(),
        )
        .ok("kubectl apply --server-side");
    let diff = plane.kubectl_in(&["diff", "--server-side", "-f", "-"], plain.as_bytes());
    assert_eq!(
        diff.code,
        Some(0),
        "kubectl diff --server-side:\n{}{}",
        diff.stdout,
        diff.stderr
    );
    let again = plane.get_json(&["ksvc", "hello", "-n", &ns]);
    assert_eq!(again["spec"], stored["spec"]);
    assert_eq!(text(&again, SHA), text(&stored, SHA));
}

#[test]
#[ignore = "needs the e2e control plane: make e2e"]
fn an_update_of_the_image_gets_a_new_sha() {
    let _serial = ControlPlane::lock();
    let plane = ControlPlane::get();
    let ns = plane.namespace("update");
    let _webhook = Webhook::start(plane, "update", &[]);
    let plain = example("plain-ksvc.yaml", &ns);
    plane
        .kubectl_in(&["apply", "-f", "-"], plain.as_bytes())
        .ok("kubectl apply");
    let before = plane.get_json(&["ksvc", "hello", "-n", &ns]);

    let updated = plain.replace("helloworld-go:latest", "helloworld-go:v2");
    plane
        .kubectl_in(&["apply", "-f", "-"], updated.as_bytes())
        .ok("apply the new image");
    let after = plane.get_json(&["ksvc", "hello", "-n", &ns]);

    assert_eq!(
        text(&after, "/spec/template/spec/containers/0/image"),
        "ghcr.io/knative/helloworld-go:v2"
    );
    assert_ne!(text(&after, SHA), text(&before, SHA));
    // What the stored object says is what the core computes for it.
    let offline = mutated_offline(&updated, &ns, &[]);
    assert_eq!(text(&after, SHA), text(&offline, SHA));
}
