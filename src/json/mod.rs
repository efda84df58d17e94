//! PURE: the JSON tree the admission core reads and edits, borrowing from the request body.
//! The byte level: it knows no Kubernetes.
//!
//! A [`Node`] parsed from a review ([`parse::parse_bytes`]) is mostly slices of the body: a string
//! without escapes is never copied, and an object is a vector of members in the order they came
//! (no map is built). Values the caller's skim table ([`parse::Skim`]) says are never read are
//! not parsed into a tree at all but kept as their JSON text ([`Node::Raw`]), so nothing is lost.
//! Reading into such a value finds nothing; in a debug build it panics instead, naming the path
//! to add to the table ([`Node::get`] and the other accessors).
//!
//! An object holds each name once: of a repeated name the parser and `serde_json`'s reading
//! into a tree (`Node: Deserialize`, how a body the fast parser refuses is read after all) keep
//! the last value, where the first stood.
//!
//! The files, lowest first: `lex.rs` the tokenizer; `node.rs` the tree and its accessors;
//! `serde.rs` the tree and serde (the fallback reader, `serde_json::Value` conversions, compact
//! text); [`canonical`] RFC 8785; [`parse`] the skimming parser; [`edit`] the `Editor`.

pub mod canonical;
pub mod edit;
mod lex;
mod node;
pub mod parse;
mod serde;

pub use node::{Map, Node, Skimmed};

#[cfg(test)]
mod agreement_tests;
