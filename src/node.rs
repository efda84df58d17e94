//! PURE: the JSON tree the admission core reads and edits, borrowing from the request body.
//!
//! A [`Node`] parsed from a review is mostly slices of the body: a string without escapes is
//! never copied, and an object is a vector of members in the order they came (no map is built).
//! Values the webhook never reads are not parsed into a tree at all but kept as their JSON text
//! ([`Node::Raw`]): the annotations of other owners (a `kubectl.kubernetes.io/last-applied-
//! configuration` can be half of a review), `metadata.managedFields` and `status`. They are
//! written back out byte for byte, so nothing is lost; only [`parse_object`] skims like that.
//!
//! Reviews are parsed with `sonic-rs` (SIMD string scanning, serde-compatible): for a 200 KB
//! review it is about twice as fast as `serde_json` into the same tree.
//!
//! Trees built by the offline CLI and by tests come from `serde_json::Value`
//! ([`Node::from_json`]) and own their strings.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
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
    /// A value kept as its JSON text because the webhook never reads into it.
    Raw(Cow<'a, str>),
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

    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_some()
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
            (Node::Raw(a), Node::Raw(b)) => a == b,
            _ => false,
        }
    }
}

impl<'a> Node<'a> {
    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Node<'a>> {
        self.as_object().and_then(|m| m.get(key))
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node<'a>> {
        self.as_object_mut().and_then(|m| m.get_mut(key))
    }

    /// The string, also of a raw string without escapes (so any annotation can be read).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::String(s) => Some(s),
            Node::Raw(text) => {
                let inner = text.strip_prefix('"')?.strip_suffix('"')?;
                (!inner.contains('\\')).then_some(inner)
            }
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Vec<Node<'a>>> {
        match self {
            Node::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_array_mut(&mut self) -> Option<&mut Vec<Node<'a>>> {
        match self {
            Node::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&Map<'a>> {
        match self {
            Node::Object(map) => Some(map),
            _ => None,
        }
    }

    pub fn as_object_mut(&mut self) -> Option<&mut Map<'a>> {
        match self {
            Node::Object(map) => Some(map),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        match self {
            Node::Null => true,
            Node::Raw(text) => text == "null",
            _ => false,
        }
    }

    pub fn is_object(&self) -> bool {
        match self {
            Node::Object(_) => true,
            Node::Raw(text) => text.starts_with('{'),
            _ => false,
        }
    }

    pub fn is_string(&self) -> bool {
        match self {
            Node::String(_) => true,
            Node::Raw(text) => text.starts_with('"'),
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
            Node::Raw(text) => serde_json::from_str(text).unwrap_or_default(),
        }
    }
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

impl From<Node<'_>> for serde_json::Value {
    fn from(node: Node<'_>) -> Self {
        node.to_json()
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
            Node::Raw(_) => self.to_json().serialize(s),
        }
    }
}

/// How much of a value to build: which members stay raw text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Everything.
    Full,
    /// A Kubernetes object: `status` stays raw.
    Object,
    /// `metadata`: `managedFields` stays raw.
    Metadata,
    /// `metadata.annotations`: only the webhook's own keys are parsed.
    Annotations,
}

/// Where a member of a value of this shape goes.
enum Member {
    Build(Shape),
    Raw,
}

impl Shape {
    fn member(self, key: &str) -> Member {
        match (self, key) {
            (Shape::Full, _) => Member::Build(Shape::Full),
            (Shape::Object, "metadata") => Member::Build(Shape::Metadata),
            (Shape::Object, "status") | (Shape::Metadata, "managedFields") => Member::Raw,
            (Shape::Metadata, "annotations") => Member::Build(Shape::Annotations),
            (Shape::Annotations, key) if crate::keys::is_own_annotation(key) => {
                Member::Build(Shape::Full)
            }
            (Shape::Annotations, _) => Member::Raw,
            (Shape::Object | Shape::Metadata, _) => Member::Build(Shape::Full),
        }
    }
}

/// Parse a Kubernetes object from the JSON of a review, borrowing from it and skimming what the
/// webhook never reads (see the module docs). Only for the `sonic-rs` deserializer.
pub fn parse_object<'de, D: Deserializer<'de>>(d: D) -> Result<Node<'de>, D::Error> {
    Seed(Shape::Object).deserialize(d)
}

impl<'de: 'a, 'a> Deserialize<'de> for Node<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Seed(Shape::Full).deserialize(d)
    }
}

#[derive(Clone, Copy)]
struct Seed(Shape);

impl<'de> DeserializeSeed<'de> for Seed {
    type Value = Node<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Node<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed {
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
        self.deserialize(d)
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
        while let Some(item) = seq.next_element_seed(Seed(Shape::Full))? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Node<'de>, A::Error> {
        let mut members = Vec::with_capacity(access.size_hint().unwrap_or(0));
        while let Some(Key(key)) = access.next_key()? {
            let value = match self.0.member(&key) {
                Member::Build(shape) => access.next_value_seed(Seed(shape))?,
                Member::Raw => Node::Raw(
                    access
                        .next_value::<sonic_rs::LazyValue<'de>>()?
                        .as_raw_cow(),
                ),
            };
            members.push((key, value));
        }
        Ok(Node::Object(Map { members }))
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

    fn skim(text: &str) -> Node<'_> {
        let mut de = sonic_rs::Deserializer::from_str(text);
        parse_object(&mut de).unwrap()
    }

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
    fn skimming_keeps_what_it_does_not_read_as_text() {
        let text = r#"{"metadata":{"name":"a","managedFields":[{"manager":"kubectl"}],
            "annotations":{"flyte.org/spec-sha":"abc","kubectl.kubernetes.io/last-applied-configuration":"{\"x\":1}","plain":"v"}},
            "spec":{"k":"v"},"status":{"conditions":[]}}"#;
        let node = skim(text);
        let annotations = node
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .unwrap();
        assert!(matches!(
            annotations.get("flyte.org/spec-sha"),
            Some(Node::String(_))
        ));
        let applied = annotations.get("kubectl.kubernetes.io/last-applied-configuration");
        assert!(matches!(applied, Some(Node::Raw(_))));
        assert_eq!(
            applied.and_then(Node::as_str),
            None,
            "escaped raw text is not read"
        );
        assert_eq!(annotations.get("plain").and_then(Node::as_str), Some("v"));
        assert!(matches!(node.get("status"), Some(Node::Raw(_))));
        let full: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(node.to_json(), full, "nothing is lost");
        assert_eq!(serde_json::to_value(&node).unwrap(), full);
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
