//! Docs name only files that exist. In the README, `docs/`, `manifests/`, `examples/`, the
//! Makefile and the comments of `src/` and `benches/`: every relative markdown link, every path
//! that starts at a folder of the repository (`src/watch/hub.rs`, `docs/json.md`, backticked or
//! not), and every `src/`-relative Rust file (`watch/hub.rs`) must name a file or folder that is
//! there. A path with a placeholder (`fuzz/artifacts/review/crash-…`, `examples/*.yaml`) needs its
//! folder only; what tools write at run time ([`GENERATED`]) is not checked.

#![allow(clippy::unwrap_used)] // a test: an unreadable checkout is a failure

use std::path::{Path, PathBuf};

/// Folders of the repository a path may start at.
const ROOTS: [&str; 9] = [
    "src",
    "docs",
    "tests",
    "benches",
    "manifests",
    "examples",
    "scripts",
    "fuzz",
    ".ci",
];

/// Written by tools at run time, never committed: cargo-fuzz's crash artifacts.
const GENERATED: [&str; 1] = ["fuzz/artifacts/"];

/// Every path `text` (the file `file`, relative to the repository) names that `exists` denies, as
/// "file:line: path". `src_folders` are the folders of `src/`, for paths relative to it.
fn stale(
    file: &str,
    text: &str,
    src_folders: &[String],
    exists: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let dir = file.rsplit_once('/').map_or("", |(dir, _)| dir);
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = match file.ends_with(".rs") {
            // Rust: comments only; a string in code may name a file a test expects to be missing.
            true => line.split_once("//").map_or("", |(_, comment)| comment),
            false => line,
        };
        let mut named: Vec<String> = Vec::new();
        if file.ends_with(".md") {
            named.extend(links(line).into_iter().map(|link| join(dir, &link)));
        }
        for token in path_tokens(line) {
            let first = token.split('/').next().unwrap_or_default();
            if ROOTS.contains(&first) {
                named.push(token);
            } else if src_folders.iter().any(|f| f == first) && token.ends_with(".rs") {
                named.push(format!("src/{token}"));
            }
        }
        for path in named {
            let path = before_placeholder(&path);
            if !GENERATED.iter().any(|g| path.starts_with(g)) && !exists(&path) {
                found.push(format!("{file}:{}: {path}", n + 1));
            }
        }
    }
    found
}

/// The relative targets of the markdown links on a line, code spans left out.
fn links(line: &str) -> Vec<String> {
    let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
    prose
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(target, _)| target))
        .filter(|t| !(t.contains("://") || t.starts_with('#') || t.starts_with("mailto:")))
        .map(|t| t.split('#').next().unwrap_or_default().to_owned())
        .filter(|t| !t.is_empty())
        .collect()
}

/// Words that look like a relative path (`a/b`), not part of a URL or an absolute path.
fn path_tokens(line: &str) -> Vec<String> {
    let in_path = |c: char| c.is_alphanumeric() || "_-./*…".contains(c);
    let chars: Vec<char> = line.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts =
            in_path(chars[i]) && (i == 0 || !(in_path(chars[i - 1]) || chars[i - 1] == '/'));
        if !starts {
            i += 1;
            continue;
        }
        let end = (i..chars.len())
            .find(|&j| !(in_path(chars[j]) || chars[j] == '/'))
            .unwrap_or(chars.len());
        let token: String = chars[i..end].iter().collect();
        let token = token.trim_end_matches('.').to_owned();
        if token.contains('/') && !token.starts_with("..") {
            tokens.push(token);
        }
        i = end;
    }
    tokens
}

/// `a/b/c-…` → `a/b/`: a path with a placeholder is checked up to its folder.
fn before_placeholder(path: &str) -> String {
    match path.find(['…', '*']) {
        Some(at) => path[..path[..at].rfind('/').map_or(0, |s| s + 1)].to_owned(),
        None => path.to_owned(),
    }
}

/// `target` as seen from the folder `dir`, normalised (`docs` + `../examples/x` → `examples/x`).
fn join(dir: &str, target: &str) -> String {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in target.split('/') {
        match part {
            ".." => {
                parts.pop();
            }
            "." | "" => {}
            part => parts.push(part),
        }
    }
    parts.join("/")
}

fn files(root: &Path, dir: &str, keep: &dyn Fn(&Path) -> bool, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(root.join(dir)).unwrap() {
        let path = entry.unwrap().path();
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if path.is_dir() {
            files(root, &rel, keep, out);
        } else if keep(&path) {
            out.push(PathBuf::from(rel));
        }
    }
}

#[test]
fn every_path_the_docs_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ext = |p: &Path, exts: &[&str]| p.extension().is_some_and(|e| exts.iter().any(|x| e == *x));
    let mut checked = vec![PathBuf::from("README.md"), PathBuf::from("Makefile")];
    files(root, "docs", &|p| ext(p, &["md"]), &mut checked);
    files(root, "manifests", &|p| ext(p, &["yaml"]), &mut checked);
    files(
        root,
        "examples",
        &|p| ext(p, &["yaml", "json"]),
        &mut checked,
    );
    files(root, "src", &|p| ext(p, &["rs"]), &mut checked);
    files(root, "benches", &|p| ext(p, &["rs"]), &mut checked);
    let src_folders: Vec<String> = std::fs::read_dir(root.join("src"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let exists = |path: &str| root.join(path).exists();
    let mut found = Vec::new();
    for file in &checked {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        found.extend(stale(&file.to_string_lossy(), &text, &src_folders, &exists));
    }
    assert!(
        found.is_empty(),
        "docs name files that do not exist:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_link_or_path_to_a_missing_file_is_found() {
    let there = [
        "README.md",
        "docs/json.md",
        "examples/",
        "src/watch/hub.rs",
        "fuzz/corpus/review/",
    ];
    let exists = |path: &str| there.contains(&path);
    let src_folders = ["watch".to_owned(), "apps".to_owned()];
    let doc = "See [json](json.md), [gone](gone.md#part), [web](https://example.com/x.md) and \
               [top](../README.md).\n\
               `src/watch/hub.rs`, `src/watch/reviews.rs` and (watch/cache.rs); `examples/*.yaml`.\n\
               The regex `[a-z]([-a-z0-9]*[a-z0-9])?` and /apps/watch are no paths; nor is \
               fuzz/artifacts/review/crash-… before a run. fuzz/corpus/review/seed-…, docs/old.md.\n";
    assert_eq!(
        stale("docs/x.md", doc, &src_folders, &exists),
        [
            "docs/x.md:1: docs/gone.md",
            "docs/x.md:2: src/watch/reviews.rs",
            "docs/x.md:2: src/watch/cache.rs",
            "docs/x.md:3: docs/old.md",
        ]
    );
    let code = "let p = \"docs/missing.md\"; // as docs/json.md and docs/gone.md say\n";
    assert_eq!(
        stale("src/a.rs", code, &src_folders, &exists),
        ["src/a.rs:1: docs/gone.md"]
    );
}
