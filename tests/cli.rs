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
    let out = run(
        &[
            "name",
            "--project",
            "proj",
            "--domain",
            "dev",
            "--name",
            "MyApp",
        ],
        b"",
    );
    assert_eq!(text(&out.stdout), "myapp-proj-dev\n");
    let out = run(
        &[
            "name",
            "--project",
            "proj",
            "--domain",
            "dev",
            "--name",
            "9lives",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));

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
/// else's is replaced by the webhook's (issue 13).
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

/// Values that cannot work are refused before anything runs, in one message that says the form
/// expected, naming the environment variable when it carried the value (issue 21).
#[test]
fn values_that_cannot_work_are_refused_with_the_form_expected() {
    // (arguments, environment, exit code, the key sentence)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], i32, &'a str);
    let cases: &[Case] = &[
        (
            &["certs", "--days", "0", "--out", "target/never"],
            &[],
            2,
            "0 days would make a certificate that is expired when it is created; give 1 to 36500",
        ),
        (
            &["certs", "--out", "target/never"],
            &[("KSVC_WEBHOOK_CERT_DAYS", "0")],
            2,
            "invalid value '0' for '--days <DAYS>' from the environment variable 'KSVC_WEBHOOK_CERT_DAYS'",
        ),
        (
            &["certs", "--service", "Bad_Name!", "--out", "target/never"],
            &[],
            2,
            "\"Bad_Name!\" is not a Service name: it must start with a lower-case letter",
        ),
        (
            &["certs", "--namespace", "a b", "--out", "target/never"],
            &[],
            2,
            "\"a b\" is not a DNS-1123 label",
        ),
        (
            &["name", "--project", "", "--domain", "dev", "--name", "x"],
            &[],
            1,
            "metadata.labels[flyte.org/project]: \"\" is empty",
        ),
        (
            &["app", "update", "x", "-n", "apps", "--min-scale", "-1"],
            &[],
            2,
            "-1 is out of range: Knative takes a scale from 0 to 2147483647 (an int32)",
        ),
        (
            &[
                "app",
                "update",
                "x",
                "-n",
                "apps",
                "--min-scale",
                "3000000000",
            ],
            &[],
            2,
            "3000000000 is out of range: Knative takes a scale from 0 to 2147483647",
        ),
        (
            &["app", "update", "x", "-n", "apps"],
            &[("KSVC_WEBHOOK_APP_MAX_SCALE", "many")],
            2,
            "invalid value 'many' for '--max-scale <MAX_SCALE>' from the environment variable \
             'KSVC_WEBHOOK_APP_MAX_SCALE': `many` is not a whole number from 0 to 2147483647",
        ),
        (
            &["mutate", "-f", "-", "-n", "team x"],
            &[],
            2,
            "invalid value 'team x' for '--namespace <NAMESPACE>'",
        ),
    ];
    for (args, env, code, sentence) in cases {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ksvc-webhook"));
        cmd.args(*args)
            .envs(env.iter().copied())
            .env("NO_COLOR", "1");
        let out = cmd
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {err}");
        assert_eq!(err.matches(sentence).count(), 1, "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        // Not clap's tip for a negative number taken for a flag.
        assert!(!err.contains("'-- -1'"), "{args:?}: {err}");
    }
    assert!(!std::path::Path::new("target/never").exists());
}

/// A directory of manifests with comments, files in several formats, a subdirectory and a file
/// kubectl would skip.
fn manifest_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let put = |rel: &str, text: &str| {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    put("a-config.yaml", CONFIG);
    put(
        "b-secret.json",
        "{\"kind\": \"Secret\", \"apiVersion\": \"v1\", \"metadata\": {\"name\": \"s\"}}\n",
    );
    put(
        "c-app.yml",
        &std::fs::read_to_string("examples/managed-ksvc.yaml").unwrap(),
    );
    put("notes.txt", "not a manifest");
    put(
        "sub/d-app.yaml",
        &std::fs::read_to_string("examples/plain-ksvc.yaml").unwrap(),
    );
    dir
}

/// A ConfigMap as people write one: comments, keys out of order, quoting of their choice.
const CONFIG: &str = "# Team settings; keep in sync with the wiki.\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings   # read by the app\ndata:\n  zeta: 'last'\n  alpha: \"1\"\n";

#[test]
fn other_documents_come_out_byte_for_byte() {
    let app = std::fs::read_to_string("examples/managed-ksvc.yaml").unwrap();
    let input = format!("{CONFIG}---\n{app}--- # trailing\n{CONFIG}");
    let out = run(&["mutate", "-f", "-"], input.as_bytes());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = text(&out.stdout);
    assert!(out.starts_with(&format!("{CONFIG}---\n")), "{out}");
    assert!(out.ends_with(&format!("--- # trailing\n{CONFIG}")), "{out}");
    assert!(out.contains("flyte.org/spec-sha"), "{out}");
    // Nothing to mutate: the whole input is the output.
    let same = run(&["uninject", "-f", "-"], CONFIG.as_bytes());
    assert_eq!(text(&same.stdout), CONFIG);
}

#[test]
fn files_repeat_and_directories_read_as_kubectl_reads_them() {
    let dir = manifest_dir();
    let path = dir.path().to_str().unwrap();
    let kinds = |args: &[&str]| {
        let out = run(args, b"");
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let out = text(&out.stdout);
        assert!(out.starts_with(CONFIG), "{out}");
        out.lines()
            .filter_map(|l| l.strip_prefix("kind: "))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(kinds(&["mutate", "-f", path]), ["ConfigMap", "Service"]);
    assert_eq!(
        kinds(&["mutate", "-R", "-f", path]),
        ["ConfigMap", "Service", "Service"]
    );
    let out = text(&run(&["mutate", "-f", path], b"").stdout);
    assert!(out.contains("\n---\n{\"kind\": \"Secret\", \"apiVersion\": \"v1\", \"metadata\": {\"name\": \"s\"}}\n---\n"), "{out}");
    let config = format!("{path}/a-config.yaml");
    assert_eq!(
        kinds(&[
            "mutate",
            "-f",
            &config,
            "-f",
            "examples/managed-ksvc.yaml",
            "-f",
            &config
        ]),
        ["ConfigMap", "Service", "ConfigMap"]
    );
    let sha = text(&run(&["sha", "-R", "-f", path], b"").stdout);
    let names: Vec<&str> = sha.lines().map(|l| l.split("  ").next().unwrap()).collect();
    assert_eq!(names, ["flyte/myapp-proj-dev", "default/hello"], "{sha}");
    assert!(
        sha.lines()
            .all(|l| l.rsplit(' ').next().unwrap().len() == 16),
        "{sha}"
    );
    let bare = br#"{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"x"},"spec":{}}"#;
    let sha = text(&run(&["sha", "-f", "-", "-n", "team-a"], bare).stdout);
    assert!(sha.starts_with("team-a/x  "), "{sha}");
}

#[test]
fn an_empty_input_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "# nothing yet\n---\n").unwrap();
    let empty = empty.to_str().unwrap();
    for (args, stdin, want) in [
        (vec!["mutate", "-f", empty], &b""[..], empty.to_owned()),
        (
            vec!["uninject", "-f", "-"],
            &b"\n"[..],
            "standard input".to_owned(),
        ),
        (
            vec!["mutate", "-f", "-"],
            &b""[..],
            "standard input".to_owned(),
        ),
    ] {
        let out = run(&args, stdin);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(out.stdout.is_empty());
        assert_eq!(
            text(&out.stderr),
            format!("error: no objects in {want}; give a manifest with at least one object\n")
        );
    }
    let bare = run(
        &["mutate", "-f", dir.path().join("sub").to_str().unwrap()],
        b"",
    );
    assert_eq!(bare.status.code(), Some(1));
}

#[test]
fn review_reads_yaml_and_names_the_file_it_cannot_review() {
    let json = std::fs::read("examples/managed-review.json").unwrap();
    let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("review.yaml");
    std::fs::write(&yaml, serde_saphyr::to_string(&value).unwrap()).unwrap();
    let from_yaml = run(&["review", "-f", yaml.to_str().unwrap()], b"");
    assert!(from_yaml.status.success(), "{}", text(&from_yaml.stderr));
    let from_json = run(&["review", "-f", "examples/managed-review.json"], b"");
    assert_eq!(from_yaml.stdout, from_json.stdout);

    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "kind: ConfigMap\n").unwrap();
    let out = run(&["review", "-f", bad.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with(&format!("error: cannot review {}: ", bad.display())),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn completion_scripts_load_in_their_shells() {
    for (shell, marker) in [
        ("bash", "complete -F _ksvc__webhook"),
        ("zsh", "#compdef ksvc-webhook"),
        ("fish", "complete -c ksvc-webhook"),
    ] {
        let out = run(&["completion", shell], b"");
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = text(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        // fish writes a flag as `-l dry-run`.
        for word in ["mutate", "app", "list", "dry-run", "until"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    // bash parses what it is given.
    let bash = run(&["completion", "bash"], b"");
    let check = Command::new("bash")
        .args(["-n", "-c", &text(&bash.stdout)])
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", text(&check.stderr));
    let bad = run(&["completion", "tcsh"], b"");
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("[possible values: bash, zsh, fish]"));
}
