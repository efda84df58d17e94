//! The watch loop: watches Knative Services and Revisions, serves every app's status from a local
//! cache, and — on the elected leader only — finishes stopping apps (stop edits, then teardown of
//! the old revisions once traffic has left them).
//!
//! Shape: observed objects (reflector stores) → pure [`status::status_for`] / [`plan::plan`] →
//! API writes. Admission never waits on this module.

pub mod edit;
pub mod http;
pub mod hub;
pub mod kapi;
pub mod leader;
pub mod metrics;
pub mod plan;
pub mod status;
pub mod view;
