//! Every ```sh block of README.md and docs/cli.md, run as written: each line of a block is a
//! `ksvc-webhook …` command (pipes included) that must succeed offline, with the binary on the
//! `PATH`. A block that needs more is marked by an HTML comment on the line before it, e.g.
//! `<!-- needs-cluster -->` or `<!-- needs-server: make run -->`, and is skipped.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

/// The commands of the unmarked ```sh blocks of `doc`, continuation lines joined.
fn runnable(doc: &str) -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(doc)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut commands = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let marked = i > 0 && lines[i - 1].trim_start().starts_with("<!-- needs-");
        if lines[i].trim() != "```sh" {
            i += 1;
            continue;
        }
        i += 1;
        let mut command = String::new();
        while i < lines.len() && lines[i].trim() != "```" {
            let line = lines[i];
            i += 1;
            match line.strip_suffix('\\') {
                Some(head) => command.push_str(head),
                None => {
                    command.push_str(line);
                    if !marked && !command.trim().is_empty() {
                        commands.push(std::mem::take(&mut command));
                    }
                    command.clear();
                }
            }
        }
    }
    commands
}

#[test]
fn every_offline_command_block_works_as_written() {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_ksvc-webhook"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for doc in ["README.md", "docs/cli.md"] {
        for command in runnable(doc) {
            assert!(
                command.trim_start().starts_with("ksvc-webhook "),
                "{doc}: `{command}` is not a ksvc-webhook command; mark its block \
                 <!-- needs-cluster --> (or what else it needs)"
            );
            let out = Command::new("bash")
                .args(["-o", "pipefail", "-c", &command])
                .env("PATH", &path)
                .env("NO_COLOR", "1")
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{doc}: `{command}` failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(!out.stdout.is_empty(), "{doc}: `{command}` printed nothing");
            ran += 1;
        }
    }
    assert!(ran >= 8, "only {ran} commands ran");
}

#[test]
fn marked_blocks_are_skipped_and_continuations_joined() {
    let readme = runnable("README.md");
    assert!(readme.iter().all(|c| !c.contains("kubectl")), "{readme:?}");
    assert!(
        readme
            .iter()
            .any(|c| c.contains("ksvc-webhook sha -f examples/"))
    );
}
