//! The one test support library of the integration tests: the fake API server ([`fake_api`],
//! which serves everything the tests need), the server harness ([`harness`]), the status API
//! setup ([`status_api`]), the built binary run against the fake ([`cli`], with the one
//! kubeconfig writer), deciding and replaying patches ([`admit`]), the certificate manager's
//! names and arguments ([`certs`]), Knative object builders ([`knative`]), the one poller
//! ([`poll`]) and the loop harness ([`replica`]); and, for the e2e suite only, the real control
//! plane ([`control_plane`]). Every test binary, flat or a folder, uses it as `support::…`.
// Test-only code: a failed setup step should panic loudly; fixtures are built with `new()`.
#![allow(clippy::unwrap_used, clippy::new_without_default)]

pub mod admit;
pub mod certs;
pub mod cli;
pub mod control_plane;
pub mod fake_api;
pub mod harness;
pub mod helm;
pub mod knative;
pub mod poll;
pub mod realistic;
pub mod replica;
pub mod status_api;
pub mod watched;

pub use cli::kubeconfig;
pub use fake_api::FakeApi;
pub use knative::{ksvc, revision};
pub use replica::Replica;
