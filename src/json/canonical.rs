//! PURE: all of RFC 8785 (JSON Canonicalization Scheme) in one place.
//!
//! Three paths write or judge canonical JSON, and they must agree byte for byte on a value
//! whose hash is stored in every managed KService:
//! - the tree writer ([`write`], [`to_vec`], and [`json_text`] for a `serde_json::Value`);
//! - the text writer ([`text`]), for JSON text a review left unparsed ([`Node::Raw`]), which
//!   writes its canonical form without building a tree;
//! - the judge ([`skim`]), which the review parser runs while it skips a value it keeps as text,
//!   and which says whether that text is canonical already (compact, members in order, no
//!   escape or number spelled otherwise), as API-server JSON mostly is: then it is copied as is.
//!
//! Members are ordered by their names' UTF-16 code units. A name that occurs twice in one object
//! keeps its last value, on every path (as `serde_json`, Go's `encoding/json` and so
//! kube-apiserver read such an object), so a duplicate never reaches the hash twice.
//!
//! This module knows no Kubernetes and never hashes: `spec_sha` hashes what it writes.

use std::borrow::Cow;
use std::cmp::Ordering;

use serde_json::{Number, Value};

use super::Node;
use super::lex::{Escapes, Lexer, MAX_DEPTH, Refused, find_special};

/// Raw text the text writer could not read: a bug (the parser that kept the text checked it)
/// or a `Node::Raw` made by hand. Never written as anything else. It names a position, not the
/// text: that may hold an env value or a secret, and the error is logged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a value kept as JSON text does not read as JSON (at byte {at} of {len})")]
pub struct Error {
    at: usize,
    len: usize,
}

/// Write the canonical JSON of `value`, handing it to `sink` in pieces of about `chunk` bytes
/// (many tiny writes to a hasher cost more than the copy; one buffer for a 200 KB spec would
/// keep growing).
pub fn write(value: &Node, chunk: usize, sink: impl FnMut(&[u8])) -> Result<(), Error> {
    let mut w = Writer {
        buf: Vec::with_capacity(chunk.min(1 << 20) + 1024),
        chunk,
        sink,
        members: Vec::new(),
    };
    w.node(value)?;
    (w.sink)(&w.buf);
    Ok(())
}

/// The canonical JSON of `value`, in one buffer.
pub fn to_vec(value: &Node) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    write(value, usize::MAX, |bytes| out.extend_from_slice(bytes))?;
    Ok(out)
}

/// The canonical JSON text of a `serde_json::Value` (which holds no raw text, so this cannot
/// fail). The same ordering, number and string rules as [`write`].
pub fn json_text(value: &Value) -> String {
    let mut out = Vec::new();
    json_value(value, &mut out);
    // Only valid UTF-8 is ever written: JSON punctuation, escapes and whole `str`s.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Append the canonical JSON of the JSON `text` (raw text a review left unparsed).
pub fn text(text: &str, out: &mut Vec<u8>) -> Result<(), Error> {
    text_with(text, out, &mut Vec::new())
}

/// [`text`] with the caller's scratch, so a writer of many raw values allocates it once.
fn text_with<'t>(text: &'t str, out: &mut Vec<u8>, members: &mut Members<'t>) -> Result<(), Error> {
    let start = out.len();
    let mut lx = Lexer::new(text);
    let written = raw_value(&mut lx, out, members, 0);
    members.clear();
    match written.is_ok() && lx.at_end() {
        true => Ok(()),
        false => {
            out.truncate(start);
            Err(Error {
                at: lx.at,
                len: text.len(),
            })
        }
    }
}

/// UTF-16 code-unit order. UTF-8 byte order is code-point order, which differs only where a
/// character from U+E000 up (lead byte 0xEE or above) meets a supplementary one: so the first
/// differing byte decides unless it is such a lead byte.
pub fn utf16_cmp(a: &str, b: &str) -> Ordering {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    match x.iter().zip(y).position(|(p, q)| p != q) {
        None => x.len().cmp(&y.len()),
        Some(i) if x[i] < 0xEE && y[i] < 0xEE => x[i].cmp(&y[i]),
        Some(_) => a.encode_utf16().cmp(b.encode_utf16()),
    }
}

/// Whether member names come strictly in canonical order: sorted, and no name twice.
fn in_order<'k>(mut names: impl Iterator<Item = &'k str>) -> bool {
    let Some(mut previous) = names.next() else {
        return true;
    };
    names.all(|name| {
        let ordered = utf16_cmp(previous, name).is_lt();
        previous = name;
        ordered
    })
}

/// Sort members by name, keeping their order among equal names, and drop all but the last of
/// each name: `serde_json`'s, Go's and kube-apiserver's reading of a repeated name.
fn order_last_wins<T>(members: &mut Vec<(&str, T)>) {
    members.sort_by(|a, b| utf16_cmp(a.0, b.0));
    // `dedup_by` keeps the first of a run; the later value replaces it first.
    members.reverse();
    members.dedup_by(|later, earlier| later.0 == earlier.0);
    members.reverse();
}

/// Numbers as ECMAScript's `Number.prototype.toString` prints the IEEE-754 double.
pub fn write_number(n: &Number, out: &mut Vec<u8>) {
    if let Some(i) = n.as_i64().filter(|i| i.unsigned_abs() < (1 << 53)) {
        out.extend_from_slice(i.to_string().as_bytes());
        return;
    }
    let f = n.as_f64().unwrap_or(0.0);
    let mut buf = ryu_js::Buffer::new();
    out.extend_from_slice(buf.format(f).as_bytes());
}

/// Whether a number token the lexer read is spelled as [`write_number`] writes it: an integer
/// that is exact as a double, and not `-0`.
fn number_is_canonical(token: &str) -> bool {
    let digits = token.strip_prefix('-').unwrap_or(token);
    digits.len() <= 15 && digits.bytes().all(|b| b.is_ascii_digit()) && token != "-0"
}

/// A string with the escapes RFC 8785 prescribes: the short forms, `\u00xx` for other controls.
pub fn write_string(s: &str, out: &mut Vec<u8>) {
    let bytes = s.as_bytes();
    out.push(b'"');
    let mut start = 0;
    if find_special(bytes).is_some() {
        for (at, &b) in bytes.iter().enumerate() {
            let escaped: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0x08 => b"\\b",
                0x0c => b"\\f",
                0x00..=0x1f => {
                    out.extend_from_slice(&bytes[start..at]);
                    out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
                    start = at + 1;
                    continue;
                }
                _ => continue,
            };
            out.extend_from_slice(&bytes[start..at]);
            out.extend_from_slice(escaped);
            start = at + 1;
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Whether a string whose escapes need `escapes` is its own canonical form, as it came.
fn escapes_are_canonical(escapes: Escapes) -> bool {
    escapes <= Escapes::Short
}

/// The tree writer's state: a buffer handed to `sink` a chunk at a time.
struct Writer<'v, S> {
    buf: Vec<u8>,
    chunk: usize,
    sink: S,
    /// Scratch for writing raw text (an env list can hold thousands of raw entries).
    members: Members<'v>,
}

impl<'v, S: FnMut(&[u8])> Writer<'v, S> {
    fn settle(&mut self) {
        if self.buf.len() >= self.chunk {
            (self.sink)(&self.buf);
            self.buf.clear();
        }
    }

    fn node(&mut self, value: &'v Node<'_>) -> Result<(), Error> {
        self.settle();
        let buf = &mut self.buf;
        match value {
            Node::Null => buf.extend_from_slice(b"null"),
            Node::Bool(true) => buf.extend_from_slice(b"true"),
            Node::Bool(false) => buf.extend_from_slice(b"false"),
            Node::Number(n) => write_number(n, buf),
            Node::String(s) => write_string(s, buf),
            Node::Array(items) => {
                buf.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.buf.push(b',');
                    }
                    self.node(item)?;
                }
                self.buf.push(b']');
            }
            // Most maps come in order (and a parsed one holds no name twice).
            Node::Object(map) if in_order(map.keys()) => self.members(map.iter())?,
            Node::Object(map) => {
                let mut members: Vec<(&str, &Node)> = map.iter().collect();
                order_last_wins(&mut members);
                self.members(members.into_iter())?;
            }
            Node::Raw {
                text,
                canonical: true,
                ..
            } => buf.extend_from_slice(text.as_bytes()),
            Node::Raw { text, .. } => text_with(text, buf, &mut self.members)?,
        }
        Ok(())
    }

    fn members<'n: 'v>(
        &mut self,
        members: impl Iterator<Item = (&'v str, &'v Node<'n>)>,
    ) -> Result<(), Error> {
        self.buf.push(b'{');
        for (i, (key, item)) in members.enumerate() {
            if i > 0 {
                self.buf.push(b',');
            }
            write_string(key, &mut self.buf);
            self.buf.push(b':');
            self.node(item)?;
        }
        self.buf.push(b'}');
        Ok(())
    }
}

fn json_value(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json_value(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&str, &Value)> =
                map.iter().map(|(k, v)| (k.as_str(), v)).collect();
            if !in_order(members.iter().map(|m| m.0)) {
                order_last_wins(&mut members);
            }
            out.push(b'{');
            for (i, (key, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(key, out);
                out.push(b':');
                json_value(item, out);
            }
            out.push(b'}');
        }
    }
}

/// The names of the members of the objects the text writer is inside, innermost last, and
/// where each member's canonical text was written.
type Members<'t> = Vec<(Cow<'t, str>, std::ops::Range<usize>)>;

/// Write the canonical JSON of the next value of raw text.
fn raw_value<'t>(
    lx: &mut Lexer<'t>,
    out: &mut Vec<u8>,
    members: &mut Members<'t>,
    depth: usize,
) -> Result<(), Refused> {
    if depth > MAX_DEPTH {
        return Err(Refused);
    }
    lx.space();
    match lx.peek().ok_or(Refused)? {
        b'{' => raw_object(lx, out, members, depth),
        b'[' => {
            out.push(b'[');
            let mut first = true;
            lx.elements(|lx, _| {
                if !std::mem::take(&mut first) {
                    out.push(b',');
                }
                raw_value(lx, out, members, depth + 1)
            })?;
            out.push(b']');
            Ok(())
        }
        b'"' => {
            let open = lx.at;
            match lx.skip_string()? {
                e if escapes_are_canonical(e) => {
                    out.extend_from_slice(&lx.bytes()[open..lx.at]);
                }
                _ => write_string(&lx.decode(open)?, out),
            }
            Ok(())
        }
        b't' => literal_into(lx, "true", out),
        b'f' => literal_into(lx, "false", out),
        b'n' => literal_into(lx, "null", out),
        _ => {
            write_number(&lx.number()?, out);
            Ok(())
        }
    }
}

fn literal_into(lx: &mut Lexer, word: &str, out: &mut Vec<u8>) -> Result<(), Refused> {
    lx.literal(word)?;
    out.extend_from_slice(word.as_bytes());
    Ok(())
}

/// An object's members are written as they come; only when their names are out of order (or
/// one repeats) are they copied back in order, the last of a repeated name kept.
fn raw_object<'t>(
    lx: &mut Lexer<'t>,
    out: &mut Vec<u8>,
    members: &mut Members<'t>,
    depth: usize,
) -> Result<(), Refused> {
    out.push(b'{');
    let first = out.len();
    let base = members.len();
    lx.elements(|lx, key| {
        let key = key.ok_or(Refused)?;
        if members.len() > base {
            out.push(b',');
        }
        let from = out.len();
        match &key {
            // Borrowed: it held no escape, so it is written as it came.
            Cow::Borrowed(plain) => {
                out.push(b'"');
                out.extend_from_slice(plain.as_bytes());
                out.extend_from_slice(b"\":");
            }
            Cow::Owned(decoded) => {
                write_string(decoded, out);
                out.push(b':');
            }
        }
        raw_value(lx, out, members, depth + 1)?;
        members.push((key, from..out.len()));
        Ok(())
    })?;
    let mine = &members[base..];
    if !in_order(mine.iter().map(|m| m.0.as_ref())) {
        let written = out.split_off(first);
        let mut ordered: Vec<(&str, &std::ops::Range<usize>)> =
            mine.iter().map(|(k, r)| (k.as_ref(), r)).collect();
        order_last_wins(&mut ordered);
        for (i, (_, range)) in ordered.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&written[range.start - first..range.end - first]);
        }
    }
    members.truncate(base);
    out.push(b'}');
    Ok(())
}

/// The judge: move past the next value, checking it and building nothing; its text, and whether
/// that text is canonical JSON as it is.
pub(crate) fn skim<'t>(lx: &mut Lexer<'t>, depth: usize) -> Result<(&'t str, bool), Refused> {
    lx.space();
    let start = lx.at;
    lx.canonical = true;
    lx.escapes = Escapes::None;
    skip(lx, depth)?;
    let canonical = lx.canonical && escapes_are_canonical(lx.escapes);
    Ok((&lx.text[start..lx.at], canonical))
}

fn skip(lx: &mut Lexer, depth: usize) -> Result<(), Refused> {
    if depth > MAX_DEPTH {
        return Err(Refused);
    }
    lx.space();
    match lx.peek().ok_or(Refused)? {
        b'"' => {
            let open = lx.at;
            match lx.skip_string()? {
                // Only decoding checks a `\u` escape's digits and surrogate pairs.
                Escapes::Unicode => lx.decode(open).map(drop),
                Escapes::None | Escapes::Short | Escapes::Solidus => Ok(()),
            }
        }
        b'{' | b'[' => {
            let mut previous: Option<Cow<str>> = None;
            lx.elements(|lx, key| {
                if let Some(key) = key {
                    // Out of order, or a name twice: the text writer must rewrite it.
                    if previous
                        .as_ref()
                        .is_some_and(|prev| utf16_cmp(prev, &key).is_ge())
                    {
                        lx.canonical = false;
                    }
                    previous = Some(key);
                }
                skip(lx, depth + 1)
            })
        }
        b't' => lx.literal("true"),
        b'f' => lx.literal("false"),
        b'n' => lx.literal("null"),
        _ => {
            let start = lx.at;
            lx.number()?;
            if !number_is_canonical(&lx.text[start..lx.at]) {
                lx.canonical = false;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
#[path = "canonical_tests.rs"]
pub(crate) mod tests;
