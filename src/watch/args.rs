//! The watch loop's flags, flattened into `serve`.

use std::time::Duration;

use clap::Args;

use crate::flags::parse_duration;

/// Flags of the watch loop (flattened into `serve`).
#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// Do not run the watch loop (no app status, no stop teardown); admission still works.
    #[arg(long, env = "KSVC_WEBHOOK_NO_WATCH")]
    pub no_watch: bool,
    /// Watch KServices in this namespace only; default: all namespaces.
    #[arg(long, env = "KSVC_WEBHOOK_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// Time between full re-reconciles of every app.
    #[arg(long, env = "KSVC_WEBHOOK_RESYNC_INTERVAL", default_value = "5m", value_parser = parse_duration)]
    pub resync_interval: Duration,
    /// Events a `/apps/watch` subscriber may lag behind before it is told to resync.
    #[arg(long, env = "KSVC_WEBHOOK_WATCH_BUFFER", default_value_t = 256)]
    pub watch_buffer: usize,
    /// Apps whose writes (as leader) may run at once; one app's writes never overlap, and
    /// status never waits for a write.
    #[arg(long, env = "KSVC_WEBHOOK_WRITE_CONCURRENCY", default_value = "4")]
    pub write_concurrency: std::num::NonZeroUsize,
    #[command(flatten)]
    pub readmit: super::readmit::args::ReadmitArgs,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Debug, Parser)]
    struct WithWatch {
        #[command(flatten)]
        watch: WatchArgs,
    }

    #[test]
    fn watch_args_are_well_formed_and_default_sensibly() {
        WithWatch::command().debug_assert();
        let parsed = WithWatch::try_parse_from(["x", "--no-watch", "--watch-buffer", "8"]).unwrap();
        assert!(parsed.watch.no_watch);
        assert_eq!(parsed.watch.watch_buffer, 8);
        assert_eq!(parsed.watch.resync_interval, Duration::from_secs(300));
    }
}
