//! What the offline commands take, run as a user runs them: values that cannot work are refused
//! in one message with the form expected, and `-f` reads files, directories and standard input
//! as kubectl does, passing through what is not a KService byte for byte.
#![allow(clippy::unwrap_used)] // test helpers may panic

use support::cli::{Ran, run_bin};

/// The binary with `args`, `stdin` on its standard input.
fn run(args: &[&str], stdin: &[u8]) -> Ran {
    run_bin(args, &[], stdin)
}

/// Values that cannot work are refused before anything runs, in one message that says the form
/// expected, naming the environment variable when it carried the value.
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
            &[
                "certs",
                "--service-namespace",
                "a b",
                "--out",
                "target/never",
            ],
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
            &[
                "app",
                "status",
                "x",
                "-n",
                "apps",
                "--until",
                "active",
                "--timeout",
                "-1s",
            ],
            &[],
            2,
            "invalid value '-1s' for '--timeout <TIMEOUT>': `-1s` is negative",
        ),
        (
            &["serve", "--listen", "127.0.0.1:99999"],
            &[],
            2,
            "`127.0.0.1:99999`: port 99999 is out of range; a port is at most 65535",
        ),
        (
            &["serve", "--local-status-listen", "0.0.0.0:8444"],
            &[],
            2,
            "--local-status-listen is 0.0.0.0:8444, not a loopback address: it serves every app without a token",
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
        (
            &["mutate", "-f", "-", "--route-domain", "not a domain!!"],
            &[],
            2,
            "\"not a domain!!\" is not a DNS-1123 subdomain",
        ),
    ];
    for (args, env, code, sentence) in cases {
        let out = run_bin(args, env, b"");
        let err = &out.stderr;
        assert_eq!(out.code, Some(*code), "{args:?}: {err}");
        assert_eq!(err.matches(sentence).count(), 1, "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        // Not clap's tip for a negative number taken for a flag.
        assert!(!err.contains("'-- -1'"), "{args:?}: {err}");
    }
    let never = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/never");
    assert!(
        !never.exists(),
        "a refused `certs` wrote {}",
        never.display()
    );
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
    assert!(out.code == Some(0), "{}", out.stderr.clone());
    let out = out.stdout.clone();
    assert!(out.starts_with(&format!("{CONFIG}---\n")), "{out}");
    assert!(out.ends_with(&format!("--- # trailing\n{CONFIG}")), "{out}");
    assert!(out.contains("flyte.org/spec-sha"), "{out}");
    // Nothing to mutate: the whole input is the output.
    let same = run(&["uninject", "-f", "-"], CONFIG.as_bytes());
    assert_eq!(same.stdout.clone(), CONFIG);
}

#[test]
fn files_repeat_and_directories_read_as_kubectl_reads_them() {
    let dir = manifest_dir();
    let path = dir.path().to_str().unwrap();
    let kinds = |args: &[&str]| {
        let out = run(args, b"");
        assert!(out.code == Some(0), "{args:?}: {}", out.stderr.clone());
        let out = out.stdout.clone();
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
    let out = run(&["mutate", "-f", path], b"").stdout;
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
    let sha = run(&["sha", "-R", "-f", path], b"").stdout;
    let names: Vec<&str> = sha.lines().map(|l| l.split("  ").next().unwrap()).collect();
    assert_eq!(names, ["flyte/myapp-proj-dev", "default/hello"], "{sha}");
    assert!(
        sha.lines()
            .all(|l| l.rsplit(' ').next().unwrap().len() == 16),
        "{sha}"
    );
    let bare = br#"{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"x"},"spec":{}}"#;
    let sha = run(&["sha", "-f", "-", "-n", "team-a"], bare).stdout;
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
        assert_eq!(out.code, Some(1), "{args:?}");
        assert!(out.stdout.is_empty());
        assert_eq!(
            out.stderr.clone(),
            format!("error: no objects in {want}; give a manifest with at least one object\n")
        );
    }
    let bare = run(
        &["mutate", "-f", dir.path().join("sub").to_str().unwrap()],
        b"",
    );
    assert_eq!(bare.code, Some(1));
}

#[test]
fn review_reads_yaml_and_names_the_file_it_cannot_review() {
    let json = std::fs::read("examples/managed-review.json").unwrap();
    let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("review.yaml");
    std::fs::write(&yaml, serde_saphyr::to_string(&value).unwrap()).unwrap();
    let from_yaml = run(&["review", "-f", yaml.to_str().unwrap()], b"");
    assert!(from_yaml.code == Some(0), "{}", from_yaml.stderr.clone());
    let from_json = run(&["review", "-f", "examples/managed-review.json"], b"");
    assert_eq!(from_yaml.stdout, from_json.stdout);

    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "kind: ConfigMap\n").unwrap();
    let out = run(&["review", "-f", bad.to_str().unwrap()], b"");
    assert_eq!(out.code, Some(1));
    let err = out.stderr.clone();
    assert!(
        err.starts_with(&format!("error: cannot review {}: ", bad.display())),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
