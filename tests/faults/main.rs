//! Fault injection: every API call the server makes fails first — 403, 404, 409, 429 with
//! Retry-After, 500, no answer, a dropped connection — and the server must recover by itself
//! once the fault stops, within the backoff bound of the loop that made the call, saying at the
//! default log level what it waits for, once per backoff step, while readiness tells the truth.
//!
//! One row per call × fault, grouped by component and run concurrently within a group (each row
//! has its own fake API server, tests/support/fake_api.rs): [`certs`] (the certificate manager at
//! start), [`lease`] (leader election), [`watch`] (the watch loop's lists, watches and writes).
//! [`process`] kills a leader, deletes the certificate Secret and empties the caBundle;
//! [`admission`] runs the server as `serve` wires it while the lists fail;
//! [`startup`] runs the built binary against an API server that never lets it start. Times are
//! real (sockets and TLS do not run on a paused clock); each row prints its measured recovery
//! time, which docs/reliability.md reports.

#[cfg(test)]
mod admission;
#[cfg(test)]
mod certs;
#[cfg(test)]
mod lease;
#[cfg(test)]
mod process;
#[cfg(test)]
mod startup;
#[cfg(test)]
mod watch;

#[cfg(test)]
mod common {
    use std::io::Write;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use support::fake_api::Fault;

    /// Slack on every measured bound: scheduling on a busy 2-core CI machine, certificate
    /// generation, HTTP round trips. The bounds themselves are the loops' backoff steps.
    pub const SLACK: Duration = Duration::from_secs(3);

    /// Log lines at the server's default level (info), captured per row.
    #[derive(Clone, Default)]
    pub struct Logs(Arc<Mutex<Vec<u8>>>);

    impl Write for Logs {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Logs {
        /// A subscriber writing here at the default level, for `WithSubscriber::with_subscriber`.
        pub fn dispatch(&self) -> tracing::Dispatch {
            // tracing caches per call site whether any subscriber wants it. With only short-lived
            // per-row subscribers, a call site first hit while none of them is alive would be
            // cached as unwanted; a process-wide one at the same level keeps them all enabled.
            static WANTED: std::sync::Once = std::sync::Once::new();
            WANTED.call_once(|| {
                let everywhere = tracing_subscriber::fmt()
                    .with_writer(std::io::sink)
                    .with_max_level(tracing::Level::INFO)
                    .finish();
                let _ = tracing::subscriber::set_global_default(everywhere);
            });
            let logs = self.clone();
            tracing_subscriber::fmt()
                .with_writer(move || logs.clone())
                .with_max_level(tracing::Level::INFO)
                .with_ansi(false)
                .without_time()
                .finish()
                .into()
        }

        pub fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }

        /// Lines at WARN containing every one of `needles`.
        pub fn warns(&self, needles: &[&str]) -> Vec<String> {
            self.text()
                .lines()
                .filter(|l| l.trim_start().starts_with("WARN"))
                .filter(|l| needles.iter().all(|n| l.contains(n)))
                .map(str::to_owned)
                .collect()
        }
    }

    /// One measured row of the fault table.
    #[derive(Debug, Clone)]
    pub struct Outcome {
        pub call: String,
        pub fault: Fault,
        /// From the last faulted request to recovery.
        pub recovered_in: Duration,
        /// What the row allowed.
        pub bound: Duration,
        /// Retry lines logged at WARN.
        pub warns: usize,
    }

    impl Outcome {
        /// The row of `call` under `fault`, recovered at `recovered`: measured from the fake's
        /// last faulted request.
        pub fn measured(
            call: String,
            fault: Fault,
            fake: &support::FakeApi,
            recovered: Instant,
            bound: Duration,
            warns: usize,
        ) -> Self {
            Self {
                call,
                fault,
                recovered_in: since_fault(fake, recovered),
                bound,
                warns,
            }
        }
    }

    /// Time from the fault's last hit to `recovered`.
    pub fn since_fault(fake: &support::FakeApi, recovered: Instant) -> Duration {
        let last = fake.last_fault_at().expect("the fault was served");
        recovered.saturating_duration_since(last)
    }

    /// Print a group's rows (`cargo test --test faults -- --nocapture` shows them) and check
    /// each against its bound.
    pub fn report(group: &str, rows: &[Outcome]) {
        println!(
            "\n{group}: call | fault | recovered after the fault stopped | bound | warn lines"
        );
        for r in rows {
            println!(
                "{group}: {} | {} | {:.2}s | {:.1}s | {}",
                r.call,
                r.fault.label(),
                r.recovered_in.as_secs_f64(),
                r.bound.as_secs_f64(),
                r.warns
            );
        }
        for r in rows {
            assert!(
                r.recovered_in <= r.bound + SLACK,
                "{group} {} × {}: recovered after {:?}, bound {:?}",
                r.call,
                r.fault.label(),
                r.recovered_in,
                r.bound
            );
        }
    }
}
