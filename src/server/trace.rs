//! The W3C trace context kube-apiserver sends its webhooks (`traceparent`, with APIServerTracing):
//! read, so that a decision's log line names the API server's trace and span, and a slow
//! `kubectl apply` can be followed to the webhook's line. Parsing only; nothing is exported.

/// The ids of a `traceparent` header: `00-<trace-id>-<parent-id>-<flags>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext<'a> {
    /// 32 lower-case hex digits, not all zero.
    pub trace_id: &'a str,
    /// 16 lower-case hex digits, not all zero: the API server's span that called the webhook.
    pub span_id: &'a str,
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
                && s.bytes().any(|b| b != b'0')
        };
        let version_ok =
            version.len() == 2 && version != "ff" && hex(version, 2) || version == "00";
        let rest_ok = version != "00" || fields.next().is_none();
        (version_ok && rest_ok && hex(trace_id, 32) && hex(span_id, 16) && flags.len() == 2)
            .then_some(Self { trace_id, span_id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_values_as_the_specification_reads_them() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            TraceContext::parse(good),
            Some(TraceContext {
                trace_id: "4bf92f3577b34da6a3ce929d0e0e4736",
                span_id: "00f067aa0ba902b7",
            })
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
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad}");
        }
    }
}
