//! PURE: the subset of kubectl's JSONPath templates that `-o jsonpath=…` takes.
//!
//! Supported: text outside braces as it is; `{.a.b}` fields (`\.` escapes a dot in a key, as in
//! `{.metadata.annotations.flyte\.org/spec-sha}`); `{.items[*].x}` and `.*` wildcards; `[N]`
//! indexes (negative from the end); `['key']`; `{@}` for the current value; `{"\n"}` quoted text;
//! `{range .items[*]}…{end}`. Several results of one expression are joined by a space; a string
//! prints as it is, anything else as compact JSON; a missing key prints nothing, as kubectl's
//! default `--allow-missing-template-keys` does. Filters (`[?(…)]`), slices and recursive
//! descent (`..`) are refused with a message that lists this subset.

use serde_json::Value;

/// What a refused template is told.
const SUBSET: &str = "supported: {.a.b}, {.items[*].x}, {.a[0]}, {['key']}, {@}, {\"text\"}, \
                      {range .items[*]}…{end}";

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Path(Vec<Step>),
    Range(Vec<Step>, Vec<Part>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(i64),
    All,
}

impl Template {
    /// Parse `text`; the error names what is wrong and lists the subset.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut stack: Vec<(Vec<Step>, Vec<Part>)> = Vec::new();
        let mut parts = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let Some(open) = rest.find('{') else {
                parts.push(Part::Text(rest.to_owned()));
                break;
            };
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_owned()));
            }
            let body_len = closing(&rest[open + 1..])
                .ok_or_else(|| format!("unclosed `{{` in jsonpath {text:?}; {SUBSET}"))?;
            let body = rest[open + 1..open + 1 + body_len].trim();
            rest = &rest[open + 2 + body_len..];
            if let Some(path) = body.strip_prefix("range ") {
                stack.push((steps(path.trim(), text)?, std::mem::take(&mut parts)));
            } else if body == "end" {
                let (path, outer) = stack
                    .pop()
                    .ok_or_else(|| format!("{{end}} without {{range}} in jsonpath {text:?}"))?;
                let inner = std::mem::replace(&mut parts, outer);
                parts.push(Part::Range(path, inner));
            } else if let Some(quoted) = body.strip_prefix('"').and_then(|b| b.strip_suffix('"')) {
                parts.push(Part::Text(unescape(quoted)));
            } else {
                parts.push(Part::Path(steps(body, text)?));
            }
        }
        if !stack.is_empty() {
            return Err(format!("{{range}} without {{end}} in jsonpath {text:?}"));
        }
        Ok(Self { parts })
    }

    /// The template applied to `root`.
    pub fn render(&self, root: &Value) -> String {
        let mut out = String::new();
        render(&self.parts, root, &mut out);
        out
    }
}

fn render(parts: &[Part], current: &Value, out: &mut String) {
    for part in parts {
        match part {
            Part::Text(text) => out.push_str(text),
            Part::Path(path) => {
                let shown: Vec<String> = select(current, path).into_iter().map(show).collect();
                out.push_str(&shown.join(" "));
            }
            Part::Range(path, body) => {
                for item in select(current, path) {
                    render(body, item, out);
                }
            }
        }
    }
}

fn show(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The values `path` reaches from `value`.
fn select<'v>(value: &'v Value, path: &[Step]) -> Vec<&'v Value> {
    let Some((step, rest)) = path.split_first() else {
        return vec![value];
    };
    let next: Vec<&Value> = match (step, value) {
        (Step::Field(key), Value::Object(map)) => map.get(key).into_iter().collect(),
        (Step::Index(i), Value::Array(items)) => {
            let at = if *i < 0 { items.len() as i64 + i } else { *i };
            usize::try_from(at)
                .ok()
                .and_then(|at| items.get(at))
                .into_iter()
                .collect()
        }
        (Step::All, Value::Array(items)) => items.iter().collect(),
        (Step::All, Value::Object(map)) => map.values().collect(),
        _ => Vec::new(),
    };
    next.into_iter().flat_map(|v| select(v, rest)).collect()
}

/// The length of the body before the `}` that closes it (quoted strings may hold braces).
fn closing(text: &str) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match (c, quoted, escaped) {
            (_, _, true) => escaped = false,
            ('\\', true, false) => escaped = true,
            ('"', _, false) => quoted = !quoted,
            ('}', false, false) => return Some(i),
            _ => {}
        }
    }
    None
}

fn unescape(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

/// The steps of a path such as `.items[*].metadata.name`, `@` or `$`.
fn steps(path: &str, template: &str) -> Result<Vec<Step>, String> {
    let refuse = |what: &str| format!("{what} in jsonpath {template:?} is not supported; {SUBSET}");
    let mut rest = path
        .strip_prefix('@')
        .or_else(|| path.strip_prefix('$'))
        .unwrap_or(path);
    let mut out = Vec::new();
    while !rest.is_empty() {
        if rest.starts_with("..") {
            return Err(refuse("recursive descent `..`"));
        }
        if let Some(after) = rest.strip_prefix('[') {
            let end = after
                .find(']')
                .ok_or_else(|| format!("unclosed `[` in jsonpath {template:?}"))?;
            let inside = after[..end].trim();
            out.push(match inside {
                "*" => Step::All,
                quoted
                    if quoted.len() >= 2
                        && (quoted.starts_with('\'') || quoted.starts_with('"')) =>
                {
                    Step::Field(quoted[1..quoted.len() - 1].to_owned())
                }
                index => Step::Index(index.parse().map_err(|_| refuse(&format!("`[{index}]`")))?),
            });
            rest = &after[end + 1..];
        } else if let Some(after) = rest.strip_prefix('.') {
            let (field, next) = field(after);
            out.push(match field.as_str() {
                "*" => Step::All,
                "" => return Err(refuse("an empty field")),
                _ => Step::Field(field),
            });
            rest = next;
        } else {
            return Err(refuse(&format!("`{rest}`")));
        }
    }
    Ok(out)
}

/// A field name up to the next unescaped `.` or `[`, with `\.` read as a dot.
fn field(text: &str) -> (String, &str) {
    let mut name = String::new();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' if chars.peek().is_some_and(|(_, n)| *n == '.') => {
                name.push('.');
                chars.next();
            }
            '.' | '[' => return (name, &text[i..]),
            c => name.push(c),
        }
    }
    (name, "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn apply(template: &str, value: &Value) -> String {
        Template::parse(template).unwrap().render(value)
    }

    #[test]
    fn the_subset_renders_as_kubectl_renders_it() {
        let list = json!({"kind": "List", "items": [
            {"name": "a", "status": {"phase": "ACTIVE", "replicas": 2},
             "annotations": {"flyte.org/spec-sha": "abc"}},
            {"name": "b", "status": {"phase": "STOPPED", "replicas": null}},
        ]});
        let cases = [
            ("{.kind}", "List"),
            ("{.items[*].name}", "a b"),
            ("{.items[0].status.replicas}", "2"),
            ("{.items[-1].name}", "b"),
            ("{.items[*].status.replicas}", "2 null"),
            (
                "{.items[0].status}",
                "{\"phase\":\"ACTIVE\",\"replicas\":2}",
            ),
            ("{.items[0].annotations.flyte\\.org/spec-sha}", "abc"),
            ("{.items[0]['annotations']['flyte.org/spec-sha']}", "abc"),
            ("{.items[0].missing}", ""),
            ("name={.items[1].name}!", "name=b!"),
            (
                "{range .items[*]}{.name}{\"\\t\"}{.status.phase}{\"\\n\"}{end}",
                "a\tACTIVE\nb\tSTOPPED\n",
            ),
            ("{range .items[*]}[{@.name}]{end}", "[a][b]"),
            ("{.items[*].status.*}", "ACTIVE 2 STOPPED null"),
            ("{$.kind}", "List"),
        ];
        for (template, want) in cases {
            assert_eq!(apply(template, &list), want, "{template}");
        }
    }

    #[test]
    fn what_is_outside_the_subset_is_refused_with_the_subset() {
        for bad in [
            "{.items[?(@.name==\"a\")].name}",
            "{..name}",
            "{.items[0:2]}",
            "{name}",
        ] {
            let err = Template::parse(bad).unwrap_err();
            assert!(
                err.contains("is not supported; supported: {.a.b}"),
                "{bad}: {err}"
            );
        }
        for (bad, want) in [
            ("{.a", "unclosed `{`"),
            ("{range .items[*]}{.a}", "{range} without {end}"),
            ("{end}", "{end} without {range}"),
        ] {
            let err = Template::parse(bad).unwrap_err();
            assert!(err.contains(want), "{bad}: {err}");
        }
    }
}
