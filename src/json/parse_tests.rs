//! Tests of the skimming parser: it reads what serde_json reads, the same way (a repeated name
//! too), and refuses what serde_json refuses; a skim table keeps values as text.

use super::*;
use proptest::prelude::*;
use serde_json::Value;

/// A table that keeps `request.userInfo` as text and builds the rest.
static TABLE: Skim = Skim::Object {
    fields: &[(
        "request",
        Skim::Object {
            fields: &[("userInfo", Skim::Raw)],
            others: Others::Full,
        },
    )],
    others: Others::Full,
};

fn parsed(text: &str) -> Result<Value, Refused> {
    parse_bytes(text.as_bytes(), &TABLE).map(|n| n.to_json())
}

#[test]
fn values_read_as_serde_json_reads_them() {
    let texts = [
        r#"{"a": [1, -2, 2.5, -0, 0.0, 1e3, 1E-2, 18446744073709551615, 18446744073709551616, -9223372036854775809]}"#,
        r#"{"s": "plain", "e": "tab\t quote\" slash\\ \u00e9 \ud83d\ude00", "k\"ey": {}}"#,
        " { \"x\" : [ true , false , null , [ ] , { } ] } ",
        r#""top-level string""#,
        "3",
    ];
    for text in texts {
        let want: Value = serde_json::from_str(text).unwrap();
        assert_eq!(parsed(text), Ok(want), "{text}");
    }
}

#[test]
fn what_serde_json_refuses_is_refused() {
    let texts = [
        "",
        "{",
        "[1,]",
        "{\"a\":1,}",
        "01",
        "1.",
        "-",
        "1e",
        "tru",
        "\"a",
        "\"\\\"",
        "\"\u{1}\"",
        "{} x",
        "{\"a\" 1}",
        "[1 2]",
        "1e400",
        "{\"request\":{\"userInfo\":[1,}}}",
        // Strings left raw are checked as closely as those that are built.
        r#"{"request":{"userInfo":"\x"}}"#,
        r#"{"request":{"userInfo":"\u12"}}"#,
        r#"{"request":{"userInfo":"\ud800"}}"#,
        r#"{"request":{"userInfo":"a\\\"}}"#,
        "{\"request\":{\"userInfo\":\"\\\n\"}}",
    ];
    for text in texts {
        assert!(serde_json::from_str::<Value>(text).is_err(), "{text:?}");
        assert_eq!(parsed(text), Err(Refused), "{text:?}");
    }
    assert_eq!(parse_bytes(b"\"\xff\"", &TABLE).map(drop), Err(Refused));
    let deep = "[".repeat(MAX_DEPTH + 2) + &"]".repeat(MAX_DEPTH + 2);
    assert_eq!(parsed(&deep), Err(Refused));
}

#[test]
fn a_repeated_name_keeps_its_last_value_where_the_first_stood() {
    let text = r#"{"a":1,"b":{"x":1,"x":[2]},"a":3}"#;
    let node = parse_bytes(text.as_bytes(), &Skim::Full).unwrap();
    let keys: Vec<&str> = node.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["a", "b"]);
    assert_eq!(node.to_json(), serde_json::from_str::<Value>(text).unwrap());
    // serde_json's reading into a tree (the fallback) does the same.
    let fallback: Node = serde_json::from_str(text).unwrap();
    let keys: Vec<&str> = fallback.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["a", "b"]);
    assert_eq!(fallback.to_json(), node.to_json());
    // A large object too (its repeats are found by sorting).
    let many: Vec<String> = (0..40).map(|i| format!("\"k{}\":{i}", i % 30)).collect();
    let text = format!("{{{}}}", many.join(","));
    let node = parse_bytes(text.as_bytes(), &Skim::Full).unwrap();
    assert_eq!(node.as_object().unwrap().len(), 30);
    assert_eq!(
        node.to_json(),
        serde_json::from_str::<Value>(&text).unwrap()
    );
}

proptest! {
    #[test]
    fn any_json_text_reads_as_serde_json_reads_it(v in canonical::tests::json_value(), pretty in any::<bool>()) {
        let text = match pretty {
            true => serde_json::to_string_pretty(&v).unwrap(),
            false => serde_json::to_string(&v).unwrap(),
        };
        prop_assert_eq!(parsed(&text), Ok(v));
    }

    #[test]
    fn strings_are_taken_exactly_when_serde_json_takes_them(inner in "[a\\\\\"nu0-9dD/\u{1}é]{0,40}", pad in 0usize..8) {
        // Built (a top-level string) and left raw (`userInfo`), at every offset in a word.
        let string = format!("\"{}{inner}\"", "p".repeat(pad));
        for text in [string.clone(), format!(r#"{{"request":{{"userInfo":{string}}}}}"#)] {
            let want = serde_json::from_str::<Value>(&text).ok();
            prop_assert_eq!(parsed(&text).ok(), want, "{}", text);
        }
    }

    #[test]
    fn any_text_is_refused_or_read_as_serde_json_reads_it(text in "[\\[\\]{}\",:0-9eE.+\\- a-z\\\\]{0,24}") {
        if let Ok(v) = parsed(&text) {
            prop_assert_eq!(serde_json::from_str::<Value>(&text).ok(), Some(v));
        }
    }
}
