//! PURE: the tree and serde. `Node: Serialize`, and `Node: Deserialize` — `serde_json`'s reading
//! into a tree, how a body the fast parser refuses is read after all (strings borrowed when they
//! have no escapes; of a repeated member name, the last value where the first stood) — the
//! conversions from and to `serde_json::Value`, and the tree's compact JSON text. Never decides
//! what a value means.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Number;

use super::{Map, Node};

impl<'a> Node<'a> {
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
}

/// A string or a number as JSON (escaped by `serde_json`; writing into a `Vec` cannot fail).
fn write_serde<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(out, value);
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
}
