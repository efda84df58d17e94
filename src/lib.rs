//! ksvc-webhook: a mutating admission webhook, sidecar injector and watch loop for Knative Services.
//!
//! Two pipelines, each flowing one way:
//! - admission: bytes → decoded AdmissionReview → pure decision → JSON Patch → response
//!   ([`json`] at the byte level, [`admission`] in flow order: decode, validate, mutate, encode);
//! - the watch loop: observed KServices and Revisions → pure status and plan → API writes
//!   ([`watch`], over the cluster plumbing in [`cluster`]).
//!
//! The pure cores ([`json`], [`admission`], the planners of [`watch`] and [`certmgr`]) do no I/O
//! and read no clock (but for `admission::sidecars::load`, which reads the catalogue file); the
//! shells ([`cli`], [`server`], [`watch`], [`certmgr`], [`cluster`]) own sockets, files and the
//! cluster; [`telemetry`] sets up the server's logs and span export.

pub mod admission;
pub mod apps;
pub mod certmgr;
pub mod cli;
pub mod cluster;
pub mod flags;
pub mod json;
pub mod keys;
pub mod locks;
pub mod manifest_text;
pub mod report;
pub mod server;
pub mod telemetry;
pub mod watch;
