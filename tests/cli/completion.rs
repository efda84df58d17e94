//! `ksvc-webhook completion bash|zsh|fish`, tested in the shells themselves: bash's completion
//! function driven as bash drives it on TAB (`COMP_WORDS`, `COMP_CWORD`), fish's `complete -C`,
//! and zsh's generated functions loaded under `compinit`. A shell that is not installed is
//! skipped with a SKIPPED banner.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ksvc-webhook"))
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether `shell` runs here; if not, says so.
fn installed(shell: &str) -> bool {
    if Command::new(shell).args(["-c", "true"]).output().is_ok() {
        return true;
    }
    let banner = format!(
        "SKIPPED: the {shell} completion test: `{shell}` is not on the PATH. Get it with: \
         apt-get install {shell}"
    );
    eprintln!("{banner}");
    false
}

/// What bash's completion function offers for the words typed so far (the last one being
/// completed), as bash calls it on TAB: `COMP_WORDS`, `COMP_CWORD`, `COMP_LINE`, `COMP_POINT`.
fn bash_completes(typed: &[&str]) -> Vec<String> {
    let script = text(&run(&["completion", "bash"]).stdout);
    let words: Vec<String> = typed.iter().map(|w| format!("'{w}'")).collect();
    let line = typed.join(" ");
    let driver = format!(
        "{script}\nCOMP_WORDS=({words})\nCOMP_CWORD={cword}\nCOMP_LINE='{line}'\n\
         COMP_POINT=${{#COMP_LINE}}\n_ksvc__webhook ksvc-webhook '{cur}' '{prev}'\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        words = words.join(" "),
        cword = typed.len() - 1,
        cur = typed[typed.len() - 1],
        prev = typed[typed.len() - 2],
    );
    let out = Command::new("bash").args(["-c", &driver]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut offered: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    offered.sort();
    offered
}

/// Completion below the top level, driven through bash's own completion function: a
/// subcommand of `app`, a flag of `mutate`, the values of `-o`.
#[test]
fn bash_completes_subcommands_flags_and_values() {
    assert_eq!(
        bash_completes(&["ksvc-webhook", "app", "s"]),
        ["start", "status", "stop"]
    );
    assert_eq!(
        bash_completes(&["ksvc-webhook", "mutate", "--s"]),
        [
            "--sidecars",
            "--sidecars-configmap",
            "--sidecars-from-cluster",
            "--strict"
        ]
    );
    assert_eq!(
        bash_completes(&["ksvc-webhook", "drift", "-o", ""]),
        ["json", "table", "yaml"]
    );
    assert_eq!(bash_completes(&["ksvc-webhook", "ch"]), ["check"]);
}

#[test]
fn completion_scripts_load_in_their_shells() {
    for (shell, marker) in [
        ("bash", "complete -F _ksvc__webhook"),
        ("zsh", "#compdef ksvc-webhook"),
        ("fish", "complete -c ksvc-webhook"),
    ] {
        let out = run(&["completion", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = text(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        // fish writes a flag as `-l dry-run`.
        for word in ["mutate", "app", "list", "dry-run", "until"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    // bash parses what it is given.
    let bash = run(&["completion", "bash"]);
    let check = Command::new("bash")
        .args(["-n", "-c", &text(&bash.stdout)])
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", text(&check.stderr));
    let bad = run(&["completion", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("[possible values: bash, zsh, fish]"));
}

/// What fish offers for `line` (fish's `complete -C`), without the descriptions.
fn fish_completes(line: &str) -> Vec<String> {
    let script = text(&run(&["completion", "fish"]).stdout);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ksvc-webhook.fish");
    std::fs::write(&path, script).unwrap();
    let command = format!("source {}; complete -C '{line}'", path.display());
    let out = Command::new("fish")
        .args(["-c", &command])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut offered: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| l.split('\t').next().unwrap().to_owned())
        .collect();
    offered.sort();
    offered
}

#[test]
fn fish_completes_subcommands_flags_and_values() {
    if !installed("fish") {
        return;
    }
    assert_eq!(
        fish_completes("ksvc-webhook app s"),
        ["start", "status", "stop"]
    );
    assert_eq!(
        fish_completes("ksvc-webhook mutate --s"),
        [
            "--sidecars",
            "--sidecars-configmap",
            "--sidecars-from-cluster",
            "--strict"
        ]
    );
    assert_eq!(
        fish_completes("ksvc-webhook drift -o "),
        ["json", "table", "yaml"]
    );
}

/// zsh: the script loads under `compinit`, and its function for `app` offers the app
/// subcommands (`_describe` stands in for the completion system that would show them).
#[test]
fn zsh_loads_the_script_and_knows_the_app_subcommands() {
    if !installed("zsh") {
        return;
    }
    let script = text(&run(&["completion", "zsh"]).stdout);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("_ksvc-webhook");
    std::fs::write(&path, script).unwrap();
    let command = format!(
        "autoload -U compinit && compinit -u -d {dump} && source {path} && \
         _describe() {{ print -l -- ${{(P)4}} }} && _ksvc-webhook__subcmd__app_commands",
        dump = dir.path().join("zcompdump").display(),
        path = path.display()
    );
    let out = Command::new("zsh")
        .args(["-f", "-c", &command])
        .env("HOME", dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let names: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| l.split(':').next().unwrap().to_owned())
        .collect();
    for name in ["list", "start", "status", "stop", "update"] {
        assert!(names.contains(&name.to_owned()), "{name}: {names:?}");
    }
}
