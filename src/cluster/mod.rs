//! Cluster plumbing shared by the server's parts and the command line: the one client builder
//! and its flags ([`client`]), one timed call, one backoff, one retry-on-conflict
//! read-modify-write ([`call`]), the Lease election ([`lease`]) that `serve` runs for the whole
//! replica ([`election`]), the wording of a failed call as kubectl words it ([`errors`]), and the
//! list of API calls each part makes, which the RBAC manifests must grant exactly ([`rbac`]).
//!
//! Knows the Kubernetes API, never a KService's meaning: what to write is decided elsewhere.

pub mod call;
pub mod client;
pub mod election;
pub mod errors;
pub mod lease;
pub mod rbac;
