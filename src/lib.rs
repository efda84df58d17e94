//! ksvc-webhook: a mutating admission webhook, sidecar injector and watch loop for Knative Services.
//!
//! Data flows one way: bytes → decoded AdmissionReview → pure decision → JSON Patch → response.
//! The pure core ([`node`], [`naming`], [`spec_sha`], [`validate`], [`sidecars`], [`mutate`],
//! [`admission`]) does no I/O and reads no clock (but for `sidecars::load`, which reads the
//! catalogue file); the shells ([`cli`], [`server`], [`watch`], [`certmgr`]) own sockets, files
//! and the cluster.

pub mod admission;
pub mod certmgr;
pub mod cli;
pub mod config;
pub mod docs;
pub mod edit;
pub mod keys;
pub mod ksvc;
pub mod mutate;
pub mod naming;
pub mod node;
pub mod pki;
pub mod rbac;
pub mod report;
pub mod server;
pub mod sidecars;
pub mod spec_sha;
pub mod stop;
pub mod validate;
pub mod watch;
// Running beside the Flyte platform (issue 13).
pub mod guard;
pub mod writers;
