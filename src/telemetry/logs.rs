//! Log output for `serve`: tracing lines go to stdout in batches written by a background thread;
//! with `--otlp-endpoint`, the review spans go to [`super::otlp`]'s layer beside them.
//!
//! The server logs one line per admission decision. Written directly, each line is a `write`
//! syscall on the request path (and a wake-up of the container runtime reading the pipe); here a
//! request only appends its formatted line to a buffer, and a thread writes whatever has
//! accumulated every [`FLUSH_EVERY`]. The buffer is bounded: past [`MAX_BUFFERED`] bytes lines
//! are dropped and the count is logged, rather than growing memory when stdout stalls.
//!
//! Lines come in two priorities. The lines of refused requests (target [`REFUSED_TARGET`]:
//! undecodable reviews, oversized ones, status requests denied) are what a client can make the
//! server write as fast as it likes, so they are dropped first: they may fill at most
//! [`MAX_BUFFERED_REFUSED`] of the buffer, and at most [`REFUSED_BYTES_PER_SEC`] (bursts of
//! [`REFUSED_BURST`]) reach stdout. Every other line, the decisions on well-formed reviews
//! among them, has the rest of the buffer. Dropping the [`Guard`] writes what is left. Never
//! formats or filters: tracing-subscriber does that.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::{FilterExt as _, LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::{SubscriberInitExt as _, TryInitError};
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::locks;
use crate::server::trace::{REFUSED_TARGET, SPAN_TARGET};

/// How log lines are written (`serve --log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable text.
    Plain,
}

/// How long a line may wait in the buffer.
pub const FLUSH_EVERY: Duration = Duration::from_millis(50);
/// Buffered bytes beyond which new lines are dropped (and counted).
pub const MAX_BUFFERED: usize = 4 << 20;
/// Buffered bytes beyond which the lines of refused requests are dropped: the rest of the
/// buffer stays for every other line.
pub const MAX_BUFFERED_REFUSED: usize = MAX_BUFFERED / 4;
/// Bytes a second of lines of refused requests, at most: 20 s of a flood log at most
/// 256 KiB + 20 × 64 KiB = 1.5 MiB of them.
pub const REFUSED_BYTES_PER_SEC: u64 = 64 << 10;
/// The bytes of lines of refused requests that may come at once after a quiet time.
pub const REFUSED_BURST: u64 = 256 << 10;

/// PURE: bytes that may be taken now, refilled at a steady rate up to a burst. Time comes in
/// as an argument.
#[derive(Debug, Clone, Copy)]
struct ByteBucket {
    available: u64,
    refilled_at: Option<Instant>,
}

impl ByteBucket {
    /// Full, with [`REFUSED_BURST`].
    const fn full() -> Self {
        Self {
            available: REFUSED_BURST,
            refilled_at: None,
        }
    }

    /// Take `bytes` at `now` if there are that many.
    fn take(&mut self, bytes: usize, now: Instant) -> bool {
        const NANOS: u64 = 1_000_000_000;
        let at = *self.refilled_at.get_or_insert(now);
        let since = now.saturating_duration_since(at).as_nanos();
        let refill = u64::try_from(since)
            .unwrap_or(u64::MAX)
            .saturating_mul(REFUSED_BYTES_PER_SEC)
            / NANOS;
        if refill > 0 {
            self.available = self.available.saturating_add(refill).min(REFUSED_BURST);
            // The clock moves on by the time those whole bytes took, so that frequent calls
            // lose no fraction of a byte; a full bucket banks nothing.
            let took = Duration::from_nanos(refill.saturating_mul(NANOS) / REFUSED_BYTES_PER_SEC);
            self.refilled_at = match self.available == REFUSED_BURST {
                true => Some(now),
                false => Some(at + took),
            };
        }
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        let taken = bytes <= self.available;
        if taken {
            self.available -= bytes;
        }
        taken
    }
}

#[derive(Debug)]
struct Pending {
    bytes: Vec<u8>,
    dropped: u64,
    dropped_refused: u64,
    refused: ByteBucket,
    closed: bool,
}

impl Default for Pending {
    fn default() -> Self {
        Self {
            bytes: Vec::new(),
            dropped: 0,
            dropped_refused: 0,
            refused: ByteBucket::full(),
            closed: false,
        }
    }
}

#[derive(Debug, Default)]
struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        locks::lock(&self.pending)
    }
}

/// The `MakeWriter` handed to tracing-subscriber; cheap to clone.
#[derive(Debug, Clone)]
pub struct Batched {
    shared: Arc<Shared>,
    /// Writes the lines of refused requests (dropped first).
    refused: bool,
}

/// Writes the remaining lines and stops the writer thread when dropped.
#[derive(Debug)]
pub struct Guard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// A writer for `out` (stdout in production) and the guard that flushes it at the end.
pub fn batched<W: Write + Send + 'static>(out: W) -> (Batched, Guard) {
    let shared = Arc::new(Shared::default());
    let worker = shared.clone();
    let thread = std::thread::Builder::new()
        .name("log-writer".into())
        .spawn(move || write_loop(&worker, out))
        .ok();
    let writer = Batched {
        shared: shared.clone(),
        refused: false,
    };
    (writer, Guard { shared, thread })
}

fn write_loop<W: Write>(shared: &Shared, mut out: W) {
    let mut batch = Vec::new();
    loop {
        let (dropped, dropped_refused, closed) = {
            let pending = shared.lock();
            let mut pending = locks::wait_while(&shared.wake, pending, FLUSH_EVERY, |p| !p.closed);
            std::mem::swap(&mut pending.bytes, &mut batch);
            let dropped = std::mem::take(&mut pending.dropped);
            let dropped_refused = std::mem::take(&mut pending.dropped_refused);
            (dropped, dropped_refused, pending.closed)
        };
        if dropped > 0 {
            let _ = writeln!(out, "log buffer full: {dropped} log lines dropped");
        }
        if dropped_refused > 0 {
            let _ = writeln!(
                out,
                "{dropped_refused} log lines of refused requests dropped (over their share of the log)"
            );
        }
        // A failing stdout cannot be reported anywhere; the lines are lost.
        let _ = out.write_all(&batch).and_then(|()| out.flush());
        batch.clear();
        if closed {
            return;
        }
    }
}

impl Write for Batched {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut pending = self.shared.lock();
        let room = match self.refused {
            true => MAX_BUFFERED_REFUSED,
            false => MAX_BUFFERED,
        };
        let fits = pending.bytes.len() + buf.len() <= room
            && (!self.refused || pending.refused.take(buf.len(), Instant::now()));
        match (fits, self.refused) {
            (true, _) => pending.bytes.extend_from_slice(buf),
            (false, true) => pending.dropped_refused += 1,
            (false, false) => pending.dropped += 1,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Batched {
    type Writer = Batched;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }

    /// The lines of refused requests get the writer that drops them first.
    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        Batched {
            shared: self.shared.clone(),
            refused: meta.target() == REFUSED_TARGET,
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The filter without `RUST_LOG`: `info`, less kube-client's own ERROR line for every failed
/// request, which only repeats what the caller logs at its level with what it does next (a
/// retry "admission is unaffected" must not read as an error). `RUST_LOG` brings it back.
pub const DEFAULT_FILTER: &str = "info,kube_client::client::builder=off";

/// Install the global subscriber (`RUST_LOG` filter, default [`DEFAULT_FILTER`]) writing through a batched
/// stdout, and with `spans` the OpenTelemetry layer exporting the review spans; keep the guard
/// alive until the end of `serve`.
pub fn init(format: LogFormat, spans: Option<&SdkTracerProvider>) -> Guard {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let (writer, guard) = batched(std::io::stdout());
    let lines = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(writer);
    // A second init (tests calling `run` twice) keeps the first subscriber.
    let _ = match format {
        LogFormat::Json => install(lines.json().flatten_event(true), filter, spans),
        LogFormat::Plain => install(lines, filter, spans),
    };
    guard
}

/// Install `lines` under `filter`, beside the exporter's layer when there are `spans`.
fn install<L>(
    lines: L,
    filter: EnvFilter,
    spans: Option<&SdkTracerProvider>,
) -> Result<(), TryInitError>
where
    L: Layer<Registry> + Send + Sync + 'static,
{
    let registry = tracing_subscriber::registry();
    match spans {
        // The filter for everything, as `tracing_subscriber::fmt()` installs it: a callsite it
        // turns off costs nothing, and no OpenTelemetry layer is there.
        None => registry.with(lines).with(filter).try_init(),
        // The filter for the log lines only: `RUST_LOG` never turns the spans off. The review
        // spans are the exporter's alone: the log lines would format their fields for nothing.
        Some(provider) => {
            let not_spans = Targets::new()
                .with_default(LevelFilter::TRACE)
                .with_target(SPAN_TARGET, LevelFilter::OFF);
            registry
                .with(lines.with_filter(filter.and(not_spans)))
                .with(super::otlp::layer(provider))
                .try_init()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Write` whose bytes the test can read afterwards.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_line_is_written_in_order_by_the_time_the_guard_drops() {
        let sink = Sink::default();
        let (writer, guard) = batched(sink.clone());
        for i in 0..1000 {
            writer
                .make_writer()
                .write_all(format!("line {i}\n").as_bytes())
                .unwrap();
        }
        drop(guard);
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let want: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        assert_eq!(text, want);
    }

    #[test]
    fn a_full_buffer_drops_and_counts_lines() {
        let shared = Arc::new(Shared::default());
        let mut writer = Batched {
            shared: shared.clone(),
            refused: false,
        };
        let line = vec![b'x'; MAX_BUFFERED / 2 + 1];
        writer.write_all(&line).unwrap();
        writer.write_all(&line).unwrap();
        let pending = shared.lock();
        assert_eq!((pending.bytes.len(), pending.dropped), (line.len(), 1));
    }

    #[test]
    fn lines_of_refused_requests_are_dropped_first_and_held_to_their_rate() {
        let shared = Arc::new(Shared::default());
        let mut decisions = Batched {
            shared: shared.clone(),
            refused: false,
        };
        let mut refused = Batched {
            shared: shared.clone(),
            refused: true,
        };
        // A flood of refused requests' lines takes its burst, then is dropped.
        let line = vec![b'r'; 1024];
        for _ in 0..1000 {
            refused.write_all(&line).unwrap();
        }
        let (kept, dropped) = {
            let p = shared.lock();
            (p.bytes.len(), p.dropped_refused)
        };
        assert!(kept <= REFUSED_BURST as usize, "{kept}");
        assert!(kept >= REFUSED_BURST as usize - 2 * line.len(), "{kept}");
        assert_eq!(dropped as usize, 1000 - kept / line.len());
        // The decisions still have the rest of the buffer.
        let decision = vec![b'd'; MAX_BUFFERED - MAX_BUFFERED_REFUSED];
        decisions.write_all(&decision).unwrap();
        let p = shared.lock();
        assert_eq!((p.bytes.len(), p.dropped), (kept + decision.len(), 0));
    }

    #[test]
    fn the_refused_lines_share_refills_at_its_rate_up_to_its_burst() {
        let t0 = Instant::now();
        let mut bucket = ByteBucket::full();
        assert!(bucket.take(REFUSED_BURST as usize, t0));
        assert!(!bucket.take(1, t0), "the burst is spent");
        // Refilled a byte at a time over many small steps, as over one long one.
        let step = Duration::from_micros(10);
        let mut now = t0;
        for _ in 0..100_000 {
            now += step;
            bucket.take(0, now);
        }
        let second = REFUSED_BYTES_PER_SEC as usize;
        assert!(bucket.take(second - 64, now), "a second refills its rate");
        assert!(!bucket.take(128, now));
        // An idle hour refills the burst, no more.
        let later = now + Duration::from_secs(3600);
        assert!(bucket.take(REFUSED_BURST as usize, later));
        assert!(!bucket.take(1, later));
    }
}
