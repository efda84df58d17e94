//! The tree's import graph, checked two ways:
//! - layering, as docs/layout.md lists it: a folder of `src/` imports only from folders
//!   before it in [`LAYERS`] (and from the leaf modules every layer may use);
//! - no circles: the files of one folder (and the top-level modules of `src/`) import each other
//!   one way only, as kube-runtime's watcher → reflector → controller do.
//!
//! Every path counts wherever code writes it: `crate::a::b`, `super::b`, `self::b`, grouped and
//! nested over several lines (`use crate::{a, b::{c, d}}`), in `use` lines and inline. Test code
//! is part of the file it tests: a `super::` inside an inline `mod tests { … }` or a `#[path]`
//! test file means that file, and its imports are that file's. An item a folder's `mod.rs`
//! re-exports (`pub use node::Node`) counts as an import of the file it comes from; `mod.rs`
//! itself is the folder's front, not a node of its graph. Comments and string literals import
//! nothing, except that a `crate::` path naming a layer above fails even in a doc comment. A
//! failure names the file, the line and the path. `source.rs` reads the files, `graph.rs` draws
//! the graph; the tests below run them on the tree and on planted sources.

#![allow(clippy::unwrap_used)] // a test: a missing folder is a broken checkout

mod graph;
mod source;

use std::path::Path;

use graph::{circles, upward};
use source::{Source, tree};

/// Lowest first.
const LAYERS: [&str; 9] = [
    "json",
    "admission",
    "cluster",
    "certmgr",
    "server",
    "watch",
    "apps",
    "telemetry",
    "cli",
];

fn src_tree() -> Vec<Source> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                // main.rs is the binary, a crate of its own.
                if rel != "main.rs" {
                    out.push((rel, std::fs::read_to_string(&path).unwrap()));
                }
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    tree(&borrowed)
}

#[test]
fn no_folder_imports_from_a_layer_above_it() {
    let sources = src_tree();
    for layer in LAYERS {
        assert!(
            sources
                .iter()
                .any(|s| s.module.first().is_some_and(|m| m == layer)),
            "src/{layer} has no Rust files"
        );
    }
    let upward = upward(&sources, &LAYERS);
    assert!(
        upward.is_empty(),
        "imports from a layer above:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_import_circle_between_files_of_a_folder() {
    let found = circles(&src_tree());
    let report: Vec<String> = found
        .iter()
        .map(|c| {
            format!(
                "src/{}: {}\n  {}",
                c.folder,
                c.files.join(" ↔ "),
                c.imports.join("\n  ")
            )
        })
        .collect();
    assert!(report.is_empty(), "import circles:\n{}", report.join("\n"));
}

#[test]
fn a_grouped_use_that_climbs_fails() {
    let sources = tree(&[
        ("json/mod.rs", "pub mod edit;\n"),
        (
            "json/edit.rs",
            "use crate::{\n    keys,\n    admission::{\n        naming::{self, AppName},\n    },\n};\n",
        ),
        ("cluster/call.rs", "use crate::{json::Node, report};\n"),
    ]);
    assert_eq!(
        upward(&sources, &LAYERS),
        [
            "src/json/edit.rs:1 uses crate::admission::naming",
            "src/json/edit.rs:1 uses crate::admission::naming::AppName"
        ]
    );
    // From admission/mod.rs, `super::super` is outside the crate: no path of it.
    let outside = tree(&[("admission/mod.rs", "fn f() { super::super::cli::run() }\n")]);
    assert!(upward(&outside, &LAYERS).is_empty());
    let climbs = tree(&[(
        "admission/sidecars/x.rs",
        "fn f() { super::super::super::cli::run() }\n",
    )]);
    assert_eq!(
        upward(&climbs, &LAYERS),
        ["src/admission/sidecars/x.rs:1 uses super::super::super::cli::run"]
    );
}

#[test]
fn an_import_circle_between_files_of_one_folder_fails() {
    let sources = tree(&[
        (
            "watch/mod.rs",
            "pub mod a;\npub mod b;\npub mod c;\npub mod d;\npub use d::Record;\n",
        ),
        (
            "watch/a.rs",
            "use super::{\n    c,\n    b::{self, Plan},\n};\n",
        ),
        (
            "watch/b.rs",
            "// use super::a; is a comment\nlet s = \"super::a::X\";\nfn f() -> crate::watch::Record { todo!() }\n",
        ),
        ("watch/c.rs", "use super::*;\n"),
        (
            "watch/d.rs",
            "pub struct Record;\nfn g() { crate::watch::a::go() }\n#[cfg(test)]\nmod tests { use super::*; }\n",
        ),
    ]);
    let found = circles(&sources);
    assert_eq!(found.len(), 1, "one circle: a → b → d → a");
    assert_eq!(found[0].folder, "watch");
    assert_eq!(found[0].files, ["a", "b", "d"]);
    assert_eq!(
        found[0].imports,
        &[
            "src/watch/a.rs:1 uses super::b",
            "src/watch/a.rs:1 uses super::b::Plan",
            "src/watch/b.rs:3 uses crate::watch::Record",
            "src/watch/d.rs:2 uses crate::watch::a::go",
        ]
    );
}

#[test]
fn a_test_module_importing_its_file_is_no_circle() {
    let sources = tree(&[
        ("watch/mod.rs", "pub mod hub;\npub mod status;\n"),
        (
            "watch/hub.rs",
            "use super::status::Phase;\n#[cfg(test)]\n#[path = \"hub_tests.rs\"]\nmod tests;\n",
        ),
        (
            "watch/hub_tests.rs",
            "use super::*;\nuse crate::watch::status::Phase;\n",
        ),
        (
            "watch/status.rs",
            "pub enum Phase {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n    fn f(c: char) -> bool { c == '{' }\n}\n",
        ),
    ]);
    assert!(circles(&sources).is_empty());
}
