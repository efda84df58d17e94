//! PURE: the paths where two versions of a KService differ, as the drift report compares them:
//! objects member by member, containers and volumes by name, an env list as the webhook's own
//! variable and the rest.

use std::collections::BTreeMap;

use crate::json::{Map, Node};
use crate::keys;

/// Append to `out` the paths where `a` and `b` differ: objects member by member (an absent
/// object as an empty one), containers and volumes by name, env lists as the webhook's own
/// variable and the rest; any other difference (a list, a value, text the parser kept) at its
/// own path.
pub(super) fn diff(
    a: Option<&Node>,
    b: Option<&Node>,
    path: &mut Vec<String>,
    out: &mut Vec<Vec<String>>,
) {
    if a == b {
        return;
    }
    let tokens: Vec<&str> = path.iter().map(String::as_str).collect();
    let named_list = matches!(
        tokens.as_slice(),
        ["spec", "template", "spec", "containers" | "volumes"]
    );
    let env = matches!(
        tokens.as_slice(),
        ["spec", "template", "spec", "containers", _, "env"]
    );
    match (a, b) {
        (None | Some(Node::Object(_)), None | Some(Node::Object(_))) => {
            let keys = union(a.and_then(Node::as_object), b.and_then(Node::as_object));
            for key in keys {
                path.push(key.clone());
                diff(
                    a.and_then(|n| n.get(&key)),
                    b.and_then(|n| n.get(&key)),
                    path,
                    out,
                );
                path.pop();
            }
        }
        (None | Some(Node::Array(_)), None | Some(Node::Array(_))) if named_list => {
            let (a, b) = (by_name(a), by_name(b));
            let names = a.keys().chain(b.keys().filter(|k| !a.contains_key(*k)));
            for name in names.cloned().collect::<Vec<_>>() {
                path.push(name.clone());
                match (a.get(&name), b.get(&name)) {
                    (Some(x), Some(y)) => diff(Some(x), Some(y), path, out),
                    // Added or removed whole.
                    _ => out.push(path.clone()),
                }
                path.pop();
            }
        }
        (None | Some(Node::Array(_)), None | Some(Node::Array(_))) if env => {
            let (ours_a, rest_a) = split_env(a);
            let (ours_b, rest_b) = split_env(b);
            if ours_a != ours_b {
                out.push(
                    [
                        path.as_slice(),
                        &[keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN.to_owned()],
                    ]
                    .concat(),
                );
            }
            if rest_a != rest_b {
                out.push(path.clone());
            }
        }
        _ => out.push(path.clone()),
    }
}

/// The keys of two maps, `a`'s first, each once.
fn union(a: Option<&Map>, b: Option<&Map>) -> Vec<String> {
    let mut keys: Vec<String> = a
        .into_iter()
        .flat_map(|m| m.keys())
        .map(str::to_owned)
        .collect();
    for key in b.into_iter().flat_map(|m| m.keys()) {
        if !keys.iter().any(|k| k == key) {
            keys.push(key.to_owned());
        }
    }
    keys
}

/// The items of a list by their `name` (an item without one under its index).
fn by_name<'d, 'a>(list: Option<&'d Node<'a>>) -> BTreeMap<String, &'d Node<'a>> {
    let items = list.and_then(Node::as_array).map_or(&[][..], Vec::as_slice);
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let name = match item {
                Node::Object(m) => m.get("name").and_then(Node::as_str),
                _ => None,
            };
            (name.map_or_else(|| i.to_string(), str::to_owned), item)
        })
        .collect()
}

/// An env list split into the webhook's own variable and the other entries.
fn split_env<'d, 'a>(list: Option<&'d Node<'a>>) -> (Vec<&'d Node<'a>>, Vec<&'d Node<'a>>) {
    let items = list.and_then(Node::as_array).map_or(&[][..], Vec::as_slice);
    items.iter().partition(|e| match e {
        Node::Object(m) => {
            m.get("name").and_then(Node::as_str) == Some(keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN)
        }
        _ => false,
    })
}

/// A JSON Pointer (RFC 6901) of path tokens.
pub(super) fn pointer(path: &[String]) -> String {
    path.iter()
        .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
        .collect()
}
