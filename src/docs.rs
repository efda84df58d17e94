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
    #[error("YAML document {index} is not valid")]
    Yaml {
        index: usize,
        #[source]
        source: serde_yaml::Error,
    },
    #[error("YAML document {index} cannot be written as JSON")]
    NotJson {
        index: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot write the output")]
    Write(#[source] serde_json::Error),
    #[error("cannot write the output as YAML")]
    WriteYaml(#[source] serde_yaml::Error),
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
    if text.trim_start().starts_with(['{', '[']) {
        let value: Value = serde_json::from_str(text).map_err(Error::Json)?;
        return Ok(Documents {
            format: Format::Json,
            items: vec![value],
        });
    }
    let mut items = Vec::new();
    for (index, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let yaml = <serde_yaml::Value as serde::Deserialize>::deserialize(doc)
            .map_err(|source| Error::Yaml { index, source })?;
        if yaml.is_null() {
            continue;
        }
        let value =
            serde_json::to_value(yaml).map_err(|source| Error::NotJson { index, source })?;
        items.push(value);
    }
    Ok(Documents {
        format: Format::Yaml,
        items,
    })
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
                .map(serde_yaml::to_string)
                .collect::<Result<Vec<_>, _>>()
                .map_err(Error::WriteYaml)?;
            Ok(docs.join("---\n"))
        }
    }
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
        assert!(matches!(parse(b"a: [1"), Err(Error::Yaml { .. })));
    }
}
