//! The status API's metric handles (`ksvc_webhook_status_…`), shared by its reviewers and
//! routes. Every label takes one of a few fixed values; nothing a caller sends becomes one.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, &'static str)>;

/// The status API's metric handles.
#[derive(Clone, Default)]
pub struct StatusMetrics {
    /// `reviews_total{kind,result}`: TokenReviews and SubjectAccessReviews sent (cache misses).
    pub reviews: Family<Labels, Counter>,
    /// `refused_total{kind,reason}`: requests refused before a review was sent, because the
    /// budget of reviews was spent (`rate_limited`, 429) or too many were in flight
    /// (`overloaded`, 503).
    pub refused: Family<Labels, Counter>,
    /// `cache_bytes{cache}`: bytes the cached answers take (`token` and `access`, over all
    /// reviewers).
    pub cache_bytes: Family<Labels, Gauge>,
    /// `watch_streams`: `/apps/watch` streams open now.
    pub watch_streams: Gauge,
    /// `watch_rejected_total{limit}`: streams refused with 429, by the limit hit.
    pub watch_rejected: Family<Labels, Counter>,
    /// `watch_cut_total`: streams ended because the caller lost access (or it could not be
    /// re-checked).
    pub watch_cut: Counter,
}

impl StatusMetrics {
    /// Register every metric under the `ksvc_webhook_status` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("ksvc_webhook_status");
        let reviews = "TokenReviews and SubjectAccessReviews sent, by kind and result";
        r.register("reviews", reviews, self.reviews.clone());
        let refused =
            "Requests refused before a review was sent: rate_limited (429) or overloaded (503)";
        r.register("refused", refused, self.refused.clone());
        // Every review result and refusal exists from the first scrape on, so the first one
        // shows in a rate.
        for kind in ["token", "access"] {
            for result in ["allowed", "denied", "unavailable"] {
                self.reviews
                    .get_or_create(&vec![("kind", kind), ("result", result)])
                    .inc_by(0);
            }
            for reason in ["rate_limited", "overloaded"] {
                self.refused
                    .get_or_create(&vec![("kind", kind), ("reason", reason)])
                    .inc_by(0);
            }
        }
        let bytes = "Bytes the cached TokenReview and SubjectAccessReview answers take";
        r.register("cache_bytes", bytes, self.cache_bytes.clone());
        let streams = "Open /apps/watch streams";
        r.register("watch_streams", streams, self.watch_streams.clone());
        let rejected = "/apps/watch streams refused with 429, by limit";
        r.register("watch_rejected", rejected, self.watch_rejected.clone());
        for limit in ["total", "per_caller", "per_namespace"] {
            self.watch_rejected
                .get_or_create(&vec![("limit", limit)])
                .inc_by(0);
        }
        let cut = "/apps/watch streams ended because the caller's access was revoked";
        r.register("watch_cut", cut, self.watch_cut.clone());
    }

    /// Count a review of `kind` (`token`, `access`) sent, by `result`.
    pub(super) fn review(&self, kind: &'static str, result: &'static str) {
        let labels = vec![("kind", kind), ("result", result)];
        self.reviews.get_or_create(&labels).inc();
    }

    /// Count a request refused before its review of `kind` was sent, by `reason`.
    pub(super) fn refuse(&self, kind: &'static str, reason: &'static str) {
        let labels = vec![("kind", kind), ("reason", reason)];
        self.refused.get_or_create(&labels).inc();
    }

    /// The byte gauge of the `cache` (`token`, `access`).
    pub(super) fn cache_bytes(&self, cache: &'static str) -> Gauge {
        self.cache_bytes
            .get_or_create(&vec![("cache", cache)])
            .clone()
    }
}
