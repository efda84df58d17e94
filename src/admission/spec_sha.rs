//! PURE: the spec-SHA annotation value — SHA-256 over the RFC 8785 (JCS) canonical JSON that
//! [`canonical`] writes.
//!
//! Canonical JSON makes the hash independent of key order, whitespace and number spelling, so a
//! manifest applied twice in any formatting gets the same SHA. This module only hashes: the
//! canonical bytes arrive in chunks of [`CHUNK`] bytes. A spec whose canonical form cannot be
//! written (raw text that does not read) is an error, never a hash of something else.

use sha2::{Digest, Sha256};

use crate::json::{Node, canonical};

pub use crate::json::canonical::Error;
/// The RFC 8785 canonical JSON text of a `serde_json::Value`.
pub use crate::json::canonical::json_text as canonical_json;

/// How many hex characters of the digest the annotation keeps.
pub const SHA_HEX_LEN: usize = 16;

/// How many canonical bytes pile up before they are hashed.
const CHUNK: usize = 16 * 1024;

/// The annotation value: the first 16 lower-case hex characters of SHA-256 over the canonical
/// JSON of `value`.
pub fn spec_sha(value: &Node) -> Result<String, Error> {
    let mut hasher = Sha256::new();
    canonical::write(value, CHUNK, |bytes| hasher.update(bytes))?;
    Ok(annotation(hasher))
}

/// [`spec_sha`] of a `serde_json::Value` (which holds no raw text, so it cannot fail).
pub fn json_sha(value: &serde_json::Value) -> String {
    let mut hasher = Sha256::new();
    hasher.update(canonical::json_text(value).as_bytes());
    annotation(hasher)
}

fn annotation(hasher: Sha256) -> String {
    hex::encode(&hasher.finalize()[..SHA_HEX_LEN / 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

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

    #[test]
    fn chunked_hashing_equals_hashing_at_once() {
        let big: Vec<Value> = (0..5000)
            .map(|i| json!({"name": format!("V{i}"), "value": i}))
            .collect();
        let value = json!({"env": big});
        let node = Node::from_json(value.clone());
        let bytes = canonical::to_vec(&node).unwrap();
        assert!(bytes.len() > 4 * CHUNK);
        let at_once = hex::encode(&Sha256::digest(&bytes)[..SHA_HEX_LEN / 2]);
        assert_eq!(spec_sha(&node).unwrap(), at_once);
        assert_eq!(json_sha(&value), at_once);
    }

    #[test]
    fn raw_text_that_does_not_read_is_no_sha() {
        let mut spec = crate::json::Map::new();
        let broken = Node::Raw {
            text: "{\"a\":".into(),
            canonical: false,
            at: Default::default(),
        };
        spec.insert("template", broken);
        assert!(spec_sha(&Node::Object(spec)).is_err());
    }

    #[test]
    fn sha_of_empty_object_is_stable() {
        // SHA-256("{}") = 44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a
        assert_eq!(json_sha(&json!({})), "44136fa355b3678a");
        assert_eq!(
            spec_sha(&Node::from_json(json!({}))).unwrap(),
            "44136fa355b3678a"
        );
    }
}
