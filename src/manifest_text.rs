//! PURE: Kubernetes manifests as text — JSON or multi-document YAML — to JSON values and back.
//!
//! The output keeps the input's format, so `mutate` fits in a `kubectl` pipeline either way.

use serde_json::Value;

/// The format of a manifest text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
}

/// Errors reading a manifest.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("input is not UTF-8 text")]
    NotUtf8,
    #[error("input is not valid JSON")]
    Json(#[source] serde_json::Error),
    #[error("input is not valid YAML")]
    Yaml(#[source] Box<serde_saphyr::Error>),
    #[error("cannot write the output")]
    Write(#[source] serde_json::Error),
    #[error("cannot write the output as YAML")]
    WriteYaml(#[source] serde_saphyr::ser::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Parsed documents and the format they came in. Empty YAML documents are dropped.
#[derive(Debug, Clone, PartialEq)]
pub struct Documents {
    pub format: Format,
    pub items: Vec<Value>,
}

/// Parse manifest bytes: JSON when the text starts with `{` or `[`, else (multi-document) YAML.
pub fn parse(bytes: &[u8]) -> Result<Documents> {
    let text = std::str::from_utf8(bytes).map_err(|_| Error::NotUtf8)?;
    if looks_like_json(text) {
        let value: Value = serde_json::from_str(text).map_err(Error::Json)?;
        return Ok(Documents {
            format: Format::Json,
            items: vec![value],
        });
    }
    let mut items: Vec<Value> = serde_saphyr::from_multiple_with_options(text, yaml_options())
        .map_err(|e| Error::Yaml(Box::new(e)))?;
    items.retain(|item| !item.is_null());
    Ok(Documents {
        format: Format::Yaml,
        items,
    })
}

/// Whether a manifest text is JSON (it starts with `{` or `[`) rather than YAML.
pub fn looks_like_json(text: &str) -> bool {
    text.trim_start().starts_with(['{', '['])
}

/// YAML 1.2's core schema, as the API server reads manifests: only `true`/`false` are booleans
/// (`yes` and `on` stay strings), `0755` and `1_000` stay strings, a repeated key is an error,
/// and an error is one line with its position.
pub fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error,
        with_snippet: false,
    }
}

/// Write documents in `format`: pretty JSON (one value, or one per line group), or YAML
/// documents separated by `---`.
pub fn render(format: Format, items: &[Value]) -> Result<String> {
    match format {
        Format::Json => {
            let mut out = String::new();
            for item in items {
                out.push_str(&serde_json::to_string_pretty(item).map_err(Error::Write)?);
                out.push('\n');
            }
            Ok(out)
        }
        Format::Yaml => {
            let docs = items
                .iter()
                .map(serde_saphyr::to_string)
                .collect::<Result<Vec<_>, _>>()
                .map_err(Error::WriteYaml)?;
            Ok(docs.join("---\n"))
        }
    }
}

/// The documents of a YAML stream as written: every piece but a first one starts at its `---`
/// line, so the pieces joined are the text byte for byte, comments included. A boundary is a
/// `---` at the start of a line followed by the line's end or a blank, as in YAML (the lines of
/// a block scalar are indented, so they are never one). Empty text has no pieces.
pub fn split_stream(text: &str) -> Vec<&str> {
    let mut starts = vec![0];
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if offset > 0 && starts_with_marker(line) {
            starts.push(offset);
        }
        offset += line.len();
    }
    starts.push(text.len());
    starts
        .windows(2)
        .map(|w| &text[w[0]..w[1]])
        .filter(|piece| !piece.is_empty())
        .collect()
}

/// Whether a piece of a YAML stream (or a line) begins with a `---` document marker.
pub fn starts_with_marker(piece: &str) -> bool {
    piece
        .strip_prefix("---")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

/// Whether `doc` is a Knative Service.
pub fn is_kservice(doc: &Value) -> bool {
    doc.get("apiVersion").and_then(Value::as_str) == Some("serving.knative.dev/v1")
        && doc.get("kind").and_then(Value::as_str) == Some("Service")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_documents_round_trip() {
        let text = "a: 1\n---\n---\nb: [x]\n";
        let docs = parse(text.as_bytes()).unwrap();
        assert_eq!(docs.format, Format::Yaml);
        assert_eq!(docs.items, vec![json!({"a": 1}), json!({"b": ["x"]})]);
        assert_eq!(
            render(docs.format, &docs.items).unwrap(),
            "a: 1\n---\nb:\n- x\n"
        );
    }

    #[test]
    fn a_stream_splits_at_its_markers_and_joins_back_byte_for_byte() {
        let text = "# head\nkind: A # a\n---\n# c\nkind: B\ndata:\n  x: |\n    ---\n    y\n--- # t\nkind: C\n---\n";
        let pieces = split_stream(text);
        assert_eq!(
            pieces,
            [
                "# head\nkind: A # a\n",
                "---\n# c\nkind: B\ndata:\n  x: |\n    ---\n    y\n",
                "--- # t\nkind: C\n",
                "---\n",
            ]
        );
        assert_eq!(pieces.concat(), text);
        assert_eq!(split_stream("---\na: 1\n"), ["---\na: 1\n"]);
        assert_eq!(split_stream("a: ---x\n----\n"), ["a: ---x\n----\n"]);
        assert!(split_stream("").is_empty());
        assert!(starts_with_marker("--- # t\nkind: C\n"));
        assert!(!starts_with_marker("kind: C\n"));
    }

    #[test]
    fn json_is_detected() {
        let docs = parse(b"  {\"a\": true}").unwrap();
        assert_eq!(docs.format, Format::Json);
        assert_eq!(
            render(Format::Json, &docs.items).unwrap(),
            "{\n  \"a\": true\n}\n"
        );
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(matches!(parse(&[0xff, 0xfe]), Err(Error::NotUtf8)));
        assert!(matches!(parse(b"{nope"), Err(Error::Json(_))));
        assert!(matches!(parse(b"a: [1"), Err(Error::Yaml(_))));
    }

    #[test]
    fn yaml_reads_as_the_core_schema() {
        let docs = parse(b"a: yes\nb: on\nc: 0755\nd: 1_000\ne: true\nf: 8080\ng: ~\n").unwrap();
        assert_eq!(
            docs.items,
            vec![
                json!({"a": "yes", "b": "on", "c": "0755", "d": "1_000", "e": true, "f": 8080, "g": null})
            ]
        );
    }

    #[test]
    fn a_yaml_error_names_its_line_and_column_on_one_line() {
        let err = parse(b"a: 1\n---\nb: 2\nc: : :\n").unwrap_err();
        let text = crate::report::error_chain(&err);
        assert!(text.contains("line 4"), "{text}");
        assert!(!text.contains('\n'), "{text}");
        let dup = crate::report::error_chain(&parse(b"a: 1\na: 2\n").unwrap_err());
        assert!(dup.contains("duplicate"), "{dup}");
    }
}
