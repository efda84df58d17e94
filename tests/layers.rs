//! The tree's layering, as the README's "Layout" lists it: a folder of `src/` imports only from
//! folders before it in [`LAYERS`] (and from the leaf modules every layer may use). A `crate::`
//! path in code or docs that reaches upward fails here, naming the file and the path.

#![allow(clippy::unwrap_used)] // a test: a missing folder is a broken checkout

use std::path::Path;

/// Lowest first.
const LAYERS: [&str; 8] = [
    "json",
    "admission",
    "cluster",
    "certmgr",
    "server",
    "watch",
    "apps",
    "cli",
];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_folder_imports_from_a_layer_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut upward = Vec::new();
    for (rank, layer) in LAYERS.iter().enumerate() {
        let mut files = Vec::new();
        rust_files(&src.join(layer), &mut files);
        assert!(!files.is_empty(), "src/{layer} has no Rust files");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for above in &LAYERS[rank + 1..] {
                let path = format!("crate::{above}");
                let reaches = text.match_indices(&path).any(|(at, _)| {
                    // `crate::apps` but not `crate::appsx`.
                    !text[at + path.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
                });
                if reaches {
                    upward.push(format!("{} uses {path}", file.display()));
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports from a layer above:\n{}",
        upward.join("\n")
    );
}
