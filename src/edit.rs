//! PURE: surgical edits of a JSON document that record themselves as RFC 6902 operations.
//!
//! Every change to an admitted object goes through an [`Editor`], so the patch sent to the API
//! server is exactly the list of changes made — nothing is re-serialised, nothing the webhook does
//! not own is touched, and an edit that changes nothing records nothing. A [`Editor::reversible`]
//! editor also keeps what each edit replaced, so [`Editor::undo`] can put the document back
//! without ever copying it (the spec SHA is computed that way over the stripped object).

use json_patch::{AddOperation, PatchOperation, RemoveOperation, ReplaceOperation};
use jsonptr::PointerBuf;
use serde_json::{Map, Value};

/// How to take one edit back.
#[derive(Debug)]
enum Undo {
    /// Put `previous` back under `key` of the map at `parent`, or remove the key when `None`.
    MapKey {
        parent: Vec<String>,
        key: String,
        previous: Option<Value>,
    },
    /// Put `previous` back at `index` of the array at `parent`.
    ArraySet {
        parent: Vec<String>,
        index: usize,
        previous: Value,
    },
    /// Re-insert a removed element at `index` of the array at `parent`.
    ArrayInsert {
        parent: Vec<String>,
        index: usize,
        value: Value,
    },
    /// Drop the element a push appended to the array at `parent`.
    ArrayPop { parent: Vec<String> },
}

/// Applies edits to `doc` and records each one as a JSON Patch operation.
pub struct Editor<'a> {
    doc: &'a mut Value,
    ops: Vec<PatchOperation>,
    undo: Option<Vec<Undo>>,
}

impl<'a> Editor<'a> {
    /// An editor over `doc` with no edits yet.
    pub fn new(doc: &'a mut Value) -> Self {
        Self {
            doc,
            ops: Vec::new(),
            undo: None,
        }
    }

    /// An editor whose edits [`Editor::undo`] takes back; it keeps undo steps instead of patch
    /// operations.
    pub fn reversible(doc: &'a mut Value) -> Self {
        Self {
            undo: Some(Vec::new()),
            ..Self::new(doc)
        }
    }

    /// A reversible editor over this editor's document; its edits are not recorded here.
    pub fn scratch(&mut self) -> Editor<'_> {
        Editor::reversible(self.doc)
    }

    /// The document as edited so far.
    pub fn doc(&self) -> &Value {
        self.doc
    }

    /// The operations recorded so far, in order.
    pub fn into_ops(self) -> Vec<PatchOperation> {
        self.ops
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
                    if let Some(Value::Object(map)) = get_mut(self.doc, &tokens(&parent)) {
                        match previous {
                            Some(v) => map.insert(key, v),
                            None => map.remove(&key),
                        };
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

    fn keep(&mut self, step: impl FnOnce() -> Undo) {
        if let Some(log) = &mut self.undo {
            log.push(step());
        }
    }

    /// Set the value at `path` (map keys only below arrays), creating missing parent maps.
    /// A parent that is `null` counts as missing. Nothing is recorded when the value is already
    /// there.
    pub fn set(&mut self, path: &[&str], value: Value) {
        let recording = self.undo.is_none();
        let mut node = &mut *self.doc;
        for (depth, token) in path.iter().enumerate() {
            let last = depth + 1 == path.len();
            match node {
                Value::Object(map) => {
                    let present = map.get(*token).is_some_and(|v| !v.is_null());
                    if last || !present {
                        if map.get(*token) == Some(&value) && last {
                            return;
                        }
                        let built = nest(&path[depth + 1..], value);
                        let copy = recording.then(|| built.clone());
                        let previous = map.insert((*token).to_string(), built);
                        if let Some(value) = copy {
                            self.ops.push(PatchOperation::Add(AddOperation {
                                path: pointer(&path[..=depth]),
                                value,
                            }));
                        }
                        self.keep(|| Undo::MapKey {
                            parent: owned(&path[..depth]),
                            key: (*token).to_string(),
                            previous,
                        });
                        return;
                    }
                    match map.get_mut(*token) {
                        Some(next) => node = next,
                        None => return,
                    }
                }
                Value::Array(items) => {
                    let Some(slot) = token.parse::<usize>().ok().filter(|i| *i < items.len())
                    else {
                        return;
                    };
                    if last {
                        if items[slot] != value {
                            let copy = recording.then(|| value.clone());
                            let previous = std::mem::replace(&mut items[slot], value);
                            if let Some(value) = copy {
                                self.ops.push(PatchOperation::Replace(ReplaceOperation {
                                    path: pointer(path),
                                    value,
                                }));
                            }
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
                _ => return,
            }
        }
    }

    /// Remove the value at `path`, if there is one.
    pub fn remove(&mut self, path: &[&str]) {
        let Some((last, parent)) = path.split_last() else {
            return;
        };
        let undo = match get_mut(self.doc, parent) {
            Some(Value::Object(map)) => map.remove(*last).map(|previous| Undo::MapKey {
                parent: owned(parent),
                key: (*last).to_string(),
                previous: Some(previous),
            }),
            Some(Value::Array(items)) => match last.parse::<usize>() {
                Ok(index) if index < items.len() => Some(Undo::ArrayInsert {
                    parent: owned(parent),
                    index,
                    value: items.remove(index),
                }),
                _ => None,
            },
            _ => None,
        };
        if let Some(undo) = undo {
            if self.undo.is_none() {
                self.ops.push(PatchOperation::Remove(RemoveOperation {
                    path: pointer(path),
                }));
            }
            self.keep(|| undo);
        }
    }

    /// Append `value` to the array at `path`, creating the array when it is missing or `null`.
    pub fn push(&mut self, path: &[&str], value: Value) {
        match get_mut(self.doc, path) {
            Some(Value::Array(items)) => {
                let copy = self.undo.is_none().then(|| value.clone());
                items.push(value);
                if let Some(value) = copy {
                    let mut at = pointer(path);
                    at.push_back("-");
                    self.ops
                        .push(PatchOperation::Add(AddOperation { path: at, value }));
                }
                self.keep(|| Undo::ArrayPop {
                    parent: owned(path),
                });
            }
            _ => self.set(path, Value::Array(vec![value])),
        }
    }
}

/// The value at `path`, mutably (map keys and array indexes).
fn get_mut<'v>(doc: &'v mut Value, path: &[&str]) -> Option<&'v mut Value> {
    path.iter().try_fold(doc, |node, token| match node {
        Value::Object(map) => map.get_mut(*token),
        Value::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
        _ => None,
    })
}

fn owned(path: &[&str]) -> Vec<String> {
    path.iter().map(|t| (*t).to_string()).collect()
}

fn tokens(path: &[String]) -> Vec<&str> {
    path.iter().map(String::as_str).collect()
}

fn array_at<'v>(doc: &'v mut Value, path: &[String]) -> Option<&'v mut Vec<Value>> {
    get_mut(doc, &tokens(path)).and_then(Value::as_array_mut)
}

/// `value` wrapped in one map per token: `nest(["a","b"], v)` is `{"a":{"b":v}}`.
fn nest(tokens: &[&str], value: Value) -> Value {
    tokens.iter().rev().fold(value, |inner, token| {
        let mut map = Map::new();
        map.insert((*token).to_string(), inner);
        Value::Object(map)
    })
}

/// A JSON Pointer from unescaped tokens (`/` and `~` are escaped by jsonptr).
pub fn pointer(path: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(path.iter().copied())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn edited(mut doc: Value, f: impl FnOnce(&mut Editor)) -> (Value, Value, Value) {
        let before = doc.clone();
        let mut ed = Editor::new(&mut doc);
        f(&mut ed);
        let ops = ed.into_ops();
        let mut replayed = before;
        json_patch::patch(&mut replayed, &ops).unwrap();
        assert_eq!(replayed, doc, "the recorded patch reproduces the edit");
        (doc, serde_json::to_value(&ops).unwrap(), replayed)
    }

    #[test]
    fn set_creates_missing_parents_in_one_operation() {
        let (doc, ops, _) = edited(json!({"metadata": {"name": "a"}}), |ed| {
            ed.set(
                &["metadata", "annotations", "flyte.org/spec-sha"],
                json!("x"),
            );
        });
        assert_eq!(doc["metadata"]["annotations"]["flyte.org/spec-sha"], "x");
        assert_eq!(
            ops,
            json!([{"op": "add", "path": "/metadata/annotations", "value": {"flyte.org/spec-sha": "x"}}])
        );
    }

    #[test]
    fn set_escapes_slashes_and_skips_no_ops() {
        let (_, ops, _) = edited(json!({"metadata": {"labels": {"a/b": "1"}}}), |ed| {
            ed.set(&["metadata", "labels", "a/b"], json!("1"));
            ed.set(&["metadata", "labels", "a~c/d"], json!("2"));
        });
        assert_eq!(
            ops,
            json!([{"op": "add", "path": "/metadata/labels/a~0c~1d", "value": "2"}])
        );
    }

    #[test]
    fn null_parents_are_replaced() {
        let (doc, _, _) = edited(json!({"metadata": {"labels": null}}), |ed| {
            ed.set(&["metadata", "labels", "k"], json!("v"));
        });
        assert_eq!(doc, json!({"metadata": {"labels": {"k": "v"}}}));
    }

    #[test]
    fn undo_puts_the_document_back() {
        let original = json!({"a": {"b": [1, 2, 3], "c": "x"}, "d": null});
        let mut doc = original.clone();
        let mut ed = Editor::reversible(&mut doc);
        ed.remove(&["a", "b", "1"]);
        ed.push(&["a", "b"], json!(9));
        ed.set(&["a", "b", "0"], json!(0));
        ed.set(&["a", "c"], json!("y"));
        ed.remove(&["a", "c"]);
        ed.set(&["d", "e", "f"], json!(1));
        ed.push(&["g"], json!([]));
        assert_ne!(ed.doc(), &original);
        ed.undo();
        assert_eq!(doc, original);
    }

    #[test]
    fn push_and_remove_in_arrays() {
        let (doc, _, _) = edited(json!({"env": [{"name": "A"}, {"name": "B"}]}), |ed| {
            ed.remove(&["env", "0"]);
            ed.push(&["env"], json!({"name": "C"}));
            ed.push(&["missing"], json!(1));
            ed.set(&["env", "0", "value"], json!("b"));
            ed.remove(&["nothing", "here"]);
        });
        assert_eq!(
            doc,
            json!({"env": [{"name": "B", "value": "b"}, {"name": "C"}], "missing": [1]})
        );
    }
}
