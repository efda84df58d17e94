//! The admission policy flags shared by `mutate`, `review` and `serve`: the cluster settings the
//! decision depends on, validated once into an [`admission::Policy`](crate::admission::Policy).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use crate::admission::Policy;
use crate::admission::mutate::Settings;
use crate::admission::naming::{DomainTemplate, TemplateError};
use crate::admission::sidecars::{self, Catalogue};

/// Cluster settings the admission decision depends on.
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    /// Knative's route-host template (config-network `domain-template`); only `.Name`,
    /// `.Namespace` and `.Domain` are supported.
    #[arg(long, env = "KSVC_WEBHOOK_DOMAIN_TEMPLATE", default_value = DomainTemplate::DEFAULT)]
    pub domain_template: String,
    /// The cluster's route domain (Knative's config-domain), used to check host lengths.
    #[arg(long, env = "KSVC_WEBHOOK_DOMAIN", default_value = "example.com")]
    pub domain: String,
    /// Template of the endpoint suffix of managed apps: `{{ project }}` and `{{ domain }}` are
    /// replaced by the lower-cased identity labels.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_ENDPOINT_SUFFIX_TEMPLATE",
        default_value = "{{ project }}-{{ domain }}"
    )]
    pub endpoint_suffix_template: String,
    /// The cluster sets config-autoscaler `allow-zero-initial-scale: "true"`, so stopping an app
    /// may also set `initial-scale: "0"` (Knative rejects it otherwise).
    #[arg(long, env = "KSVC_WEBHOOK_ALLOW_ZERO_INITIAL_SCALE")]
    pub allow_zero_initial_scale: bool,
    /// The sidecar catalogue: a YAML file of named container/volume templates and a `default`
    /// list (see examples/sidecars.yaml). Without it no sidecar is injected.
    #[arg(long, env = "KSVC_WEBHOOK_SIDECARS", value_name = "FILE")]
    pub sidecars: Option<PathBuf>,
}

/// Settings that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error(transparent)]
    Sidecars(#[from] sidecars::LoadError),
}

impl PolicyArgs {
    /// The validated policy, with the sidecar catalogue read from its file.
    pub fn policy(&self) -> Result<Policy, PolicyError> {
        let catalogue = match &self.sidecars {
            Some(path) => sidecars::load(path)?,
            None => Catalogue::default(),
        };
        Ok(Policy {
            domain_template: DomainTemplate::new(&self.domain_template, &self.domain)?,
            mutate: Settings {
                suffix_template: self.endpoint_suffix_template.clone(),
                allow_zero_initial_scale: self.allow_zero_initial_scale,
            },
            sidecars: Arc::new(catalogue),
        })
    }
}
