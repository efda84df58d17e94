//! Every reader and writer of JSON in this folder agrees: the skimming parser, `serde_json`'s
//! reading into a tree (the fallback), `serde_json::Value`, the canonical text writer and the
//! judge give the same canonical JSON, for RFC 8785's examples and for text spelled every way
//! people and programs spell it.

use std::borrow::Cow;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::Node;
use super::canonical::tests::{json_value, judged};
use super::canonical::{self, json_text, to_vec};
use super::parse::{Skim, parse};

/// The canonical text of JSON `text` by every path, which must agree: the tree parsed by
/// the skimming parser, the tree `serde_json` reads (the fallback), the `serde_json::Value`,
/// the text writer, and (when it says the text is canonical) the judge.
fn every_path(text: &str) -> String {
    let parsed = to_vec(&parse(text, &Skim::Full, "").unwrap()).unwrap();
    let fallback = to_vec(&serde_json::from_str::<Node>(text).unwrap()).unwrap();
    let value = json_text(&serde_json::from_str::<Value>(text).unwrap());
    let mut written = Vec::new();
    canonical::text(text, &mut written).unwrap();
    let raw = Node::Raw {
        text: Cow::Borrowed(text.trim()),
        canonical: judged(text),
        at: Default::default(),
    };
    let as_raw = to_vec(&raw).unwrap();
    let parsed = String::from_utf8(parsed).unwrap();
    assert_eq!(
        parsed,
        String::from_utf8(fallback).unwrap(),
        "fallback tree: {text}"
    );
    assert_eq!(parsed, value, "serde_json::Value: {text}");
    assert_eq!(
        parsed,
        String::from_utf8(written).unwrap(),
        "text writer: {text}"
    );
    assert_eq!(parsed, String::from_utf8(as_raw).unwrap(), "judge: {text}");
    parsed
}

#[test]
fn canonical_form_follows_rfc8785() {
    let cases = [
        (
            json!({"b": 1, "a": [true, null, "x"]}).to_string(),
            r#"{"a":[true,null,"x"],"b":1}"#,
        ),
        (
            r#"{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001]}"#.into(),
            r#"{"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27]}"#,
        ),
        (
            json!("\u{20ac}$\u{000F}\u{000a}A'\u{0042}\u{0022}\u{005c}\\\"/").to_string(),
            r#""€$\u000f\nA'B\"\\\\\"/""#,
        ),
        (
            json!({"\u{20ac}": 1, "\r": 2, "\u{fb33}": 7, "1": 3, "\u{1F600}": 4, "\u{0080}": 5, "\u{00f6}": 6}).to_string(),
            "{\"\\r\":2,\"1\":3,\"\u{0080}\":5,\"\u{00f6}\":6,\"\u{20ac}\":1,\"\u{1F600}\":4,\"\u{fb33}\":7}",
        ),
        ("-0.0".into(), "0"),
        ("9007199254740993".into(), "9007199254740992"),
        (r#"["a\/b", "\u0041\u00e9\u001F"]"#.into(), "[\"a/b\",\"A\u{e9}\\u001f\"]"),
        // A repeated name keeps its last value, as serde_json, Go and kube-apiserver read it.
        (r#"{"b":1,"a":2,"b":[3],"a":{"x":1,"x":2}}"#.into(), r#"{"a":{"x":2},"b":[3]}"#),
        (r#"{"a":1,"a":2}"#.into(), r#"{"a":2}"#),
    ];
    for (text, want) in cases {
        assert_eq!(every_path(&text), want, "{text}");
    }
}

/// A string literal spelling `chars` with a mix of escapes (short, `\/`, `\u`, surrogate
/// pairs) and plain characters.
fn spelled(chars: &str, styles: &[u8]) -> String {
    let mut out = String::from("\"");
    for (c, style) in chars.chars().zip(styles.iter().cycle()) {
        let mut units = [0u16; 2];
        match (c, style % 4) {
            ('"', _) => out.push_str("\\\""),
            ('\\', _) => out.push_str("\\\\"),
            ('/', 0) => out.push_str("\\/"),
            ('\n', 1) => out.push_str("\\n"),
            (c, 2) | (c @ '\0'..='\u{1f}', _) => {
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
            (c, _) => out.push(c),
        }
    }
    out.push('"');
    out
}

/// JSON text as people and programs write it: loose whitespace, repeated member names,
/// escapes where none are needed, numbers spelled many ways.
fn json_text_of_any_spelling() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
        prop::sample::select(vec![
            "-0",
            "0.0",
            "1.50",
            "1e3",
            "1E+2",
            "-2.5e-3",
            "123456789012345678",
            "1e-400"
        ])
        .prop_map(str::to_string),
    ];
    let string = (
        "[a-z/\"\\\\\n\u{1}é\u{e000}\u{1f600}]{0,8}",
        prop::collection::vec(any::<u8>(), 1..4),
    )
        .prop_map(|(chars, styles)| spelled(&chars, &styles));
    let leaf = prop_oneof![
        prop::sample::select(vec!["null", "true", "false"]).prop_map(str::to_string),
        number,
        string,
    ];
    let space = prop::sample::select(vec!["", "", " ", "\n  ", "\t"]);
    leaf.prop_recursive(4, 40, 5, move |inner| {
        let key = (
            "[ab\u{e000}\u{1f600}]{0,2}",
            prop::collection::vec(any::<u8>(), 1..3),
        )
            .prop_map(|(chars, styles)| spelled(&chars, &styles));
        prop_oneof![
            (prop::collection::vec(inner.clone(), 0..5), space.clone())
                .prop_map(|(items, gap)| format!("[{gap}{}{gap}]", items.join(&format!(",{gap}")))),
            (prop::collection::vec((key, inner), 0..5), space.clone()).prop_map(
                |(members, gap)| {
                    let members: Vec<String> = members
                        .into_iter()
                        .map(|(k, v)| format!("{k}{gap}:{gap}{v}"))
                        .collect();
                    format!("{{{gap}{}{gap}}}", members.join(&format!("{gap},")))
                }
            ),
        ]
    })
}

proptest! {
    #[test]
    fn every_path_writes_the_same_canonical_json(text in json_text_of_any_spelling()) {
        // Text serde_json refuses (a number out of range) is no JSON to agree on.
        prop_assume!(serde_json::from_str::<Value>(&text).is_ok());
        every_path(&text);
    }

    #[test]
    fn every_path_agrees_on_values(v in json_value(), pretty in any::<bool>()) {
        let text = match pretty {
            true => serde_json::to_string_pretty(&v).unwrap(),
            false => serde_json::to_string(&v).unwrap(),
        };
        every_path(&text);
    }
}
