//! The monitoring component against a real Prometheus (Debian's `prometheus` package): `serve`
//! runs against the fake API with self-managed certificates and the watch loop, takes a short
//! load (allowed, denied and undecodable reviews, status calls), and Prometheus scrapes it. Then
//! every dashboard panel's query and every alert's expression goes through Prometheus's HTTP
//! API: each must parse, and each panel must return data unless every series it names is
//! kube-apiserver's or kube-state-metrics' (absent here, see [`FOREIGN`]). A second test checks,
//! without Prometheus, that every metric an expression names is one the server exports or one of
//! [`FOREIGN`].
//!
//! Without `prometheus` on the PATH the first test says loudly that it was skipped (under
//! `CI=true` it fails instead: `.ci/run` installs the package).
#![allow(clippy::unwrap_used)] // a failed setup step should panic loudly

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::FakeApi;

const BIN: &str = env!("CARGO_BIN_EXE_ksvc-webhook");
const JOB: &str = "ksvc-system/ksvc-webhook";
const NS: &str = "ksvc-system";

/// Series that come from kube-apiserver and kube-state-metrics, never from the server.
const FOREIGN: &[&str] = &[
    "apiserver_admission_webhook_admission_duration_seconds_bucket",
    "apiserver_admission_webhook_rejection_count",
    "apiserver_admission_webhook_fail_open_count",
    "kube_deployment_status_replicas_available",
    "up",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every query of the dashboard, by panel title, with the template variables filled in.
fn dashboard_queries() -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(root().join("manifests/monitoring/dashboard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let mut panels = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let Some(targets) = panel["targets"].as_array() else {
            continue;
        };
        let exprs = targets
            .iter()
            .map(|t| {
                t["expr"]
                    .as_str()
                    .unwrap()
                    .replace("$namespace", NS)
                    .replace("$job", JOB)
                    .replace("$__rate_interval", "20s")
            })
            .collect();
        panels.push((panel["title"].as_str().unwrap().to_string(), exprs));
    }
    // The template variables' own queries.
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(q) = var["definition"].as_str() {
            let series = q
                .trim_start_matches("label_values(")
                .split([',', ')'])
                .next()
                .unwrap()
                .replace("$namespace", NS);
            panels.push((format!("variable {}", var["name"]), vec![series]));
        }
    }
    panels
}

/// Every alert expression of the PrometheusRule, by alert name.
fn alert_exprs() -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(root().join("manifests/monitoring/prometheusrule.yaml")).unwrap();
    let rule: Value = serde_saphyr::from_str(&text).unwrap();
    let mut alerts = Vec::new();
    for group in rule["spec"]["groups"].as_array().unwrap() {
        for r in group["rules"].as_array().unwrap() {
            alerts.push((
                r["alert"].as_str().unwrap().to_string(),
                r["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    alerts
}

/// The metric names an expression reads (identifiers followed by `{`, `[` or a space that are
/// not PromQL functions, keywords or label names).
fn metric_names(expr: &str) -> BTreeSet<String> {
    const WORDS: &[&str] = &[
        "sum",
        "by",
        "rate",
        "increase",
        "histogram_quantile",
        "max",
        "min",
        "count",
        "absent",
        "or",
        "unless",
        "on",
        "vector",
        "time",
        "and",
        "le",
        "without",
        "avg",
        "irate",
    ];
    let mut names = BTreeSet::new();
    let mut rest = expr;
    // Drop label matchers `{…}` and the grouping `(…)` after by/on, whose words are labels.
    let mut cleaned = String::new();
    let mut depth = 0;
    for c in rest.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ if depth == 0 => cleaned.push(c),
            _ => {}
        }
    }
    for group in ["by (", "on("] {
        while let Some(i) = cleaned.find(group) {
            let end = cleaned[i..].find(')').map_or(cleaned.len(), |e| i + e + 1);
            cleaned.replace_range(i..end, " ");
        }
    }
    rest = &cleaned;
    for word in rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
        let is_name = word.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && !WORDS.contains(&word)
            && word.contains('_')
            || word == "up";
        if is_name {
            names.insert(word.to_string());
        }
    }
    names
}

/// The metric names `serve` exports, from one scrape of its /metrics.
fn exported(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = line.split(['{', ' ']).next().unwrap();
        names.insert(name.to_string());
    }
    names
}

#[test]
fn every_metric_the_dashboard_and_the_alerts_name_is_exported_or_foreign() {
    // What the server exports, from one scrape of a `serve` under the same load (no Prometheus
    // needed, so this check runs everywhere).
    let rt = tokio::runtime::Runtime::new().unwrap();
    let served = rt.block_on(async {
        let fake = FakeApi::start().await;
        let server = Serve::start(&fake).await;
        server.load().await;
        let text = server.scrape().await;
        drop(server);
        text
    });
    let exported = exported(&served);
    let mut unknown = Vec::new();
    let queries = dashboard_queries()
        .into_iter()
        .flat_map(|(title, exprs)| exprs.into_iter().map(move |e| (title.clone(), e)))
        .chain(alert_exprs());
    for (what, expr) in queries {
        for name in metric_names(&expr) {
            if !exported.contains(&name) && !FOREIGN.contains(&name.as_str()) {
                unknown.push(format!("{what}: {name}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "names neither exported nor foreign:\n{}",
        unknown.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_panel_and_alert_query_runs_against_a_real_prometheus() {
    if Command::new("prometheus")
        .arg("--version")
        .output()
        .is_err()
    {
        let banner = "SKIPPED: the real-Prometheus test: `prometheus` is not on the PATH. \
                      Get it with: apt-get install prometheus";
        eprintln!("{banner}");
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "{banner}");
        return;
    }
    let fake = FakeApi::start().await;
    let server = Serve::start(&fake).await;
    let prometheus = Prometheus::start(server.metrics).await;
    server.load().await;
    // Enough scrapes (every 500ms) after the load for rates over 20s to have two samples.
    prometheus
        .wait_for("ksvc_webhook_admission_requests_total", 6)
        .await;
    let mut failures = Vec::new();
    for (title, exprs) in dashboard_queries() {
        let mut has_data = false;
        for expr in &exprs {
            match prometheus.query(expr).await {
                Ok(n) => has_data |= n > 0,
                Err(e) => failures.push(format!("panel {title:?}: {expr}: {e}")),
            }
        }
        let only_foreign = exprs.iter().all(|e| {
            let names = metric_names(e);
            !names.is_empty() && names.iter().all(|n| FOREIGN.contains(&n.as_str()))
        });
        if !has_data && !only_foreign {
            failures.push(format!("panel {title:?} returned no data: {exprs:?}"));
        }
    }
    for (alert, expr) in alert_exprs() {
        if let Err(e) = prometheus.query(&expr).await {
            failures.push(format!("alert {alert}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `serve` against the fake API: self-managed certificates, the watch loop, the status API.
struct Serve {
    child: Child,
    _dir: tempfile::TempDir,
    https: SocketAddr,
    metrics: SocketAddr,
    ca: PathBuf,
}

impl Serve {
    async fn start(fake: &FakeApi) -> Self {
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
        support::wait_until("serve answers /readyz", || {
            std::net::TcpStream::connect(server.metrics).is_ok() && server.ca.exists()
        })
        .await;
        server
    }

    /// Allowed, denied and undecodable reviews, and status calls with and without access.
    async fn load(&self) {
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

    async fn scrape(&self) -> String {
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
struct Prometheus {
    child: Child,
    _dir: tempfile::TempDir,
    addr: SocketAddr,
}

impl Prometheus {
    async fn start(target: SocketAddr) -> Self {
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
        support::wait_until("prometheus is ready", || {
            std::net::TcpStream::connect(addr).is_ok()
        })
        .await;
        prometheus
    }

    /// Run an instant query: the number of series it returned, or Prometheus's error.
    async fn query(&self, expr: &str) -> Result<usize, String> {
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
    async fn wait_for(&self, metric: &str, samples: usize) {
        let expr = format!("count_over_time({metric}{{job=\"{JOB}\"}}[1m])");
        for _ in 0..120 {
            let url = format!(
                "http://{}/api/v1/query?query={}",
                self.addr,
                percent_encode(&expr)
            );
            let answer: Value = serde_json::from_str(&http_get(&url).await).unwrap_or_default();
            let enough = answer["data"]["result"].as_array().is_some_and(|r| {
                r.iter().any(|s| {
                    s["value"][1]
                        .as_str()
                        .and_then(|v| v.parse::<usize>().ok())
                        .is_some_and(|n| n >= samples)
                })
            });
            if enough {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("prometheus never held {samples} samples of {metric}");
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
