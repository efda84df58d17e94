//! PURE: the parser of AdmissionReview bodies, straight into a [`Node`] tree.
//!
//! Why not a serde `Deserializer`: on a 200 KB review, `serde_json` and `sonic-rs` both spent
//! more time visiting tokens into a tree than the whole review may take, and `sonic-rs`'s own
//! tree turns edited objects into hash maps (losing member order, so patches would not be
//! byte-stable). This parser does one pass over the bytes, finds string ends eight bytes at a
//! time, borrows every string without escapes, and builds nothing for what admission never reads
//! (see [`Shape`]): those values are checked and kept as their text ([`Node::Raw`]). Inside
//! `spec`, that is everything but what the edits touch (template metadata, container names,
//! ports and env, volume names); [`canonical`] writes the canonical JSON of such text without
//! building a tree, for the spec SHA.
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
    /// `request.oldObject`: only `metadata.labels` is parsed (the rules read nothing else).
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
            (Shape::Container, "name" | "ports" | "env") | (Shape::Volume, "name") => {
                Build(Shape::Full)
            }
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
            (Shape::OldObject | Shape::OldMetadata, _) => Raw,
            (
                Shape::Review
                | Shape::Request
                | Shape::Object
                | Shape::Metadata
                | Shape::Containers
                | Shape::Volumes,
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

/// Append the RFC 8785 canonical JSON of the JSON `text` (raw text a review left unparsed).
pub fn canonical(text: &str, out: &mut Vec<u8>) -> Result<(), Refused> {
    let mut p = Parser::new(text);
    p.canonical(out, 0)?;
    p.space();
    match p.at == text.len() {
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

struct Parser<'a> {
    text: &'a str,
    at: usize,
    /// The members of the objects [`Parser::canonical`] is inside, innermost last: the names and
    /// where each member's canonical text was written.
    members: Vec<(Cow<'a, str>, std::ops::Range<usize>)>,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            at: 0,
            members: Vec::new(),
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
        let escaped = self.skip_string()?;
        let inner = &self.text[open + 1..self.at - 1];
        match escaped {
            false => Ok(Cow::Borrowed(inner)),
            true => serde_json::from_str::<String>(&self.text[open..self.at])
                .map(Cow::Owned)
                .map_err(|_| Refused),
        }
    }

    /// Move past the string that starts at the quote under the cursor; whether it held escapes.
    /// Eight bytes at a time, every special byte of a word handled in place: a
    /// `last-applied-configuration` annotation has an escape every few bytes.
    fn skip_string(&mut self) -> Result<bool, Refused> {
        let bytes = self.bytes();
        let mut at = self.at + 1;
        // Bytes before this index are escaped (the byte after a backslash).
        let mut escaped_until = 0;
        while at < bytes.len() {
            let mut hits = super::special_bytes(super::word_at(&bytes[at..]));
            while hits != 0 {
                let pos = at + hits.trailing_zeros() as usize / 8;
                hits &= hits - 1;
                if pos >= bytes.len() || pos < escaped_until {
                    continue;
                }
                match bytes[pos] {
                    b'"' => {
                        self.at = pos + 1;
                        return Ok(escaped_until > 0);
                    }
                    b'\\' => escaped_until = pos + 2,
                    _ => return Err(Refused), // a raw control character
                }
            }
            at += 8;
        }
        Err(Refused)
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
                spec_sha::write_string(&self.string()?, out);
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
            spec_sha::write_string(&key, out);
            out.push(b':');
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
        self.skip(depth)?;
        Ok(Node::Raw(&self.text[start..self.at]))
    }

    /// Move past the next value, checking its grammar, building nothing.
    fn skip(&mut self, depth: usize) -> Result<(), Refused> {
        if depth > MAX_DEPTH {
            return Err(Refused);
        }
        self.space();
        match self.peek().ok_or(Refused)? {
            b'"' => self.skip_string().map(drop),
            b'{' | b'[' => self.elements(|p, _| p.skip(depth + 1)),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            _ => self.number().map(drop),
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
        assert!(matches!(request.get("userInfo"), Some(Node::Raw(_))));
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
        assert!(matches!(applied, Some(Node::Raw(_))));
        assert!(matches!(object.get("status"), Some(Node::Raw(_))));
        assert!(matches!(object.get("spec"), Some(Node::Object(_))));
        let old = request.get("oldObject").unwrap();
        assert!(matches!(old.get("spec"), Some(Node::Raw(_))));
        assert!(matches!(
            old.get("metadata").and_then(|m| m.get("labels")),
            Some(Node::Object(_))
        ));
        let full: Value = serde_json::from_str(text).unwrap();
        assert_eq!(node.to_json(), full, "nothing is lost");
        assert_eq!(json!(node), full);
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
            prop_assert_eq!(canonical(&text, &mut out), Ok(()));
            prop_assert_eq!(String::from_utf8(out).unwrap(), spec_sha::canonical_json(&v));
        }

        #[test]
        fn any_text_is_refused_or_read_as_serde_json_reads_it(text in "[\\[\\]{}\",:0-9eE.+\\- a-z\\\\]{0,24}") {
            if let Ok(v) = parsed(&text) {
                prop_assert_eq!(serde_json::from_str::<Value>(&text).ok(), Some(v));
            }
        }
    }
}
