//! The flags of re-admission (flattened into the watch loop's, so into `serve`).

use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use clap::Args;

use super::wave::{Mode, Settings};
use crate::admission::drift::Reason;
use crate::flags::{parse_duration, parse_nonzero_duration};

/// How drifted KServices are written again (off by default; the leader only).
#[derive(Debug, Clone, Args)]
pub struct ReadmitArgs {
    /// Write drifted KServices again through admission, on the leader only: `off` (the drift
    /// report only), `labelled` (in namespaces labelled `ksvc-webhook.flyte.org/readmit=enabled`)
    /// or `all`. Each write that changes the template is a new Revision and new pods.
    #[arg(long = "readmit", env = "KSVC_WEBHOOK_READMIT", value_enum, default_value_t = Mode::Off)]
    pub mode: Mode,
    /// The drift reasons re-admission acts on, comma-separated; default: every one a write can
    /// fix (`would-reject`, `excluded` and `blocked-revision-name` never are).
    #[arg(
        long = "readmit-reasons",
        env = "KSVC_WEBHOOK_READMIT_REASONS",
        value_delimiter = ',',
        value_parser = parse_reason,
        value_name = "REASON"
    )]
    pub reasons: Vec<Reason>,
    /// Re-admitted apps whose new Revision may be not Ready yet at once.
    #[arg(
        long = "readmit-max-in-flight",
        env = "KSVC_WEBHOOK_READMIT_MAX_IN_FLIGHT",
        default_value = "1"
    )]
    pub max_in_flight: NonZeroUsize,
    /// The least time between two re-admissions.
    #[arg(long = "readmit-interval", env = "KSVC_WEBHOOK_READMIT_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub interval: Duration,
    /// A re-admitted app whose new Revision is not Ready by then counts as failed.
    #[arg(long = "readmit-ready-timeout", env = "KSVC_WEBHOOK_READMIT_READY_TIMEOUT", default_value = "5m", value_parser = parse_nonzero_duration)]
    pub ready_timeout: Duration,
    /// Failures in a row (a failed or late Revision, a refused write) in one namespace that pause
    /// re-admission there, and across three namespaces everywhere, until the policy changes or
    /// the server restarts.
    #[arg(
        long = "readmit-max-failures",
        env = "KSVC_WEBHOOK_READMIT_MAX_FAILURES",
        default_value = "3"
    )]
    pub max_failures: NonZeroU32,
}

impl Default for ReadmitArgs {
    fn default() -> Self {
        Self {
            mode: Mode::Off,
            reasons: Vec::new(),
            max_in_flight: NonZeroUsize::MIN,
            interval: Duration::from_secs(30),
            ready_timeout: Duration::from_secs(300),
            max_failures: NonZeroU32::new(3).unwrap_or(NonZeroU32::MIN),
        }
    }
}

impl ReadmitArgs {
    /// The wave's settings.
    pub fn settings(&self) -> Settings {
        let defaults = Settings::default();
        Settings {
            mode: self.mode,
            reasons: match self.reasons.is_empty() {
                true => defaults.reasons,
                false => self.reasons.iter().copied().collect(),
            },
            max_in_flight: self.max_in_flight.get(),
            interval: self.interval,
            ready_timeout: self.ready_timeout,
            max_failures: self.max_failures.get(),
        }
    }
}

/// A reason re-admission may act on.
fn parse_reason(text: &str) -> Result<Reason, String> {
    let text = text.trim();
    let reason = Reason::ALL
        .into_iter()
        .find(|r| r.as_str() == text)
        .ok_or_else(|| {
            let names: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
            format!("`{text}` is no drift reason; one of {}", names.join(", "))
        })?;
    match reason.fixable() {
        true => Ok(reason),
        false => Err(format!("`{text}` is never acted on: a write cannot fix it")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Debug, Parser)]
    struct With {
        #[command(flatten)]
        readmit: ReadmitArgs,
    }

    #[test]
    fn readmission_is_off_unless_asked_and_never_acts_on_what_a_write_cannot_fix() {
        With::command().debug_assert();
        let parsed = With::try_parse_from(["x"]).unwrap().readmit;
        assert_eq!(parsed.settings(), Settings::default());
        assert_eq!(parsed.settings(), ReadmitArgs::default().settings());
        let parsed = With::try_parse_from([
            "x",
            "--readmit=labelled",
            "--readmit-reasons",
            "stale-sidecars,missing-spec-sha",
            "--readmit-interval",
            "1m",
        ])
        .unwrap()
        .readmit
        .settings();
        assert_eq!(parsed.mode, Mode::Labelled);
        assert_eq!(
            parsed.reasons,
            [Reason::MissingSpecSha, Reason::StaleSidecars].into()
        );
        assert_eq!(parsed.interval, Duration::from_secs(60));
        for bad in ["would-reject", "excluded", "blocked-revision-name", "nope"] {
            let err = With::try_parse_from(["x", "--readmit-reasons", bad]).unwrap_err();
            assert!(err.to_string().contains(bad), "{err}");
        }
        assert!(With::try_parse_from(["x", "--readmit-ready-timeout", "0s"]).is_err());
    }
}
