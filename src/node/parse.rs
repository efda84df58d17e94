//! PURE: the parser of AdmissionReview bodies, straight into a [`Node`] tree.
//!
//! Why not a serde `Deserializer`: on a 200 KB review, `serde_json` and `sonic-rs` both spent
//! more time visiting tokens into a tree than the whole review may take, and `sonic-rs`'s own
//! tree turns edited objects into hash maps (losing member order, so patches would not be
//! byte-stable). This parser does one pass over the bytes, finds string ends eight bytes at a
//! time (escapes included, without a branch per escape), borrows every string without escapes,
//! and builds nothing for what admission never reads (see [`Shape`]): those values are checked
//! and kept as their text ([`Node::Raw`]). Inside `spec`, that is everything but what the edits
//! touch: template metadata, container names and ports, volume names, and the list of env
//! entries (each entry stays raw unless the list may hold the webhook's own variable).
//!
//! The spec SHA needs the canonical JSON of that raw text. While skipping a value the parser
//! notes whether its text is canonical already (compact, members in order, nothing spelled
//! otherwise), as API-server JSON mostly is: such text is hashed as it is. Other raw text goes
//! through [`canonical`], which writes its canonical form without building a tree.
//!
//! Anything it does not take (invalid UTF-8 or JSON, nesting deeper than [`MAX_DEPTH`], a number
//! out of range) is an `Err`, and the caller falls back to `serde_json`, which either parses the
//! body after all or says what is wrong with it. Escaped strings are decoded by `serde_json` too.

use std::borrow::Cow;

use serde_json::Number;

use super::{Map, Node};
use crate::{keys, spec_sha};

/// Nesting deeper than this is refused (as `serde_json` does at 128), so no input can exhaust
/// the stack of a parser, a hasher or a destructor that recurse.
pub const MAX_DEPTH: usize = 128;

/// What this parser does not take; the caller falls back to `serde_json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused;

/// How much of a value to build: which members stay raw text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Everything.
    Full,
    /// The AdmissionReview.
    Review,
    /// `request`: `userInfo` and `options` stay raw.
    Request,
    /// `request.object`: `status` stays raw.
    Object,
    /// `request.object.metadata`: `managedFields` stays raw.
    Metadata,
    /// `metadata.annotations`: only the webhook's own keys are parsed.
    Annotations,
    /// `request.oldObject`: `metadata.labels`, the webhook's own annotations and `spec` (as in
    /// [`Shape::Object`]) are parsed.
    OldObject,
    /// `request.oldObject.metadata`.
    OldMetadata,
    /// `request.object.spec`: only `template` is parsed.
    Spec,
    /// `spec.template`: `metadata` and `spec` are parsed.
    Template,
    /// `spec.template.spec`: `containers` and `volumes` are parsed.
    PodSpec,
    /// `spec.template.spec.containers`, a list of [`Shape::Container`].
    Containers,
    /// A container: `name`, `ports` and `env` are parsed.
    Container,
    /// A container's `env`: a list of entries kept raw, unless one may be the webhook's own
    /// variable (see [`Parser::env`]).
    Env,
    /// `spec.template.spec.volumes`, a list of [`Shape::Volume`].
    Volumes,
    /// A volume: `name` is parsed.
    Volume,
}

/// Where a member of a value of this shape goes.
enum Member {
    Build(Shape),
    Raw,
}

impl Shape {
    fn member(self, key: &str) -> Member {
        use Member::{Build, Raw};
        match (self, key) {
            (Shape::Full, _) => Build(Shape::Full),
            (Shape::Review, "request") => Build(Shape::Request),
            (Shape::Request, "object") => Build(Shape::Object),
            (Shape::Request, "oldObject") => Build(Shape::OldObject),
            (Shape::Request, "userInfo" | "options") => Raw,
            (Shape::Object, "metadata") => Build(Shape::Metadata),
            (Shape::Object, "spec") => Build(Shape::Spec),
            (Shape::Spec, "template") => Build(Shape::Template),
            (Shape::Template, "metadata") => Build(Shape::Full),
            (Shape::Template, "spec") => Build(Shape::PodSpec),
            (Shape::PodSpec, "containers") => Build(Shape::Containers),
            (Shape::PodSpec, "volumes") => Build(Shape::Volumes),
            (Shape::Container, "env") => Build(Shape::Env),
            (Shape::Container, "name" | "ports") | (Shape::Volume, "name") => Build(Shape::Full),
            (
                Shape::Spec | Shape::Template | Shape::PodSpec | Shape::Container | Shape::Volume,
                _,
            ) => Raw,
            (Shape::Object, "status") | (Shape::Metadata, "managedFields") => Raw,
            (Shape::Metadata, "annotations") => Build(Shape::Annotations),
            (Shape::Annotations, key) if keys::is_own_annotation(key) => Build(Shape::Full),
            (Shape::Annotations, _) => Raw,
            (Shape::OldObject, "metadata") => Build(Shape::OldMetadata),
            (Shape::OldMetadata, "labels") => Build(Shape::Full),
            // A stop records the stored template; an unchanged spec keeps the stored SHA.
            (Shape::OldObject, "spec") => Build(Shape::Spec),
            (Shape::OldMetadata, "annotations") => Build(Shape::Annotations),
            (Shape::OldObject | Shape::OldMetadata, _) => Raw,
            (
                Shape::Review
                | Shape::Request
                | Shape::Object
                | Shape::Metadata
                | Shape::Containers
                | Shape::Volumes
                | Shape::Env,
                _,
            ) => Build(Shape::Full),
        }
    }

    /// How the elements of a list of this shape are built.
    fn element(self) -> Shape {
        match self {
            Shape::Containers => Shape::Container,
            Shape::Volumes => Shape::Volume,
            _ => Shape::Full,
        }
    }
}

/// The names of the members of the objects [`canonical`] is inside, innermost last, and where
/// each member's canonical text was written. Empty between calls: a caller that canonicalizes
/// many raw values hands the same one to each, so its room is allocated once.
pub type Members<'a> = Vec<(Cow<'a, str>, std::ops::Range<usize>)>;

/// Append the RFC 8785 canonical JSON of the JSON `text` (raw text a review left unparsed).
pub fn canonical<'a>(
    text: &'a str,
    out: &mut Vec<u8>,
    members: &mut Members<'a>,
) -> Result<(), Refused> {
    let mut p = Parser {
        members: std::mem::take(members),
        ..Parser::new(text)
    };
    let written = p.canonical(out, 0);
    p.space();
    *members = std::mem::take(&mut p.members);
    members.clear();
    match written.is_ok() && p.at == text.len() {
        true => Ok(()),
        false => Err(Refused),
    }
}

/// Parse an AdmissionReview body, skimming what admission never reads.
pub fn review(body: &[u8]) -> Result<Node<'_>, Refused> {
    let text = std::str::from_utf8(body).map_err(|_| Refused)?;
    let mut p = Parser::new(text);
    let node = p.value(Shape::Review, 0)?;
    p.space();
    match p.at == text.len() {
        true => Ok(node),
        false => Err(Refused),
    }
}

/// What escapes a string held, from least to most work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Escapes {
    None,
    /// Only escapes RFC 8785 writes the same way: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`,
    /// `\t`. Such a string is its own canonical form.
    Short,
    /// A `\/` too, which canonical JSON writes as a plain `/`.
    Solidus,
    /// A `\u` escape too, whose digits and surrogate pairs only decoding checks.
    Unicode,
}

/// The bytes of an eight-byte word that are escaped: each follows an odd-length run of
/// backslashes. Bit `i` of `backslashes` is set for a `\` at byte `i`; `carry` says whether the
/// word's first byte is escaped, and is set for the next word. Branch-free, after simdjson:
/// subtracting the runs' starts from their shifted bits flips the escaped byte of each odd run.
fn escaped_bytes(backslashes: u8, carry: &mut bool) -> u8 {
    const ODD: u8 = 0xaa;
    let carried = u8::from(*carry);
    // A backslash that is itself escaped starts no escape.
    let starts = backslashes & !carried;
    let codes = (((starts << 1) | ODD).wrapping_sub(starts)) ^ ODD;
    *carry = (codes & backslashes) & 0x80 != 0;
    codes ^ (backslashes | carried)
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
    /// Scratch of [`Parser::canonical`].
    members: Members<'a>,
    /// Whether the text skipped since [`Parser::raw`] began is canonical JSON so far, escapes
    /// aside (see [`Node::Raw`]).
    canonical: bool,
    /// The most work any string's escapes needed since [`Parser::raw`] began.
    escapes: Escapes,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            at: 0,
            members: Vec::new(),
            canonical: true,
            escapes: Escapes::None,
        }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.at).copied()
    }

    fn space(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
            self.canonical = false;
        }
    }

    fn eat(&mut self, byte: u8) -> Result<(), Refused> {
        self.space();
        match self.peek() == Some(byte) {
            true => {
                self.at += 1;
                Ok(())
            }
            false => Err(Refused),
        }
    }

    /// The next value, built to `shape`.
    fn value(&mut self, shape: Shape, depth: usize) -> Result<Node<'a>, Refused> {
        if depth > MAX_DEPTH {
            return Err(Refused);
        }
        self.space();
        match self.peek().ok_or(Refused)? {
            b'{' => self.object(shape, depth),
            b'[' if shape == Shape::Env => self.env(depth),
            b'[' => self.array(shape.element(), depth),
            b'"' => self.string().map(Node::String),
            b't' => self.literal("true").map(|()| Node::Bool(true)),
            b'f' => self.literal("false").map(|()| Node::Bool(false)),
            b'n' => self.literal("null").map(|()| Node::Null),
            _ => self.number().map(Node::Number),
        }
    }

    fn object(&mut self, shape: Shape, depth: usize) -> Result<Node<'a>, Refused> {
        let mut map = Map::new();
        self.elements(|p, key| {
            let key = key.ok_or(Refused)?;
            let value = match shape.member(&key) {
                Member::Build(inner) => p.value(inner, depth + 1)?,
                Member::Raw => p.raw(depth + 1)?,
            };
            map.push(key, value);
            Ok(())
        })?;
        Ok(Node::Object(map))
    }

    fn array(&mut self, element: Shape, depth: usize) -> Result<Node<'a>, Refused> {
        let mut items = Vec::new();
        self.elements(|p, _| {
            items.push(p.value(element, depth + 1)?);
            Ok(())
        })?;
        Ok(Node::Array(items))
    }

    /// A container's env list, its entries kept as raw text: an env list can hold thousands of
    /// entries, and admission only looks for the one named `INTERNAL_APP_ENDPOINT_PATTERN`. An
    /// entry whose text holds that name, or a `\u` escape that could spell it, is built, so an
    /// entry left raw is never the webhook's variable. One search over the whole list tells
    /// whether any entry holds the name.
    fn env(&mut self, depth: usize) -> Result<Node<'a>, Refused> {
        let start = self.at;
        let mut items = Vec::new();
        // The entries with a `\u` escape, by index.
        let mut unicode = Vec::new();
        self.elements(|p, _| {
            let item = p.raw(depth + 1)?;
            if p.escapes == Escapes::Unicode {
                unicode.push(items.len());
            }
            items.push(item);
            Ok(())
        })?;
        let ours = |text: &str| {
            memchr::memmem::find(
                text.as_bytes(),
                keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN.as_bytes(),
            )
            .is_some()
        };
        let named = ours(&self.text[start..self.at]);
        if named || !unicode.is_empty() {
            for (i, item) in items.iter_mut().enumerate() {
                if let Node::Raw { text, .. } = *item
                    && (unicode.binary_search(&i).is_ok() || (named && ours(text)))
                {
                    *item = Parser::new(text).value(Shape::Full, depth + 1)?;
                }
            }
        }
        Ok(Node::Array(items))
    }

    /// Walk the object or array whose `{` or `[` is under the cursor, up to its closing byte:
    /// `element` reads each value, given its member name in an object.
    fn elements(
        &mut self,
        mut element: impl FnMut(&mut Self, Option<Cow<'a, str>>) -> Result<(), Refused>,
    ) -> Result<(), Refused> {
        let object = self.peek() == Some(b'{');
        let close = if object { b'}' } else { b']' };
        self.at += 1;
        self.space();
        if self.peek() == Some(close) {
            self.at += 1;
            return Ok(());
        }
        loop {
            let key = match object {
                true => {
                    self.space();
                    if self.peek() != Some(b'"') {
                        return Err(Refused);
                    }
                    let key = self.string()?;
                    self.eat(b':')?;
                    Some(key)
                }
                false => None,
            };
            element(self, key)?;
            self.space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b) if b == close => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(Refused),
            }
        }
    }

    /// Move past `word` (`true`, `false`, `null`), which must be under the cursor.
    fn literal(&mut self, word: &str) -> Result<(), Refused> {
        match self.text[self.at..].starts_with(word) {
            true => {
                self.at += word.len();
                Ok(())
            }
            false => Err(Refused),
        }
    }

    /// A string: borrowed when it holds no escape, else decoded by `serde_json`.
    fn string(&mut self) -> Result<Cow<'a, str>, Refused> {
        let open = self.at;
        match self.skip_string()? {
            Escapes::None => Ok(Cow::Borrowed(&self.text[open + 1..self.at - 1])),
            Escapes::Short | Escapes::Solidus | Escapes::Unicode => {
                self.decode(open).map(Cow::Owned)
            }
        }
    }

    /// The string from the quote at `open` to the cursor, its escapes decoded (and so checked,
    /// digits and surrogate pairs of `\u` escapes included) by `serde_json`.
    fn decode(&self, open: usize) -> Result<String, Refused> {
        serde_json::from_str(&self.text[open..self.at]).map_err(|_| Refused)
    }

    /// Move past the string that starts at the quote under the cursor, checking it; what escapes
    /// it held. Eight bytes at a time and without a branch per escape: a
    /// `last-applied-configuration` annotation has an escape every few bytes.
    fn skip_string(&mut self) -> Result<Escapes, Refused> {
        let bytes = self.bytes();
        let mut at = self.at + 1;
        let mut escapes = Escapes::None;
        // Whether the first byte of the next word is escaped (a backslash ended this one).
        let mut carry = false;
        let close = loop {
            if at >= bytes.len() {
                return Err(Refused);
            }
            let high = super::string_bytes_high(super::word_at(&bytes[at..]));
            if !carry {
                // The usual word: no backslash, so the first special byte decides.
                let [quotes, backslashes, controls] = high;
                if backslashes == 0 {
                    let stops = quotes | controls;
                    if stops == 0 {
                        at += 8;
                        continue;
                    }
                    let pos = at + stops.trailing_zeros() as usize / 8;
                    match bytes.get(pos) {
                        Some(b'"') => break pos,
                        _ => return Err(Refused), // a raw control character
                    }
                }
            }
            let [quotes, backslashes, controls] = high.map(super::byte_mask);
            let escaped = escaped_bytes(backslashes, &mut carry);
            let ends = quotes & !escaped;
            // The bytes before the closing quote: all of the word if the quote is not in it.
            let inside = (ends & ends.wrapping_neg()).wrapping_sub(1);
            if controls & inside != 0 {
                return Err(Refused); // a raw control character
            }
            let escaped = escaped & inside;
            if escaped != 0 {
                escapes = escapes.max(Escapes::Short);
                // `\"` and `\\` need no check; the other escaped bytes are checked one by one.
                let mut others = escaped & !(quotes | backslashes);
                while others != 0 {
                    let pos = at + others.trailing_zeros() as usize;
                    others &= others - 1;
                    match bytes.get(pos) {
                        Some(b'b' | b'f' | b'n' | b'r' | b't') => {}
                        Some(b'/') => escapes = escapes.max(Escapes::Solidus),
                        Some(b'u') => escapes = Escapes::Unicode,
                        _ => return Err(Refused),
                    }
                }
            }
            if ends != 0 {
                break at + ends.trailing_zeros() as usize;
            }
            at += 8;
        };
        self.at = close + 1;
        self.escapes = self.escapes.max(escapes);
        Ok(escapes)
    }

    /// A number, as `serde_json` reads it: integers that fit as integers, the rest as doubles.
    fn number(&mut self) -> Result<Number, Refused> {
        let start = self.at;
        let bytes = self.bytes();
        let mut at = start;
        let digits = |at: &mut usize| {
            let from = *at;
            while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            *at - from
        };
        let negative = bytes.get(at) == Some(&b'-');
        at += usize::from(negative);
        let int_start = at;
        match digits(&mut at) {
            0 => return Err(Refused),
            n if n > 1 && bytes[int_start] == b'0' => return Err(Refused),
            _ => {}
        }
        let mut integer = true;
        if bytes.get(at) == Some(&b'.') {
            at += 1;
            integer = false;
            if digits(&mut at) == 0 {
                return Err(Refused);
            }
        }
        if let Some(b'e' | b'E') = bytes.get(at) {
            at += 1;
            integer = false;
            if let Some(b'+' | b'-') = bytes.get(at) {
                at += 1;
            }
            if digits(&mut at) == 0 {
                return Err(Refused);
            }
        }
        self.at = at;
        let token = &self.text[start..at];
        if integer {
            match negative {
                // `-0` is the double -0.0, as serde_json reads it.
                true => match token.parse::<i64>() {
                    Ok(0) | Err(_) => {}
                    Ok(n) => return Ok(n.into()),
                },
                false => {
                    if let Ok(n) = token.parse::<u64>() {
                        return Ok(n.into());
                    }
                }
            }
        }
        let float: f64 = token.parse().map_err(|_| Refused)?;
        Number::from_f64(float).ok_or(Refused)
    }

    /// Write the canonical JSON of the next value (see [`crate::spec_sha`]).
    fn canonical(&mut self, out: &mut Vec<u8>, depth: usize) -> Result<(), Refused> {
        if depth > MAX_DEPTH {
            return Err(Refused);
        }
        self.space();
        match self.peek().ok_or(Refused)? {
            b'{' => self.canonical_object(out, depth),
            b'[' => {
                out.push(b'[');
                let mut first = true;
                self.elements(|p, _| {
                    if !std::mem::take(&mut first) {
                        out.push(b',');
                    }
                    p.canonical(out, depth + 1)
                })?;
                out.push(b']');
                Ok(())
            }
            b'"' => {
                let open = self.at;
                match self.skip_string()? {
                    Escapes::None | Escapes::Short => {
                        out.extend_from_slice(&self.bytes()[open..self.at]);
                    }
                    Escapes::Solidus | Escapes::Unicode => {
                        spec_sha::write_string(&self.decode(open)?, out);
                    }
                }
                Ok(())
            }
            b't' => self.literal_into("true", out),
            b'f' => self.literal_into("false", out),
            b'n' => self.literal_into("null", out),
            _ => {
                spec_sha::write_number(&self.number()?, out);
                Ok(())
            }
        }
    }

    /// An object's members are written as they come; only when their names are out of order
    /// are they copied back in order.
    fn canonical_object(&mut self, out: &mut Vec<u8>, depth: usize) -> Result<(), Refused> {
        out.push(b'{');
        let first = out.len();
        let base = self.members.len();
        self.elements(|p, key| {
            let key = key.ok_or(Refused)?;
            if p.members.len() > base {
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
                    spec_sha::write_string(decoded, out);
                    out.push(b':');
                }
            }
            p.canonical(out, depth + 1)?;
            p.members.push((key, from..out.len()));
            Ok(())
        })?;
        let members = &mut self.members[base..];
        if !members.is_sorted_by(|a, b| spec_sha::utf16_cmp(&a.0, &b.0).is_le()) {
            let written = out.split_off(first);
            members.sort_by(|a, b| spec_sha::utf16_cmp(&a.0, &b.0));
            for (i, (_, range)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(&written[range.start - first..range.end - first]);
            }
        }
        self.members.truncate(base);
        out.push(b'}');
        Ok(())
    }

    fn literal_into(&mut self, word: &str, out: &mut Vec<u8>) -> Result<(), Refused> {
        self.literal(word)?;
        out.extend_from_slice(word.as_bytes());
        Ok(())
    }

    /// Check the next value and keep its text.
    fn raw(&mut self, depth: usize) -> Result<Node<'a>, Refused> {
        self.space();
        let start = self.at;
        self.canonical = true;
        self.escapes = Escapes::None;
        self.skip(depth)?;
        Ok(Node::Raw {
            text: &self.text[start..self.at],
            canonical: self.canonical && self.escapes <= Escapes::Short,
        })
    }

    /// Move past the next value, checking its grammar, building nothing.
    fn skip(&mut self, depth: usize) -> Result<(), Refused> {
        if depth > MAX_DEPTH {
            return Err(Refused);
        }
        self.space();
        match self.peek().ok_or(Refused)? {
            b'"' => {
                let open = self.at;
                match self.skip_string()? {
                    Escapes::Unicode => self.decode(open).map(drop),
                    Escapes::None | Escapes::Short | Escapes::Solidus => Ok(()),
                }
            }
            b'{' | b'[' => {
                // Canonical members come in UTF-16 order of their names.
                let mut previous: Option<Cow<'a, str>> = None;
                self.elements(|p, key| {
                    if let Some(key) = key {
                        if previous
                            .as_ref()
                            .is_some_and(|prev| spec_sha::utf16_cmp(prev, &key).is_gt())
                        {
                            p.canonical = false;
                        }
                        previous = Some(key);
                    }
                    p.skip(depth + 1)
                })
            }
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            _ => {
                let start = self.at;
                self.number()?;
                // Canonical as written: an integer that is exact as a double, and not `-0`.
                let token = &self.text[start..self.at];
                let digits = token.strip_prefix('-').unwrap_or(token);
                if digits.len() > 15 || !digits.bytes().all(|b| b.is_ascii_digit()) || token == "-0"
                {
                    self.canonical = false;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn parsed(text: &str) -> Result<Value, Refused> {
        review(text.as_bytes()).map(|n| n.to_json())
    }

    #[test]
    fn values_read_as_serde_json_reads_them() {
        let texts = [
            r#"{"a": [1, -2, 2.5, -0, 0.0, 1e3, 1E-2, 18446744073709551615, 18446744073709551616, -9223372036854775809]}"#,
            r#"{"s": "plain", "e": "tab\t quote\" slash\\ \u00e9 \ud83d\ude00", "k\"ey": {}}"#,
            " { \"x\" : [ true , false , null , [ ] , { } ] } ",
            r#""top-level string""#,
            "3",
        ];
        for text in texts {
            let want: Value = serde_json::from_str(text).unwrap();
            assert_eq!(parsed(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn what_serde_json_refuses_is_refused() {
        let texts = [
            "",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            "-",
            "1e",
            "tru",
            "\"a",
            "\"\\\"",
            "\"\u{1}\"",
            "{} x",
            "{\"a\" 1}",
            "[1 2]",
            "1e400",
            "{\"request\":{\"userInfo\":[1,}}}",
            // Strings left raw are checked as closely as those that are built.
            r#"{"request":{"userInfo":"\x"}}"#,
            r#"{"request":{"userInfo":"\u12"}}"#,
            r#"{"request":{"userInfo":"\ud800"}}"#,
            r#"{"request":{"userInfo":"a\\\"}}"#,
            "{\"request\":{\"userInfo\":\"\\\n\"}}",
        ];
        for text in texts {
            assert!(serde_json::from_str::<Value>(text).is_err(), "{text:?}");
            assert_eq!(parsed(text), Err(Refused), "{text:?}");
        }
        assert_eq!(review(b"\"\xff\""), Err(Refused));
        let deep = "[".repeat(MAX_DEPTH + 2) + &"]".repeat(MAX_DEPTH + 2);
        assert_eq!(parsed(&deep), Err(Refused));
    }

    #[test]
    fn reviews_keep_what_admission_never_reads_as_text() {
        let text = r#"{"request":{"uid":"u","userInfo":{"username":"me"},
            "object":{"metadata":{"name":"a","managedFields":[{"manager":"kubectl"}],
              "annotations":{"flyte.org/spec-sha":"abc","kubectl.kubernetes.io/last-applied-configuration":"{\"x\":1}"}},
              "spec":{"k":"v"},"status":{"conditions":[]}},
            "oldObject":{"metadata":{"labels":{"l":"v"},"name":"a"},"spec":{"k":"v"}}}}"#;
        let node = review(text.as_bytes()).unwrap();
        let request = node.get("request").unwrap();
        assert!(matches!(request.get("userInfo"), Some(Node::Raw { .. })));
        let object = request.get("object").unwrap();
        let annotations = object
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .unwrap();
        assert!(matches!(
            annotations.get("flyte.org/spec-sha"),
            Some(Node::String(_))
        ));
        let applied = annotations.get("kubectl.kubernetes.io/last-applied-configuration");
        assert!(matches!(applied, Some(Node::Raw { .. })));
        assert!(matches!(object.get("status"), Some(Node::Raw { .. })));
        assert!(matches!(object.get("spec"), Some(Node::Object(_))));
        let old = request.get("oldObject").unwrap();
        assert!(matches!(old.get("spec"), Some(Node::Object(_))));
        assert!(matches!(
            old.get("metadata").and_then(|m| m.get("labels")),
            Some(Node::Object(_))
        ));
        let full: Value = serde_json::from_str(text).unwrap();
        assert_eq!(node.to_json(), full, "nothing is lost");
        assert_eq!(json!(node), full);
    }

    #[test]
    fn env_entries_stay_raw_unless_one_may_be_the_webhooks_own() {
        let env_of = |list: &str| {
            let text = format!(
                r#"{{"request":{{"object":{{"spec":{{"template":{{"spec":{{"containers":[{{"name":"app","env":{list}}}]}}}}}}}}}}}}"#
            );
            let node = review(text.as_bytes()).unwrap();
            let want: Value = serde_json::from_str(list).unwrap();
            let env = [
                "request",
                "object",
                "spec",
                "template",
                "spec",
                "containers",
            ]
            .iter()
            .try_fold(&node, |n, k| n.get(k))
            .and_then(|c| c.as_array()?.first()?.get("env").cloned())
            .unwrap();
            assert_eq!(env.to_json(), want, "{list}");
            env.as_array()
                .unwrap()
                .iter()
                .map(|e| matches!(e, Node::Raw { .. }))
                .collect::<Vec<bool>>()
        };
        assert_eq!(
            env_of(r#"[{"name":"A","value":"1"}, {"name":"B","value":"q\"t"}]"#),
            [true, true]
        );
        // An entry with the name itself, or any `\u` escape (which could spell it), is built.
        assert_eq!(
            env_of(r#"[{"name":"A"}, {"name":"INTERNAL_APP_ENDPOINT_PATTERN","value":"x"}]"#),
            [true, false]
        );
        assert_eq!(
            env_of(r#"[{"name":"\u0049NTERNAL_APP_ENDPOINT_PATTERN","value":"x"}, {"name":"B"}]"#),
            [false, true]
        );
        assert_eq!(
            env_of(
                r#"[{"name":"A","value":"\u00e9"}, {"name":"B","value":"INTERNAL_APP_ENDPOINT_PATTERN"}]"#
            ),
            [false, false]
        );
    }

    #[test]
    fn raw_strings_are_written_canonically() {
        let cases = [
            (r#"["plain", "q\"b\\n\n\t"]"#, r#"["plain","q\"b\\n\n\t"]"#),
            (r#""a\/b""#, r#""a/b""#),
            (
                r#"{"\u0062": "\u0041\u00e9\u001F", "a": 1}"#,
                "{\"a\":1,\"b\":\"A\u{e9}\\u001f\"}",
            ),
        ];
        for (text, want) in cases {
            let mut out = Vec::new();
            assert_eq!(canonical(text, &mut out, &mut Vec::new()), Ok(()));
            assert_eq!(String::from_utf8(out).unwrap(), want, "{text}");
        }
    }

    /// `text` skimmed as raw text: whether it was found canonical.
    fn raw_is_canonical(text: &str) -> bool {
        let body = format!(r#"{{"request":{{"userInfo":{text}}}}}"#);
        let node = review(body.as_bytes()).unwrap();
        match node.get("request").and_then(|r| r.get("userInfo")) {
            Some(Node::Raw {
                text: raw,
                canonical,
            }) => {
                assert_eq!(*raw, text.trim());
                *canonical
            }
            other => panic!("not raw: {other:?}"),
        }
    }

    #[test]
    fn raw_text_is_marked_canonical_only_as_it_is_written_canonically() {
        let canonical = [
            r#"{"a":[1,-2,"x\"y\\z\n",true,null],"b":{"c":{}},"é":"😀"}"#,
            r#"[123456789012345,"a/b"]"#,
            " {\"a\":1} ",
        ];
        let otherwise = [
            r#"{"a": 1}"#,
            r#"{"b":1,"a":2}"#,
            "[1.5]",
            "[1e3]",
            "[-0]",
            "[1234567890123456]",
            r#"["\u0041"]"#,
            r#"["a\/b"]"#,
            "[\n1]",
        ];
        for text in canonical {
            assert!(raw_is_canonical(text), "{text}");
        }
        for text in otherwise {
            assert!(!raw_is_canonical(text), "{text}");
        }
    }

    #[test]
    fn escaped_bytes_follow_odd_backslash_runs() {
        for backslashes in 0..=255u8 {
            for carry_in in [false, true] {
                let (mut want, mut escaping) = (0u8, carry_in);
                for i in 0..8 {
                    if escaping {
                        want |= 1 << i;
                        escaping = false;
                    } else if backslashes & (1 << i) != 0 {
                        escaping = true;
                    }
                }
                let mut carry = carry_in;
                assert_eq!(
                    escaped_bytes(backslashes, &mut carry),
                    want,
                    "{backslashes:#010b} {carry_in}"
                );
                assert_eq!(carry, escaping, "{backslashes:#010b} {carry_in}");
            }
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "[a-z\"\\\\\u{0}-\u{1f}é\u{1f600}/ ]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("[a-z\"é]{0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_json_text_reads_as_serde_json_reads_it(v in json_value(), pretty in any::<bool>()) {
            let text = match pretty {
                true => serde_json::to_string_pretty(&v).unwrap(),
                false => serde_json::to_string(&v).unwrap(),
            };
            prop_assert_eq!(parsed(&text), Ok(v));
        }

        #[test]
        fn raw_text_canonicalizes_as_its_tree_does(v in json_value(), pretty in any::<bool>()) {
            let text = match pretty {
                true => serde_json::to_string_pretty(&v).unwrap(),
                false => serde_json::to_string(&v).unwrap(),
            };
            let mut out = Vec::new();
            prop_assert_eq!(canonical(&text, &mut out, &mut Vec::new()), Ok(()));
            prop_assert_eq!(String::from_utf8(out).unwrap(), spec_sha::canonical_json(&v));
        }

        #[test]
        fn raw_text_marked_canonical_is_its_canonical_json(v in json_value(), pretty in any::<bool>()) {
            let text = match pretty {
                true => serde_json::to_string_pretty(&v).unwrap(),
                false => serde_json::to_string(&v).unwrap(),
            };
            if raw_is_canonical(&text) {
                prop_assert_eq!(text, spec_sha::canonical_json(&v));
            }
        }

        #[test]
        fn strings_are_taken_exactly_when_serde_json_takes_them(inner in "[a\\\\\"nu0-9dD/\u{1}é]{0,40}", pad in 0usize..8) {
            // Built (a top-level string) and left raw (`userInfo`), at every offset in a word.
            let string = format!("\"{}{inner}\"", "p".repeat(pad));
            for text in [string.clone(), format!(r#"{{"request":{{"userInfo":{string}}}}}"#)] {
                let want = serde_json::from_str::<Value>(&text).ok();
                prop_assert_eq!(parsed(&text).ok(), want, "{}", text);
            }
        }

        #[test]
        fn any_text_is_refused_or_read_as_serde_json_reads_it(text in "[\\[\\]{}\",:0-9eE.+\\- a-z\\\\]{0,24}") {
            if let Ok(v) = parsed(&text) {
                prop_assert_eq!(serde_json::from_str::<Value>(&text).ok(), Some(v));
            }
        }
    }
}
