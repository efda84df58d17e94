//! `ksvc-webhook serve` as the e2e suite runs it: a local process beside the control plane,
//! under the webhook ServiceAccount's token, with self-managed certificates.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{ControlPlane, MUTATING, PLANE, SYSTEM_NS, run, tail};
use crate::cli::{bin, repo_root};
use crate::poll;

/// One `ksvc-webhook serve` process on the control plane's webhook port, under the webhook's
/// ServiceAccount token, with self-managed certificates. Stopped (SIGTERM) when dropped; when the
/// test is failing, the tails of its log and the control plane's are printed first.
pub struct Webhook {
    child: Child,
    /// Its stderr and stdout, JSON log lines.
    pub log: PathBuf,
    pid_file: PathBuf,
    _tls: tempfile::TempDir,
}

impl Webhook {
    /// Start `serve` as `identity` (its Lease holder name) with `extra` flags; returns once its
    /// /readyz answers 200, the leader has published the CA into the mutating configuration and
    /// switched its failurePolicy from the install's `Ignore` to `--failure-policy` (`Fail`).
    /// The configurations are pointed at [`ControlPlane::webhook_port`] first (a test that
    /// pointed them elsewhere may have failed before it put them back).
    pub fn start(plane: &ControlPlane, identity: &str, extra: &[&str]) -> Webhook {
        plane.point_webhooks_at(plane.webhook_port);
        let webhook = Self::spawn(plane, identity, plane.webhook_port, extra);
        webhook.wait_ready(plane.webhook_port);
        poll::blocking(
            "the CA bundle is in the mutating webhook configuration",
            Duration::from_secs(60),
            || {
                let config = plane.get_json(&["mutatingwebhookconfiguration", MUTATING]);
                config["webhooks"][0]["clientConfig"]["caBundle"]
                    .as_str()
                    .filter(|bundle| !bundle.is_empty())
                    .map(|_| ())
            },
        );
        // The leader then switches the install's Ignore to its --failure-policy (docs/install.md).
        let want = match extra.contains(&"--failure-policy=Ignore") {
            true => "Ignore",
            false => "Fail",
        };
        poll::blocking(
            &format!("the webhook's failurePolicy is {want}"),
            Duration::from_secs(60),
            || {
                let config = plane.get_json(&["mutatingwebhookconfiguration", MUTATING]);
                (config["webhooks"][0]["failurePolicy"] == want).then_some(())
            },
        );
        webhook
    }

    /// Start `serve` on `port` without waiting for anything.
    pub fn spawn(plane: &ControlPlane, identity: &str, port: u16, extra: &[&str]) -> Webhook {
        let tls = tempfile::tempdir().unwrap();
        let log = plane.dir.join(format!("ksvc-webhook-{identity}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin())
            .arg("serve")
            .arg(format!("--listen=127.0.0.1:{port}"))
            .arg("--tls-dir")
            .arg(tls.path())
            .arg("--self-managed-certs=true")
            .arg("--kubeconfig")
            .arg(&plane.webhook_kubeconfig)
            .args([
                "--log-format=json",
                "--drain-period=0s",
                "--shutdown-timeout=2s",
            ])
            .args(extra)
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("KSVC_WEBHOOK_POD_NAME", identity)
            .env("KSVC_WEBHOOK_POD_NAMESPACE", SYSTEM_NS)
            .env("RUST_LOG", "info")
            .current_dir(repo_root())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        // scripts/e2e-cluster.sh kills what a killed test run left behind.
        let pid_file = plane.dir.join(format!("ksvc-webhook-{}.pid", child.id()));
        std::fs::write(&pid_file, child.id().to_string()).unwrap();
        Webhook {
            child,
            log,
            pid_file,
            _tls: tls,
        }
    }

    /// Wait until /readyz on `port` answers 200 (the certificate is the webhook's own: not
    /// verified here; kube-apiserver verifies it on every call the tests make).
    pub fn wait_ready(&self, port: u16) {
        let url = format!("https://127.0.0.1:{port}/readyz");
        poll::blocking(
            &format!("{url} answers 200"),
            Duration::from_secs(60),
            || {
                let mut command = Command::new("curl");
                command.args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", &url]);
                (run(command, b"").stdout == "200").then_some(())
            },
        );
    }

    /// Everything the process has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as a crashed node; waits for the process to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.pid_file);
    }

    /// SIGTERM, as the kubelet stops a pod (the server releases its Lease); SIGKILL after 10 s.
    pub fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return self.kill();
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", tail(&self.log, 40));
            if let Some(plane) = PLANE.get() {
                eprintln!("{}", plane.log_tails(20));
            }
        }
        self.stop();
    }
}
