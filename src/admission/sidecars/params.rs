//! PURE: the `{{ .Param }}` placeholders of sidecar templates, filled from the KService.
//!
//! Placeholders follow Go template spelling (`{{ .Namespace }}`, spaces optional) and may appear
//! in any string value of a template except names. Unknown or unterminated placeholders are
//! refused when the catalogue is parsed, so filling one in never fails. `{{ .AppPort }}`, the port
//! the app listens on, is known only to a template that fronts the app.

use std::borrow::Cow;

use serde_json::Value;

use crate::admission::ksvc;
use crate::json::Node;

/// The placeholders a template may use.
pub const NAMES: [&str; 6] = [
    ".Namespace",
    ".Name",
    ".Project",
    ".Domain",
    ".AppName",
    APP_PORT,
];
/// The placeholder of the app's own port, for the upstream of a fronting template.
pub const APP_PORT: &str = ".AppPort";

/// Values filled into a template for one KService.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params {
    /// `{{ .Namespace }}`: the namespace the KService lives in.
    pub namespace: String,
    /// `{{ .Name }}`: the KService's `metadata.name` (empty for a `generateName` on CREATE).
    pub name: String,
    /// `{{ .Project }}`: the `flyte.org/project` label of a managed app, else empty.
    pub project: String,
    /// `{{ .Domain }}`: the `flyte.org/domain` label of a managed app, else empty.
    pub domain: String,
    /// `{{ .AppName }}`: the `flyte.org/app-name` label of a managed app, else the KService name.
    pub app_name: String,
    /// `{{ .AppPort }}`: the port the app listens on once a fronting template holds the serving
    /// port (empty without one).
    pub app_port: String,
}

impl Params {
    /// The values of `doc` as it stands (after the webhook set its name), in `namespace`.
    pub fn of(doc: &crate::json::Node, namespace: &str) -> Self {
        let name = ksvc::name(doc).to_string();
        match ksvc::identity(doc) {
            Some(id) => Self {
                namespace: namespace.to_string(),
                name,
                project: id.project,
                domain: id.domain,
                app_name: id.name,
                app_port: String::new(),
            },
            None => Self {
                namespace: namespace.to_string(),
                app_name: name.clone(),
                name,
                ..Self::default()
            },
        }
    }

    /// A short digest of the values, recorded with a parameterised template so that a change
    /// (a `generateName` that got its name) fills the template in again.
    pub fn digest(&self) -> String {
        let values = [
            &self.namespace,
            &self.name,
            &self.project,
            &self.domain,
            &self.app_name,
        ]
        .map(|v| Node::from(v.as_str()));
        // Hashing fails only on raw text that does not parse, and these are strings.
        crate::admission::spec_sha::spec_sha(&Node::Array(values.into())).unwrap_or_default()
    }

    fn lookup(&self, key: &str) -> Option<&str> {
        match key {
            ".Namespace" => Some(&self.namespace),
            ".Name" => Some(&self.name),
            ".Project" => Some(&self.project),
            ".Domain" => Some(&self.domain),
            ".AppName" => Some(&self.app_name),
            APP_PORT => Some(&self.app_port),
            _ => None,
        }
    }
}

/// `text` with every placeholder replaced by `lookup`; `Err` names the first bad placeholder.
pub fn expand<'t, 'p>(
    text: &'t str,
    lookup: impl Fn(&str) -> Option<&'p str>,
) -> Result<Cow<'t, str>, String> {
    expand_with(text, lookup, String::push_str)
}

/// [`expand`], each value written into the result by `push`.
fn expand_with<'t, 'p>(
    text: &'t str,
    lookup: impl Fn(&str) -> Option<&'p str>,
    push: impl Fn(&mut String, &str),
) -> Result<Cow<'t, str>, String> {
    if !has_open(text) {
        return Ok(Cow::Borrowed(text));
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = find(rest, "{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let Some(close) = find(after, "}}") else {
            return Err(format!(
                "has an unterminated placeholder {:?}",
                &rest[open..]
            ));
        };
        let key = after[..close].trim();
        match lookup(key) {
            Some(value) => push(&mut out, value),
            None => {
                return Err(format!(
                    "uses the unknown placeholder {{{{ {key} }}}}; use one of {}",
                    NAMES.map(|n| format!("{{{{ {n} }}}}")).join(", ")
                ));
            }
        }
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    Ok(Cow::Owned(out))
}

/// Why `text` has a bad placeholder, or `None`; `{{ .AppPort }}` only when `fronting`.
pub fn problem(text: &str, fronting: bool) -> Option<String> {
    let app_port = std::cell::Cell::new(false);
    let bad = expand(text, |key| {
        app_port.set(app_port.get() || key == APP_PORT);
        NAMES.contains(&key).then_some("")
    })
    .err();
    match (bad, app_port.get() && !fronting) {
        (Some(bad), _) => Some(bad),
        (None, true) => Some(
            "uses {{ .AppPort }}, which only a fronting template (fronts: {port: N}) knows: \
             the app's port moves only when a sidecar takes it over"
                .to_string(),
        ),
        (None, false) => None,
    }
}

/// One step from a value to a string inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// A template item (a container or a volume) ready to inject, built once at load. It is an
/// object whose `name` is a string and whose other members are kept as their JSON text:
/// admission never reads into a sidecar's own fields, so filling an item in copies a few strings
/// and the patch carries the text as it is. The placeholders of a member are filled into its
/// text (each value escaped for JSON); a member with a placeholder-like key, which that would
/// also fill, stays a tree whose strings are filled one by one.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    node: Node<'static>,
    /// The members whose text holds placeholders.
    texts: Vec<String>,
    /// The paths of the placeholder strings inside members kept as trees.
    holes: Vec<Vec<Step>>,
}

impl Item {
    /// `value` ready to inject; `at` names it (`templates.auth-proxy.containers[0]`). The
    /// catalogue refuses an item that is not an object; one is kept as a tree, as it came.
    pub fn new(value: &Value, at: &str) -> Self {
        let mut holes = Vec::new();
        walk(value, &mut Vec::new(), &mut holes);
        let Some(members) = value.as_object() else {
            return Self {
                node: Node::from_json(value.clone()),
                texts: Vec::new(),
                holes,
            };
        };
        let mut map = crate::json::Map::new();
        let mut texts = Vec::new();
        let mut trees = Vec::new();
        for (key, member) in members {
            let key_step = Step::Key(key.clone());
            let filled = holes.iter().any(|h| h.first() == Some(&key_step));
            let node = if key == "name" || (filled && has_open_key(member)) {
                trees.push(key_step);
                Node::from_json(member.clone())
            } else {
                if filled {
                    texts.push(key.clone());
                }
                Node::raw(member.to_string(), &format!("{at}.{key}"))
            };
            map.insert(key.clone(), node);
        }
        holes.retain(|h| h.first().is_some_and(|step| trees.contains(step)));
        Self {
            node: Node::Object(map),
            texts,
            holes,
        }
    }

    /// Whether any string holds a placeholder.
    pub fn parameterised(&self) -> bool {
        !self.texts.is_empty() || !self.holes.is_empty()
    }

    /// The item with its placeholders filled from `params`.
    pub fn fill<'a>(&self, params: &Params) -> Node<'a> {
        let mut node: Node<'a> = self.node.clone();
        let Some(map) = node.as_object_mut() else {
            return node;
        };
        for key in &self.texts {
            if let Some(Node::Raw { text, .. }) = map.get_mut(key)
                && let Ok(Cow::Owned(filled)) =
                    expand_with(text, |k| params.lookup(k), push_json_escaped)
            {
                *text = Cow::Owned(filled);
            }
        }
        for hole in &self.holes {
            let slot = hole.iter().try_fold(&mut node, |node, step| match step {
                Step::Key(key) => node.as_object_mut()?.get_mut(key),
                Step::Index(i) => node.as_array_mut()?.get_mut(*i),
            });
            if let Some(Node::String(text)) = slot
                && let Ok(Cow::Owned(filled)) = expand(text, |k| params.lookup(k))
            {
                *text = Cow::Owned(filled);
            }
        }
        node
    }
}

/// Whether a key inside `value` holds `{{` (filling its text would fill the key too).
fn has_open_key(value: &Value) -> bool {
    match value {
        Value::Array(items) => items.iter().any(has_open_key),
        Value::Object(map) => map.iter().any(|(k, v)| has_open(k) || has_open_key(v)),
        _ => false,
    }
}

/// `value` escaped as the inside of a JSON string, as `serde_json` writes it.
fn push_json_escaped(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if c < ' ' => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
}

fn walk(value: &Value, at: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match value {
        Value::String(s) if has_open(s) => out.push(at.clone()),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                at.push(Step::Index(i));
                walk(item, at, out);
                at.pop();
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                at.push(Step::Key(key.clone()));
                walk(item, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn has_open(text: &str) -> bool {
    find(text, "{{").is_some()
}

/// Where `needle` starts in `text`: its first byte found with `memchr`, the rest compared.
/// The strings searched are short (a template's, an env entry), and `str::find` or
/// `memmem::find` set up a searcher per call that costs more than such a scan.
pub(super) fn find(text: &str, needle: &str) -> Option<usize> {
    let (bytes, wanted) = (text.as_bytes(), needle.as_bytes());
    let first = *wanted.first()?;
    memchr::memchr_iter(first, bytes).find(|&at| bytes[at..].starts_with(wanted))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn placeholders_are_filled() {
        let params = Params {
            namespace: "ns".into(),
            name: "app-p-d".into(),
            project: "p".into(),
            domain: "d".into(),
            app_name: "app".into(),
            app_port: "8080".into(),
        };
        let v = json!({"args": ["--tag={{ .Project }}/{{.Domain}}/{{ .AppName }}", "{{ .AppPort }}"],
                       "env": [{"value": "{{ .Name }}.{{ .Namespace }}"}]});
        let item = Item::new(&v, "templates.t.containers[0]");
        assert_eq!((item.texts.len(), item.holes.len()), (2, 0));
        assert!(item.parameterised());
        assert_eq!(
            item.fill(&params).to_json(),
            json!({"args": ["--tag=p/d/app", "8080"], "env": [{"value": "app-p-d.ns"}]})
        );
    }

    #[test]
    fn filled_text_escapes_values_and_keys_are_never_filled() {
        let params = Params {
            namespace: "ns".into(),
            name: "we\"ird\\name\n".into(),
            app_port: "8080".into(),
            ..Params::default()
        };
        let v = json!({"name": "proxy",
                       "args": ["--name={{ .Name }}", "--up=127.0.0.1:{{ .AppPort }}"],
                       "csi": {"volumeAttributes": {"{{ .Name }}": "{{ .Namespace }}"}}});
        let item = Item::new(&v, "templates.t.containers[0]");
        assert_eq!(item.texts, ["args"]);
        assert_eq!(
            item.fill(&params).to_json(),
            json!({"name": "proxy",
                   "args": ["--name=we\"ird\\name\n", "--up=127.0.0.1:8080"],
                   "csi": {"volumeAttributes": {"{{ .Name }}": "ns"}}})
        );
    }

    #[test]
    fn the_digest_is_the_canonical_hash_of_the_values() {
        let params = Params {
            namespace: "ns".into(),
            name: "a\"b\u{1}".into(),
            project: "p".into(),
            domain: "d".into(),
            app_name: "ünï".into(),
            app_port: "8080".into(),
        };
        let values = json!(["ns", "a\"b\u{1}", "p", "d", "ünï"]);
        assert_eq!(
            params.digest(),
            crate::admission::spec_sha::json_sha(&values)
        );
    }

    #[test]
    fn bad_placeholders_are_named() {
        assert_eq!(problem("plain", false), None);
        assert_eq!(problem("{{ .Name }}-x", false), None);
        assert!(
            problem("{{ .Nope }}", false)
                .unwrap()
                .contains("unknown placeholder {{ .Nope }}")
        );
        assert!(
            problem("a {{ .Name", false)
                .unwrap()
                .contains("unterminated")
        );
        assert_eq!(problem("127.0.0.1:{{ .AppPort }}", true), None);
        assert!(
            problem("127.0.0.1:{{ .AppPort }}", false)
                .unwrap()
                .contains("only a fronting template")
        );
    }

    #[test]
    fn unmanaged_app_name_is_the_name() {
        let doc = json!({"metadata": {"name": "web"}});
        let p = Params::of(&Node::from_json(doc), "ns");
        assert_eq!((p.app_name.as_str(), p.project.as_str()), ("web", ""));
    }
}
