//! The status API's flags, flattened into `serve`, with the minimums below which a value would
//! turn the cache or a stream's re-check into a flood of reviews, and the loopback-only address of
//! the local status listener (each refused when the flags are parsed, before the server starts).

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use crate::flags::{parse_duration, parse_listen_addr};

/// The port of the local status listener by default (`--local-status-listen`), where
/// `ksvc-webhook drift` port-forwards to: beside `--listen`'s 8443, and no other default's.
pub const LOCAL_STATUS_PORT: u16 = 8444;

/// The shortest `--status-auth-cache-ttl`: below, every request is a review.
pub const MIN_CACHE_TTL: Duration = Duration::from_secs(1);
/// The shortest `--status-watch-recheck`: each open stream sends two reviews per period.
pub const MIN_WATCH_RECHECK: Duration = Duration::from_secs(10);

/// Who may read the status API (`/apps…`, src/apps/http.rs) and how much: flattened into `serve`.
///
/// Callers authenticate with a bearer token (checked by a TokenReview) and are authorized as if
/// they read the Knative Services themselves (a SubjectAccessReview); see docs/status-api.md.
#[derive(Debug, Clone, Args)]
pub struct StatusApiArgs {
    /// Require a bearer token on /apps… and check it with TokenReview and SubjectAccessReview
    /// (`false` for local runs without a cluster: anyone may then read every app).
    #[arg(
        long,
        env = "KSVC_WEBHOOK_STATUS_AUTH",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub status_auth: bool,
    /// How long a TokenReview or SubjectAccessReview answer (allowed or denied) is reused (at
    /// least 1s).
    #[arg(long, env = "KSVC_WEBHOOK_STATUS_AUTH_CACHE_TTL", default_value = "10s", value_parser = parse_cache_ttl)]
    pub status_auth_cache_ttl: Duration,
    /// Most cached answers, for tokens and for access decisions each (the soonest to expire
    /// are dropped first).
    #[arg(long, env = "KSVC_WEBHOOK_STATUS_AUTH_CACHE_SIZE", default_value_t = 4096,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub status_auth_cache_size: u64,
    /// Most bytes of cached answers, for tokens and for access decisions each (the soonest to
    /// expire are dropped first).
    #[arg(long, env = "KSVC_WEBHOOK_STATUS_AUTH_CACHE_BYTES", default_value_t = 4 << 20,
          value_parser = clap::value_parser!(u64).range(4096..=(1 << 30)))]
    pub status_auth_cache_bytes: u64,
    /// Timeout of one TokenReview or SubjectAccessReview call.
    #[arg(long, env = "KSVC_WEBHOOK_STATUS_AUTH_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub status_auth_timeout: Duration,
    /// Audiences a bearer token must be valid for, comma-separated (sent in the TokenReview and
    /// checked in its answer); empty: the API server's own audience.
    #[arg(
        long,
        env = "KSVC_WEBHOOK_STATUS_AUTH_AUDIENCES",
        value_delimiter = ','
    )]
    pub status_auth_audiences: Vec<String>,
    /// TokenReviews per second of tokens this server has not seen, for all callers together
    /// (bursts of twice as many; 429 beyond).
    #[arg(long, env = "KSVC_WEBHOOK_STATUS_AUTH_NEW_TOKEN_RATE", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub status_auth_new_token_rate: u32,
    /// Reviews per second of one caller (by username; bursts of five times as many; 429
    /// beyond).
    #[arg(long, env = "KSVC_WEBHOOK_STATUS_AUTH_CALLER_RATE", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub status_auth_caller_rate: u32,
    /// Most TokenReviews and SubjectAccessReviews in flight at once (503 beyond).
    #[arg(long, env = "KSVC_WEBHOOK_STATUS_AUTH_MAX_IN_FLIGHT", default_value_t = 16,
          value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub status_auth_max_in_flight: u64,
    /// How often an open /apps/watch stream re-checks its token and access (at least 10s).
    #[arg(long, env = "KSVC_WEBHOOK_STATUS_WATCH_RECHECK", default_value = "10s", value_parser = parse_watch_recheck)]
    pub status_watch_recheck: Duration,
    /// Most concurrent /apps/watch streams of all callers together (429 beyond).
    #[arg(long, env = "KSVC_WEBHOOK_MAX_WATCH_STREAMS", default_value_t = 512)]
    pub max_watch_streams: usize,
    /// Most concurrent /apps/watch streams of one caller (one authenticated user; 429 beyond).
    #[arg(
        long,
        env = "KSVC_WEBHOOK_MAX_WATCH_STREAMS_PER_CALLER",
        default_value_t = 16
    )]
    pub max_watch_streams_per_caller: usize,
    /// Most concurrent /apps/watch streams of the ServiceAccounts of one namespace together
    /// (`system:serviceaccount:NS:…` callers; 429 beyond).
    #[arg(
        long,
        env = "KSVC_WEBHOOK_MAX_WATCH_STREAMS_PER_NAMESPACE",
        default_value_t = 64
    )]
    pub max_watch_streams_per_namespace: usize,
    /// Serve the status API's read-only routes (/apps…) without a token on this loopback
    /// address too, plain HTTP, for `ksvc-webhook drift` through a port-forward (reaching it
    /// takes `create pods/portforward` in this namespace, which already yields this pod's
    /// token); `off` for none. A loopback address only (127.0.0.1, ::1, localhost).
    #[arg(long, env = "KSVC_WEBHOOK_LOCAL_STATUS_LISTEN", default_value = "127.0.0.1:8444",
          value_name = "HOST:PORT|off", value_parser = parse_local_listen)]
    pub local_status_listen: LocalListen,
    /// Require a bearer token on /metrics too, allowed `get` on the non-resource URL /metrics
    /// (Prometheus then scrapes with its ServiceAccount token).
    #[arg(long, env = "KSVC_WEBHOOK_METRICS_AUTH")]
    pub metrics_auth: bool,
}

/// Where the local status listener listens: a loopback address, or nowhere (`off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalListen(pub Option<SocketAddr>);

/// `off`, or a loopback `HOST:PORT`; any other address is refused, saying why.
fn parse_local_listen(text: &str) -> Result<LocalListen, String> {
    if text == "off" {
        return Ok(LocalListen(None));
    }
    let addr = parse_listen_addr(text)?;
    match addr.ip().is_loopback() {
        true => Ok(LocalListen(Some(addr))),
        false => Err(format!(
            "--local-status-listen is {text}, not a loopback address: it serves every app without \
             a token, which is safe only where nothing outside the pod reaches it (a \
             port-forward, which already needs the pod's rights); use 127.0.0.1:PORT, [::1]:PORT, \
             or off"
        )),
    }
}

/// A duration of at least `min`, or why not, naming the flag.
fn at_least(text: &str, min: Duration, flag: &str, why: &str) -> Result<Duration, String> {
    let value = parse_duration(text)?;
    match value >= min {
        true => Ok(value),
        false => Err(format!(
            "{flag} is {text}, below its minimum of {}s: {why}",
            min.as_secs()
        )),
    }
}

fn parse_cache_ttl(text: &str) -> Result<Duration, String> {
    let why = "a shorter TTL makes every request its own TokenReview and SubjectAccessReview";
    at_least(text, MIN_CACHE_TTL, "--status-auth-cache-ttl", why)
}

fn parse_watch_recheck(text: &str) -> Result<Duration, String> {
    let why = "every open /apps/watch stream sends two reviews per period";
    at_least(text, MIN_WATCH_RECHECK, "--status-watch-recheck", why)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Flags {
        #[command(flatten)]
        status: StatusApiArgs,
    }

    fn parse(args: &[&str]) -> Result<StatusApiArgs, String> {
        let all = std::iter::once("x").chain(args.iter().copied());
        Flags::try_parse_from(all)
            .map(|f| f.status)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_ttl_and_the_recheck_period_have_minimums() {
        let cases = [
            (
                "--status-auth-cache-ttl=0s",
                "--status-auth-cache-ttl is 0s, below its minimum of 1s",
            ),
            ("--status-auth-cache-ttl=999ms", "below its minimum of 1s"),
            (
                "--status-watch-recheck=0s",
                "--status-watch-recheck is 0s, below its minimum of 10s",
            ),
            ("--status-watch-recheck=9s", "below its minimum of 10s"),
        ];
        for (flag, want) in cases {
            let error = parse(&[flag]).unwrap_err();
            assert!(error.contains(want), "{flag}: {error}");
        }
        let lowest = parse(&["--status-auth-cache-ttl=1s", "--status-watch-recheck=10s"]).unwrap();
        assert_eq!(lowest.status_auth_cache_ttl, MIN_CACHE_TTL);
        assert_eq!(lowest.status_watch_recheck, MIN_WATCH_RECHECK);
        assert!(parse(&["--status-auth-cache-ttl=banana"]).is_err());
    }

    #[test]
    fn budgets_cannot_be_switched_off() {
        for flag in [
            "--status-auth-new-token-rate=0",
            "--status-auth-caller-rate=0",
            "--status-auth-max-in-flight=0",
            "--status-auth-cache-bytes=0",
        ] {
            assert!(parse(&[flag]).is_err(), "{flag}");
        }
    }

    /// Loopback only: any other address, the wildcard ones first, is refused with the reason.
    #[test]
    fn the_local_status_listener_is_loopback_or_off() {
        let listen = |args: &[&str]| parse(args).map(|a| a.local_status_listen.0);
        let default = format!("127.0.0.1:{LOCAL_STATUS_PORT}");
        assert_eq!(listen(&[]).unwrap(), Some(default.parse().unwrap()));
        assert_eq!(listen(&["--local-status-listen=off"]).unwrap(), None);
        for (text, want) in [
            ("127.0.0.1:0", "127.0.0.1:0"),
            ("localhost:9000", "127.0.0.1:9000"),
            ("[::1]:8444", "[::1]:8444"),
            ("127.0.0.2:8444", "127.0.0.2:8444"),
        ] {
            let got = listen(&[&format!("--local-status-listen={text}")]);
            assert_eq!(got.unwrap(), Some(want.parse().unwrap()), "{text}");
        }
        for text in ["0.0.0.0:8444", ":8444", "[::]:8444", "10.0.0.7:8444"] {
            let error = parse(&[&format!("--local-status-listen={text}")]).unwrap_err();
            assert!(error.contains("not a loopback address"), "{text}: {error}");
            assert!(error.contains("without a token"), "{text}: {error}");
        }
        let error = parse(&["--local-status-listen=127.0.0.1:70000"]).unwrap_err();
        assert!(error.contains("out of range"), "{error}");
    }

    #[test]
    fn audiences_are_a_comma_list() {
        let args = parse(&["--status-auth-audiences=ksvc-webhook,https://kubernetes.default.svc"]);
        assert_eq!(
            args.unwrap().status_auth_audiences,
            ["ksvc-webhook", "https://kubernetes.default.svc"]
        );
        assert!(parse(&[]).unwrap().status_auth_audiences.is_empty());
    }
}
