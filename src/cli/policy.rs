//! The admission policy flags shared by `mutate`, `review`, `drift`, `explain` and `serve`: the
//! cluster settings the decision depends on, validated once into an
//! [`admission::Policy`](crate::admission::Policy); [`SidecarSourceArgs`], the flags of the
//! offline commands that read the sidecar catalogue from the cluster instead of a file; and
//! [`OfflinePolicyArgs`], the two with the cluster to read it from, as `mutate` and `explain`
//! take them.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use crate::admission::Policy;
use crate::admission::guard;
use crate::admission::mutate::Settings;
use crate::admission::naming::{DomainTemplate, TemplateError};
use crate::admission::sidecars::{self, Catalogue};
use crate::admission::writers::Principals;
use crate::cluster::client::{self, ClientArgs};
use crate::cluster::{call, errors};
use crate::report::error_chain;

/// Cluster settings the admission decision depends on.
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    /// Knative's route-host template (config-network `domain-template`); only `.Name`,
    /// `.Namespace` and `.Domain` are supported.
    #[arg(long, env = "KSVC_WEBHOOK_DOMAIN_TEMPLATE", default_value = DomainTemplate::DEFAULT)]
    pub domain_template: String,
    /// The cluster's route domain (Knative's config-domain), used to check host lengths. Not the
    /// app identity's domain (`flyte.org/domain`, `name --domain`).
    #[arg(long, env = "KSVC_WEBHOOK_ROUTE_DOMAIN", default_value = "example.com",
          value_parser = crate::flags::parse_dns_subdomain)]
    pub route_domain: String,
    /// Deprecated spelling of `--route-domain`: it is used, with a warning.
    #[arg(long = "domain", env = "KSVC_WEBHOOK_DOMAIN", hide = true,
          value_parser = crate::flags::parse_dns_subdomain)]
    pub deprecated_domain: Option<String>,
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
    /// The cluster sets Knative's config-features `multi-container-probing: "enabled"`: a
    /// KService whose own container has probes may then be fronted by a sidecar (its probes
    /// stay on its container, naming its port). Off, such a KService is refused, as Knative
    /// would refuse the probes on a container without the serving port.
    #[arg(long, env = "KSVC_WEBHOOK_MULTI_CONTAINER_PROBING")]
    pub multi_container_probing: bool,
    /// Writers whose `flyte.org/spec-sha` is kept as written (the platform's own hash, which its
    /// Deploy compares): comma-separated usernames (e.g.
    /// `system:serviceaccount:flyte:flyteadmin`) and `group:NAME` entries, matched against the
    /// review's `request.userInfo`.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_PLATFORM_WRITERS",
        value_delimiter = ',',
        value_name = "USER|group:NAME"
    )]
    pub platform_writers: Vec<String>,
    /// Who the revision guard always lets delete a revision, even one that still serves:
    /// comma-separated usernames and `group:NAME` entries, matched against the review's
    /// `request.userInfo`. Replaces the default list (the garbage collector, the namespace
    /// controller and kube-controller-manager), so keep those when adding to it.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_GUARD_ALLOWED_DELETERS",
        value_delimiter = ',',
        value_name = "USER|group:NAME",
        default_values = crate::admission::guard::DEFAULT_ALLOWED_DELETERS
    )]
    pub guard_allowed_deleters: Vec<String>,
}

/// Settings that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error(transparent)]
    Sidecars(#[from] sidecars::LoadError),
    #[error(transparent)]
    Writers(#[from] crate::admission::writers::WritersError),
}

impl PolicyArgs {
    /// The route domain: `--route-domain`, or the deprecated `--domain` (with a warning on
    /// standard error, as it means the app identity's domain elsewhere).
    pub fn route_domain(&self) -> &str {
        match &self.deprecated_domain {
            Some(domain) => {
                eprintln!(
                    "warning: --domain (KSVC_WEBHOOK_DOMAIN) is deprecated here: it is the route \
                     domain, so say --route-domain (KSVC_WEBHOOK_ROUTE_DOMAIN)"
                );
                domain
            }
            None => &self.route_domain,
        }
    }

    /// The validated policy, with the sidecar catalogue read from its file.
    pub fn policy(&self) -> Result<Policy, PolicyError> {
        let catalogue = match &self.sidecars {
            Some(path) => sidecars::load(path)?,
            None => Catalogue::default(),
        };
        Ok(Policy {
            domain_template: DomainTemplate::new(&self.domain_template, self.route_domain())?,
            mutate: Settings {
                suffix_template: self.endpoint_suffix_template.clone(),
                allow_zero_initial_scale: self.allow_zero_initial_scale,
            },
            sidecars: Arc::new(catalogue),
            knative: sidecars::Knative {
                multi_container_probing: self.multi_container_probing,
            },
            platform_writers: Principals::parse(&self.platform_writers)?,
            revision_guard: guard::Settings {
                allowed_deleters: Principals::parse(&self.guard_allowed_deleters)?,
            },
        })
    }

    /// The policy `serve` starts with. A sidecar catalogue that cannot be loaded is logged and
    /// stands in as [`Catalogue::unavailable`] rather than stopping the server: a crash-looping
    /// webhook would refuse every KService write without a word, while this one refuses, with the
    /// reason, only those that do not opt out of sidecars, and recovers when the file is fixed.
    pub fn startup_policy(&self) -> Result<Policy, PolicyError> {
        match self.policy() {
            Err(PolicyError::Sidecars(err)) => {
                let reason = error_chain(&err);
                tracing::warn!(
                    error = %reason,
                    "sidecar catalogue cannot be loaded; KServices that do not opt out of sidecars \
                     are refused until it can"
                );
                let without = PolicyArgs {
                    sidecars: None,
                    ..self.clone()
                };
                let mut policy = without.policy()?;
                policy.sidecars = Arc::new(Catalogue::unavailable(reason));
                Ok(policy)
            }
            other => other,
        }
    }
}

/// Where an offline command reads the sidecar catalogue from, besides `--sidecars FILE`: the
/// cluster's ConfigMap, as the server reads it.
#[derive(Debug, Clone, Args)]
pub struct SidecarSourceArgs {
    /// Read the sidecar catalogue from the cluster's ConfigMap with your kubeconfig, as the
    /// server reads it (key `sidecars.yaml`), instead of `--sidecars FILE`.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_SIDECARS_FROM_CLUSTER",
        conflicts_with = "sidecars"
    )]
    pub sidecars_from_cluster: bool,
    /// The catalogue's ConfigMap for `--sidecars-from-cluster`, as NAMESPACE/NAME.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_SIDECARS_CONFIGMAP",
        default_value = "ksvc-system/ksvc-webhook-sidecars",
        value_name = "NAMESPACE/NAME"
    )]
    pub sidecars_configmap: String,
}

/// The policy flags of `mutate` and `explain`: the policy, where its sidecar catalogue comes
/// from, and the cluster (also the one `explain NAME` reads).
#[derive(Debug, Clone, Args)]
pub struct OfflinePolicyArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub sidecars_source: SidecarSourceArgs,
    #[command(flatten)]
    pub cluster: ClientArgs,
}

impl OfflinePolicyArgs {
    /// The validated policy, with the cluster's catalogue when `--sidecars-from-cluster` asks.
    pub fn policy(&self) -> anyhow::Result<Policy> {
        let mut policy = self.policy.policy()?;
        self.sidecars_source.apply(&mut policy, &self.cluster)?;
        Ok(policy)
    }
}

impl SidecarSourceArgs {
    /// `policy` with the cluster's catalogue when `--sidecars-from-cluster` asks for it.
    pub fn apply(&self, policy: &mut Policy, cluster: &ClientArgs) -> anyhow::Result<()> {
        if self.sidecars_from_cluster {
            policy.sidecars = Arc::new(catalogue_from_cluster(cluster, &self.sidecars_configmap)?);
        }
        Ok(())
    }
}

/// The sidecar catalogue in the ConfigMap `at` (`NAMESPACE/NAME`, key `sidecars.yaml`) of the
/// cluster `cluster` names, read with the user's credentials.
fn catalogue_from_cluster(cluster: &ClientArgs, at: &str) -> anyhow::Result<Catalogue> {
    let Some((namespace, name)) = at.split_once('/') else {
        bail!(
            "--sidecars-configmap {at:?}: say NAMESPACE/NAME, e.g. ksvc-system/ksvc-webhook-sidecars"
        );
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let text = runtime.block_on(async {
        let (client, server) = client::client(cluster, None).await?;
        let config_maps: Api<ConfigMap> = Api::namespaced(client, namespace);
        let found = call::timed("get configmap", cluster.api_timeout, config_maps.get_opt(name))
            .await
            .map_err(|e| errors::Error::from_call(e, &server))?;
        let Some(config_map) = found else {
            bail!("no ConfigMap {namespace}/{name} in the cluster; name the catalogue's with --sidecars-configmap NAMESPACE/NAME");
        };
        let data = config_map.data.unwrap_or_default();
        let Some(text) = data.get("sidecars.yaml") else {
            bail!("ConfigMap {namespace}/{name} has no key sidecars.yaml");
        };
        Ok(text.clone())
    })?;
    Catalogue::parse(&text).with_context(|| format!("the sidecar catalogue in ConfigMap {at}"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arc_swap::ArcSwap;
    use clap::Parser as _;
    use prometheus_client::registry::Registry;

    use crate::server::catalogue::{CatalogueReloader, Checked};

    const ONE: &str =
        "templates:\n  agent:\n    containers:\n      - name: agent\n        image: agent:1\n";

    #[tokio::test]
    async fn a_catalogue_that_cannot_be_loaded_at_start_fails_closed_until_it_can() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sidecars.yaml");
        std::fs::write(&path, "templates: [not, a, map]").unwrap();
        let cli = super::super::Cli::parse_from([
            "ksvc-webhook",
            "mutate",
            "-f",
            "-",
            "--sidecars",
            path.to_str().unwrap(),
        ]);
        let super::super::Command::Mutate(args) = cli.command else {
            panic!("not mutate");
        };
        assert!(
            args.offline.policy.policy().is_err(),
            "offline commands still fail"
        );
        let policy = args.offline.policy.startup_policy().unwrap();
        let reason = policy.sidecars.unavailable_reason().unwrap().to_string();
        assert!(
            reason.contains("does not have the expected shape"),
            "{reason}"
        );
        let policy = Arc::new(ArcSwap::from_pointee(policy));
        let mut registry = Registry::default();
        let mut reloader = CatalogueReloader::new(path.clone(), policy.clone(), &mut registry);
        assert!(matches!(reloader.check().await, Checked::Rejected(_)));
        assert!(policy.load().sidecars.unavailable_reason().is_some());
        std::fs::write(&path, ONE).unwrap();
        assert_eq!(reloader.check().await, Checked::Reloaded { templates: 1 });
        assert_eq!(policy.load().sidecars.unavailable_reason(), None);
    }

    /// `mutate`, `drift` and `explain` read the catalogue from the cluster with one set of
    /// flags: the same words, variables and defaults in each.
    #[test]
    fn every_offline_command_reads_the_cluster_catalogue_with_the_same_flags() {
        use clap::CommandFactory as _;
        let cli = super::super::Cli::command();
        let flag = |command: &str, id: &str| {
            let sub = cli.find_subcommand(command).unwrap();
            let arg = sub.get_arguments().find(|a| a.get_id() == id).unwrap();
            (
                arg.get_help().map(ToString::to_string),
                arg.get_env().map(|e| e.to_owned()),
                arg.get_default_values().to_vec(),
            )
        };
        for id in ["sidecars_from_cluster", "sidecars_configmap"] {
            let mutate = flag("mutate", id);
            assert!(mutate.0.is_some() && mutate.1.is_some(), "{id}");
            assert_eq!(flag("drift", id), mutate, "{id}");
            assert_eq!(flag("explain", id), mutate, "{id}");
        }
    }

    #[test]
    fn the_route_domain_has_its_own_name_and_domain_still_works_with_a_warning() {
        let mutate = |extra: &[&str]| {
            let args = ["ksvc-webhook", "mutate", "-f", "-"].iter().chain(extra);
            match super::super::Cli::parse_from(args).command {
                super::super::Command::Mutate(args) => args.offline.policy,
                _ => panic!("not mutate"),
            }
        };
        assert_eq!(mutate(&[]).route_domain(), "example.com");
        assert_eq!(
            mutate(&["--route-domain", "apps.example.org"]).route_domain(),
            "apps.example.org"
        );
        let old = mutate(&["--domain", "old.example.org"]);
        assert_eq!(old.route_domain(), "old.example.org");
        assert!(old.policy().is_ok());
    }
}
