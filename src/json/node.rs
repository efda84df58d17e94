//! PURE: the tree — [`Node`], [`Map`] and where the parser left a value as text ([`Skimmed`]) —
//! with its accessors. Reading and writing it with serde lives in `serde.rs`, parsing in
//! [`super::parse`]. Never parses or writes JSON text itself.

use std::borrow::Cow;

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
    pub(super) fn at(path: String) -> Self {
        Self {
            path: Some(path.into()),
            sifted: false,
        }
    }

    pub(super) fn sifted() -> Self {
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
    pub(super) members: Vec<(Cow<'a, str>, Node<'a>)>,
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

#[cfg(test)]
mod tests {
    use super::*;

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
