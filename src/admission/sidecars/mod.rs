//! PURE (but for [`load`]): the sidecar catalogue, its load-time checks, and sidecar injection.
//!
//! A catalogue is a YAML document of named templates, each a list of ordinary Kubernetes
//! containers and the volumes they mount, plus a `default` list injected into every KService:
//!
//! ```yaml
//! default: [log-shipper]
//! templates:
//!   log-shipper:
//!     containers: [{name: log-shipper, image: fluent/fluent-bit:3.1, ...}]
//!     volumes: [{name: app-logs, emptyDir: {}}]
//! ```
//!
//! A template may *front* the app (`fronts: {port: 4180}`): an auth proxy, a WAF, a request logger
//! that must sit on the request path. Knative sends every request to the one container that
//! declares `ports`, so the webhook hands that declaration over from the user's container to the
//! fronting one (`fronting.rs` checks it can, `handover.rs` does it); `{{ .AppPort }}` tells the
//! proxy where the app listens.
//!
//! Containers and volumes stay `serde_json::Value`s, so fields unknown to k8s-openapi survive
//! injection; the typed k8s-openapi views are used only to check them. A template that breaks
//! Knative's multi-container rules is refused when the catalogue is parsed (`checks.rs`), never
//! at admission. [`plan`] selects the templates for a KService and checks them against it;
//! [`converge`] edits its containers and volumes to match and records what it injected in the
//! `sidecar.flyte.org/status` annotation; [`strip`] takes exactly that away again.
//!
//! Only [`load`] touches the file system; everything else is pure and reads no clock.

mod catalogue;
mod checks;
mod edited;
mod fronting;
mod handover;
mod inject;
mod kind;
mod params;
mod record;
mod select;

pub use catalogue::{Catalogue, CatalogueError, LoadError, Result, Template, content_hash, load};
pub use checks::Problem;
pub use handover::{Fronts, Handover, Knative, ProbePort, app_container};
pub use inject::{Plan, converge, strip, strip_recorded};
pub use params::Params;
pub use record::{Injected, Status};
pub use select::plan;
