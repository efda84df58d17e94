//! The W3C trace context kube-apiserver sends its webhooks (`traceparent`, with APIServerTracing):
//! read, so that a decision's log line names the API server's trace and span, and a slow
//! `kubectl apply` can be followed to the webhook's line; and the review's own span, a child of
//! the API server's, for `serve --otlp-endpoint`.
//!
//! The span is a `tracing` span with target [`SPAN_TARGET`], never entered (no log line is
//! inside it) and ended when dropped; the OpenTelemetry layer that `serve` installs with
//! `--otlp-endpoint` is the only one that exports it. Without that flag the routes never make
//! one. Exports nothing itself and never blocks.

use axum::http::StatusCode;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::admission::Summary;

/// The `tracing` target of the review spans: the one target the OpenTelemetry layer exports.
pub const SPAN_TARGET: &str = "ksvc_webhook::review";

/// The `tracing` target of the lines about refused requests (undecodable or oversized reviews,
/// status requests denied): the log drops them first when it must drop lines.
pub const REFUSED_TARGET: &str = "ksvc_webhook::refused";

/// The most bytes of a string attribute: a review's strings come from its sender, and a span
/// outlives the request in the exporter's queue. Kubernetes names fit (253 bytes at most).
pub const MAX_ATTRIBUTE_BYTES: usize = 256;

/// The ids of a `traceparent` header: `00-<trace-id>-<parent-id>-<flags>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext<'a> {
    /// 32 lower-case hex digits, not all zero.
    pub trace_id: &'a str,
    /// 16 lower-case hex digits, not all zero: the API server's span that called the webhook.
    pub span_id: &'a str,
    /// The `sampled` bit of the flags: whether the API server records its trace.
    pub sampled: bool,
}

impl<'a> TraceContext<'a> {
    /// The context of a `traceparent` value, or `None` when it is not one (an unknown version's
    /// first four fields are read as version 00's, as the specification asks).
    pub fn parse(header: &'a str) -> Option<Self> {
        let mut fields = header.trim().split('-');
        let version = fields.next()?;
        let (trace_id, span_id, flags) = (fields.next()?, fields.next()?, fields.next()?);
        let hex = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        let id = |s: &str, len: usize| hex(s, len) && s.bytes().any(|b| b != b'0');
        let version_ok = hex(version, 2) && version != "ff";
        let rest_ok = version != "00" || fields.next().is_none();
        let flags = u8::from_str_radix(flags, 16)
            .ok()
            .filter(|_| hex(flags, 2))?;
        (version_ok && rest_ok && id(trace_id, 32) && id(span_id, 16)).then_some(Self {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }

    /// The API server's span as the remote parent of an OpenTelemetry span.
    fn parent(self) -> Option<opentelemetry::Context> {
        let flags = match self.sampled {
            true => TraceFlags::SAMPLED,
            false => TraceFlags::default(),
        };
        let parent = SpanContext::new(
            TraceId::from_hex(self.trace_id).ok()?,
            SpanId::from_hex(self.span_id).ok()?,
            flags,
            true,
            TraceState::NONE,
        );
        Some(opentelemetry::Context::new().with_remote_span_context(parent))
    }
}

/// The span of one review on `route`: a child of the API server's span when `parent` is its
/// `traceparent`, a new trace otherwise. The SDK's parent-based sampler keeps the API server's
/// decision: a review whose parent is not sampled is not exported, nor by default one without a
/// parent (`--otlp-untraced-reviews` exports those).
pub fn review_span(route: &'static str, parent: Option<TraceContext>) -> Span {
    let span = tracing::info_span!(
        target: SPAN_TARGET,
        parent: None,
        "admission.review",
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = "POST",
        http.route = route,
        http.response.status_code = Empty,
        admission.uid = Empty,
        admission.operation = Empty,
        admission.kind = Empty,
        admission.namespace = Empty,
        admission.name = Empty,
        admission.dry_run = Empty,
        admission.allowed = Empty,
        admission.rejected_rules = Empty,
    );
    if let Some(parent) = parent.and_then(TraceContext::parent) {
        // Fails only when no OpenTelemetry layer is installed: the span is then a new trace
        // that nothing exports.
        let _ = span.set_parent(parent);
    }
    span
}

/// Record what was decided on `span`. The values are typed attributes, not log text: strings
/// go as they are (the exporter's protobuf delimits them), cut to [`MAX_ATTRIBUTE_BYTES`]. Free
/// when the span is disabled.
pub fn record_decision(span: &Span, summary: &Summary) {
    if span.is_disabled() {
        return;
    }
    span.record("admission.uid", bounded(&summary.uid));
    span.record("admission.operation", bounded(&summary.operation));
    span.record("admission.kind", bounded(&summary.kind));
    span.record("admission.namespace", bounded(&summary.namespace));
    span.record("admission.name", bounded(&summary.name));
    span.record("admission.dry_run", summary.dry_run);
    span.record("admission.allowed", summary.allowed);
    if !summary.rejected_rules.is_empty() {
        let rules = summary.rejected_rules.join(",");
        span.record("admission.rejected_rules", bounded(&rules));
    }
    if summary.failure.is_some() {
        span.record("otel.status_code", "error");
    }
}

/// `text` cut to [`MAX_ATTRIBUTE_BYTES`] at a character boundary (span attributes, log fields).
pub fn bounded(text: &str) -> &str {
    let mut end = text.len().min(MAX_ATTRIBUTE_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Record the HTTP status of the answer on `span`; a 5xx marks the span as failed.
pub fn record_status(span: &Span, status: StatusCode) {
    if span.is_disabled() {
        return;
    }
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_cut_at_a_character_boundary() {
        let name = "a".repeat(MAX_ATTRIBUTE_BYTES - 1) + "é";
        assert_eq!(bounded(&name), &name[..MAX_ATTRIBUTE_BYTES - 1]);
        assert_eq!(bounded("myapp"), "myapp");
        assert_eq!(bounded(&"x".repeat(100_000)).len(), MAX_ATTRIBUTE_BYTES);
    }

    #[test]
    fn traceparent_values_as_the_specification_reads_them() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            TraceContext::parse(good),
            Some(TraceContext {
                trace_id: "4bf92f3577b34da6a3ce929d0e0e4736",
                span_id: "00f067aa0ba902b7",
                sampled: true,
            })
        );
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert_eq!(
            TraceContext::parse(unsampled).map(|t| t.sampled),
            Some(false)
        );
        // A later version may add fields.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra";
        assert!(TraceContext::parse(later).is_some());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-+1",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad}");
        }
    }
}
