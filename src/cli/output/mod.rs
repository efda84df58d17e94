//! PURE: how every command that prints records prints them — one [`Output`] (`-o`) for `app`,
//! `drift`, `check` and `explain`, one kubectl-style [`Table`] that keeps its column widths
//! across calls (the rows of a watch stay under their header), and [`structured`] for JSON,
//! YAML and JSONPath. Each command takes the forms that make sense for it ([`parse_any`],
//! [`parse_document`]). Text in, text out: nothing here writes but to the writer it is given.

pub mod jsonpath;

use std::io::Write;

use clap::Args;
use serde::Serialize;
use serde_json::Value;

use jsonpath::Template;

/// The output format (`-o`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Output {
    /// Columns for a person, aligned as kubectl aligns them.
    #[default]
    Table,
    /// The table with more columns.
    Wide,
    /// `KIND/NAME`, one per line.
    Name,
    /// Pretty-printed JSON.
    Json,
    /// YAML.
    Yaml,
    /// A kubectl JSONPath template over the JSON.
    JsonPath(Template),
}

/// The forms `app -o` takes, for messages.
pub const FORMS: &str = "table, wide, name, json, yaml or jsonpath=TEMPLATE";

/// The forms of a command whose output is one document (`check`, `drift`, `explain`).
pub const DOCUMENT_FORMS: &str = "table, json, yaml or jsonpath=TEMPLATE";

/// Parse `-o` for `app`: every form.
pub fn parse_any(text: &str) -> Result<Output, String> {
    match text.split_once('=') {
        Some(("jsonpath", template)) => Template::parse(template).map(Output::JsonPath),
        _ => match text {
            "table" => Ok(Output::Table),
            "wide" => Ok(Output::Wide),
            "name" => Ok(Output::Name),
            "json" => Ok(Output::Json),
            "yaml" => Ok(Output::Yaml),
            other => Err(format!("unknown output format `{other}`; use {FORMS}")),
        },
    }
}

/// Parse `-o` for `check`, `drift` and `explain`: neither `wide` nor `name`.
pub fn parse_document(text: &str) -> Result<Output, String> {
    match parse_any(text) {
        Ok(Output::Wide | Output::Name) | Err(_) => Err(format!(
            "unknown output format `{text}`; use {DOCUMENT_FORMS}"
        )),
        Ok(output) => Ok(output),
    }
}

/// The `-o` parser clap calls: [`parse_any`] or [`parse_document`], with the fixed forms listed
/// for help and shell completion (`jsonpath=TEMPLATE` is in each flag's own help).
#[derive(Debug, Clone, Copy)]
pub struct Forms {
    /// Only the forms of [`parse_document`].
    pub document: bool,
}

impl clap::builder::TypedValueParser for Forms {
    type Value = Output;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Output, clap::Error> {
        let parse = if self.document {
            parse_document
        } else {
            parse_any
        };
        let text = value.to_string_lossy();
        parse(&text).map_err(|message| {
            let arg = arg.map_or_else(|| "-o".to_owned(), ToString::to_string);
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("invalid value '{text}' for '{arg}': {message}\n"),
            )
            .with_cmd(cmd)
        })
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        let forms: &[&'static str] = match self.document {
            true => &["table", "json", "yaml"],
            false => &["table", "wide", "name", "json", "yaml"],
        };
        Some(Box::new(
            forms.iter().map(|f| clap::builder::PossibleValue::new(*f)),
        ))
    }
}

/// The `-o` flag of `check`, `drift` and `explain`.
#[derive(Debug, Clone, Default, Args)]
pub struct StructuredArgs {
    /// Output format: `table` (for a person), `json` or `yaml` (snake_case keys, docs/cli.md),
    /// or `jsonpath=TEMPLATE` (kubectl's syntax over the JSON).
    #[arg(short = 'o', long = "output", default_value = "table",
          value_parser = Forms { document: true }, hide_possible_values = true)]
    pub output: Output,
}

impl Output {
    /// Whether the output is for a program (JSON, YAML, JSONPath) rather than a person.
    pub fn structured(&self) -> bool {
        matches!(self, Output::Json | Output::Yaml | Output::JsonPath(_))
    }
}

/// `value` as JSON, YAML or through a JSONPath template (a table form prints it as JSON).
pub fn render<T: Serialize + ?Sized>(value: &T, output: &Output) -> Result<String, String> {
    let value = serde_json::to_value(value).map_err(|e| e.to_string())?;
    match output {
        Output::Yaml => yaml(&value),
        Output::JsonPath(template) => Ok(template.render(&value)),
        Output::Json | Output::Table | Output::Wide | Output::Name => pretty(&value),
    }
}

/// [`render`] `value` to `out`.
pub fn structured<T: Serialize + ?Sized>(
    value: &T,
    output: &Output,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let text = render(value, output).map_err(anyhow::Error::msg)?;
    out.write_all(text.as_bytes())?;
    Ok(())
}

/// `value` pretty-printed, with a final newline.
pub fn pretty(value: &Value) -> Result<String, String> {
    serde_json::to_string_pretty(value)
        .map(|text| text + "\n")
        .map_err(|e| e.to_string())
}

/// `value` as one YAML document, with its `---`.
pub fn yaml(value: &Value) -> Result<String, String> {
    serde_saphyr::to_string(value)
        .map(|text| format!("---\n{text}"))
        .map_err(|e| e.to_string())
}

/// A kubectl-style table: columns padded to the widest cell seen so far, three spaces apart,
/// the last one unpadded. The header is printed once, before the first rows; widths only grow,
/// so rows printed later (a watch) stay under it.
#[derive(Debug, Clone, Default)]
pub struct Table {
    widths: Vec<usize>,
}

impl Table {
    /// The lines of `rows` (the header's first, on the first call), each followed by the lines
    /// `under` gives for its row, indented by two spaces.
    pub fn render(
        &mut self,
        header: &[&str],
        rows: &[Vec<String>],
        under: impl Fn(usize) -> Vec<String>,
    ) -> String {
        let first = self.widths.is_empty();
        let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
        for row in std::iter::once(&header).chain(rows) {
            for (i, cell) in row.iter().enumerate() {
                let width = cell.chars().count();
                match self.widths.get_mut(i) {
                    Some(w) => *w = (*w).max(width),
                    None => self.widths.push(width),
                }
            }
        }
        let mut text = String::new();
        if first {
            text.push_str(&self.line(&header));
        }
        for (i, row) in rows.iter().enumerate() {
            text.push_str(&self.line(row));
            for extra in under(i) {
                text.push_str(&format!("  {extra}\n"));
            }
        }
        text
    }

    /// Cells padded to the column widths, three spaces apart.
    fn line(&self, cells: &[String]) -> String {
        let mut line = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                line.push_str(cell);
            } else {
                let width = self.widths.get(i).copied().unwrap_or(0);
                line.push_str(&format!("{cell:<width$}   "));
            }
        }
        line.push('\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cells: &[&str]) -> Vec<String> {
        cells.iter().map(|c| (*c).to_owned()).collect()
    }

    #[test]
    fn a_table_keeps_its_widths_and_prints_its_header_once() {
        let mut table = Table::default();
        let first = table.render(
            &["NAME", "PHASE"],
            &[row(&["a-long-name", "ACTIVE"])],
            |_| vec!["under".to_owned()],
        );
        assert_eq!(
            first,
            "NAME          PHASE\na-long-name   ACTIVE\n  under\n"
        );
        let later = table.render(&["NAME", "PHASE"], &[row(&["b", "STOPPED"])], |_| vec![]);
        assert_eq!(later, "b             STOPPED\n");
    }

    #[test]
    fn each_command_takes_its_forms() {
        assert_eq!(parse_any("wide"), Ok(Output::Wide));
        assert_eq!(parse_document("yaml"), Ok(Output::Yaml));
        assert!(parse_document("wide").unwrap_err().contains(DOCUMENT_FORMS));
        assert!(parse_any("xml").unwrap_err().contains(FORMS));
        let path = parse_document("jsonpath={.ok}").unwrap();
        assert_eq!(
            render(&serde_json::json!({"ok": true}), &path).unwrap(),
            "true"
        );
    }
}
