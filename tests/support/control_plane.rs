//! The real control plane of the e2e suite (`tests/e2e`): kube-apiserver, etcd and
//! kube-controller-manager started by `scripts/e2e-cluster.sh up`, with the project installed as a
//! user installs it (`manifests/` through the `e2e/overlay` kustomization) and `ksvc-webhook
//! serve` running here, as a local process, under its ServiceAccount's identity.
//!
//! It owns the suite's view of that cluster: where it is (the script's `env` file), kubectl as
//! the admin or as any token, tokens from the TokenRequest API, fresh namespaces, the webhook
//! processes (both parts, each under its own ServiceAccount; each stopped when dropped, each with
//! a PID file the script's `down` also reads), and
//! the log tails printed when a test fails. Tests share one cluster and take [`ControlPlane::lock`]
//! to run one at a time.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use serde_json::Value;

use crate::cli::{Ran, repo_root};

mod webhook;
pub use webhook::Webhook;

/// The webhook's namespace, the two parts' ServiceAccounts and the registrations, as
/// `manifests/` names them.
pub const SYSTEM_NS: &str = "ksvc-system";
pub const SERVICE_ACCOUNT: &str = "ksvc-webhook";
pub const CONTROLLER_ACCOUNT: &str = "ksvc-webhook-controller";
pub const MUTATING: &str = "zz-ksvc-webhook.flyte.org";
pub const GUARD: &str = "ksvc-webhook-revision-guard.flyte.org";

/// The running control plane, read from the `env` file `scripts/e2e-cluster.sh up` wrote.
pub struct ControlPlane {
    /// The script's directory: certificates, logs, PID files.
    pub dir: PathBuf,
    /// The admin's kubeconfig (O=system:masters).
    pub kubeconfig: PathBuf,
    /// kubectl of the same release as kube-apiserver.
    pub kubectl: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// The webhook's port on 127.0.0.1, which the webhook configurations' `service.port` name.
    pub webhook_port: u16,
    /// The controller part's port on 127.0.0.1 (the status API).
    pub status_port: u16,
    /// A kubeconfig with a TokenRequest token of `ksvc-system/ksvc-webhook` (the admission part).
    pub webhook_kubeconfig: PathBuf,
    /// A kubeconfig with a TokenRequest token of `ksvc-system/ksvc-webhook-controller`.
    pub controller_kubeconfig: PathBuf,
}

static PLANE: OnceLock<ControlPlane> = OnceLock::new();
static SERIAL: Mutex<()> = Mutex::new(());

impl ControlPlane {
    /// The control plane, with the project installed on first use. Panics with what to run when
    /// the control plane is not up.
    pub fn get() -> &'static ControlPlane {
        PLANE.get_or_init(|| {
            let plane = Self::read_env();
            plane.install();
            plane
        })
    }

    /// One test at a time: every test changes the one cluster (webhook processes, registrations).
    pub fn lock() -> MutexGuard<'static, ()> {
        SERIAL
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn read_env() -> ControlPlane {
        let file = std::env::var_os("E2E_ENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join("target/e2e/cluster/env"));
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "the e2e control plane is not up ({}: {e}): run `make e2e`, or \
                 `scripts/e2e-cluster.sh up` and then `cargo test --test e2e -- --ignored`",
                file.display()
            )
        });
        let var = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("{} has no {name}=", file.display()))
                .to_owned()
        };
        let dir = PathBuf::from(var("E2E_DIR"));
        let webhook_port = free_port();
        let status_port = free_port();
        ControlPlane {
            kubeconfig: PathBuf::from(var("KUBECONFIG")),
            kubectl: PathBuf::from(var("K8S_BIN")).join("kubectl"),
            server: format!("https://127.0.0.1:{}", var("E2E_API_PORT")),
            webhook_port,
            status_port,
            webhook_kubeconfig: dir.join("ksvc-webhook.kubeconfig"),
            controller_kubeconfig: dir.join("ksvc-webhook-controller.kubeconfig"),
            dir,
        }
    }

    /// `kubectl apply -k` of manifests/ through e2e/overlay, with the webhook configurations'
    /// port set to [`Self::webhook_port`]; then each part's kubeconfig with a fresh token.
    /// Done once by [`Self::get`]; a test that uninstalled puts the install back with it.
    pub fn install(&self) {
        // kustomize refuses absolute resource paths: the layer lives under target/e2e, two
        // levels below the repository's target/.
        let layer = repo_root().join("target/e2e/install");
        std::fs::create_dir_all(&layer).unwrap();
        let port = self.webhook_port;
        let patch = |kind: &str| {
            format!(
                "  - target: {{group: admissionregistration.k8s.io, kind: {kind}}}\n    \
                 patch: '[{{\"op\": \"replace\", \"path\": \"/webhooks/0/clientConfig/service/port\", \"value\": {port}}}]'\n"
            )
        };
        let kustomization = format!(
            "# Written by tests/support/control_plane.rs: e2e/overlay with the test webhook's port.\n\
             resources: [../../../e2e/overlay]\npatches:\n{}{}",
            patch("MutatingWebhookConfiguration"),
            patch("ValidatingWebhookConfiguration")
        );
        std::fs::write(layer.join("kustomization.yaml"), kustomization).unwrap();
        self.kubectl(&["apply", "-k", &layer.display().to_string()])
            .ok("install manifests/ through e2e/overlay");
        self.renew_tokens();
    }

    /// Each part's kubeconfig with a fresh token of its ServiceAccount (a reinstall made new
    /// accounts).
    pub fn renew_tokens(&self) {
        for (account, kubeconfig) in [
            (SERVICE_ACCOUNT, &self.webhook_kubeconfig),
            (CONTROLLER_ACCOUNT, &self.controller_kubeconfig),
        ] {
            let token = self.token(SYSTEM_NS, account, None);
            self.write_kubeconfig(kubeconfig, &token, SYSTEM_NS);
        }
    }

    /// kubectl as the admin.
    pub fn kubectl(&self, args: &[&str]) -> Ran {
        self.kubectl_as(&self.kubeconfig, args, b"")
    }

    /// kubectl as the admin, with `stdin` (for `-f -`).
    pub fn kubectl_in(&self, args: &[&str], stdin: &[u8]) -> Ran {
        self.kubectl_as(&self.kubeconfig, args, stdin)
    }

    /// `kubectl patch` of the cluster-wide `kind`/`name` with the JSON patch `patch`, which must
    /// succeed (`what` says what it does).
    pub fn json_patch(&self, kind: &str, name: &str, patch: &str, what: &str) -> Ran {
        let args = ["patch", kind, name, "--type=json", "-p", patch];
        self.kubectl(&args).ok(what)
    }

    /// `kubectl label --overwrite` of `kind`/`name` in `ns`, which must succeed (`what` says
    /// what it does).
    pub fn label(&self, kind: &str, name: &str, ns: &str, label: &str, what: &str) -> Ran {
        let args = ["label", kind, name, "-n", ns, "--overwrite", label];
        self.kubectl(&args).ok(what)
    }

    /// kubectl with `kubeconfig` (a token's identity).
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str], stdin: &[u8]) -> Ran {
        let mut command = Command::new(&self.kubectl);
        command
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .current_dir(repo_root());
        run(command, stdin)
    }

    /// An object as JSON (`kubectl get -o json`), as the admin.
    pub fn get_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["get", "-o", "json"];
        all.extend_from_slice(args);
        let ran = self.kubectl(&all).ok("read an object");
        serde_json::from_str(&ran.stdout).unwrap()
    }

    /// A token of `namespace/account` from the TokenRequest API, for `audience` (default: the
    /// API server's own).
    pub fn token(&self, namespace: &str, account: &str, audience: Option<&str>) -> String {
        let mut args = vec![
            "create",
            "token",
            account,
            "-n",
            namespace,
            "--duration",
            "2h",
        ];
        if let Some(audience) = audience {
            args.extend(["--audience", audience]);
        }
        self.kubectl(&args)
            .ok("request a ServiceAccount token")
            .stdout
            .trim()
            .to_owned()
    }

    /// A kubeconfig at `path` for the API server with `token`, context namespace `namespace`.
    pub fn write_kubeconfig(&self, path: &Path, token: &str, namespace: &str) {
        let yaml = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: e2e\nclusters:\n- name: e2e\n  cluster:\n    \
             server: {}\n    certificate-authority: {}\ncontexts:\n- name: e2e\n  context:\n    cluster: e2e\n    \
             user: e2e\n    namespace: {namespace}\nusers:\n- name: e2e\n  user:\n    token: {token}\n",
            self.server,
            self.dir.join("ca.crt").display()
        );
        std::fs::write(path, yaml).unwrap();
    }

    /// A new namespace whose name starts with `prefix`, unique within the cluster's life.
    pub fn namespace(&self, prefix: &str) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        self.kubectl(&["create", "namespace", &name])
            .ok("create a namespace");
        name
    }

    /// Point both webhook configurations' `service.port` at `port` on 127.0.0.1 (as a Service
    /// sends kube-apiserver to whichever pod is ready).
    pub fn point_webhooks_at(&self, port: u16) {
        let patch = format!(
            r#"[{{"op": "replace", "path": "/webhooks/0/clientConfig/service/port", "value": {port}}}]"#
        );
        for (kind, name) in [
            ("mutatingwebhookconfiguration", MUTATING),
            ("validatingwebhookconfiguration", GUARD),
        ] {
            self.kubectl(&["patch", kind, name, "--type=json", "-p", &patch])
                .ok("point the webhook configuration at a port");
        }
    }

    /// The last `lines` lines of each control plane log, for a failing test's output.
    pub fn log_tails(&self, lines: usize) -> String {
        [
            "kube-apiserver.log",
            "kube-controller-manager.log",
            "etcd.log",
        ]
        .iter()
        .map(|name| tail(&self.dir.join(name), lines))
        .collect()
    }
}

/// Run `command` with `stdin`, without colours or the test's KUBECONFIG.
fn run(mut command: Command, stdin: &[u8]) -> Ran {
    use std::io::Write;
    let mut child = command
        .env_remove("KUBECONFIG")
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let _ = child.stdin.take().unwrap().write_all(stdin);
    let out = child.wait_with_output().unwrap();
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

impl Ran {
    /// This run, which kube-apiserver must have refused because it could not call the mutating
    /// webhook; panics with `what` and its output otherwise.
    pub fn refused_by_the_webhook(&self, what: &str) {
        assert_eq!(self.code, Some(1), "{what}: {}", self.stdout);
        let failed = format!("failed calling webhook \"{MUTATING}\"");
        assert!(self.stderr.contains(&failed), "{}", self.stderr);
    }

    /// This run, which must have exited 0; panics with `what` and its output otherwise.
    pub fn ok(self, what: &str) -> Ran {
        assert_eq!(
            self.code,
            Some(0),
            "{what}: exited {:?}\nstdout: {}\nstderr: {}",
            self.code,
            self.stdout,
            self.stderr
        );
        self
    }
}

/// The last `lines` lines of `path`, under a header naming it.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    format!(
        "--- the last lines of {}:\n{}\n",
        path.display(),
        all[start..].join("\n")
    )
}

/// Puts the manifests back however a test that changes them ends.
pub struct Reinstall<'a>(pub &'a ControlPlane);

impl Drop for Reinstall<'_> {
    fn drop(&mut self) {
        let _ = self.0.kubectl(&["apply", "-k", "target/e2e/install"]);
    }
}

/// A free port on 127.0.0.1 (bound, then released for the process that will listen on it).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}
