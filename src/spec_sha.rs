//! PURE: the spec-SHA annotation value — SHA-256 over RFC 8785 (JCS) canonical JSON.
//!
//! Canonical JSON makes the hash independent of key order, whitespace and number spelling, so a
//! manifest applied twice in any formatting gets the same SHA. The canonical bytes stream straight
//! into the hasher; nothing is built in memory.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// How many hex characters of the digest the annotation keeps.
pub const SHA_HEX_LEN: usize = 16;

/// The annotation value: the first 16 lower-case hex characters of SHA-256 over the canonical
/// JSON of `value`.
pub fn spec_sha(value: &Value) -> String {
    let mut sink = HashSink::default();
    write_canonical(value, &mut sink);
    let digest = sink.finish();
    hex::encode(&digest[..SHA_HEX_LEN / 2])
}

/// The RFC 8785 canonical JSON text of `value`.
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    // Only valid UTF-8 is ever written: JSON punctuation, escapes and whole `str`s.
    String::from_utf8_lossy(&out).into_owned()
}

/// Where canonical bytes go: a buffer or a hasher.
trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Buffers small writes so the hasher sees large blocks.
#[derive(Default)]
struct HashSink {
    hasher: Sha256,
    buf: Vec<u8>,
}

impl HashSink {
    const FLUSH_AT: usize = 4096;

    fn finish(mut self) -> [u8; 32] {
        self.hasher.update(&self.buf);
        self.hasher.finalize().into()
    }
}

impl Sink for HashSink {
    fn put(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= Self::FLUSH_AT {
            self.hasher.update(&self.buf);
            self.buf.clear();
        }
    }
}

fn write_canonical(value: &Value, out: &mut impl Sink) {
    match value {
        Value::Null => out.put(b"null"),
        Value::Bool(true) => out.put(b"true"),
        Value::Bool(false) => out.put(b"false"),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.put(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.put(b",");
                }
                write_canonical(item, out);
            }
            out.put(b"]");
        }
        Value::Object(map) => {
            out.put(b"{");
            // RFC 8785 orders members by UTF-16 code units. The map iterates in code-point
            // order, which is the same unless a key holds a character from U+E000 (UTF-8 lead
            // byte 0xEE or above): only then is a sorted copy of the entries needed.
            if map.keys().any(|k| k.bytes().any(|b| b >= 0xEE)) {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
                write_members(entries.into_iter(), out);
            } else {
                write_members(map.iter(), out);
            }
            out.put(b"}");
        }
    }
}

fn write_members<'v>(members: impl Iterator<Item = (&'v String, &'v Value)>, out: &mut impl Sink) {
    for (i, (key, item)) in members.enumerate() {
        if i > 0 {
            out.put(b",");
        }
        write_string(key, out);
        out.put(b":");
        write_canonical(item, out);
    }
}

/// Numbers as ECMAScript's `Number.prototype.toString` prints the IEEE-754 double.
fn write_number(n: &serde_json::Number, out: &mut impl Sink) {
    if let Some(i) = n.as_i64().filter(|i| i.unsigned_abs() < (1 << 53)) {
        out.put(i.to_string().as_bytes());
        return;
    }
    let f = n.as_f64().unwrap_or(0.0);
    let mut buf = ryu_js::Buffer::new();
    out.put(buf.format(f).as_bytes());
}

fn write_string(s: &str, out: &mut impl Sink) {
    out.put(b"\"");
    let bytes = s.as_bytes();
    let mut start = 0;
    while let Some(offset) = bytes[start..]
        .iter()
        .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
    {
        let at = start + offset;
        out.put(&bytes[start..at]);
        match bytes[at] {
            b'"' => out.put(b"\\\""),
            b'\\' => out.put(b"\\\\"),
            b'\n' => out.put(b"\\n"),
            b'\r' => out.put(b"\\r"),
            b'\t' => out.put(b"\\t"),
            0x08 => out.put(b"\\b"),
            0x0c => out.put(b"\\f"),
            control => out.put(format!("\\u{control:04x}").as_bytes()),
        }
        start = at + 1;
    }
    out.put(&bytes[start..]);
    out.put(b"\"");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        }
    }

    #[test]
    fn sha_ignores_formatting_and_key_order() {
        let a: Value = serde_json::from_str(
            r#"{"template":{"spec":{"containers":[{"image":"nginx","name":"app"}]}}}"#,
        )
        .unwrap();
        let b: Value = serde_json::from_str("{ \"template\" : { \"spec\": {\n \"containers\" : [ { \"name\":\"app\", \"image\" : \"nginx\" } ] } } }").unwrap();
        assert_eq!(spec_sha(&a), spec_sha(&b));
        assert_eq!(spec_sha(&a).len(), 16);
        let c = json!({"template":{"spec":{"containers":[{"image":"nginx:2","name":"app"}]}}});
        assert_ne!(spec_sha(&a), spec_sha(&c));
    }

    #[test]
    fn sha_of_empty_object_is_stable() {
        // SHA-256("{}") = 44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a
        assert_eq!(spec_sha(&json!({})), "44136fa355b3678a");
    }
}
