//! Run the real `ksvc-webhook` binary against the fake API server, as a user at a prompt would:
//! a kubeconfig pointing at the fake (written by the one kubeconfig writer, [`kubeconfig`]), no
//! `KUBECONFIG` from the test's environment.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::FakeApi;

/// What one run of the binary printed, and how it ended.
#[derive(Debug, Clone)]
pub struct Ran {
    /// The exit code (`None` when a signal ended it).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// The one kubeconfig writer: a file in `dir` naming the API server at `server` (no
/// credentials), current context `fake` in `namespace`, and a second context `other` in `apps`.
pub fn kubeconfig(server: &str, namespace: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let yaml = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\nclusters:\n- name: fake\n  cluster:\n    server: {server}\n\
         contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: {namespace}\n\
         - name: other\n  context:\n    cluster: fake\n    user: fake\n    namespace: apps\nusers:\n- name: fake\n  user: {{}}\n"
    );
    std::fs::write(&path, yaml).unwrap();
    path
}

/// A kubeconfig for `server` in `dir` (the caller keeps the directory, which goes when dropped):
/// context `fake`, namespace `system`, and a second context `other` in namespace `apps`.
pub fn kubeconfig_for(server: &str, dir: &tempfile::TempDir) -> PathBuf {
    kubeconfig(server, "system", dir.path())
}

/// Run the binary with `args` and a kubeconfig for `fake`, off the runtime (the fake keeps
/// answering while the binary runs). Ends within the binary's own deadlines.
pub async fn run(fake: &FakeApi, args: &[&str]) -> Ran {
    run_against(&format!("http://{}", fake.addr), args).await
}

/// Run the binary with `args` and a kubeconfig for `server`, which need not be listening.
pub async fn run_against(server: &str, args: &[&str]) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig_for(server, &dir);
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    all.extend(["--kubeconfig".to_owned(), kubeconfig.display().to_string()]);
    let ran = tokio::task::spawn_blocking(move || run_bin(&all, &[], b""))
        .await
        .unwrap();
    drop(dir);
    ran
}

/// Run the binary in the repository with `args`, these environment variables (and neither
/// `KUBECONFIG` nor colours from the test's environment) and `stdin`; blocks until it ends.
pub fn run_bin<S: AsRef<std::ffi::OsStr>>(args: &[S], env: &[(&str, &str)], stdin: &[u8]) -> Ran {
    let mut child = Command::new(bin())
        .args(args)
        .env_remove("KUBECONFIG")
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .current_dir(repo_root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A command that exits without reading its input closes the pipe: not the test's failure.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    let out = child.wait_with_output().unwrap();
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// `ksvc-webhook name` for app `app` of project `proj`, domain `dev`.
pub fn name_of(app: &str) -> Ran {
    let args = [
        "name",
        "--project",
        "proj",
        "--domain",
        "dev",
        "--name",
        app,
    ];
    run_bin(&args, &[], b"")
}

/// The built `ksvc-webhook` binary of the test run: cargo builds it for the integration tests
/// into the folder above their own (`target/<profile>/deps/<test>` beside
/// `target/<profile>/ksvc-webhook`).
pub fn bin() -> PathBuf {
    if let Some(path) = std::env::var_os("CARGO_BIN_EXE_ksvc-webhook") {
        return PathBuf::from(path);
    }
    let test = std::env::current_exe().unwrap();
    test.parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("ksvc-webhook")
}

/// The repository's root (this library lives in `tests/support`): commands run from there, as
/// the README's do.
pub fn repo_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// `serve` of the built binary with self-managed certificates against the API server of
/// `kubeconfig`, one worker, no watch loop, listening on a free port of 127.0.0.1, its
/// certificates in `tls_dir`; the caller adds its own flags and spawns it.
pub fn self_managed_serve(kubeconfig: &std::path::Path, tls_dir: &std::path::Path) -> Command {
    let mut command = serve_in_cluster(kubeconfig, tls_dir);
    command.arg("--self-managed-certs=true");
    command
}

/// [`self_managed_serve`] without choosing where the certificates come from: the caller says
/// (`--cert-manager`, for one).
pub fn serve_in_cluster(kubeconfig: &std::path::Path, tls_dir: &std::path::Path) -> Command {
    let mut command = Command::new(bin());
    command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--no-watch",
            "--workers",
            "1",
        ])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--tls-dir")
        .arg(tls_dir);
    command
}
