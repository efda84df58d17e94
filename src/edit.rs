//! PURE: surgical edits of a JSON document that record themselves as RFC 6902 operations.
//!
//! Every change to an admitted object goes through an [`Editor`], so the patch sent to the API
//! server is exactly the list of changes made — nothing is re-serialised, nothing the webhook does
//! not own is touched, and an edit that changes nothing records nothing.

use json_patch::{AddOperation, PatchOperation, RemoveOperation, ReplaceOperation};
use jsonptr::PointerBuf;
use serde_json::{Map, Value};

/// Applies edits to `doc` and records each one as a JSON Patch operation.
pub struct Editor<'a> {
    doc: &'a mut Value,
    ops: Vec<PatchOperation>,
}

impl<'a> Editor<'a> {
    /// An editor over `doc` with no edits yet.
    pub fn new(doc: &'a mut Value) -> Self {
        Self {
            doc,
            ops: Vec::new(),
        }
    }

    /// The document as edited so far.
    pub fn doc(&self) -> &Value {
        self.doc
    }

    /// The operations recorded so far, in order.
    pub fn into_ops(self) -> Vec<PatchOperation> {
        self.ops
    }

    /// Set the value at `path` (map keys only below arrays), creating missing parent maps.
    /// A parent that is `null` counts as missing. Nothing is recorded when the value is already
    /// there.
    pub fn set(&mut self, path: &[&str], value: Value) {
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
                        map.insert((*token).to_string(), built.clone());
                        self.ops.push(PatchOperation::Add(AddOperation {
                            path: pointer(&path[..=depth]),
                            value: built,
                        }));
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
                            items[slot] = value.clone();
                            self.ops.push(PatchOperation::Replace(ReplaceOperation {
                                path: pointer(path),
                                value,
                            }));
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
        let removed = match get_mut(self.doc, parent) {
            Some(Value::Object(map)) => map.remove(*last).is_some(),
            Some(Value::Array(items)) => match last.parse::<usize>() {
                Ok(i) if i < items.len() => {
                    items.remove(i);
                    true
                }
                _ => false,
            },
            _ => false,
        };
        if removed {
            self.ops.push(PatchOperation::Remove(RemoveOperation {
                path: pointer(path),
            }));
        }
    }

    /// Append `value` to the array at `path`, creating the array when it is missing or `null`.
    pub fn push(&mut self, path: &[&str], value: Value) {
        match get_mut(self.doc, path) {
            Some(Value::Array(items)) => {
                items.push(value.clone());
                let mut at = pointer(path);
                at.push_back("-");
                self.ops
                    .push(PatchOperation::Add(AddOperation { path: at, value }));
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
