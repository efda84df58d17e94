//! `ksvc-webhook serve` as the e2e suite runs it: both parts as local processes beside the
//! control plane, as the two Deployments run them, each under its own ServiceAccount's token —
//! `--role admission` (self-managed certificates, the webhook's port) and `--role controller`
//! (the loop and the status API, serving the certificate files the admission part wrote) — so
//! the RBAC of each part is proven on the real API server.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{ControlPlane, MUTATING, PLANE, SYSTEM_NS, free_port, run, tail};
use crate::cli::{bin, repo_root};
use crate::poll;

/// `serve`'s flags for the admission part (its own Lease, as the Deployment's).
const ADMISSION: &[&str] = &["--role=admission", "--lease-name=ksvc-webhook-admission"];

/// One `serve` process, with its log and PID file.
struct Process {
    child: Child,
    log: PathBuf,
    pid_file: PathBuf,
}

/// The two parts of one replica: the admission part on a port, under the webhook's
/// ServiceAccount token, with self-managed certificates; the controller part on a port of its
/// own, under its ServiceAccount's token, serving the same certificate files. Stopped (SIGTERM)
/// when dropped; when the test is failing, the tails of their logs and the control plane's are
/// printed first. `extra` flags go to both.
pub struct Webhook {
    admission: Process,
    controller: Process,
    /// The controller part's port (the status API).
    pub status_port: u16,
    /// The controller part's loopback status listener's port (`--local-status-listen`, no
    /// token), which `drift --status-url` reads as it reads a pod's through a port-forward.
    pub local_status_port: u16,
    _tls: tempfile::TempDir,
}

impl Webhook {
    /// Start both parts as `identity` (their Lease holder name) with `extra` flags; returns once
    /// both answer /readyz, the leader has published the CA into the mutating configuration
    /// and switched its failurePolicy from the install's `Ignore` to `--failure-policy` (`Fail`).
    /// The configurations are pointed at [`ControlPlane::webhook_port`] first (a test that
    /// pointed them elsewhere may have failed before it put them back).
    pub fn start(plane: &ControlPlane, identity: &str, extra: &[&str]) -> Webhook {
        plane.point_webhooks_at(plane.webhook_port);
        let webhook = Self::spawn(plane, identity, plane.webhook_port, extra);
        webhook.wait_ready(plane.webhook_port);
        webhook.wait_ready(webhook.status_port);
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

    /// Start the admission part on `port`, and once it has written its certificate files the
    /// controller part ([`ControlPlane::status_port`] beside the webhook's port, else a free
    /// one), without waiting for either to answer.
    pub fn spawn(plane: &ControlPlane, identity: &str, port: u16, extra: &[&str]) -> Webhook {
        let tls = tempfile::tempdir().unwrap();
        let mut admission = Command::new(bin());
        admission
            .arg("serve")
            .args(ADMISSION)
            .arg(format!("--listen=127.0.0.1:{port}"))
            .arg("--tls-dir")
            .arg(tls.path())
            .arg("--self-managed-certs=true")
            .arg("--kubeconfig")
            .arg(&plane.webhook_kubeconfig);
        let admission = Process::start(
            plane,
            admission,
            identity,
            &format!("ksvc-webhook-{identity}"),
            extra,
        );
        poll::blocking(
            "the admission part wrote its certificate files",
            Duration::from_secs(60),
            || tls.path().join("tls.crt").exists().then_some(()),
        );
        let status_port = match port == plane.webhook_port {
            true => plane.status_port,
            false => free_port(),
        };
        let local_status_port = free_port();
        let mut controller = Command::new(bin());
        controller
            .args(["serve", "--role=controller"])
            .arg(format!("--listen=127.0.0.1:{status_port}"))
            .arg(format!(
                "--local-status-listen=127.0.0.1:{local_status_port}"
            ))
            .arg("--tls-dir")
            .arg(tls.path())
            .arg("--self-managed-certs=false")
            .arg("--kubeconfig")
            .arg(&plane.controller_kubeconfig);
        let name = format!("ksvc-webhook-{identity}-controller");
        let controller = Process::start(plane, controller, identity, &name, extra);
        Webhook {
            admission,
            controller,
            status_port,
            local_status_port,
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

    /// Everything both parts have logged so far.
    pub fn log_text(&self) -> String {
        [&self.admission.log, &self.controller.log]
            .iter()
            .map(|log| std::fs::read_to_string(log).unwrap_or_default())
            .collect()
    }

    /// The admission part's log file.
    pub fn admission_log(&self) -> &Path {
        &self.admission.log
    }

    /// SIGKILL both parts, as a crashed node; waits for the processes to be gone.
    pub fn kill(&mut self) {
        self.admission.kill();
        self.controller.kill();
    }

    /// SIGTERM both parts, as the kubelet stops a pod (each releases its Lease); SIGKILL after
    /// 10 s.
    pub fn stop(&mut self) {
        self.admission.stop();
        self.controller.stop();
    }
}

impl Process {
    /// Spawn `command` (`serve` with its part's flags) with the suite's common flags, `extra`,
    /// and `identity` as its Lease holder name; its output goes to `<name>.log`.
    fn start(
        plane: &ControlPlane,
        mut command: Command,
        identity: &str,
        name: &str,
        extra: &[&str],
    ) -> Process {
        let log = plane.dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = command
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
        Process {
            child,
            log,
            pid_file,
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.pid_file);
    }

    fn stop(&mut self) {
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
            eprintln!("{}", tail(&self.admission.log, 40));
            eprintln!("{}", tail(&self.controller.log, 40));
            if let Some(plane) = PLANE.get() {
                eprintln!("{}", plane.log_tails(20));
            }
        }
        self.stop();
    }
}
