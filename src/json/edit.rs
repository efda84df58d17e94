//! PURE: surgical edits of a JSON document that record themselves as RFC 6902 operations.
//!
//! Every change to an admitted object goes through an [`Editor`], so the patch sent to the API
//! server is exactly the list of changes made — nothing is re-serialised, nothing the webhook does
//! not own is touched, and an edit that changes nothing records nothing. The [`Patch`] is written
//! as JSON text while the edits are made (a value the parser kept as text is copied as it came),
//! so the response only has to base64-encode it. A [`Editor::reversible`] editor also keeps what
//! each edit replaced, so [`Editor::undo`] can put the document back without ever copying it (the
//! spec SHA is computed that way over the stripped object). A [`Editor::counting`] editor
//! writes no patch and only counts its edits, for a caller that needs to know whether anything
//! changed and compares the documents itself (the drift report).

use std::fmt;

use crate::json::{Map, Node};

/// The edits an [`Editor`] made, as an RFC 6902 JSON Patch document (or only how many, from a
/// [`Editor::counting`] editor).
#[derive(Clone, PartialEq, Eq)]
pub struct Patch {
    /// The document so far, always complete: `[]`, `[{…}]`, `[{…},{…}]`; `None` when the edits
    /// are only counted.
    text: Option<Vec<u8>>,
    ops: usize,
}

impl Default for Patch {
    fn default() -> Self {
        Self {
            text: Some(b"[]".to_vec()),
            ops: 0,
        }
    }
}

impl Patch {
    /// Whether no edit was recorded.
    pub fn is_empty(&self) -> bool {
        self.ops == 0
    }

    /// How many operations it holds.
    pub fn len(&self) -> usize {
        self.ops
    }

    /// The JSON Patch document; `None` when the edits were only counted.
    pub fn json(&self) -> Option<&[u8]> {
        self.text.as_deref()
    }

    /// Append `{"op":op,"path":path[,"value":value]}`.
    fn record(&mut self, op: &str, path: &[&str], append: bool, value: Option<&Node>) {
        let Some(out) = &mut self.text else {
            self.ops += 1;
            return;
        };
        out.pop(); // the closing `]`
        if self.ops > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"op\":\"");
        out.extend_from_slice(op.as_bytes());
        out.extend_from_slice(b"\",\"path\":");
        let _ = serde_json::to_writer(&mut *out, &pointer(path, append));
        if let Some(value) = value {
            out.extend_from_slice(b",\"value\":");
            value.write_json(out);
        }
        out.extend_from_slice(b"}]");
        self.ops += 1;
    }
}

/// The patch as text, for test failures and logs.
impl fmt::Debug for Patch {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match &self.text {
            Some(text) => f.write_str(&String::from_utf8_lossy(text)),
            None => write!(f, "{} edits, counted", self.ops),
        }
    }
}

/// How to take one edit back.
#[derive(Debug)]
enum Undo<'a> {
    /// Put `previous` back under `key` of the map at `parent`, or remove the key when `None`.
    MapKey {
        parent: Vec<String>,
        key: String,
        previous: Option<Node<'a>>,
    },
    /// Re-insert a removed member at `index` of the map at `parent`.
    MapInsert {
        parent: Vec<String>,
        index: usize,
        key: String,
        value: Node<'a>,
    },
    /// Put `previous` back at `index` of the array at `parent`.
    ArraySet {
        parent: Vec<String>,
        index: usize,
        previous: Node<'a>,
    },
    /// Re-insert a removed element at `index` of the array at `parent`.
    ArrayInsert {
        parent: Vec<String>,
        index: usize,
        value: Node<'a>,
    },
    /// Drop the element a push appended to the array at `parent`.
    ArrayPop { parent: Vec<String> },
}

/// Applies edits to `doc` and records each one as a JSON Patch operation.
pub struct Editor<'d, 'a> {
    doc: &'d mut Node<'a>,
    patch: Patch,
    undo: Option<Vec<Undo<'a>>>,
}

impl<'d, 'a> Editor<'d, 'a> {
    /// An editor over `doc` with no edits yet.
    pub fn new(doc: &'d mut Node<'a>) -> Self {
        Self {
            doc,
            patch: Patch::default(),
            undo: None,
        }
    }

    /// An editor that counts its edits and writes no patch ([`Patch::json`] is `None`).
    pub fn counting(doc: &'d mut Node<'a>) -> Self {
        Self {
            doc,
            patch: Patch { text: None, ops: 0 },
            undo: None,
        }
    }

    /// An editor whose edits [`Editor::undo`] takes back; it keeps undo steps instead of patch
    /// operations.
    pub fn reversible(doc: &'d mut Node<'a>) -> Self {
        Self {
            undo: Some(Vec::new()),
            ..Self::new(doc)
        }
    }

    /// A reversible editor over this editor's document; its edits are not recorded here.
    pub fn scratch(&mut self) -> Editor<'_, 'a> {
        Editor::reversible(self.doc)
    }

    /// The document as edited so far.
    pub fn doc(&self) -> &Node<'a> {
        self.doc
    }

    /// Whether an edit was recorded so far (never, by a reversible editor).
    pub fn recorded(&self) -> bool {
        !self.patch.is_empty()
    }

    /// The operations recorded, in order.
    pub fn into_patch(self) -> Patch {
        self.patch
    }

    /// Take back every edit of a reversible editor, newest first.
    pub fn undo(self) {
        for step in self.undo.into_iter().flatten().rev() {
            match step {
                Undo::MapKey {
                    parent,
                    key,
                    previous,
                } => {
                    if let Some(map) = map_at(self.doc, &parent) {
                        match previous {
                            Some(v) => map.insert(key, v),
                            None => map.remove(&key).map(|(_, v)| v),
                        };
                    }
                }
                Undo::MapInsert {
                    parent,
                    index,
                    key,
                    value,
                } => {
                    if let Some(map) = map_at(self.doc, &parent) {
                        map.insert_at(index, key, value);
                    }
                }
                Undo::ArraySet {
                    parent,
                    index,
                    previous,
                } => {
                    if let Some(slot) = array_at(self.doc, &parent).and_then(|a| a.get_mut(index)) {
                        *slot = previous;
                    }
                }
                Undo::ArrayInsert {
                    parent,
                    index,
                    value,
                } => {
                    if let Some(items) = array_at(self.doc, &parent).filter(|a| index <= a.len()) {
                        items.insert(index, value);
                    }
                }
                Undo::ArrayPop { parent } => {
                    if let Some(items) = array_at(self.doc, &parent) {
                        items.pop();
                    }
                }
            }
        }
    }

    fn keep(&mut self, step: impl FnOnce() -> Undo<'a>) {
        if let Some(log) = &mut self.undo {
            log.push(step());
        }
    }

    /// Set the value at `path` (map keys only below arrays), creating missing parent maps.
    /// A parent that is `null` counts as missing. Nothing is recorded when the value is already
    /// there.
    pub fn set(&mut self, path: &[&str], value: Node<'a>) {
        let recording = self.undo.is_none();
        let mut node = &mut *self.doc;
        for (depth, token) in path.iter().enumerate() {
            let last = depth + 1 == path.len();
            match node {
                Node::Object(map) => {
                    let present = map.get(token).is_some_and(|v| !v.is_null());
                    if last || !present {
                        if last && map.get(token) == Some(&value) {
                            return;
                        }
                        let built = nest(&path[depth + 1..], value);
                        if recording {
                            self.patch
                                .record("add", &path[..=depth], false, Some(&built));
                        }
                        let previous = map.insert((*token).to_string(), built);
                        self.keep(|| Undo::MapKey {
                            parent: owned(&path[..depth]),
                            key: (*token).to_string(),
                            previous,
                        });
                        return;
                    }
                    match map.get_mut(token) {
                        Some(next) => node = next,
                        None => return,
                    }
                }
                Node::Array(items) => {
                    let Some(slot) = token.parse::<usize>().ok().filter(|i| *i < items.len())
                    else {
                        return;
                    };
                    if last {
                        if items[slot] != value {
                            if recording {
                                self.patch.record("replace", path, false, Some(&value));
                            }
                            let previous = std::mem::replace(&mut items[slot], value);
                            self.keep(|| Undo::ArraySet {
                                parent: owned(&path[..depth]),
                                index: slot,
                                previous,
                            });
                        }
                        return;
                    }
                    node = &mut items[slot];
                }
                // An edit inside text the parser skimmed would be lost (a panic in debug builds).
                other => return other.not_skimmed(token).unwrap_or(()),
            }
        }
    }

    /// Remove the value at `path`, if there is one.
    pub fn remove(&mut self, path: &[&str]) {
        let Some((last, parent)) = path.split_last() else {
            return;
        };
        let undo = match get_mut(self.doc, parent) {
            Some(Node::Object(map)) => map.remove(last).map(|(index, value)| Undo::MapInsert {
                parent: owned(parent),
                index,
                key: (*last).to_string(),
                value,
            }),
            Some(Node::Array(items)) => match last.parse::<usize>() {
                Ok(index) if index < items.len() => Some(Undo::ArrayInsert {
                    parent: owned(parent),
                    index,
                    value: items.remove(index),
                }),
                _ => None,
            },
            Some(other) => other.not_skimmed(last),
            None => None,
        };
        if let Some(undo) = undo {
            if self.undo.is_none() {
                self.patch.record("remove", path, false, None);
            }
            self.keep(|| undo);
        }
    }

    /// Append `value` to the array at `path`, creating the array when it is missing or `null`.
    pub fn push(&mut self, path: &[&str], value: Node<'a>) {
        match get_mut(self.doc, path) {
            Some(Node::Array(items)) => {
                if self.undo.is_none() {
                    self.patch.record("add", path, true, Some(&value));
                }
                items.push(value);
                self.keep(|| Undo::ArrayPop {
                    parent: owned(path),
                });
            }
            Some(other @ Node::Raw { .. }) => other.not_skimmed("-").unwrap_or(()),
            _ => self.set(path, Node::Array(vec![value])),
        }
    }
}

/// The value at `path`, mutably (map keys and array indexes).
fn get_mut<'d, 'a>(doc: &'d mut Node<'a>, path: &[&str]) -> Option<&'d mut Node<'a>> {
    path.iter()
        .try_fold(doc, |node, token| node.child_mut(token))
}

fn owned(path: &[&str]) -> Vec<String> {
    path.iter().map(|t| (*t).to_string()).collect()
}

fn tokens(path: &[String]) -> Vec<&str> {
    path.iter().map(String::as_str).collect()
}

fn map_at<'d, 'a>(doc: &'d mut Node<'a>, path: &[String]) -> Option<&'d mut Map<'a>> {
    get_mut(doc, &tokens(path)).and_then(Node::as_object_mut)
}

fn array_at<'d, 'a>(doc: &'d mut Node<'a>, path: &[String]) -> Option<&'d mut Vec<Node<'a>>> {
    get_mut(doc, &tokens(path)).and_then(Node::as_array_mut)
}

/// `value` wrapped in one map per token: `nest(["a","b"], v)` is `{"a":{"b":v}}`.
fn nest<'a>(tokens: &[&str], value: Node<'a>) -> Node<'a> {
    tokens.iter().rev().fold(value, |inner, token| {
        let mut map = Map::new();
        map.insert((*token).to_string(), inner);
        Node::Object(map)
    })
}

/// The RFC 6901 JSON Pointer of `path` (`~` written `~0`, `/` written `~1`), with `/-` (the end
/// of an array) after it when `append`.
fn pointer(path: &[&str], append: bool) -> String {
    let mut out = String::with_capacity(path.iter().map(|t| t.len() + 1).sum::<usize>() + 2);
    for token in path {
        out.push('/');
        for c in token.chars() {
            match c {
                '~' => out.push_str("~0"),
                '/' => out.push_str("~1"),
                c => out.push(c),
            }
        }
    }
    if append {
        out.push_str("/-");
    }
    out
}

#[cfg(test)]
#[path = "edit_tests.rs"]
mod tests;
