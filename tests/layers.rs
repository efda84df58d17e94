//! The tree's import graph, checked two ways:
//! - layering, as the README's "Layout" lists it: a folder of `src/` imports only from folders
//!   before it in [`LAYERS`] (and from the leaf modules every layer may use);
//! - no circles: the files of one folder (and the top-level modules of `src/`) import each other
//!   one way only, as kube-runtime's watcher → reflector → controller do.
//!
//! Every path counts wherever code writes it: `crate::a::b`, `super::b`, `self::b`, grouped and
//! nested over several lines (`use crate::{a, b::{c, d}}`), in `use` lines and inline. A `super::`
//! inside an inline `mod tests { … }` or a `#[path]` test file means the file under test. An item a
//! folder's `mod.rs` re-exports (`pub use node::Node`) counts as an import of the file it comes
//! from; `mod.rs` itself is the folder's front, not a node of its graph. Comments and string
//! literals import nothing, except that a `crate::` path naming a layer above fails even in a doc
//! comment. A failure names the file, the line and the path.

#![allow(clippy::unwrap_used)] // a test: a missing folder is a broken checkout

use std::collections::{BTreeMap, BTreeSet};
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

/// Circles tolerated for now: a folder below `src/` and the files of its circle.
const ALLOWED_CIRCLES: &[(&str, &[&str])] = &[
    // Temporary: removed when apps/auth.rs is split.
    ("apps", &["auth", "reviews"]),
];

/// One file of `src/`: its path below `src/`, its module path and its text.
struct Source {
    path: String,
    module: Vec<String>,
    text: String,
    code: String,
}

/// The sources of a tree given as (path below `src/`, text). A file's module path comes from its
/// place, or from the `#[path = "…"] mod name;` that includes it.
fn tree(files: &[(&str, &str)]) -> Vec<Source> {
    let mut sources: Vec<Source> = files
        .iter()
        .map(|(path, text)| Source {
            path: (*path).to_owned(),
            module: module_of(path),
            text: (*text).to_owned(),
            code: code_only(text),
        })
        .collect();
    let mut included = BTreeMap::new();
    for s in &sources {
        let dir = s.path.rsplit_once('/').map_or("", |(dir, _)| dir);
        for (file, name) in path_attributes(&s.text) {
            let path = if dir.is_empty() {
                file
            } else {
                format!("{dir}/{file}")
            };
            let mut module = s.module.clone();
            module.push(name);
            included.insert(path, module);
        }
    }
    for s in &mut sources {
        if let Some(module) = included.remove(&s.path) {
            s.module = module;
        }
    }
    sources
}

fn module_of(path: &str) -> Vec<String> {
    let mut parts: Vec<String> = path
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// `(file, name)` of every `#[path = "file"] mod name;`.
fn path_attributes(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("#[path = \"") {
        let rest = &text[at + 10..];
        let Some((file, after)) = rest.split_once("\"]") else {
            continue;
        };
        let after = after.trim_start();
        let Some(decl) = after
            .strip_prefix("mod ")
            .or(after.strip_prefix("pub mod "))
        else {
            continue;
        };
        if let Some((name, _)) = decl.split_once(';') {
            found.push((file.to_owned(), name.trim().to_owned()));
        }
    }
    found
}

/// The text with comments and the insides of string and char literals blanked out; newlines kept,
/// so offsets give the same line numbers.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let prev = i.checked_sub(1).map(|p| chars[p]);
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                match (chars[i], chars.get(i + 1)) {
                    ('/', Some('*')) => depth += 1,
                    ('*', Some('/')) => depth -= 1,
                    _ => {}
                }
                let closing = chars[i] == '*' && chars.get(i + 1) == Some(&'/');
                blank(&mut out, chars[i]);
                i += 1;
                if closing && depth == 0 {
                    blank(&mut out, chars[i]);
                    i += 1;
                    break;
                }
            }
        } else if c == 'r'
            && !prev.is_some_and(|p| ident(p) && p != 'b')
            && raw_string_at(&chars, i)
        {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            out.push('r');
            out.extend(std::iter::repeat_n('#', hashes));
            out.push('"');
            i += 2 + hashes;
            while i < chars.len() {
                let closes = chars[i] == '"'
                    && chars[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == '#')
                        .count()
                        == hashes;
                if closes {
                    out.push('"');
                    out.extend(std::iter::repeat_n('#', hashes));
                    i += 1 + hashes;
                    break;
                }
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let step = if chars[i] == '\\' { 2 } else { 1 };
                for &skipped in chars.iter().skip(i).take(step) {
                    blank(&mut out, skipped);
                }
                i += step;
            }
            out.push('"');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A char literal ('x', '\n', '\u{7f}'); a lifetime ('a) has no closing quote.
            out.push('\'');
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                let step = if chars[i] == '\\' { 2 } else { 1 };
                for &skipped in chars.iter().skip(i).take(step) {
                    blank(&mut out, skipped);
                }
                i += step;
            }
            out.push('\'');
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn raw_string_at(chars: &[char], at: usize) -> bool {
    let hashes = chars[at + 1..].iter().take_while(|&&h| h == '#').count();
    chars.get(at + 1 + hashes) == Some(&'"')
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn skip_ws(code: &[u8], i: &mut usize) {
    while code.get(*i).is_some_and(u8::is_ascii_whitespace) {
        *i += 1;
    }
}

fn ident(code: &[u8], i: &mut usize) -> Option<String> {
    let start = *i;
    while code.get(*i).copied().is_some_and(is_ident) {
        *i += 1;
    }
    (*i > start).then(|| String::from_utf8_lossy(&code[start..*i]).into_owned())
}

/// Every path the use tree at `i` names, each after `prefix`: `a::{b, c::{d, e as f}, self}`
/// names `a::b`, `a::c::d`, `a::c::e` and `a`.
fn use_tree(code: &[u8], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    skip_ws(code, i);
    match code.get(*i) {
        Some(b'{') => {
            *i += 1;
            loop {
                skip_ws(code, i);
                if code.get(*i) == Some(&b'}') {
                    *i += 1;
                    return;
                }
                use_tree(code, i, prefix, out);
                skip_ws(code, i);
                match code.get(*i) {
                    Some(b',') => *i += 1,
                    Some(b'}') => {}
                    _ => return, // not a use tree
                }
            }
        }
        Some(b'*') => {
            *i += 1;
            out.push([prefix, &["*".to_owned()]].concat());
            return;
        }
        _ => {}
    }
    let mut path = prefix.to_vec();
    while let Some(segment) = ident(code, i) {
        // `self` inside braces is the path before them.
        if !(segment == "self" && !prefix.is_empty() && path.len() == prefix.len()) {
            path.push(segment);
        }
        let mut j = *i;
        skip_ws(code, &mut j);
        if !code[j..].starts_with(b"::") {
            break;
        }
        *i = j + 2;
        skip_ws(code, i);
        if matches!(code.get(*i), Some(b'{' | b'*')) {
            return use_tree(code, i, &path, out);
        }
    }
    if path.len() > prefix.len() || !prefix.is_empty() {
        out.push(path);
    }
}

/// Every path from `crate::`, `super::` or `self::` in the code, with its offset.
fn references(code: &str) -> Vec<(usize, Vec<String>)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    for start in ["crate", "super", "self"] {
        for (at, _) in code.match_indices(start) {
            let boundary =
                at == 0 || !(is_ident(bytes[at - 1]) || matches!(bytes[at - 1], b':' | b'$'));
            let mut j = at + start.len();
            skip_ws(bytes, &mut j);
            if boundary
                && !bytes.get(at + start.len()).copied().is_some_and(is_ident)
                && bytes[j..].starts_with(b"::")
            {
                let mut i = at;
                let mut paths = Vec::new();
                use_tree(bytes, &mut i, &[], &mut paths);
                found.extend(paths.into_iter().map(|p| (at, p)));
            }
        }
    }
    found.sort();
    found
}

/// The absolute module path `path` names when written in `module`; relative paths (a `mod.rs`
/// re-exporting its children) start from `module`.
fn resolve(module: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut base = module.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        _ => {}
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop()?;
        rest = &rest[1..];
    }
    Some([base, rest.to_vec()].concat())
}

/// `(start, end, name)` of every inline `mod name { … }`.
fn inline_modules(code: &str) -> Vec<(usize, usize, String)> {
    let bytes = code.as_bytes();
    let mut spans = Vec::new();
    for (at, _) in code.match_indices("mod ") {
        if at > 0 && is_ident(bytes[at - 1]) {
            continue;
        }
        let mut i = at + 4;
        skip_ws(bytes, &mut i);
        let Some(name) = ident(bytes, &mut i) else {
            continue;
        };
        skip_ws(bytes, &mut i);
        if bytes.get(i) != Some(&b'{') {
            continue;
        }
        let mut depth = 0;
        for (end, b) in bytes.iter().enumerate().skip(i) {
            match b {
                b'{' => depth += 1,
                b'}' => depth -= 1,
                _ => continue,
            }
            if depth == 0 {
                spans.push((i, end, name));
                break;
            }
        }
    }
    spans.sort();
    spans
}

/// Every absolute path a file names, with the line and the path as written.
fn resolved(s: &Source) -> Vec<(usize, Vec<String>, String)> {
    let spans = inline_modules(&s.code);
    references(&s.code)
        .into_iter()
        .filter_map(|(at, path)| {
            let mut module = s.module.clone();
            module.extend(
                spans
                    .iter()
                    .filter(|(a, b, _)| (*a..*b).contains(&at))
                    .map(|(_, _, n)| n.clone()),
            );
            let line = s.code[..at].matches('\n').count() + 1;
            Some((line, resolve(&module, &path)?, path.join("::")))
        })
        .collect()
}

/// Each file's imports from a layer above its own.
fn upward(sources: &[Source]) -> Vec<String> {
    let mut found = BTreeSet::new();
    for s in sources {
        let Some(rank) = LAYERS
            .iter()
            .position(|l| s.module.first().is_some_and(|m| m == l))
        else {
            continue;
        };
        let above = &LAYERS[rank + 1..];
        for (line, path, written) in resolved(s) {
            if path.first().is_some_and(|p| above.contains(&p.as_str())) {
                found.insert(format!("src/{}:{line} uses {written}", s.path));
            }
        }
        // Doc links too: `crate::apps` but not `crate::appsx`.
        for layer in above {
            let path = format!("crate::{layer}");
            let named = s.text.match_indices(&path).any(|(at, _)| {
                !s.text[at + path.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
            });
            if named {
                found.insert(format!("src/{} names {path}", s.path));
            }
        }
    }
    found.into_iter().collect()
}

/// One import between two files of a folder.
struct Edge {
    from: String,
    to: String,
    at: String,
}

/// The import edges between the files of every folder, keyed by the folder's module path.
fn folder_graphs(sources: &[Source]) -> BTreeMap<Vec<String>, Vec<Edge>> {
    let fronts: Vec<&Source> = sources
        .iter()
        .filter(|s| s.path == "lib.rs" || s.path.ends_with("/mod.rs"))
        .collect();
    let mut graphs = BTreeMap::new();
    for front in fronts {
        let folder = &front.module;
        let depth = folder.len();
        let within = |m: &[String]| m.len() > depth && m.starts_with(folder);
        let children: BTreeSet<&String> = sources
            .iter()
            .filter(|s| within(&s.module))
            .map(|s| &s.module[depth])
            .collect();
        // `pub use child::Item` in the front: `Item` comes from `child`.
        let reexports: BTreeMap<String, String> = front
            .code
            .match_indices("pub use ")
            .chain(front.code.match_indices("pub(crate) use "))
            .flat_map(|(at, found)| {
                let mut paths = Vec::new();
                use_tree(
                    front.code.as_bytes(),
                    &mut (at + found.len()),
                    &[],
                    &mut paths,
                );
                paths
            })
            .filter_map(|p| resolve(folder, &p))
            .filter(|p| within(p) && children.contains(&p[depth]))
            .filter_map(|p| Some((p.last()?.clone(), p[depth].clone())))
            .collect();
        let mut edges = Vec::new();
        for s in sources.iter().filter(|s| within(&s.module)) {
            for (line, path, written) in resolved(s) {
                if !within(&path) {
                    continue;
                }
                let to = if children.contains(&path[depth]) {
                    &path[depth]
                } else if let Some(child) = reexports.get(&path[depth]) {
                    child
                } else {
                    continue; // an item of the front itself
                };
                if *to != s.module[depth] {
                    edges.push(Edge {
                        from: s.module[depth].clone(),
                        to: to.clone(),
                        at: format!("src/{}:{line} uses {written}", s.path),
                    });
                }
            }
        }
        graphs.insert(folder.clone(), edges);
    }
    graphs
}

/// Every import circle: the folder, the files in it (sorted) and the imports that close it.
fn circles(sources: &[Source]) -> Vec<(String, Vec<String>, Vec<String>)> {
    let mut found = Vec::new();
    for (folder, edges) in folder_graphs(sources) {
        let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for e in &edges {
            next.entry(&e.from).or_default().insert(&e.to);
        }
        let reach = |from: &str| {
            let mut seen = BTreeSet::new();
            let mut todo = vec![from];
            while let Some(n) = todo.pop() {
                for &m in next.get(n).into_iter().flatten() {
                    if seen.insert(m) {
                        todo.push(m);
                    }
                }
            }
            seen
        };
        let reached: BTreeMap<&str, BTreeSet<&str>> = next.keys().map(|&n| (n, reach(n))).collect();
        let mut placed = BTreeSet::new();
        for (&n, r) in &reached {
            if !r.contains(n) || placed.contains(n) {
                continue;
            }
            let members: Vec<&str> = r
                .iter()
                .copied()
                .filter(|m| reached.get(m).is_some_and(|b| b.contains(n)))
                .collect();
            placed.extend(members.iter().copied());
            let closing = edges
                .iter()
                .filter(|e| members.contains(&e.from.as_str()) && members.contains(&e.to.as_str()))
                .map(|e| e.at.clone())
                .collect();
            let members = members.into_iter().map(String::from).collect();
            found.push((folder.join("/"), members, closing));
        }
    }
    found
}

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
    let upward = upward(&sources);
    assert!(
        upward.is_empty(),
        "imports from a layer above:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_import_circle_between_files_of_a_folder() {
    let found = circles(&src_tree());
    let allowed = |folder: &str, members: &[String]| {
        ALLOWED_CIRCLES
            .iter()
            .any(|(f, m)| *f == folder && m.iter().eq(members.iter()))
    };
    let report: Vec<String> = found
        .iter()
        .filter(|(folder, members, _)| !allowed(folder, members))
        .map(|(folder, members, closing)| {
            format!(
                "src/{folder}: {}\n  {}",
                members.join(" ↔ "),
                closing.join("\n  ")
            )
        })
        .collect();
    assert!(report.is_empty(), "import circles:\n{}", report.join("\n"));
    for (folder, members) in ALLOWED_CIRCLES {
        let still = found
            .iter()
            .any(|(f, m, _)| f == folder && m.iter().eq(members.iter()));
        assert!(
            still,
            "src/{folder}: {members:?} no longer import each other; delete their ALLOWED_CIRCLES entry"
        );
    }
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
        upward(&sources),
        [
            "src/json/edit.rs:1 uses crate::admission::naming",
            "src/json/edit.rs:1 uses crate::admission::naming::AppName"
        ]
    );
    // From admission/mod.rs, `super::super` is outside the crate: no path of it.
    let outside = tree(&[("admission/mod.rs", "fn f() { super::super::cli::run() }\n")]);
    assert!(upward(&outside).is_empty());
    let climbs = tree(&[(
        "admission/sidecars/x.rs",
        "fn f() { super::super::super::cli::run() }\n",
    )]);
    assert_eq!(
        upward(&climbs),
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
    let (folder, members, closing) = &found[0];
    assert_eq!(folder, "watch");
    assert_eq!(members, &["a", "b", "d"]);
    assert_eq!(
        closing,
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
