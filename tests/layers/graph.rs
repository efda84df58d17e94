//! The import graph of a tree read by `source.rs`: the imports that climb the layer order, and the
//! import circles between the files of one folder. Reads no file.

use std::collections::{BTreeMap, BTreeSet};

use crate::source::{Source, resolve, resolved, use_tree};

/// Each file's imports from a layer above its own (`layers` lowest first), as "file:line uses
/// path"; and each `crate::` path to a layer above in its text (a doc link too), as "file names
/// path".
pub fn upward(sources: &[Source], layers: &[&str]) -> Vec<String> {
    let mut found = BTreeSet::new();
    for s in sources {
        let Some(rank) = layers
            .iter()
            .position(|l| s.module.first().is_some_and(|m| m == l))
        else {
            continue;
        };
        let above = &layers[rank + 1..];
        for (line, path, written) in resolved(s) {
            if path.first().is_some_and(|p| above.contains(&p.as_str())) {
                found.insert(format!("src/{}:{line} uses {written}", s.path));
            }
        }
        for layer in above {
            let path = format!("crate::{layer}");
            // `crate::apps` but not `crate::appsx`.
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

/// One import between two files of a folder, and where it is written.
struct Edge {
    from: String,
    to: String,
    at: String,
}

/// The import edges between the files of every folder (a `mod.rs` or `lib.rs` and what is
/// below it), keyed by the folder's module path. A file of a subfolder counts as that subfolder.
fn folder_graphs(sources: &[Source]) -> BTreeMap<Vec<String>, Vec<Edge>> {
    let mut graphs = BTreeMap::new();
    let fronts = sources
        .iter()
        .filter(|s| s.path == "lib.rs" || s.path.ends_with("/mod.rs"));
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
        let mut reexports = BTreeMap::new();
        for (at, found) in front.code.match_indices("pub use ") {
            let mut paths = Vec::new();
            use_tree(
                front.code.as_bytes(),
                &mut (at + found.len()),
                &[],
                &mut paths,
            );
            for path in paths.iter().filter_map(|p| resolve(folder, p)) {
                if within(&path) && children.contains(&path[depth]) {
                    reexports.insert(path[path.len() - 1].clone(), path[depth].clone());
                }
            }
        }
        let mut edges = Vec::new();
        for s in sources.iter().filter(|s| within(&s.module)) {
            for (line, path, written) in resolved(s) {
                if !within(&path) {
                    continue;
                }
                let to = match reexports.get(&path[depth]) {
                    _ if children.contains(&path[depth]) => &path[depth],
                    Some(child) => child,
                    None => continue, // an item of the front itself
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

/// An import circle: the folder (its module path, `a/b`), its files in the circle (sorted) and
/// the imports between them.
pub struct Circle {
    pub folder: String,
    pub files: Vec<String>,
    pub imports: Vec<String>,
}

/// Every import circle between the files of one folder.
pub fn circles(sources: &[Source]) -> Vec<Circle> {
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
        for (&n, from_n) in &reached {
            if !from_n.contains(n) || placed.contains(n) {
                continue;
            }
            // n's circle: what n reaches that reaches n back.
            let files: Vec<&str> = from_n
                .iter()
                .copied()
                .filter(|m| reached.get(m).is_some_and(|r| r.contains(n)))
                .collect();
            placed.extend(files.iter().copied());
            let inside =
                |e: &&Edge| files.contains(&e.from.as_str()) && files.contains(&e.to.as_str());
            found.push(Circle {
                folder: folder.join("/"),
                imports: edges.iter().filter(inside).map(|e| e.at.clone()).collect(),
                files: files.into_iter().map(String::from).collect(),
            });
        }
    }
    found
}
