//! Reading one Rust file for the module paths it names: its own module path (from its place in
//! `src/` or the `#[path]` that includes it), its code without comments and literals, and every
//! `crate::`, `super::` or `self::` path in it, use trees expanded and resolved to absolute paths.
//! Knows no layer and no folder.

use std::collections::BTreeMap;

/// One file of `src/`: its path below `src/`, its module path, its text and its code.
pub struct Source {
    pub path: String,
    pub module: Vec<String>,
    pub text: String,
    pub code: String,
}

/// The sources of a tree given as (path below `src/`, text). A file's module path comes from its
/// place, or from the `#[path = "…"] mod name;` that includes it.
pub fn tree(files: &[(&str, &str)]) -> Vec<Source> {
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
            let path = match dir {
                "" => file,
                dir => format!("{dir}/{file}"),
            };
            included.insert(path, [s.module.clone(), vec![name]].concat());
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
    for (at, attribute) in text.match_indices("#[path = \"") {
        let Some((file, after)) = text[at + attribute.len()..].split_once("\"]") else {
            continue;
        };
        let after = after.trim_start();
        let decl = after.strip_prefix("pub(crate) ").unwrap_or(after);
        if let Some((name, _)) = decl.strip_prefix("mod ").and_then(|d| d.split_once(';')) {
            found.push((file.to_owned(), name.trim().to_owned()));
        }
    }
    found
}

/// The text with comments and string and char literals blanked out; newlines are kept, so an
/// offset is on the same line in both.
pub fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = chars.clone();
    let mut i = 0;
    while i < chars.len() {
        // `r"…"` and `br"…"` are raw strings, `for"` is no such thing.
        let prefix = if i > 0 && chars[i - 1] == 'b' { 2 } else { 1 };
        let after_ident =
            i >= prefix && (chars[i - prefix].is_alphanumeric() || chars[i - prefix] == '_');
        let end = match &chars[i..] {
            ['/', '/', ..] => Some(
                chars[i..]
                    .iter()
                    .position(|&c| c == '\n')
                    .map_or(chars.len(), |n| i + n),
            ),
            ['/', '*', ..] => Some(block_comment_end(&chars, i)),
            ['r', '"' | '#', ..] if !after_ident => raw_string_end(&chars, i),
            ['"', ..] => Some(quoted_end(&chars, i, '"')),
            // A char literal; a lifetime ('a) has no closing quote.
            ['\'', '\\', ..] | ['\'', _, '\'', ..] => Some(quoted_end(&chars, i, '\'')),
            _ => None,
        };
        let Some(end) = end.map(|e| e.min(chars.len())) else {
            i += 1;
            continue;
        };
        for c in &mut out[i..end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        i = end.max(i + 1);
    }
    out.into_iter().collect()
}

fn block_comment_end(chars: &[char], start: usize) -> usize {
    let (mut depth, mut i) = (0, start);
    while i + 1 < chars.len() {
        match (chars[i], chars[i + 1]) {
            ('/', '*') => depth += 1,
            ('*', '/') => depth -= 1,
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
        if depth == 0 {
            return i;
        }
    }
    chars.len()
}

/// The end of `r"…"` or `r#"…"#` at `start`; `None` when it is no raw string (`r#ident`).
fn raw_string_end(chars: &[char], start: usize) -> Option<usize> {
    let hashes = chars[start + 1..].iter().take_while(|&&c| c == '#').count();
    let body = start + 1 + hashes;
    if chars.get(body) != Some(&'"') {
        return None;
    }
    (body + 1..chars.len())
        .find(|&i| chars[i] == '"' && chars[i + 1..].iter().take(hashes).all(|&c| c == '#'))
        .map(|i| i + 1 + hashes)
}

/// The end of a literal quoted with `quote` at `start`, escapes skipped.
fn quoted_end(chars: &[char], start: usize, quote: char) -> usize {
    let mut i = start + 1;
    while i < chars.len() && chars[i] != quote {
        i += if chars[i] == '\\' { 2 } else { 1 };
    }
    i + 1
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
pub fn use_tree(code: &[u8], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
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

/// Every path starting `crate::`, `super::` or `self::` in the code, with its offset.
fn references(code: &str) -> Vec<(usize, Vec<String>)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    for start in ["crate", "super", "self"] {
        for (at, _) in code.match_indices(start) {
            // Not `$crate`, not the second `super` of `super::super`, not `selfish`.
            let begins = at == 0 || !(is_ident(bytes[at - 1]) || b":$".contains(&bytes[at - 1]));
            let mut j = at + start.len();
            skip_ws(bytes, &mut j);
            let whole = !bytes.get(at + start.len()).copied().is_some_and(is_ident);
            if begins && whole && bytes[j..].starts_with(b"::") {
                let mut paths = Vec::new();
                use_tree(bytes, &mut at.clone(), &[], &mut paths);
                found.extend(paths.into_iter().map(|p| (at, p)));
            }
        }
    }
    found.sort();
    found
}

/// The absolute module path `path` names when written in `module`; a path starting with neither
/// `crate`, `self` nor `super` (a `mod.rs` re-exporting its children) starts from `module`.
/// `None` when it climbs out of the crate.
pub fn resolve(module: &[String], path: &[String]) -> Option<Vec<String>> {
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
        let mut i = at + 4;
        skip_ws(bytes, &mut i);
        let Some(name) = ident(bytes, &mut i) else {
            continue;
        };
        skip_ws(bytes, &mut i);
        if (at > 0 && is_ident(bytes[at - 1])) || bytes.get(i) != Some(&b'{') {
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
    spans
}

/// Every absolute path a file's code names: its line, the path, and the path as written. A path
/// inside an inline module is read from that module.
pub fn resolved(s: &Source) -> Vec<(usize, Vec<String>, String)> {
    let spans = inline_modules(&s.code);
    references(&s.code)
        .into_iter()
        .filter_map(|(at, path)| {
            let inner = spans.iter().filter(|(a, b, _)| (*a..*b).contains(&at));
            let module = [s.module.clone(), inner.map(|(_, _, n)| n.clone()).collect()].concat();
            let line = s.code[..at].matches('\n').count() + 1;
            Some((line, resolve(&module, &path)?, path.join("::")))
        })
        .collect()
}
