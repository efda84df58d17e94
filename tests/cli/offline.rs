//! The offline commands, run as a user runs them: the real binary, files and pipes.

#![allow(clippy::unwrap_used)] // test helpers may panic

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ksvc-webhook"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn mutate_prints_yaml_for_yaml_and_fails_on_violations() {
    let ok = run(&["mutate", "-f", "examples/managed-ksvc.yaml"], b"");
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let out = text(&ok.stdout);
    assert!(out.contains("name: myapp-proj-dev"), "{out}");
    assert!(out.contains("INTERNAL_APP_ENDPOINT_PATTERN"));

    let bad = run(&["mutate", "-f", "examples/invalid-ksvc.yaml"], b"");
    assert_eq!(bad.status.code(), Some(1));
    assert!(bad.stdout.is_empty());
    let err = text(&bad.stderr);
    assert!(
        err.contains("metadata.name: \"My_App\" is not a DNS-1035 label"),
        "{err}"
    );
    assert!(err.contains("3 problems"), "{err}");
}

#[test]
fn mutate_passes_other_documents_through_and_reads_stdin_json() {
    let input = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n---\napiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: hello\nspec:\n  template:\n    spec:\n      containers:\n      - image: nginx\n";
    let out = run(&["mutate", "-f", "-", "-n", "team-a"], input);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let docs: Vec<&str> = std::str::from_utf8(&out.stdout)
        .unwrap()
        .split("---\n")
        .collect();
    assert_eq!(docs.len(), 2);
    assert!(docs[0].contains("kind: ConfigMap") && !docs[0].contains("annotations"));
    assert!(docs[1].contains("http://{app_fqdn}.team-a.svc.cluster.local"));

    let json = br#"{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"x"},"spec":{"template":{"spec":{"containers":[{"image":"a"}]}}}}"#;
    let out = run(&["mutate", "-f", "-"], json);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        value["metadata"]["annotations"]["flyte.org/spec-sha"]
            .as_str()
            .unwrap()
            .len(),
        16
    );
}

#[test]
fn mutate_update_checks_the_old_object() {
    let dir = std::env::temp_dir().join(format!("ksvc-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let old = dir.join("old.yaml");
    std::fs::write(&old, std::fs::read("examples/managed-ksvc.yaml").unwrap()).unwrap();
    let changed = text(&std::fs::read("examples/managed-ksvc.yaml").unwrap())
        .replace("domain: dev", "domain: prod");
    let out = run(
        &[
            "mutate",
            "-f",
            "-",
            "--operation",
            "update",
            "--old",
            old.to_str().unwrap(),
        ],
        changed.as_bytes(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("identity labels cannot change"),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn review_prints_the_server_answer() {
    let out = run(&["review", "-f", "examples/managed-review.json"], b"");
    assert!(out.status.success());
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        value["response"]["uid"],
        "7f0c1a52-0b6e-4c8e-9a43-1d2f5e6a7b01"
    );
    assert_eq!(value["response"]["patchType"], "JSONPatch");
    let denied = run(&["review", "-f", "examples/invalid-review.json"], b"");
    assert!(denied.status.success(), "a decided review is not an error");
}

#[test]
fn name_sha_and_uninject() {
    let out = support::cli::name_of("MyApp");
    assert_eq!(out.stdout, "myapp-proj-dev\n");
    let out = support::cli::name_of("9lives");
    assert_eq!(out.code, Some(1));

    let sha = run(&["sha", "-f", "examples/managed-ksvc.yaml"], b"");
    let shown = text(&sha.stdout);
    let (name, hash) = shown.trim_end().split_once("  ").unwrap();
    assert_eq!(name, "flyte/myapp-proj-dev", "{shown}");
    let mutated = run(&["mutate", "-f", "examples/managed-ksvc.yaml"], b"");
    let stamped = text(&mutated.stdout);
    assert!(
        stamped.contains(&format!("flyte.org/spec-sha: {hash}")),
        "{stamped}"
    );
    // The SHA of the mutated manifest is the SHA of the original: injections are not hashed.
    assert_eq!(run(&["sha", "-f", "-"], &mutated.stdout).stdout, sha.stdout);

    let stripped = run(&["uninject", "-f", "-"], &mutated.stdout);
    let back = text(&stripped.stdout);
    assert!(
        !back.contains("INTERNAL_APP_ENDPOINT_PATTERN") && !back.contains("flyte.org/spec-sha"),
        "{back}"
    );
}

#[test]
fn malformed_input_is_one_line_and_no_panic() {
    let cases: &[(&[&str], &[u8])] = &[
        (&["mutate", "-f", "-"], b"\xff\xfe\x00"),
        (&["mutate", "-f", "-"], b"{not json"),
        (&["mutate", "-f", "-"], b"a: [unclosed"),
        (&["review", "-f", "-"], b"{}"),
        (&["review", "-f", "-"], br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE"}}"#),
        (&["review", "-f", "-"], br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}"#),
        (&["review", "-f", "/nonexistent/file.json"], b""),
        (&["sha", "-f", "-"], b"apiVersion: v1\nkind: ConfigMap\n"),
        (&["mutate", "-f", "-", "--domain-template", "{{.Annotations.x}}.{{.Domain}}"], b""),
    ];
    for (args, input) in cases {
        let out = run(args, input);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"));
    }
}

#[test]
fn help_explains_every_command() {
    let out = run(&["--help"], b"");
    let help = text(&out.stdout);
    for cmd in ["mutate", "review", "uninject", "name", "sha"] {
        assert!(help.contains(cmd), "{help}");
    }
    let out = run(&["mutate", "--help"], b"");
    assert!(text(&out.stdout).contains("KSVC_WEBHOOK_DOMAIN_TEMPLATE"));
}

/// `mutate --user/--group` acts as a writer: a platform writer's own spec SHA is kept, anyone
/// else's is replaced by the webhook's.
#[test]
fn mutate_acts_as_the_given_writer() {
    let app = serde_json::json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"labels": {"flyte.org/project": "proj", "flyte.org/domain": "dev",
                                "flyte.org/app-name": "myapp"},
                     "annotations": {"flyte.org/spec-sha": "platform-own-sha"}},
        "spec": {"template": {"spec": {"containers": [{"image": "app:1"}]}}}
    })
    .to_string();
    let sha_as = |who: &[&str]| {
        let mut args = vec![
            "mutate",
            "-f",
            "-",
            "--platform-writers",
            "system:serviceaccount:flyte:flyteadmin,group:flyte-platform",
        ];
        args.extend_from_slice(who);
        let out = run(&args, app.as_bytes());
        assert!(out.status.success(), "{}", text(&out.stderr));
        let doc: serde_json::Value = serde_saphyr::from_slice(&out.stdout).unwrap();
        doc["metadata"]["annotations"]["flyte.org/spec-sha"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        sha_as(&["--user", "system:serviceaccount:flyte:flyteadmin"]),
        "platform-own-sha"
    );
    assert_eq!(
        sha_as(&["--user", "ci", "--group", "flyte-platform"]),
        "platform-own-sha"
    );
    assert_ne!(sha_as(&["--user", "alice"]), "platform-own-sha");
    assert_ne!(sha_as(&[]), "platform-own-sha");
}

/// The example reviews as `make run` decides them (the example sidecar catalogue loaded): the
/// README's curl lines get what they promise.
#[test]
fn the_example_reviews_are_decided_as_make_run_decides_them() {
    for (review, allowed) in [
        ("examples/managed-review.json", true),
        ("examples/plain-review.json", true),
        ("examples/invalid-review.json", false),
    ] {
        let out = run(
            &[
                "review",
                "-f",
                review,
                "--sidecars",
                "examples/sidecars.yaml",
            ],
            b"",
        );
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(answer["response"]["allowed"], allowed, "{review}: {answer}");
    }
}

/// `mutate --sidecars-from-cluster` reads the catalogue from its ConfigMap in the cluster, as
/// `istioctl kube-inject` reads its injector config, and injects what `--sidecars FILE` would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutate_reads_the_catalogue_from_the_cluster() {
    let fake = support::FakeApi::start().await;
    let catalogue = std::fs::read_to_string("examples/sidecars.yaml").unwrap();
    fake.put(
        "configmaps",
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "ksvc-webhook-sidecars", "namespace": "ksvc-system"},
            "data": {"sidecars.yaml": catalogue}}),
    );
    let from_file = run(
        &[
            "mutate",
            "-f",
            "examples/sidecar-ksvc.yaml",
            "--sidecars",
            "examples/sidecars.yaml",
        ],
        b"",
    );
    assert!(from_file.status.success());
    let args = [
        "mutate",
        "-f",
        "examples/sidecar-ksvc.yaml",
        "--sidecars-from-cluster",
    ];
    let from_cluster = support::cli::run(&fake, &args).await;
    assert_eq!(from_cluster.code, Some(0), "{}", from_cluster.stderr);
    assert_eq!(from_cluster.stdout, text(&from_file.stdout));

    let elsewhere = [&args[..], &["--sidecars-configmap", "other/none"]].concat();
    let missing = support::cli::run(&fake, &elsewhere).await;
    assert_ne!(missing.code, Some(0));
    assert_eq!(
        missing
            .stderr
            .matches("no ConfigMap other/none in the cluster")
            .count(),
        1,
        "{}",
        missing.stderr
    );
}

/// Wrong input is named on stderr without changing the output; `--strict` makes it exit 1.
#[test]
fn mutate_names_what_is_not_a_kservice_and_unknown_fields() {
    let manifests = b"apiVersion: serving.knative.dev/v1
kind: Servce
metadata: {name: a}
---
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: b
  lables: {flyte.org/project: p, flyte.org/domain: d, flyte.org/app-name: b}
spec: {template: {spec: {containers: [{image: x}]}}}
";
    let lenient = run(&["mutate", "-f", "-"], manifests);
    assert_eq!(lenient.status.code(), Some(0), "{}", text(&lenient.stderr));
    assert_eq!(
        text(&lenient.stderr),
        "warning: Service \"b\": unknown field \"metadata.lables\"\n\
         warning: 1 document is not a serving.knative.dev/v1 Service, passed through unchanged: \
         kind Servce (serving.knative.dev/v1)\n"
    );
    let strict = run(&["mutate", "-f", "-", "--strict"], manifests);
    assert_eq!(strict.status.code(), Some(1));
    assert_eq!(strict.stdout, lenient.stdout, "the output does not change");
    assert!(
        text(&strict.stderr)
            .ends_with("error: --strict: 1 unknown field and 1 document that is not a KService\n"),
        "{}",
        text(&strict.stderr)
    );
    let review = run(&["mutate", "-f", "examples/managed-review.json"], b"");
    assert!(
        text(&review.stderr).contains("an AdmissionReview (give it to `ksvc-webhook review`)"),
        "{}",
        text(&review.stderr)
    );
    let clean = run(
        &["mutate", "-f", "examples/managed-ksvc.yaml", "--strict"],
        b"",
    );
    assert_eq!(clean.status.code(), Some(0), "{}", text(&clean.stderr));
    assert!(clean.stderr.is_empty(), "{}", text(&clean.stderr));
}

/// `mutate --diff`: what admission changes, as a unified diff, instead of the whole object.
#[test]
fn mutate_diff_shows_only_what_admission_changes() {
    let out = run(
        &["mutate", "-f", "examples/managed-ksvc.yaml", "--diff"],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let diff = text(&out.stdout);
    assert!(
        diff.starts_with("--- Service (as written)\n+++ Service (as admitted)\n@@ "),
        "{diff}"
    );
    assert!(diff.contains("\n+  name: myapp-proj-dev\n"), "{diff}");
    assert!(
        diff.lines()
            .any(|l| l.starts_with('+') && l.contains("flyte.org/spec-sha")),
        "{diff}"
    );
    assert!(
        diff.lines().any(|l| l.starts_with(' ')),
        "context lines: {diff}"
    );
    let admitted = run(&["mutate", "-f", "examples/managed-ksvc.yaml"], b"");
    let again = run(&["mutate", "-f", "-", "--diff"], &admitted.stdout);
    assert_eq!(text(&again.stdout), "", "admitted twice: nothing changes");
}

/// `--version` names the commit it was built from (`unknown` outside a git checkout).
#[test]
fn version_names_the_commit() {
    let out = run(&["--version"], b"");
    let version = text(&out.stdout);
    let commit = version
        .strip_prefix(concat!(
            "ksvc-webhook ",
            env!("CARGO_PKG_VERSION"),
            " (commit "
        ))
        .and_then(|rest| rest.strip_suffix(")\n"))
        .unwrap_or_else(|| panic!("{version}"));
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "{version}"
    );
}
