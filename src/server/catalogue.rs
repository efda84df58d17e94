//! Hot reload of the sidecar catalogue: on every tick of `reload.rs`'s loop, read the file again
//! and swap the policy when its content changed. A catalogue that does not load is reported and
//! counted; the previous one keeps serving. A catalogue that does not load at start-up does not stop the server (`cli::policy`'s start-up policy): admission fails closed for
//! every KService that may get a sidecar (one may be an auth proxy that fronts the app) until a
//! check loads the file. I/O only: parsing and every rule are [`crate::admission::sidecars`]'.

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::reload::{LastSeen, Reload};
use crate::admission::Policy;
use crate::admission::sidecars::{self, Catalogue};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// Polls the catalogue file and stores each new valid catalogue into the shared policy.
pub struct CatalogueReloader {
    path: PathBuf,
    policy: Arc<ArcSwap<Policy>>,
    last_seen: LastSeen<String>,
    reloads: Family<ResultLabel, Counter>,
}

/// What one check found.
#[derive(Debug, PartialEq, Eq)]
pub enum Checked {
    Unchanged,
    Reloaded { templates: usize },
    Rejected(String),
}

impl CatalogueReloader {
    /// A reloader of `path` into `policy`; its reload counter is registered in `registry`. The
    /// first check loads the file again, so a change made since start-up is never missed.
    pub fn new(path: PathBuf, policy: Arc<ArcSwap<Policy>>, registry: &mut Registry) -> Self {
        let reloads = Family::<ResultLabel, Counter>::default();
        registry.register(
            "ksvc_webhook_sidecar_catalogue_reloads",
            "Sidecar catalogue reloads by result (ok or error)",
            reloads.clone(),
        );
        // Both results exist from the first scrape on, so the first error shows in a rate.
        for result in ["ok", "error"] {
            reloads.get_or_create(&ResultLabel { result }).inc_by(0);
        }
        Self {
            path,
            policy,
            last_seen: LastSeen::new(String::new()),
            reloads,
        }
    }

    /// Read the file once and swap the catalogue if its content changed and loads.
    pub async fn check(&mut self) -> Checked {
        let bytes = match tokio::fs::read(&self.path).await {
            Ok(bytes) => bytes,
            Err(err) => {
                return self.rejected(format!("cannot read {}: {err}", self.path.display()));
            }
        };
        if self
            .last_seen
            .changed(sidecars::content_hash(&bytes))
            .is_none()
        {
            return Checked::Unchanged;
        }
        let parsed = std::str::from_utf8(&bytes)
            .map_err(|_| "not UTF-8 text".to_string())
            .and_then(|text| Catalogue::parse(text).map_err(|e| e.to_string()));
        match parsed {
            Ok(catalogue)
                if catalogue.fingerprint() == self.policy.load().sidecars.fingerprint() =>
            {
                Checked::Unchanged
            }
            Ok(catalogue) => {
                let templates = catalogue.names().count();
                let mut next = Policy::clone(&self.policy.load());
                next.sidecars = Arc::new(catalogue);
                self.policy.store(Arc::new(next));
                self.reloads
                    .get_or_create(&ResultLabel { result: "ok" })
                    .inc();
                Checked::Reloaded { templates }
            }
            Err(err) => self.rejected(err),
        }
    }

    fn rejected(&self, reason: String) -> Checked {
        self.reloads
            .get_or_create(&ResultLabel { result: "error" })
            .inc();
        Checked::Rejected(reason)
    }
}

impl Reload for CatalogueReloader {
    async fn reload(&mut self) {
        match self.check().await {
            Checked::Unchanged => {}
            Checked::Reloaded { templates } => {
                tracing::info!(path = %self.path.display(), templates, "sidecar catalogue reloaded");
            }
            Checked::Rejected(reason)
                if self.policy.load().sidecars.unavailable_reason().is_some() =>
            {
                tracing::warn!(
                    path = %self.path.display(),
                    error = %reason,
                    "sidecar catalogue still cannot be loaded; KServices that do not opt out \
                     of sidecars are refused until it can"
                )
            }
            Checked::Rejected(reason) => tracing::warn!(
                path = %self.path.display(),
                error = %reason,
                "new sidecar catalogue rejected; the previous one keeps serving"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str =
        "templates:\n  agent:\n    containers:\n      - name: agent\n        image: agent:1\n";

    #[tokio::test]
    async fn a_changed_valid_catalogue_is_swapped_in_and_a_broken_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sidecars.yaml");
        std::fs::write(&path, ONE).unwrap();
        let policy = Arc::new(ArcSwap::from_pointee(Policy {
            sidecars: Arc::new(Catalogue::parse(ONE).unwrap()),
            ..Policy::default()
        }));
        let mut registry = Registry::default();
        let mut reloader = CatalogueReloader::new(path.clone(), policy.clone(), &mut registry);
        assert_eq!(
            reloader.check().await,
            Checked::Unchanged,
            "same content as at start"
        );

        std::fs::write(&path, ONE.replace("agent:1", "agent:2")).unwrap();
        assert_eq!(reloader.check().await, Checked::Reloaded { templates: 1 });
        let swapped = policy.load().sidecars.fingerprint().to_string();

        std::fs::write(&path, "templates: [not, a, map]").unwrap();
        assert!(matches!(reloader.check().await, Checked::Rejected(_)));
        assert_eq!(
            policy.load().sidecars.fingerprint(),
            swapped,
            "the old one keeps serving"
        );
        assert_eq!(reloader.check().await, Checked::Unchanged, "reported once");

        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("ksvc_webhook_sidecar_catalogue_reloads_total{result=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("ksvc_webhook_sidecar_catalogue_reloads_total{result=\"error\"} 1"),
            "{text}"
        );
    }
}
