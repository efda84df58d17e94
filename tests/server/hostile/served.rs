//! The built binary under attack: `serve` with generated certificates (and the fake API when a
//! test needs the watch loop), its log lines collected, its resident memory read from /proc.

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use ksvc_webhook::cli::{Cli, Command as Sub, serve};
use ksvc_webhook::server::memory::Arithmetic;

use super::attack::one_review;
use support::FakeApi;
use support::harness::{self, Conn, KillOnDrop, Pki, SecretDir};

const BIN: &str = env!("CARGO_BIN_EXE_ksvc-webhook");

/// Flags every served binary gets: one worker (as the Deployment's 1-CPU limit gives it) and
/// certificates from files.
const COMMON: &[&str] = &[
    "--listen",
    "127.0.0.1:0",
    "--self-managed-certs=false",
    "--workers",
    "1",
    // A port of its own: tests run servers side by side.
    "--local-status-listen=127.0.0.1:0",
];

/// The Deployment's limits (manifests/base/deployment.yaml), with the probe listener on a free
/// port: what the attacks of docs/reliability.md run against.
pub const DEPLOYMENT: &[&str] = &[
    "--request-timeout=10s",
    "--body-budget=64Mi",
    "--small-body-reserve=16Mi",
    "--max-connections=256",
    "--max-connections-per-ip=64",
    "--metrics-listen=127.0.0.1:0",
];

/// The same with `--http2`, and the fewer connections docs/reliability.md asks for then: 64, 16
/// from one address.
pub const DEPLOYMENT_H2: &[&str] = &[
    "--request-timeout=10s",
    "--body-budget=64Mi",
    "--small-body-reserve=16Mi",
    "--max-connections=64",
    "--max-connections-per-ip=16",
    "--metrics-listen=127.0.0.1:0",
    "--http2",
];

/// The allocator settings of the admission Deployment (manifests/base/deployment.yaml): memory
/// committed on demand, and freed memory given back at once. The memory arithmetic is for them:
/// with mimalloc's default delay, pages freed by bodies cut or refused stay resident a while
/// and are counted beside the bodies that replace them (the HTTP/1.1 row of uploads.rs peaked
/// 33 to 49 MiB over its baseline with the delay, 25 to 26 MiB without).
const DEPLOYMENT_ENV: &[(&str, &str)] = &[
    ("MIMALLOC_ARENA_EAGER_COMMIT", "0"),
    ("MIMALLOC_PURGE_DELAY", "0"),
];

/// A running `serve`.
pub struct Served {
    child: KillOnDrop,
    pid: u32,
    pub addr: SocketAddr,
    pub pki: Pki,
    logs: Arc<Mutex<String>>,
    /// The flags it was started with, beside [`COMMON`].
    args: Vec<String>,
    _secret: SecretDir,
    _dir: tempfile::TempDir,
}

impl Served {
    /// `serve` with `args`, against `fake` (else `--no-watch`), with the allocator settings of
    /// the Deployment ([`DEPLOYMENT_ENV`]); returns once it listens.
    pub fn start(args: &[&str], fake: Option<&FakeApi>) -> Self {
        let pki = Pki::new();
        let secret = SecretDir::new(&pki.leaf.cert_pem, &pki.leaf.key_pem);
        let dir = tempfile::tempdir().unwrap();
        let mut command = Command::new(BIN);
        command.arg("serve").args(COMMON).args(args);
        command.arg("--tls-dir").arg(secret.path());
        match fake {
            Some(fake) => command.arg("--kubeconfig").arg(fake.kubeconfig(dir.path())),
            None => command.arg("--no-watch"),
        };
        let mut child = command
            .envs(DEPLOYMENT_ENV.iter().copied())
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let logs = Arc::new(Mutex::new(String::new()));
        let stdout = child.stdout.take().unwrap();
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let mut logs = sink.lock().unwrap();
                logs.push_str(&line);
                logs.push('\n');
            }
        });
        let pid = child.id();
        let child = KillOnDrop(Some(child));
        let started = Instant::now();
        let addr = loop {
            let found = logs.lock().unwrap().lines().find_map(|line| {
                let rest = line.split("listen=").nth(1)?;
                rest.split_whitespace().next()?.parse().ok()
            });
            if let Some(addr) = found {
                break addr;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "serve never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Self {
            child,
            pid,
            addr,
            pki,
            logs,
            args: args.iter().map(|a| a.to_string()).collect(),
            _secret: secret,
            _dir: dir,
        }
    }

    /// [`Self::start`], then [`Self::warm_up`]: where every attack starts, and its baseline.
    pub async fn warmed(args: &[&str], fake: Option<&FakeApi>) -> (Arc<Self>, u64) {
        let served = Self::start(args, fake);
        let baseline = served.warm_up().await;
        (Arc::new(served), baseline)
    }

    /// One well-formed review answered (code paths and buffers touched once), then the resident
    /// memory: the baseline the memory bound is added to.
    pub async fn warm_up(&self) -> u64 {
        let answered = one_review(&mut self.h1().await, "warm-up").await;
        assert!(answered.is_some(), "the warm-up review was not answered");
        self.memory("VmRSS")
    }

    /// The most the resident memory may reach from `baseline`: what admission may add by the
    /// arithmetic of docs/reliability.md for this server's flags.
    pub fn memory_bound(&self, baseline: u64) -> u64 {
        baseline + self.arithmetic().admission()
    }

    /// The plain probe listener's address (`--metrics-listen`).
    pub fn probe_addr(&self) -> SocketAddr {
        let logs = self.logs();
        let found = logs.lines().find_map(|line| {
            let rest = line.split("metrics=Some(").nth(1)?;
            rest.split(')').next()?.parse().ok()
        });
        found.expect("serve was started without --metrics-listen")
    }

    /// `GET path` on the probe listener, on a fresh connection: the status line and the body.
    pub async fn probe(&self, path: &str) -> Option<String> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut tcp = tokio::net::TcpStream::connect(self.probe_addr())
            .await
            .ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nhost: probe\r\nconnection: close\r\n\r\n");
        tcp.write_all(request.as_bytes()).await.ok()?;
        let mut answer = String::new();
        tcp.read_to_string(&mut answer).await.ok()?;
        Some(answer)
    }

    /// The value of the `/metrics` line starting with `prefix`, read on the probe listener.
    pub async fn metric(&self, prefix: &str) -> Option<f64> {
        let text = self.probe("/metrics").await?;
        let line = text.lines().find(|l| l.starts_with(prefix))?;
        line.rsplit(' ').next()?.parse().ok()
    }

    /// What the server logged so far.
    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    /// A line of /proc/PID/status in bytes (`VmRSS`: resident now, `VmHWM`: the peak).
    pub fn memory(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with(&format!("{field}:")))
            .unwrap();
        let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kb * 1024
    }

    /// CPU time the process has used (user and system), from /proc/PID/stat.
    pub fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).unwrap();
        // Fields after the command name, which is in parentheses: utime and stime are the 12th
        // and 13th, in clock ticks (100 per second on Linux).
        let after = stat.rsplit_once(')').unwrap().1;
        let fields: Vec<u64> = after
            .split_whitespace()
            .skip(11)
            .take(2)
            .map(|f| f.parse().unwrap())
            .collect();
        Duration::from_millis((fields[0] + fields[1]) * 10)
    }

    /// The memory arithmetic of docs/reliability.md for the flags this server runs with.
    pub fn arithmetic(&self) -> Arithmetic {
        let mut argv = vec!["ksvc-webhook".to_owned(), "serve".to_owned()];
        argv.extend(COMMON.iter().map(|a| a.to_string()));
        argv.extend(self.args.iter().cloned());
        let Sub::Serve(args) = Cli::try_parse_from(argv).unwrap().command else {
            unreachable!("parsed serve")
        };
        Arithmetic::of(&serve::options(&args))
    }

    /// An HTTP/1.1 connection, as kube-apiserver makes them.
    pub async fn h1(&self) -> Conn {
        self.connect(None, &[b"http/1.1"]).await.unwrap()
    }

    /// A connection from `from` (another peer as the server sees it) offering `alpn`.
    pub async fn connect(&self, from: Option<IpAddr>, alpn: &[&[u8]]) -> std::io::Result<Conn> {
        harness::connect_from(from, self.addr, &self.pki.ca.cert_pem, alpn).await
    }

    /// Send SIGTERM, as the kubelet does.
    pub fn sigterm(&mut self) {
        let pid = self.child.get().id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success());
    }

    /// Wait up to `limit` for the process to exit.
    pub async fn exited(&mut self, limit: Duration) -> Option<ExitStatus> {
        let started = Instant::now();
        while started.elapsed() < limit {
            if let Some(status) = self.child.get().try_wait().unwrap() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

/// Mebibytes, for the printed figures.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}
