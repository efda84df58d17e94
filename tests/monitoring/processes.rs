//! The processes the monitoring tests run: `serve` against the fake API, a real Prometheus
//! scraping it, and curl as their HTTP client.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::FakeApi;

use super::queries::{JOB, NS, root};

const BIN: &str = env!("CARGO_BIN_EXE_ksvc-webhook");
/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `serve` against the fake API: self-managed certificates, the watch loop, the status API.
pub struct Serve {
    child: Child,
    _dir: tempfile::TempDir,
    https: SocketAddr,
    /// The plain-HTTP metrics listener Prometheus scrapes.
    pub metrics: SocketAddr,
    ca: PathBuf,
}

impl Serve {
    pub async fn start(fake: &FakeApi) -> Self {
        fake.put(
            "mutatingwebhookconfigurations",
            json!({"apiVersion": "admissionregistration.k8s.io/v1",
                   "kind": "MutatingWebhookConfiguration",
                   "metadata": {"name": "zz-ksvc-webhook.flyte.org"},
                   "webhooks": [{"name": "zz-ksvc-webhook.flyte.org",
                       "admissionReviewVersions": ["v1"], "sideEffects": "None",
                       "clientConfig": {"service": {"name": "ksvc-webhook",
                           "namespace": NS, "path": "/mutate", "port": 443}}}]}),
        );
        fake.put(
            "services",
            support::ksvc("app", false, false, 1, &["app-00001"], "app-00001"),
        );
        fake.add_token("dashboard-token", "dashboard", &[]);
        fake.grant("dashboard", "list", None);
        fake.grant("dashboard", "get", None);
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = fake.kubeconfig(dir.path());
        let certs = dir.path().join("certs");
        let https: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let child = Command::new(BIN)
            .arg("serve")
            .args(["--listen", &https.to_string()])
            .args(["--metrics-listen", &metrics.to_string()])
            .arg("--local-status-listen=127.0.0.1:0")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--tls-dir")
            .arg(&certs)
            .args(["--self-managed-certs=true", "--cert-reload-interval", "1s"])
            .args(["--guard-config-name", ""])
            .arg("--sidecars")
            .arg(root().join("examples/sidecars.yaml"))
            .args(["--lease-duration", "2s", "--workers", "1"])
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let server = Self {
            child,
            https,
            metrics,
            ca: certs.join("ca.crt"),
            _dir: dir,
        };
        support::poll::until("serve answers /readyz", support::poll::LIMIT, || {
            std::net::TcpStream::connect(server.metrics).is_ok() && server.ca.exists()
        })
        .await;
        server
    }

    /// Allowed, denied and undecodable reviews, and status calls with and without access.
    pub async fn load(&self) {
        let client = Curl(self.ca.clone());
        let examples = root().join("examples");
        let bodies = [
            std::fs::read(examples.join("managed-review.json")).unwrap(),
            std::fs::read(examples.join("invalid-review.json")).unwrap(),
            b"{not json".to_vec(),
        ];
        for _ in 0..5 {
            for body in &bodies {
                let url = format!("https://localhost:{}/mutate", self.https.port());
                client.post(&url, body.clone()).await;
            }
            for token in ["dashboard-token", "garbage"] {
                let url = format!("https://localhost:{}/apps", self.https.port());
                client.get(&url, Some(token)).await;
            }
        }
    }

    pub async fn scrape(&self) -> String {
        let url = format!("http://{}/metrics", self.metrics);
        http_get(&url).await
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real Prometheus scraping `target` every 500ms under the PodMonitor's job name.
pub struct Prometheus {
    child: Child,
    _dir: tempfile::TempDir,
    addr: SocketAddr,
}

impl Prometheus {
    pub async fn start(target: SocketAddr) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "global: {{scrape_interval: 500ms, evaluation_interval: 500ms}}\n\
             scrape_configs:\n\
             - job_name: {JOB}\n  static_configs:\n  - targets: ['{target}']\n    \
             labels: {{namespace: {NS}, pod: ksvc-webhook-0}}\n"
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let prometheus = Self {
            child,
            _dir: dir,
            addr,
        };
        support::poll::until("prometheus is ready", support::poll::LIMIT, || {
            std::net::TcpStream::connect(addr).is_ok()
        })
        .await;
        prometheus
    }

    /// Run an instant query: the number of series it returned, or Prometheus's error.
    pub async fn query(&self, expr: &str) -> Result<usize, String> {
        let url = format!(
            "http://{}/api/v1/query?query={}",
            self.addr,
            percent_encode(expr)
        );
        let answer: Value =
            serde_json::from_str(&http_get(&url).await).map_err(|e| e.to_string())?;
        if answer["status"] != "success" {
            return Err(answer["error"].to_string());
        }
        Ok(match &answer["data"]["result"] {
            Value::Array(series) => series.len(),
            // A scalar or a string is one value.
            _ => 1,
        })
    }

    /// Wait until Prometheus holds at least `samples` samples of `metric`.
    pub async fn wait_for(&self, metric: &str, samples: usize) {
        let expr = format!("count_over_time({metric}{{job=\"{JOB}\"}}[1m])");
        let url = format!(
            "http://{}/api/v1/query?query={}",
            self.addr,
            percent_encode(&expr)
        );
        let enough = || async {
            let answer: Value = serde_json::from_str(&http_get(&url).await).unwrap_or_default();
            answer["data"]["result"].as_array().is_some_and(|r| {
                r.iter().any(|s| {
                    s["value"][1]
                        .as_str()
                        .and_then(|v| v.parse::<usize>().ok())
                        .is_some_and(|n| n >= samples)
                })
            })
        };
        let what = format!("prometheus holds {samples} samples of {metric}");
        support::poll::until_async(&what, Duration::from_secs(30), enough).await;
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn http_get(url: &str) -> String {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "--max-time", "5", url]);
    run(cmd, Vec::new()).await
}

/// Run `cmd` off the runtime's threads with `stdin` as its input; its standard output.
async fn run(mut cmd: Command, stdin: Vec<u8>) -> String {
    tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().unwrap();
        child.stdin.take().unwrap().write_all(&stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
    .await
    .unwrap()
}

/// curl as the HTTPS client, trusting the server's CA (its certificate names localhost).
struct Curl(PathBuf);

impl Curl {
    async fn post(&self, url: &str, body: Vec<u8>) -> String {
        let mut cmd = self.command(url, None);
        cmd.args([
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            "@-",
        ]);
        run(cmd, body).await
    }

    async fn get(&self, url: &str, token: Option<&str>) -> String {
        run(self.command(url, token), Vec::new()).await
    }

    fn command(&self, url: &str, token: Option<&str>) -> Command {
        let mut cmd = Command::new("curl");
        cmd.args(["-s", "--max-time", "5", "--cacert"])
            .arg(&self.0)
            .arg(url);
        if let Some(token) = token {
            cmd.args(["-H", &format!("Authorization: Bearer {token}")]);
        }
        cmd
    }
}
