//! PURE: the paths where two versions of a KService differ, as the drift report compares them:
//! objects member by member, containers and volumes by name, an env list as the webhook's own
//! variable and the rest.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::json::Node;
use crate::keys;

/// One step of a path: a member's key or a list item's name, borrowed from the trees; an
/// item without a name goes by its index.
type Token<'t> = Cow<'t, str>;

/// Append to `out` the paths where `a` and `b` differ: objects member by member (an absent
/// object as an empty one), containers and volumes by name, env lists as the webhook's own
/// variable and the rest; any other difference (a list, a value, text the parser kept) at its
/// own path. Only the leaves are compared, each once.
pub(super) fn diff<'t>(
    a: Option<&'t Node<'_>>,
    b: Option<&'t Node<'_>>,
    path: &mut Vec<Token<'t>>,
    out: &mut Vec<Vec<String>>,
) {
    let in_pod = path.len() >= 4 && path[..3] == ["spec", "template", "spec"];
    let named_list = in_pod && path.len() == 4 && matches!(&*path[3], "containers" | "volumes");
    let env = in_pod && path.len() == 6 && path[3] == "containers" && path[5] == "env";
    match (a, b) {
        (None | Some(Node::Object(_)), None | Some(Node::Object(_))) => {
            let (a_map, b_map) = (a.and_then(Node::as_object), b.and_then(Node::as_object));
            for (key, x) in a_map.into_iter().flat_map(|m| m.iter()) {
                path.push(Cow::Borrowed(key));
                diff(Some(x), b_map.and_then(|m| m.get(key)), path, out);
                path.pop();
            }
            let only_b = b_map
                .into_iter()
                .flat_map(|m| m.iter())
                .filter(|(k, _)| a_map.is_none_or(|m| m.get(k).is_none()));
            for (key, y) in only_b {
                path.push(Cow::Borrowed(key));
                diff(None, Some(y), path, out);
                path.pop();
            }
        }
        _ if a == b => {}
        (None | Some(Node::Array(_)), None | Some(Node::Array(_))) if named_list => {
            let (a, b) = (by_name(a), by_name(b));
            let names = a.keys().chain(b.keys().filter(|k| !a.contains_key(*k)));
            for name in names {
                path.push(name.clone());
                match (a.get(name), b.get(name)) {
                    (Some(x), Some(y)) => diff_item(x, y, path, out),
                    // Added or removed whole.
                    _ => out.push(owned(path)),
                }
                path.pop();
            }
        }
        (None | Some(Node::Array(_)), None | Some(Node::Array(_))) if env => {
            let (ours_a, rest_a) = split_env(a);
            let (ours_b, rest_b) = split_env(b);
            if ours_a != ours_b {
                path.push(Cow::Borrowed(keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN));
                out.push(owned(path));
                path.pop();
            }
            if rest_a != rest_b {
                out.push(owned(path));
            }
        }
        _ => out.push(owned(path)),
    }
}

/// A container or volume on both sides: its own path when anything but its env list differs
/// (all of it is a sidecar's, or the handed-over port's), and its env list apart (the
/// webhook's own variable may be in it).
fn diff_item<'t>(
    x: &'t Node<'_>,
    y: &'t Node<'_>,
    path: &mut Vec<Token<'t>>,
    out: &mut Vec<Vec<String>>,
) {
    if x == y {
        return;
    }
    let (Node::Object(a), Node::Object(b)) = (x, y) else {
        out.push(owned(path));
        return;
    };
    let differs = |p: &crate::json::Map, q: &crate::json::Map| {
        p.iter().any(|(k, v)| k != "env" && q.get(k) != Some(v))
    };
    let beyond_env = differs(a, b) || differs(b, a);
    if beyond_env {
        out.push(owned(path));
    }
    path.push(Cow::Borrowed("env"));
    diff(a.get("env"), b.get("env"), path, out);
    path.pop();
}

fn owned(path: &[Token]) -> Vec<String> {
    path.iter().map(|t| t.to_string()).collect()
}

/// The items of a list by their `name` (an item without one under its index).
fn by_name<'t, 'a>(list: Option<&'t Node<'a>>) -> BTreeMap<Token<'t>, &'t Node<'a>> {
    let items = list.and_then(Node::as_array).map_or(&[][..], Vec::as_slice);
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let name = match item {
                Node::Object(m) => m.get("name").and_then(Node::as_str),
                _ => None,
            };
            let token = name.map_or_else(|| Cow::Owned(i.to_string()), Cow::Borrowed);
            (token, item)
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
