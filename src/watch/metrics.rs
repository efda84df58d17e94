//! The watch loop's Prometheus metrics: whether the app cache has synced, apps by status,
//! objects cached, reconciles, errors, writes in flight, the time of reconciles and of writes, and the drift
//! report's apps by reason and time of its last full evaluation.
//!
//! Created once, cloned into the loop (metrics are shared handles), registered by the server with
//! [`Metrics::register`]. Must never block or do I/O.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::cache::Cache;
use super::drift::DriftIndex;
use super::hub::Hub;
use crate::admission::drift::Reason;

type Labels = Vec<(&'static str, &'static str)>;

/// The loop's metric handles.
#[derive(Clone)]
pub struct Metrics {
    /// `ksvc_webhook_watch_synced`: 1 once both caches have listed and every app has a status
    /// (`/apps` answers 503 until then), else 0. Admission readiness never depends on it.
    pub synced: Gauge,
    /// `ksvc_webhook_watch_apps{phase}`: apps in each phase, from this replica's cache.
    pub apps: Family<Labels, Gauge>,
    /// `ksvc_webhook_watch_cached_objects{resource}`: Services and Revisions held in this
    /// replica's cache, what its memory grows with (docs/performance.md).
    pub cached: Family<Labels, Gauge>,
    /// `ksvc_webhook_watch_reconciles_total`.
    pub reconciles: Counter,
    /// `ksvc_webhook_watch_errors_total{kind}`: failed API calls and watch errors.
    pub errors: Family<Labels, Counter>,
    /// `ksvc_webhook_watch_reconcile_duration_seconds`: status, plan and publishing of one app.
    pub duration: Histogram,
    /// `ksvc_webhook_watch_writes_total{action}`: writes made as leader.
    pub writes: Family<Labels, Counter>,
    /// `ksvc_webhook_watch_writes_in_flight`: apps whose writes are queued or running.
    pub writes_in_flight: Gauge,
    /// `ksvc_webhook_watch_write_duration_seconds`: one app's writes, from getting a write slot.
    pub write_duration: Histogram,
    /// `ksvc_webhook_drift_apps{reason}`: KServices in this replica's cache with each drift
    /// reason (one KService may count under several).
    pub drift_apps: Family<Labels, Gauge>,
    /// `ksvc_webhook_drift_last_evaluation_timestamp_seconds`: when every cached KService was
    /// last evaluated against the current policy (0 before the first time).
    pub drift_evaluated: Gauge<f64, AtomicU64>,
    /// `ksvc_webhook_readmit_total{result}`: re-admissions by how they ended (`converged`,
    /// `failed`, `timed_out`, `refused`, `unfixable`).
    pub readmit_total: Family<Labels, Counter>,
    /// `ksvc_webhook_readmit_in_flight`: re-admitted apps not settled yet, and writes under way.
    pub readmit_in_flight: Gauge,
    /// `ksvc_webhook_readmit_paused`: 1 while failures in a row hold re-admission, else 0.
    pub readmit_paused: Gauge,
}

/// Every `result` of `ksvc_webhook_readmit_total`.
pub const READMIT_RESULTS: [&str; 5] = ["converged", "failed", "timed_out", "refused", "unfixable"];

impl Default for Metrics {
    fn default() -> Self {
        Self {
            synced: Gauge::default(),
            apps: Family::default(),
            cached: Family::default(),
            reconciles: Counter::default(),
            errors: Family::default(),
            duration: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            writes: Family::default(),
            writes_in_flight: Gauge::default(),
            write_duration: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            drift_apps: Family::default(),
            drift_evaluated: Gauge::default(),
            readmit_total: Family::default(),
            readmit_in_flight: Gauge::default(),
            readmit_paused: Gauge::default(),
        }
    }
}

impl Metrics {
    /// Register every metric: the loop's under the `ksvc_webhook_watch` prefix, the drift
    /// report's under `ksvc_webhook_drift`.
    pub fn register(&self, registry: &mut Registry) {
        let drift = registry.sub_registry_with_prefix("ksvc_webhook_drift");
        drift.register(
            "apps",
            "KServices in this replica's cache that admission would change, or refuse, or does not serve, by reason",
            self.drift_apps.clone(),
        );
        // Every reason exists from the first scrape on.
        for reason in Reason::ALL {
            self.drift_apps
                .get_or_create(&vec![("reason", reason.as_str())])
                .inc_by(0);
        }
        drift.register(
            "last_evaluation_timestamp_seconds",
            "When every cached KService was last evaluated against the current admission policy",
            self.drift_evaluated.clone(),
        );
        let readmit = registry.sub_registry_with_prefix("ksvc_webhook_readmit");
        readmit.register(
            "in_flight",
            "Re-admitted apps whose new Revision is not settled yet, and re-admission writes under way",
            self.readmit_in_flight.clone(),
        );
        readmit.register(
            "paused",
            "1 while failures in a row hold re-admission until the policy changes, else 0",
            self.readmit_paused.clone(),
        );
        registry.register(
            "ksvc_webhook_readmit",
            "Re-admissions by how they ended",
            self.readmit_total.clone(),
        );
        for result in READMIT_RESULTS {
            self.readmit_total
                .get_or_create(&vec![("result", result)])
                .inc_by(0);
        }
        let r = registry.sub_registry_with_prefix("ksvc_webhook_watch");
        r.register(
            "synced",
            "1 once the app cache has listed everything and every app has a status, else 0",
            self.synced.clone(),
        );
        r.register(
            "apps",
            "Apps in each phase, from this replica's cache",
            self.apps.clone(),
        );
        r.register(
            "cached_objects",
            "Services and Revisions held in this replica's cache, by resource",
            self.cached.clone(),
        );
        for resource in ["services", "revisions"] {
            self.cached
                .get_or_create(&vec![("resource", resource)])
                .set(0);
        }
        r.register("reconciles", "Reconciles run", self.reconciles.clone());
        r.register(
            "errors",
            "Failed API calls and watch errors, by kind",
            self.errors.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Time to compute and publish one app's status and plan; writes are timed apart",
            self.duration.clone(),
        );
        r.register(
            "writes",
            "Writes made as leader, by action",
            self.writes.clone(),
        );
        // Every action and error kind exists from the first scrape on, so the first of each
        // shows in a rate.
        for action in ["stop_edits", "delete_revision", "event"] {
            self.writes
                .get_or_create(&vec![("action", action)])
                .inc_by(0);
        }
        for kind in ["watch", "write", "event", "lease", "connect"] {
            self.error_counter(kind);
        }
        r.register(
            "writes_in_flight",
            "Apps whose writes are queued or running",
            self.writes_in_flight.clone(),
        );
        r.register(
            "write_duration_seconds",
            "Time of one app's writes, from getting a write slot",
            self.write_duration.clone(),
        );
    }

    /// Count an error of a kind (`watch`, `write`, `event`, `lease`, `connect`).
    pub fn error(&self, kind: &'static str) {
        self.error_counter(kind).inc();
    }

    /// The counter of one kind of error, for a part that counts without knowing these metrics
    /// (the Lease election).
    pub fn error_counter(&self, kind: &'static str) -> Counter {
        self.errors.get_or_create(&vec![("kind", kind)]).clone()
    }

    /// Count a write (`stop_edits`, `delete_revision`, `event`).
    pub fn write(&self, action: &'static str) {
        self.writes.get_or_create(&vec![("action", action)]).inc();
    }

    /// Count a re-admission that ended so ([`READMIT_RESULTS`]).
    pub fn readmit(&self, result: &'static str) {
        self.readmit_total
            .get_or_create(&vec![("result", result)])
            .inc();
    }

    /// Set the per-reason drift gauges from the index.
    pub fn refresh_drift(&self, index: &DriftIndex) {
        for (reason, count) in index.counts() {
            self.drift_apps
                .get_or_create(&vec![("reason", reason.as_str())])
                .set(*count);
        }
    }

    /// Set the cached-objects gauges from the cache's stores.
    pub fn refresh_cached(&self, cache: &Cache) {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        for (resource, n) in [
            ("services", cache.services.len()),
            ("revisions", cache.revisions.len()),
        ] {
            self.cached
                .get_or_create(&vec![("resource", resource)])
                .set(count(n));
        }
    }

    /// Set the per-phase gauges from the hub.
    pub fn refresh_apps(&self, hub: &Hub) {
        for (phase, count) in hub.count_by_phase() {
            self.apps
                .get_or_create(&vec![("phase", phase.as_str())])
                .set(count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::hub::{AppRecord, Hub};
    use crate::watch::status::{AppStatus, Phase};

    #[test]
    fn registered_metrics_encode_with_phase_labels() {
        let metrics = Metrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let hub = Hub::new();
        hub.upsert(AppRecord {
            namespace: "ns".into(),
            name: "a".into(),
            project: None,
            domain: None,
            app_name: None,
            status: AppStatus {
                phase: Phase::Stopping,
                message: String::new(),
                last_transition_time: String::new(),
                replicas: None,
                url: None,
                substate: None,
            },
            drift: Default::default(),
        });
        metrics.refresh_apps(&hub);
        metrics.reconciles.inc();
        metrics.error("watch");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"ksvc_webhook_watch_apps{phase="STOPPING"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"ksvc_webhook_watch_apps{phase="ACTIVE"} 0"#),
            "{text}"
        );
        assert!(
            text.contains("ksvc_webhook_watch_reconciles_total 1"),
            "{text}"
        );
        assert!(
            text.contains(r#"ksvc_webhook_watch_errors_total{kind="watch"} 1"#),
            "{text}"
        );
        assert!(text.contains("ksvc_webhook_watch_synced 0"), "{text}");
        assert!(
            text.contains(r#"ksvc_webhook_watch_cached_objects{resource="revisions"} 0"#),
            "{text}"
        );
        for reason in Reason::ALL {
            let zero = format!(
                "ksvc_webhook_drift_apps{{reason=\"{}\"}} 0",
                reason.as_str()
            );
            assert!(text.contains(&zero), "{text}");
        }
        assert!(
            text.contains("ksvc_webhook_drift_last_evaluation_timestamp_seconds 0.0"),
            "{text}"
        );
        metrics.synced.set(1);
        metrics.writes_in_flight.inc();
        let ksvc = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "a", "namespace": "ns"}}),
        );
        metrics.refresh_cached(&Cache::from_objects(vec![ksvc.unwrap()], Vec::new()));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("ksvc_webhook_watch_synced 1"), "{text}");
        assert!(
            text.contains("ksvc_webhook_watch_writes_in_flight 1"),
            "{text}"
        );
        assert!(
            text.contains(r#"ksvc_webhook_watch_cached_objects{resource="services"} 1"#),
            "{text}"
        );
    }
}
