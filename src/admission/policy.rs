//! PURE: the cluster-wide settings admission decides with — route domain, edits, the sidecar
//! catalogue, Knative's limits, platform writers and the revision guard's settings. Read-only
//! data, read by every decision: a review the server answers, the watch loop's drift report
//! and re-admission, and the `drift` and offline commands of the CLI. The server's catalogue
//! reload swaps a whole new one in.

use std::sync::Arc;

use super::guard;
use super::mutate::Settings;
use super::naming::DomainTemplate;
use super::sidecars::{self, Catalogue};
use super::writers::Principals;

/// Cluster-wide settings the decision depends on.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// The route-host template and domain (Knative's `config-network` / `config-domain`).
    pub domain_template: DomainTemplate,
    /// Settings of the edits.
    pub mutate: Settings,
    /// The sidecar catalogue (empty: no sidecars); shared, so a reload swaps it cheaply.
    pub sidecars: Arc<Catalogue>,
    /// What the cluster's Knative allows that fronting sidecars depend on.
    pub knative: sidecars::Knative,
    /// Writers whose `flyte.org/spec-sha` is kept as written.
    pub platform_writers: Principals,
    /// How the revision guard decides.
    pub revision_guard: guard::Settings,
}
