//! The documents of the `-f` inputs, each KService edited in place and every other document
//! passed through byte for byte, comments included: a YAML stream is split at its `---` lines
//! and only a piece that holds a KService is written anew.
//!
//! Shared by `mutate`, `uninject` and `sha`; what the edit does is theirs.

use anyhow::{Context, bail};
use serde_json::Value;

use super::inputs::{self, Input};
use crate::manifest_text::{self as docs, Format};

/// Apply `f` to every KService in `doc`, looking inside `kind: List`.
pub fn each_kservice(
    doc: &mut Value,
    f: &mut impl FnMut(&mut Value) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    if doc.get("kind").and_then(Value::as_str) == Some("List") {
        if let Some(items) = doc.get_mut("items").and_then(Value::as_array_mut) {
            for item in items {
                each_kservice(item, f)?;
            }
        }
        return Ok(());
    }
    if docs::is_kservice(doc) {
        f(doc)
    } else {
        Ok(())
    }
}

/// The documents of `inputs` after [`rewrite`].
#[derive(Debug)]
pub struct Rewritten {
    /// Every document, the KServices edited.
    pub text: String,
    /// What each document that is not a `serving.knative.dev/v1` Service is (passed through).
    pub others: Vec<String>,
}

/// The documents of `doc` that are not KServices, looking inside `kind: List`.
fn others(doc: &Value, found: &mut Vec<String>) {
    match doc.get("kind").and_then(Value::as_str) {
        Some("List") => doc
            .get("items")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .for_each(|item| others(item, found)),
        _ if docs::is_kservice(doc) => {}
        _ => found.push(super::fields::what_it_is(doc)),
    }
}

/// Every document of `inputs` in order: a piece holding a KService (or a List of them) after
/// `edit`, written anew; any other piece exactly as read. JSON inputs alone give JSON, anything
/// else a YAML stream (JSON is YAML, so a JSON piece passes through there too). An input without
/// a single object is an error.
pub fn rewrite(
    inputs: &[Input],
    mut edit: impl FnMut(&mut Value) -> anyhow::Result<()>,
) -> anyhow::Result<Rewritten> {
    let json = inputs.iter().all(|i| docs::looks_like_json(&i.text));
    let mut out = String::new();
    let mut passed = Vec::new();
    let mut objects = 0;
    for input in inputs {
        let pieces = match docs::looks_like_json(&input.text) {
            true => vec![input.text.as_str()],
            false => docs::split_stream(&input.text),
        };
        for piece in pieces {
            let mut parsed = docs::parse(piece.as_bytes())
                .with_context(|| format!("cannot parse {}", input.name))?;
            objects += parsed.items.len();
            let mut edited = false;
            for doc in &mut parsed.items {
                others(doc, &mut passed);
                each_kservice(doc, &mut |obj| {
                    edited = true;
                    edit(obj)
                })?;
            }
            let text = match (edited, json) {
                (false, _) => piece.to_owned(),
                (true, true) => docs::render(Format::Json, &parsed.items)?,
                (true, false) => {
                    let marker = if docs::starts_with_marker(piece) {
                        "---\n"
                    } else {
                        ""
                    };
                    format!("{marker}{}", docs::render(Format::Yaml, &parsed.items)?)
                }
            };
            append(&mut out, &text, json);
        }
    }
    if objects == 0 {
        bail!(
            "no objects in {}; give a manifest with at least one object",
            inputs::names(inputs)
        );
    }
    Ok(Rewritten {
        text: out,
        others: passed,
    })
}

/// Append a piece: on a line of its own, after a `---` line in a YAML stream when it brings none.
fn append(out: &mut String, piece: &str, json: bool) {
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    if !json && !out.is_empty() && !docs::starts_with_marker(piece) {
        out.push_str("---\n");
    }
    out.push_str(piece);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(name: &str, text: &str) -> Input {
        Input {
            name: name.into(),
            text: text.into(),
        }
    }

    const KSVC: &str =
        "apiVersion: serving.knative.dev/v1\nkind: Service # the app\nmetadata:\n  name: a\n";

    fn mark(obj: &mut Value) -> anyhow::Result<()> {
        obj["metadata"]["labels"] = serde_json::json!({"seen": "yes"});
        Ok(())
    }

    #[test]
    fn documents_that_are_not_kservices_pass_through_byte_for_byte() {
        let other = "# keep me\napiVersion: v1\nkind: ConfigMap   # odd spacing\ndata: {b: '2', a: \"1\"}\n";
        let text = format!("{other}---\n{KSVC}--- # tail\n{other}");
        let out = rewrite(&[input("m.yaml", &text)], mark).unwrap().text;
        let pieces = docs::split_stream(&out);
        assert_eq!(pieces.len(), 3, "{out}");
        assert_eq!(pieces[0], other);
        assert!(
            pieces[1].starts_with("---\n") && pieces[1].contains("seen: \"yes\""),
            "{out}"
        );
        assert_eq!(pieces[2], format!("--- # tail\n{other}"));
        let untouched = rewrite(&[input("c.yaml", other)], mark).unwrap().text;
        assert_eq!(untouched, other);
    }

    #[test]
    fn inputs_are_joined_into_one_stream() {
        let inputs = [
            input("a.yaml", "kind: A\n"),
            input("b.json", "{\"kind\": \"B\"}"),
            input("c.yaml", KSVC),
        ];
        let out = rewrite(&inputs, mark).unwrap().text;
        assert!(
            out.starts_with(
                "kind: A\n---\n{\"kind\": \"B\"}\n---\napiVersion: serving.knative.dev/v1\n"
            ),
            "{out}"
        );
        let json = [
            input("a.json", "{\"kind\": \"A\"}\n"),
            input("b.json", "[1]"),
        ];
        assert_eq!(rewrite(&json, mark).unwrap().text, "{\"kind\": \"A\"}\n[1]");
    }

    #[test]
    fn an_input_without_objects_is_an_error() {
        for text in ["", "\n", "# only a comment\n", "---\n---\n"] {
            let err = rewrite(&[input("empty.yaml", text)], mark).unwrap_err();
            assert_eq!(
                err.to_string(),
                "no objects in empty.yaml; give a manifest with at least one object",
                "{text:?}"
            );
        }
    }
}
