//! The standard process metrics every Prometheus exporter has (`process_resident_memory_bytes`,
//! `process_cpu_seconds_total`, `process_open_fds`, …) and `ksvc_webhook_build_info`, read from
//! `/proc/self` on each scrape.
//!
//! The parsing is pure ([`Sample::parse`]); the [`Collector`] reads the files. Where `/proc` is
//! missing (not Linux), the process series are left out and the build info stays. Labels: the
//! build info's `version` only, so there is one series per process.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Linux reports CPU times and start times in ticks of `USER_HZ`, fixed at 100 by its ABI.
const TICKS_PER_SECOND: f64 = 100.0;
const PAGE_OR_KIB: f64 = 1024.0;

/// One reading of the process, in the units Prometheus names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub cpu_seconds: f64,
    pub resident_memory_bytes: f64,
    pub virtual_memory_bytes: f64,
    pub start_time_seconds: f64,
    pub open_fds: f64,
    pub max_fds: f64,
    pub threads: f64,
}

impl Sample {
    /// Parse `/proc/self/stat`, `/proc/self/status`, `/proc/self/limits` and the `btime` line
    /// of `/proc/stat`; `None` when any of them is not in the kernel's format.
    pub fn parse(
        stat: &str,
        status: &str,
        limits: &str,
        proc_stat: &str,
        open_fds: usize,
    ) -> Option<Self> {
        // The command name (field 2) may hold spaces and parentheses: fields count from the last ')'.
        let after_comm = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = after_comm.split_whitespace().collect();
        // After the name: state is field 3, so field N is at index N - 3.
        let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
        let utime = field(14)?;
        let stime = field(15)?;
        let threads = field(20)?;
        let start_ticks = field(22)?;
        let boot_time = proc_stat
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse::<f64>()
            .ok()?;
        let kib = |key: &str| {
            let line = status.lines().find_map(|l| l.strip_prefix(key))?;
            line.split_whitespace().next()?.parse::<f64>().ok()
        };
        let max_fds = limits
            .lines()
            .find_map(|l| l.strip_prefix("Max open files"))?
            .split_whitespace()
            .next()?
            .parse::<f64>()
            .ok()?;
        Some(Self {
            cpu_seconds: (utime + stime) / TICKS_PER_SECOND,
            resident_memory_bytes: kib("VmRSS:")? * PAGE_OR_KIB,
            virtual_memory_bytes: kib("VmSize:")? * PAGE_OR_KIB,
            start_time_seconds: boot_time + start_ticks / TICKS_PER_SECOND,
            open_fds: open_fds as f64,
            max_fds,
            threads,
        })
    }

    /// Read this process's sample from `/proc`.
    fn read() -> Option<Self> {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let fds = std::fs::read_dir("/proc/self/fd").ok()?.count();
        Self::parse(
            &read("/proc/self/stat")?,
            &read("/proc/self/status")?,
            &read("/proc/self/limits")?,
            &read("/proc/stat")?,
            fds,
        )
    }
}

/// The collector registered into the server's registry.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let build = ConstGauge::new(1i64);
        let labels = [("version", env!("CARGO_PKG_VERSION"))];
        let help = "Always 1; the label says which ksvc-webhook build is running";
        let mut family = encoder.encode_descriptor(
            "ksvc_webhook_build_info",
            help,
            None,
            build.metric_type(),
        )?;
        build.encode(family.encode_family(&labels)?)?;
        let Some(s) = Sample::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(s.cpu_seconds);
        let cpu_help = "Total user and system CPU time spent in seconds";
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            cpu_help,
            None,
            cpu.metric_type(),
        )?)?;
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                s.resident_memory_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                s.virtual_memory_bytes,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                s.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                s.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                s.max_fds,
            ),
            (
                "process_threads",
                "Number of OS threads in the process",
                s.threads,
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (ksvc (web) hook) S 1 4242 4242 0 -1 4194560 2000 0 0 0 250 50 0 0 20 0 7 0 120000 200000000 5000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
    const STATUS: &str =
        "Name:\tksvc-webhook\nVmSize:\t  204800 kB\nVmRSS:\t   20480 kB\nThreads:\t7\n";
    const LIMITS: &str = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1048576              1048576              files\n";
    const PROC_STAT: &str = "cpu  1 2 3\nbtime 1780000000\nprocesses 9\n";

    #[test]
    fn a_proc_reading_becomes_prometheus_units() {
        let s = Sample::parse(STAT, STATUS, LIMITS, PROC_STAT, 12).unwrap();
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.resident_memory_bytes, 20480.0 * 1024.0);
        assert_eq!(s.virtual_memory_bytes, 204800.0 * 1024.0);
        assert_eq!(s.start_time_seconds, 1_780_000_000.0 + 1200.0);
        assert_eq!(s.open_fds, 12.0);
        assert_eq!(s.max_fds, 1_048_576.0);
        assert_eq!(s.threads, 7.0);
    }

    #[test]
    fn text_not_in_the_kernels_format_gives_no_sample() {
        assert_eq!(Sample::parse("garbage", STATUS, LIMITS, PROC_STAT, 1), None);
        assert_eq!(Sample::parse(STAT, "", LIMITS, PROC_STAT, 1), None);
        assert_eq!(Sample::parse(STAT, STATUS, LIMITS, "cpu 1\n", 1), None);
    }

    #[test]
    fn the_collector_encodes_the_process_and_build_series() {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let version = env!("CARGO_PKG_VERSION");
        assert!(
            text.contains(&format!(
                "ksvc_webhook_build_info{{version=\"{version}\"}} 1"
            )),
            "{text}"
        );
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
        ] {
            assert!(text.contains(name), "{name} in\n{text}");
        }
    }
}
