//! Tests of RFC 8785 canonical JSON: the judge, raw text, string escapes and key order; and
//! [`json_value`], the generator of JSON values the parser's tests share.
//! Every path writing the same text is `agreement_tests.rs`.

use super::*;
use proptest::prelude::*;

/// The judge's verdict on `text`: whether it is canonical as it is.
pub(crate) fn judged(text: &str) -> bool {
    let mut lx = Lexer::new(text);
    let (raw, canonical) = skim(&mut lx, 0).unwrap();
    assert_eq!(raw, text.trim());
    canonical
}

#[test]
fn raw_text_is_marked_canonical_only_as_it_is_written_canonically() {
    let canonical = [
        r#"{"a":[1,-2,"x\"y\\z\n",true,null],"b":{"c":{}},"é":"😀"}"#,
        r#"[123456789012345,"a/b"]"#,
        " {\"a\":1} ",
    ];
    let otherwise = [
        r#"{"a": 1}"#,
        r#"{"b":1,"a":2}"#,
        r#"{"a":1,"a":2}"#,
        "[1.5]",
        "[1e3]",
        "[-0]",
        "[1234567890123456]",
        r#"["\u0041"]"#,
        r#"["a\/b"]"#,
        "[\n1]",
    ];
    for text in canonical {
        assert!(judged(text), "{text}");
    }
    for text in otherwise {
        assert!(!judged(text), "{text}");
    }
}

#[test]
fn raw_text_that_does_not_read_is_an_error_never_a_value() {
    for text in ["{", "[1,]", "\"\\x\"", "{\"a\":1} x"] {
        let mut out = b"kept".to_vec();
        assert!(super::text(text, &mut out).is_err(), "{text}");
        assert_eq!(out, b"kept");
        let raw = Node::Raw {
            text: Cow::Borrowed(text),
            canonical: false,
            at: Default::default(),
        };
        let wrapped = Node::Array(vec![Node::Null, raw]);
        let err = to_vec(&wrapped).unwrap_err();
        assert!(err.to_string().contains("does not read as JSON"), "{err}");
    }
}

/// JSON values of every kind, strings with every character class that is escaped.
pub(crate) fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "[a-z\"\\\\\u{0}-\u{1f}é\u{1f600}/ ]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z\"é]{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn strings_escape_like_serde_json(s in "[a-z\"\\\\\u{0}-\u{1f}é\u{1f600}]{0,20}") {
        let mut out = Vec::new();
        write_string(&s, &mut out);
        // serde_json escapes the same characters; it spells other controls the same way.
        prop_assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&s).unwrap());
        let first = s.bytes().position(|b| b < 0x20 || b == b'"' || b == b'\\');
        prop_assert_eq!(find_special(s.as_bytes()), first);
    }

    #[test]
    fn key_order_is_utf16_order(a in "[a\u{e000}\u{ffff}\u{10000}\u{1f600}é]{0,4}", b in "[a\u{e000}\u{ffff}\u{10000}\u{1f600}é]{0,4}") {
        prop_assert_eq!(utf16_cmp(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
    }
}
