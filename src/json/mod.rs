//! PURE: the JSON tree the admission core reads and edits, borrowing from the request body.
//! The byte level: it knows no Kubernetes.
//!
//! A [`Node`] parsed from a review ([`parse::review`]) is mostly slices of the body: a string
//! without escapes is never copied, and an object is a vector of members in the order they came
//! (no map is built). Values the caller's skim table ([`parse::Skim`]) says are never read are
//! not parsed into a tree at all but kept as their JSON text ([`Node::Raw`]), so nothing is lost.
//! Reading into such a value finds nothing; in a debug build it panics instead, naming the path
//! to add to the table ([`Node::get`] and the other accessors).
//!
//! An object holds each name once: of a repeated name the parser and `serde_json`'s reading
//! into a tree (`Node: Deserialize`, how a body the fast parser refuses is read after all) keep
//! the last value, where the first stood. [`canonical`] holds RFC 8785; [`lex`] the tokenizer.

pub mod canonical;
pub mod edit;
mod lex;
pub mod parse;

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Number;

/// A JSON value.
#[derive(Debug, Clone, Default)]
pub enum Node<'a> {
    #[default]
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    Array(Vec<Node<'a>>),
    Object(Map<'a>),
    /// A value kept as its JSON text (a slice of the body) because the webhook never reads into it.
    Raw {
        text: Cow<'a, str>,
        /// Whether the text is already RFC 8785 canonical JSON (compact, members in order, no
        /// escape or number spelled otherwise), as API-server JSON mostly is: then the spec
        /// SHA hashes it as it is.
        canonical: bool,
        /// Where the parser found it (debug builds only).
        at: Skimmed,
    },
}

/// Where the skimming parser found a value it kept as text: in debug builds its path
/// (`request.object.spec.template.spec.nodeSelector`), for the panic of a read into it; nothing
/// in release builds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skimmed {
    #[cfg(debug_assertions)]
    path: Option<Box<str>>,
    /// An element a [`parse::Skim::Sift`] left as text: reading it finds nothing, by design.
    #[cfg(debug_assertions)]
    sifted: bool,
}

impl Skimmed {
    #[cfg(debug_assertions)]
    fn at(path: String) -> Self {
        Self {
            path: Some(path.into()),
            sifted: false,
        }
    }

    fn sifted() -> Self {
        Self {
            #[cfg(debug_assertions)]
            path: None,
            #[cfg(debug_assertions)]
            sifted: true,
        }
    }
}

/// A JSON object: its members in order. Lookups scan, which beats hashing for the small maps of
/// a Kubernetes object.
#[derive(Debug, Clone, Default)]
pub struct Map<'a> {
    members: Vec<(Cow<'a, str>, Node<'a>)>,
}

impl<'a> Map<'a> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The members a parser read, in order; of a name that occurs twice, the last value is
    /// kept where the first stood (as `serde_json`, Go and kube-apiserver read such an object).
    pub(crate) fn parsed(mut members: Vec<(Cow<'a, str>, Node<'a>)>) -> Self {
        if has_repeats(&members) {
            let mut first: std::collections::HashMap<Cow<'a, str>, usize> =
                std::collections::HashMap::with_capacity(members.len());
            let mut kept: Vec<(Cow<'a, str>, Node<'a>)> = Vec::with_capacity(members.len());
            for (key, value) in members {
                match first.get(&key) {
                    Some(&at) => kept[at].1 = value,
                    None => {
                        first.insert(key.clone(), kept.len());
                        kept.push((key, value));
                    }
                }
            }
            members = kept;
        }
        Self { members }
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.members.iter().position(|(k, _)| k == key)
    }

    pub fn get(&self, key: &str) -> Option<&Node<'a>> {
        self.members.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node<'a>> {
        self.members
            .iter_mut()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// Set `key` to `value` (in place when present, else appended); returns the previous value.
    pub fn insert(&mut self, key: impl Into<Cow<'a, str>>, value: Node<'a>) -> Option<Node<'a>> {
        let key = key.into();
        match self.position(&key) {
            Some(at) => Some(std::mem::replace(&mut self.members[at].1, value)),
            None => {
                self.members.push((key, value));
                None
            }
        }
    }

    /// Put `key` back at `index` (where [`Map::remove`] found it).
    pub fn insert_at(&mut self, index: usize, key: impl Into<Cow<'a, str>>, value: Node<'a>) {
        let at = index.min(self.members.len());
        self.members.insert(at, (key.into(), value));
    }

    /// Remove `key`, keeping the order of the rest; returns where it was and its value.
    pub fn remove(&mut self, key: &str) -> Option<(usize, Node<'a>)> {
        let at = self.position(key)?;
        Some((at, self.members.remove(at).1))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Node<'a>)> {
        self.members.iter().map(|(k, v)| (k.as_ref(), v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|(k, _)| k.as_ref())
    }
}

/// Whether a name occurs twice: a scan for the small maps of Kubernetes objects, a sort of
/// the names for large ones (so no input makes this quadratic).
fn has_repeats<T>(members: &[(Cow<str>, T)]) -> bool {
    match members.len() {
        0..=16 => members
            .iter()
            .enumerate()
            .any(|(i, (key, _))| members[..i].iter().any(|(k, _)| k == key)),
        _ => {
            let mut names: Vec<&str> = members.iter().map(|(k, _)| k.as_ref()).collect();
            names.sort_unstable();
            names.windows(2).any(|w| w[0] == w[1])
        }
    }
}

/// Equal when both hold the same keys with equal values, in any order.
impl PartialEq for Map<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

/// Equal as JSON values; raw text is compared as text.
impl PartialEq for Node<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Node::Null, Node::Null) => true,
            (Node::Bool(a), Node::Bool(b)) => a == b,
            (Node::Number(a), Node::Number(b)) => a == b,
            (Node::String(a), Node::String(b)) => a == b,
            (Node::Array(a), Node::Array(b)) => a == b,
            (Node::Object(a), Node::Object(b)) => a == b,
            (Node::Raw { text: a, .. }, Node::Raw { text: b, .. }) => a == b,
            _ => false,
        }
    }
}

impl<'a> Node<'a> {
    /// A value kept as its JSON text, which must be valid JSON: for a value the webhook writes
    /// but never reads into, so it is copied and sent as it is. `at` names it for the panic of a
    /// debug build when something reads into it after all.
    pub fn raw(text: String, at: &str) -> Node<'static> {
        #[cfg(not(debug_assertions))]
        let _ = at;
        Node::Raw {
            text: Cow::Owned(text),
            canonical: false,
            #[cfg(debug_assertions)]
            at: Skimmed::at(at.to_string()),
            #[cfg(not(debug_assertions))]
            at: Skimmed::default(),
        }
    }

    /// The member `key` of an object.
    ///
    /// This and the other accessors panic in a debug build on a value the parser kept as text
    /// that holds an object or array: reading into it finds nothing, so the path belongs in the
    /// skim table (the message names it).
    #[track_caller]
    pub fn get(&self, key: &str) -> Option<&Node<'a>> {
        match self {
            Node::Object(map) => map.get(key),
            other => other.not_skimmed(key),
        }
    }

    #[track_caller]
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node<'a>> {
        match self {
            Node::Object(map) => map.get_mut(key),
            other => other.not_skimmed(key),
        }
    }

    /// The member `token` of an object, or the element at index `token` of an array (a JSON
    /// Pointer step).
    #[track_caller]
    pub fn child(&self, token: &str) -> Option<&Node<'a>> {
        match self {
            Node::Object(map) => map.get(token),
            Node::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get(i)),
            other => other.not_skimmed(token),
        }
    }

    /// [`Node::child`], mutably.
    #[track_caller]
    pub fn child_mut(&mut self, token: &str) -> Option<&mut Node<'a>> {
        match self {
            Node::Object(map) => map.get_mut(token),
            Node::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            other => other.not_skimmed(token),
        }
    }

    /// `None`, as a read of `reading` inside a value that is no object or array finds nothing;
    /// but in a debug build, a panic when the value is text the parser kept that holds one.
    #[track_caller]
    pub(crate) fn not_skimmed<T>(&self, reading: &str) -> Option<T> {
        #[cfg(debug_assertions)]
        if let Node::Raw { text, at, .. } = self
            && !at.sifted
            && (text.starts_with('{') || text.starts_with('['))
        {
            panic!(
                "read of {reading:?} inside {}, which the review parser kept as JSON text: \
                 add that path to the skim table it was given",
                at.path.as_deref().unwrap_or("a value")
            );
        }
        let _ = reading;
        None
    }

    /// The string, also of a raw string without escapes (so any annotation can be read).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::String(s) => Some(s),
            Node::Raw { text, .. } => {
                let inner = text.strip_prefix('"')?.strip_suffix('"')?;
                (!inner.contains('\\')).then_some(inner)
            }
            _ => None,
        }
    }

    #[track_caller]
    pub fn as_array(&self) -> Option<&Vec<Node<'a>>> {
        match self {
            Node::Array(items) => Some(items),
            other => other.not_skimmed("its elements"),
        }
    }

    #[track_caller]
    pub fn as_array_mut(&mut self) -> Option<&mut Vec<Node<'a>>> {
        match self {
            Node::Array(items) => Some(items),
            other => other.not_skimmed("its elements"),
        }
    }

    #[track_caller]
    pub fn as_object(&self) -> Option<&Map<'a>> {
        match self {
            Node::Object(map) => Some(map),
            other => other.not_skimmed("its members"),
        }
    }

    #[track_caller]
    pub fn as_object_mut(&mut self) -> Option<&mut Map<'a>> {
        match self {
            Node::Object(map) => Some(map),
            other => other.not_skimmed("its members"),
        }
    }

    pub fn is_null(&self) -> bool {
        match self {
            Node::Null => true,
            Node::Raw { text, .. } => text == "null",
            _ => false,
        }
    }

    pub fn is_object(&self) -> bool {
        match self {
            Node::Object(_) => true,
            Node::Raw { text, .. } => text.starts_with('{'),
            _ => false,
        }
    }

    pub fn is_string(&self) -> bool {
        match self {
            Node::String(_) => true,
            Node::Raw { text, .. } => text.starts_with('"'),
            _ => false,
        }
    }

    /// A tree that owns all its strings, from a `serde_json::Value`.
    pub fn from_json(value: serde_json::Value) -> Node<'static> {
        use serde_json::Value;
        match value {
            Value::Null => Node::Null,
            Value::Bool(b) => Node::Bool(b),
            Value::Number(n) => Node::Number(n),
            Value::String(s) => Node::String(Cow::Owned(s)),
            Value::Array(items) => Node::Array(items.into_iter().map(Node::from_json).collect()),
            Value::Object(map) => Node::Object(Map {
                members: map
                    .into_iter()
                    .map(|(k, v)| (Cow::Owned(k), Node::from_json(v)))
                    .collect(),
            }),
        }
    }

    /// A tree borrowing the strings of a `serde_json::Value`.
    pub fn borrow_json(value: &'a serde_json::Value) -> Node<'a> {
        use serde_json::Value;
        match value {
            Value::Null => Node::Null,
            Value::Bool(b) => Node::Bool(*b),
            Value::Number(n) => Node::Number(n.clone()),
            Value::String(s) => Node::String(Cow::Borrowed(s)),
            Value::Array(items) => Node::Array(items.iter().map(Node::borrow_json).collect()),
            Value::Object(map) => Node::Object(Map {
                members: map
                    .iter()
                    .map(|(k, v)| (Cow::Borrowed(k.as_str()), Node::borrow_json(v)))
                    .collect(),
            }),
        }
    }

    /// The same value as a `serde_json::Value`.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Number(n) => Value::Number(n.clone()),
            Node::String(s) => Value::String(s.to_string()),
            Node::Array(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Node::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.to_string(), v.to_json()))
                    .collect(),
            ),
            // Raw text came out of a successful parse, so it parses again.
            Node::Raw { text, .. } => serde_json::from_str(text).unwrap_or_default(),
        }
    }

    /// Append the value's JSON text to `out`: compact, members in their order, text the parser
    /// kept raw copied as it came (never parsed again).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            Node::Null => out.extend_from_slice(b"null"),
            Node::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Node::Number(n) => write_serde(n, out),
            Node::String(s) => write_serde(s.as_ref(), out),
            Node::Array(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    item.write_json(out);
                }
                out.push(b']');
            }
            Node::Object(map) => {
                out.push(b'{');
                for (i, (key, value)) in map.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_serde(key, out);
                    out.push(b':');
                    value.write_json(out);
                }
                out.push(b'}');
            }
            Node::Raw { text, .. } => out.extend_from_slice(text.as_bytes()),
        }
    }

    /// The same tree owning all its strings and text.
    pub fn into_owned(self) -> Node<'static> {
        let owned = |s: Cow<'a, str>| Cow::Owned(s.into_owned());
        match self {
            Node::Null => Node::Null,
            Node::Bool(b) => Node::Bool(b),
            Node::Number(n) => Node::Number(n),
            Node::String(s) => Node::String(owned(s)),
            Node::Array(items) => Node::Array(items.into_iter().map(Node::into_owned).collect()),
            Node::Object(map) => Node::Object(Map {
                members: map
                    .members
                    .into_iter()
                    .map(|(k, v)| (owned(k), v.into_owned()))
                    .collect(),
            }),
            Node::Raw {
                text,
                canonical,
                at,
            } => Node::Raw {
                text: owned(text),
                canonical,
                at,
            },
        }
    }
}

/// A string or a number as JSON (escaped by `serde_json`; writing into a `Vec` cannot fail).
fn write_serde<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(out, value);
}

impl<'a> From<&'a str> for Node<'a> {
    fn from(s: &'a str) -> Self {
        Node::String(Cow::Borrowed(s))
    }
}

impl From<String> for Node<'_> {
    fn from(s: String) -> Self {
        Node::String(Cow::Owned(s))
    }
}

impl Serialize for Node<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Node::Null => s.serialize_unit(),
            Node::Bool(b) => s.serialize_bool(*b),
            Node::Number(n) => n.serialize(s),
            Node::String(text) => s.serialize_str(text),
            Node::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Node::Object(map) => {
                let mut out = s.serialize_map(Some(map.len()))?;
                for (k, v) in map.iter() {
                    out.serialize_entry(k, v)?;
                }
                out.end()
            }
            Node::Raw { .. } => self.to_json().serialize(s),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Node<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }

    fn visit_none<E>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node<'de>, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Node<'de>, E> {
        Ok(Node::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Node<'de>, E> {
        Ok(Node::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Node<'de>, E> {
        Ok(Node::Number(n.into()))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Node<'de>, E> {
        Number::from_f64(n)
            .map(Node::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Node<'de>, E> {
        Ok(Node::String(Cow::Borrowed(s)))
    }

    fn visit_str<E>(self, s: &str) -> Result<Node<'de>, E> {
        Ok(Node::String(Cow::Owned(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> Result<Node<'de>, E> {
        Ok(Node::String(Cow::Owned(s)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Node<'de>, A::Error> {
        let mut members = Vec::with_capacity(access.size_hint().unwrap_or(0));
        while let Some(Key(key)) = access.next_key()? {
            members.push((key, access.next_value()?));
        }
        Ok(Node::Object(Map::parsed(members)))
    }
}

/// A member name, borrowed from the input when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }

            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }

            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }

            fn visit_string<E>(self, s: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parsed_trees_equal_serde_json_values() {
        let value = json!({"a": [1, -2, 2.5, "x\"y", null, true], "b": {"c": {}}, "d": 1e300});
        let text = serde_json::to_string(&value).unwrap();
        let node: Node = serde_json::from_str(&text).unwrap();
        assert_eq!(node.to_json(), value);
        assert_eq!(Node::from_json(value.clone()), node);
        assert_eq!(serde_json::to_value(&node).unwrap(), value);
    }

    #[test]
    fn maps_compare_without_order_and_put_keys_back_in_place() {
        let mut a = Map::new();
        a.insert("x", Node::from("1"));
        a.insert("y", Node::from("2"));
        let mut b = Map::new();
        b.insert("y", Node::from("2"));
        b.insert("x", Node::from("1"));
        assert_eq!(a, b);
        let (at, value) = a.remove("x").unwrap();
        a.insert_at(at, "x", value);
        assert_eq!(a.keys().collect::<Vec<_>>(), ["x", "y"]);
    }
}
