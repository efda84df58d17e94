//! The server's Prometheus metrics and the `/metrics` text encoding.
//!
//! Owns the admission, connection and certificate metrics; other components register theirs into the same
//! `prometheus_client` [`Registry`] before the server starts (see [`super::Server::registry_mut`]).
//! Label values come from closed sets (operations, results, rule names) so cardinality stays
//! bounded. Never records object contents.

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::conns::Refused;

/// Labels of the request counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    operation: &'static str,
    result: &'static str,
}

/// Labels of the rejection counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    rule: &'static str,
}

/// Labels of the certificate reload counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    result: &'static str,
}

/// Labels of the open-connection gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    listener: &'static str,
}

/// Labels of the refused-connection counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusedLabels {
    listener: &'static str,
    reason: &'static str,
}

/// What became of one admission request (the `result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    Denied,
    /// 400: the body is not an AdmissionReview.
    Invalid,
    /// 413: the body is over the limit.
    TooLarge,
    /// 415: the Content-Type is not JSON.
    WrongType,
    /// The decision panicked (a bug); answered 400 rather than 500.
    Failed,
    /// 408: the body had not arrived by `--request-timeout`.
    TimedOut,
    /// 503: the body did not fit in `--body-budget`.
    OverBudget,
}

impl Outcome {
    /// Every outcome, so each series exists from the first scrape on.
    const ALL: [Self; 8] = [
        Self::Allowed,
        Self::Denied,
        Self::Invalid,
        Self::TooLarge,
        Self::WrongType,
        Self::Failed,
        Self::TimedOut,
        Self::OverBudget,
    ];

    /// The `operation` labels this outcome is counted under: a decision under the review's
    /// operation, anything else before the operation is known.
    fn operations(self) -> &'static [&'static str] {
        match self {
            Self::Allowed | Self::Denied => &["CREATE", "UPDATE", "DELETE", "CONNECT", "other"],
            _ => &["unknown"],
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Denied => "denied",
            Self::Invalid => "invalid",
            Self::TooLarge => "too_large",
            Self::WrongType => "unsupported_media_type",
            Self::Failed => "failed",
            Self::TimedOut => "timeout",
            Self::OverBudget => "over_budget",
        }
    }
}

/// The server's metric handles; cheap to clone.
#[derive(Debug, Clone)]
pub struct Metrics {
    requests: Family<RequestLabels, Counter>,
    duration: Histogram,
    rejections: Family<RuleLabels, Counter>,
    cert_expiry: Gauge<i64, AtomicI64>,
    cert_reloads: Family<ReloadLabels, Counter>,
    connections: Family<ListenerLabels, Gauge<i64, AtomicI64>>,
    connections_refused: Family<RefusedLabels, Counter>,
    body_bytes: Gauge<i64, AtomicI64>,
}

impl Metrics {
    /// Create the metrics and register them under `ksvc_webhook_` in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        // 50 µs … ~1.6 s, doubling: admission decisions are sub-millisecond when healthy.
        let buckets = prometheus_client::metrics::histogram::exponential_buckets(0.000_05, 2.0, 16);
        let metrics = Self {
            requests: Family::default(),
            duration: Histogram::new(buckets),
            rejections: Family::default(),
            cert_expiry: Gauge::default(),
            cert_reloads: Family::default(),
            connections: Family::default(),
            connections_refused: Family::default(),
            body_bytes: Gauge::default(),
        };
        let reg = registry.sub_registry_with_prefix("ksvc_webhook");
        reg.register(
            "admission_requests",
            "Admission requests by operation and result",
            metrics.requests.clone(),
        );
        reg.register(
            "admission_duration_seconds",
            "Time to read, decide and answer one admission request",
            metrics.duration.clone(),
        );
        reg.register(
            "admission_rejections",
            "Rejected admissions by broken rule",
            metrics.rejections.clone(),
        );
        // Every series of a closed label set exists from the first scrape on (the Prometheus
        // advice): a panel reads 0 rather than "no data", and the first event shows in a rate.
        for outcome in Outcome::ALL {
            for &operation in outcome.operations() {
                let result = outcome.label();
                let labels = RequestLabels { operation, result };
                metrics.requests.get_or_create(&labels).inc_by(0);
            }
        }
        for rule in crate::admission::RULES {
            metrics
                .rejections
                .get_or_create(&RuleLabels { rule })
                .inc_by(0);
        }
        reg.register(
            "certificate_expiry_timestamp_seconds",
            "notAfter of the serving certificate in use, unix seconds",
            metrics.cert_expiry.clone(),
        );
        reg.register(
            "certificate_reloads",
            "Serving certificate reloads by result (ok or error)",
            metrics.cert_reloads.clone(),
        );
        // Every result from the first scrape on: a rate over a series that appears only at the
        // first failure shows nothing for that failure.
        for result in ["ok", "error"] {
            metrics
                .cert_reloads
                .get_or_create(&ReloadLabels { result })
                .inc_by(0);
        }
        reg.register(
            "connections",
            "Open connections by listener (admission: the TLS port; plain: --metrics-listen; local: --local-status-listen)",
            metrics.connections.clone(),
        );
        reg.register(
            "connections_refused",
            "Connections closed by listener and reason: refused at a cap (max_connections, max_connections_per_ip), or evicted to make room for a newcomer",
            metrics.connections_refused.clone(),
        );
        reg.register(
            "admission_body_bytes",
            "Request body bytes reserved by admission requests being read or decided",
            metrics.body_bytes.clone(),
        );
        metrics
    }

    /// The gauge of `listener`'s open connections; its refusal counters exist from then on.
    pub(crate) fn connections(&self, listener: &'static str) -> Gauge<i64, AtomicI64> {
        for refused in Refused::ALL {
            let labels = RefusedLabels {
                listener,
                reason: refused.label(),
            };
            self.connections_refused.get_or_create(&labels).inc_by(0);
        }
        self.connections
            .get_or_create(&ListenerLabels { listener })
            .clone()
    }

    /// Count one connection `listener` closed at once for `reason`.
    pub(crate) fn connection_refused(&self, listener: &'static str, reason: &'static str) {
        let labels = RefusedLabels { listener, reason };
        self.connections_refused.get_or_create(&labels).inc();
    }

    /// The gauge of reserved body bytes.
    pub(crate) fn body_bytes(&self) -> Gauge<i64, AtomicI64> {
        self.body_bytes.clone()
    }

    /// Count one admission request and its latency.
    pub fn observe(&self, operation: &str, outcome: Outcome, seconds: f64) {
        let labels = RequestLabels {
            operation: operation_label(operation),
            result: outcome.label(),
        };
        self.requests.get_or_create(&labels).inc();
        self.duration.observe(seconds);
    }

    /// Count the rules one rejection broke.
    pub fn rejected(&self, rules: &[&'static str]) {
        for &rule in rules {
            self.rejections.get_or_create(&RuleLabels { rule }).inc();
        }
    }

    pub(crate) fn cert_loaded(&self, not_after_unix: i64) {
        self.cert_expiry.set(not_after_unix);
    }

    pub(crate) fn cert_reloaded(&self) {
        self.reload("ok");
    }

    pub(crate) fn cert_reload_failed(&self) {
        self.reload("error");
    }

    fn reload(&self, result: &'static str) {
        self.cert_reloads
            .get_or_create(&ReloadLabels { result })
            .inc();
    }
}

/// Map an AdmissionReview operation onto the closed label set.
fn operation_label(operation: &str) -> &'static str {
    match operation {
        "CREATE" => "CREATE",
        "UPDATE" => "UPDATE",
        "DELETE" => "DELETE",
        "CONNECT" => "CONNECT",
        "" => "unknown",
        _ => "other",
    }
}

/// The frozen registry behind `/metrics`.
#[derive(Debug, Clone)]
pub struct Exposition {
    registry: Arc<Registry>,
}

impl Exposition {
    pub fn new(registry: Registry) -> Self {
        Self {
            registry: Arc::new(registry),
        }
    }

    /// The OpenMetrics text of every registered metric.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::with_capacity(4096);
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_encode_with_bounded_labels() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.observe("CREATE", Outcome::Allowed, 0.001);
        metrics.observe("whatever", Outcome::Invalid, 0.001);
        metrics.rejected(&["name"]);
        metrics.cert_loaded(1_800_000_000);
        metrics.cert_reload_failed();
        metrics.observe("CREATE", Outcome::TimedOut, 10.0);
        metrics.connection_refused("admission", "max_connections");
        metrics.connections("admission").set(3);
        metrics.body_bytes().set(1024);
        let text = Exposition::new(registry).encode().unwrap();
        for want in [
            r#"ksvc_webhook_admission_requests_total{operation="CREATE",result="allowed"} 1"#,
            r#"ksvc_webhook_admission_requests_total{operation="other",result="invalid"} 1"#,
            r#"ksvc_webhook_admission_rejections_total{rule="name"} 1"#,
            "ksvc_webhook_certificate_expiry_timestamp_seconds 1800000000",
            r#"ksvc_webhook_certificate_reloads_total{result="error"} 1"#,
            "ksvc_webhook_admission_duration_seconds_count 3",
            r#"ksvc_webhook_admission_requests_total{operation="CREATE",result="timeout"} 1"#,
            r#"ksvc_webhook_connections_refused_total{listener="admission",reason="max_connections"} 1"#,
            r#"ksvc_webhook_connections{listener="admission"} 3"#,
            "ksvc_webhook_admission_body_bytes 1024",
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
    }

    #[test]
    fn every_known_series_is_there_before_its_first_event() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let _ = metrics.connections("admission");
        let text = Exposition::new(registry).encode().unwrap();
        let zero = |name: &str, labels: &str| format!("ksvc_webhook_{name}_total{{{labels}}} 0");
        let mut want = vec![
            zero(
                "admission_requests",
                r#"operation="CREATE",result="allowed""#,
            ),
            zero("admission_requests", r#"operation="other",result="denied""#),
            zero(
                "admission_requests",
                r#"operation="unknown",result="over_budget""#,
            ),
            zero("certificate_reloads", r#"result="error""#),
        ];
        for reason in ["max_connections", "max_connections_per_ip"] {
            let labels = format!(r#"listener="admission",reason="{reason}""#);
            want.push(zero("connections_refused", &labels));
        }
        for rule in crate::admission::RULES {
            want.push(zero("admission_rejections", &format!("rule=\"{rule}\"")));
        }
        for line in want {
            assert!(text.contains(&line), "missing {line} in\n{text}");
        }
    }
}
