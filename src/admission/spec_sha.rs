//! PURE: the spec-SHA annotation value — SHA-256 over RFC 8785 (JCS) canonical JSON.
//!
//! Canonical JSON makes the hash independent of key order, whitespace and number spelling, so a
//! manifest applied twice in any formatting gets the same SHA. The canonical bytes are written
//! into a buffer that is handed to the hasher in chunks of [`CHUNK`] bytes: many tiny writes to a
//! hasher cost more than the copy, and one buffer for a 200 KB spec would keep growing. Text a
//! review left raw is copied as it is when the parser found it canonical already, and otherwise
//! written canonically by [`json::parse::canonical`] without building a tree.

use sha2::{Digest, Sha256};

use crate::json::{self, Node};

/// How many hex characters of the digest the annotation keeps.
pub const SHA_HEX_LEN: usize = 16;

/// How many canonical bytes pile up before they are hashed.
const CHUNK: usize = 16 * 1024;

/// The annotation value: the first 16 lower-case hex characters of SHA-256 over the canonical
/// JSON of `value`.
pub fn spec_sha(value: &Node) -> String {
    let mut out = Out {
        buf: Vec::with_capacity(CHUNK + 1024),
        hasher: Some(Sha256::new()),
        members: Vec::new(),
    };
    write_canonical(value, &mut out);
    let mut hasher = out.hasher.unwrap_or_default();
    hasher.update(&out.buf);
    hex::encode(&hasher.finalize()[..SHA_HEX_LEN / 2])
}

/// [`spec_sha`] of a `serde_json::Value`.
pub fn json_sha(value: &serde_json::Value) -> String {
    spec_sha(&Node::borrow_json(value))
}

/// The RFC 8785 canonical JSON text of `value`.
pub fn canonical_json(value: &serde_json::Value) -> String {
    // Only valid UTF-8 is ever written: JSON punctuation, escapes and whole `str`s.
    String::from_utf8_lossy(&canonical_bytes(&Node::borrow_json(value))).into_owned()
}

/// All the canonical bytes, in one buffer.
fn canonical_bytes(value: &Node) -> Vec<u8> {
    let mut out = Out {
        buf: Vec::with_capacity(4096),
        hasher: None,
        members: Vec::new(),
    };
    write_canonical(value, &mut out);
    out.buf
}

/// Where canonical bytes go: a buffer, hashed a chunk at a time when there is a hasher.
struct Out<'a> {
    buf: Vec<u8>,
    hasher: Option<Sha256>,
    /// Scratch for writing raw text (an env list can hold thousands of raw entries).
    members: json::parse::Members<'a>,
}

impl Out<'_> {
    /// Hand a full chunk to the hasher.
    fn settle(&mut self) {
        if let Some(hasher) = &mut self.hasher
            && self.buf.len() >= CHUNK
        {
            hasher.update(&self.buf);
            self.buf.clear();
        }
    }
}

fn write_canonical<'a>(value: &Node<'a>, out: &mut Out<'a>) {
    out.settle();
    let buf = &mut out.buf;
    match value {
        Node::Null => buf.extend_from_slice(b"null"),
        Node::Bool(true) => buf.extend_from_slice(b"true"),
        Node::Bool(false) => buf.extend_from_slice(b"false"),
        Node::Number(n) => write_number(n, buf),
        Node::String(s) => write_string(s, buf),
        Node::Array(items) => {
            buf.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.buf.push(b',');
                }
                write_canonical(item, out);
            }
            out.buf.push(b']');
        }
        Node::Object(map) => {
            // RFC 8785 orders members by their names' UTF-16 code units; most maps come sorted.
            if map.keys().is_sorted_by(|a, b| utf16_cmp(a, b).is_le()) {
                write_members(map.iter(), out);
            } else {
                let mut members: Vec<(&str, &Node)> = map.iter().collect();
                members.sort_unstable_by(|a, b| utf16_cmp(a.0, b.0));
                write_members(members.into_iter(), out);
            }
        }
        // Raw text was checked by the parser that left it, so it reads again.
        Node::Raw {
            text,
            canonical: true,
        } => buf.extend_from_slice(text.as_bytes()),
        Node::Raw {
            text,
            canonical: false,
        } => {
            let at = buf.len();
            if json::parse::canonical(text, buf, &mut out.members).is_err() {
                buf.truncate(at);
                buf.extend_from_slice(b"null");
            }
        }
    }
}

fn write_members<'v, 'a: 'v>(
    members: impl Iterator<Item = (&'v str, &'v Node<'a>)>,
    out: &mut Out<'a>,
) {
    out.buf.push(b'{');
    for (i, (key, item)) in members.enumerate() {
        if i > 0 {
            out.buf.push(b',');
        }
        write_string(key, &mut out.buf);
        out.buf.push(b':');
        write_canonical(item, out);
    }
    out.buf.push(b'}');
}

/// UTF-16 code-unit order. UTF-8 byte order is code-point order, which differs only where a
/// character from U+E000 up (lead byte 0xEE or above) meets a supplementary one: so the first
/// differing byte decides unless it is such a lead byte.
pub(crate) fn utf16_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    match x.iter().zip(y).position(|(p, q)| p != q) {
        None => x.len().cmp(&y.len()),
        Some(i) if x[i] < 0xEE && y[i] < 0xEE => x[i].cmp(&y[i]),
        Some(_) => a.encode_utf16().cmp(b.encode_utf16()),
    }
}

/// Numbers as ECMAScript's `Number.prototype.toString` prints the IEEE-754 double.
pub(crate) fn write_number(n: &serde_json::Number, out: &mut Vec<u8>) {
    if let Some(i) = n.as_i64().filter(|i| i.unsigned_abs() < (1 << 53)) {
        out.extend_from_slice(i.to_string().as_bytes());
        return;
    }
    let f = n.as_f64().unwrap_or(0.0);
    let mut buf = ryu_js::Buffer::new();
    out.extend_from_slice(buf.format(f).as_bytes());
}

pub(crate) fn write_string(s: &str, out: &mut Vec<u8>) {
    let bytes = s.as_bytes();
    out.push(b'"');
    let mut start = 0;
    if json::find_special(bytes).is_some() {
        for (at, &b) in bytes.iter().enumerate() {
            let escaped: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0x08 => b"\\b",
                0x0c => b"\\f",
                0x00..=0x1f => {
                    out.extend_from_slice(&bytes[start..at]);
                    out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
                    start = at + 1;
                    continue;
                }
                _ => continue,
            };
            out.extend_from_slice(&bytes[start..at]);
            out.extend_from_slice(escaped);
            start = at + 1;
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn canonical_form_follows_rfc8785() {
        let cases = [
            (
                json!({"b": 1, "a": [true, null, "x"]}),
                r#"{"a":[true,null,"x"],"b":1}"#,
            ),
            (
                serde_json::from_str(r#"{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001]}"#).unwrap(),
                r#"{"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27]}"#,
            ),
            (
                json!("\u{20ac}$\u{000F}\u{000a}A'\u{0042}\u{0022}\u{005c}\\\"/"),
                r#""€$\u000f\nA'B\"\\\\\"/""#,
            ),
            (
                json!({"\u{20ac}": 1, "\r": 2, "\u{fb33}": 7, "1": 3, "\u{1F600}": 4, "\u{0080}": 5, "\u{00f6}": 6}),
                "{\"\\r\":2,\"1\":3,\"\u{0080}\":5,\"\u{00f6}\":6,\"\u{20ac}\":1,\"\u{1F600}\":4,\"\u{fb33}\":7}",
            ),
            (json!(-0.0), "0"),
            (json!(9007199254740993u64), "9007199254740992"),
        ];
        for (value, want) in cases {
            assert_eq!(canonical_json(&value), want);
            let text = value.to_string();
            let parsed: Node = serde_json::from_str(&text).unwrap();
            assert_eq!(String::from_utf8(canonical_bytes(&parsed)).unwrap(), want);
        }
    }

    #[test]
    fn sha_ignores_formatting_and_key_order() {
        let a: Value = serde_json::from_str(
            r#"{"template":{"spec":{"containers":[{"image":"nginx","name":"app"}]}}}"#,
        )
        .unwrap();
        let b: Value = serde_json::from_str("{ \"template\" : { \"spec\": {\n \"containers\" : [ { \"name\":\"app\", \"image\" : \"nginx\" } ] } } }").unwrap();
        assert_eq!(json_sha(&a), json_sha(&b));
        assert_eq!(json_sha(&a).len(), 16);
        let c = json!({"template":{"spec":{"containers":[{"image":"nginx:2","name":"app"}]}}});
        assert_ne!(json_sha(&a), json_sha(&c));
    }

    proptest::proptest! {
        #[test]
        fn strings_escape_like_serde_json(s in "[a-z\"\\\\\u{0}-\u{1f}é\u{1f600}]{0,20}") {
            let mut out = Vec::new();
            write_string(&s, &mut out);
            // serde_json escapes the same characters; it spells other controls the same way.
            proptest::prop_assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&s).unwrap());
            let first = s.bytes().position(|b| b < 0x20 || b == b'"' || b == b'\\');
            proptest::prop_assert_eq!(json::find_special(s.as_bytes()), first);
        }

        #[test]
        fn key_order_is_utf16_order(a in "[a\u{e000}\u{ffff}\u{10000}\u{1f600}é]{0,4}", b in "[a\u{e000}\u{ffff}\u{10000}\u{1f600}é]{0,4}") {
            proptest::prop_assert_eq!(utf16_cmp(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
        }
    }

    #[test]
    fn chunked_hashing_equals_hashing_at_once() {
        let big: Vec<Value> = (0..5000)
            .map(|i| json!({"name": format!("V{i}"), "value": i}))
            .collect();
        let node = Node::from_json(json!({"env": big}));
        let bytes = canonical_bytes(&node);
        assert!(bytes.len() > 4 * CHUNK);
        assert_eq!(
            spec_sha(&node),
            hex::encode(&Sha256::digest(&bytes)[..SHA_HEX_LEN / 2])
        );
    }

    #[test]
    fn sha_of_empty_object_is_stable() {
        // SHA-256("{}") = 44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a
        assert_eq!(json_sha(&json!({})), "44136fa355b3678a");
    }
}
