//! The CA bundle's publication, as Prometheus sees it: one counter of publication rounds per
//! webhook configuration and result, and a gauge saying whether each configuration carried the
//! current bundle after the leader's last round.
//!
//! Labels come from closed sets ([`Config`], [`Published`]), so cardinality is fixed. Owns the
//! metric definitions only; [`super::shell::Manager`] records into them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Which webhook configuration a bundle goes into (the `config` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Config {
    /// The MutatingWebhookConfiguration of admission (`failurePolicy: Fail`).
    Webhook,
    /// The ValidatingWebhookConfiguration of the revision guard (`failurePolicy: Ignore`).
    RevisionGuard,
}

impl Config {
    fn label(self) -> &'static str {
        match self {
            Config::Webhook => "webhook",
            Config::RevisionGuard => "revision-guard",
        }
    }
}

/// What one publication round found or did (the `result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// The bundle differed and was patched in.
    Patched,
    /// Every webhook of the configuration already carried the bundle.
    Current,
    /// The configuration does not exist.
    Missing,
    /// The read or the patch failed (the log line says why).
    Failed,
}

impl Published {
    const ALL: [Self; 4] = [Self::Patched, Self::Current, Self::Missing, Self::Failed];

    fn label(self) -> &'static str {
        match self {
            Published::Patched => "patched",
            Published::Current => "current",
            Published::Missing => "missing",
            Published::Failed => "failed",
        }
    }

    /// Whether the configuration carries the current bundle after this round.
    fn is_current(self) -> bool {
        matches!(self, Published::Patched | Published::Current)
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoundLabels {
    config: &'static str,
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConfigLabels {
    config: &'static str,
}

/// The publication metrics; cheap to clone (shared counters).
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    rounds: Family<RoundLabels, Counter>,
    current: Family<ConfigLabels, Gauge>,
}

impl Metrics {
    /// Metrics registered in `registry` (unregistered ones, from `default`, count unseen).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "ksvc_webhook_cabundle_publications",
            "Leader rounds publishing the CA bundle into a webhook configuration, by result",
            metrics.rounds.clone(),
        );
        registry.register(
            "ksvc_webhook_cabundle_current",
            "1 when the webhook configuration carried the current CA bundle after the leader's \
             last round, 0 when it was missing or could not be updated",
            metrics.current.clone(),
        );
        metrics
    }

    /// Show `config`, whose bundle this replica publishes when it leads, from the first scrape
    /// on: every result counted 0 times, and not current (0) until a round finds it so. The
    /// alert on the gauge waits 15 minutes, and takes the highest over the replicas.
    pub fn publishes(&self, config: Config) {
        let config = config.label();
        for published in Published::ALL {
            let result = published.label();
            self.rounds
                .get_or_create(&RoundLabels { config, result })
                .inc_by(0);
        }
        self.current.get_or_create(&ConfigLabels { config }).set(0);
    }

    /// Record one round's result for `config`.
    pub fn observe(&self, config: Config, published: Published) {
        let config = config.label();
        self.rounds
            .get_or_create(&RoundLabels {
                config,
                result: published.label(),
            })
            .inc();
        self.current
            .get_or_create(&ConfigLabels { config })
            .set(i64::from(published.is_current()));
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    #[test]
    fn a_failed_round_clears_the_current_gauge_and_is_counted() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.observe(Config::RevisionGuard, Published::Patched);
        metrics.observe(Config::RevisionGuard, Published::Failed);
        metrics.observe(Config::Webhook, Published::Current);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for line in [
            r#"ksvc_webhook_cabundle_publications_total{config="revision-guard",result="patched"} 1"#,
            r#"ksvc_webhook_cabundle_publications_total{config="revision-guard",result="failed"} 1"#,
            r#"ksvc_webhook_cabundle_current{config="revision-guard"} 0"#,
            r#"ksvc_webhook_cabundle_current{config="webhook"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
