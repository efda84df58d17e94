//! The Helm CLI for the chart tests: where the binary is, and `helm template` of
//! charts/ksvc-webhook parsed into objects.
//!
//! helm comes from `$HELM`, else the cache scripts/helm-build.sh fills
//! (`~/.cache/ksvc-webhook-e2e/helm-<version>/helm`, the version pinned in e2e/helmbin/go.mod),
//! else the PATH. Without one a chart test says it skipped and returns; under CI (`CI=true`) it
//! fails instead, saying what to install, as `make monitoring-check` does for promtool.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .unwrap()
}

/// The chart's directory.
pub fn chart() -> PathBuf {
    root().join("charts/ksvc-webhook")
}

/// The helm version e2e/helmbin/go.mod pins, e.g. `v4.3.2`.
pub fn pinned_version() -> String {
    let go_mod = std::fs::read_to_string(root().join("e2e/helmbin/go.mod")).unwrap();
    go_mod
        .lines()
        .find_map(|l| l.trim().strip_prefix("helm.sh/helm/v4 "))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("e2e/helmbin/go.mod requires helm.sh/helm/v4")
        .to_owned()
}

/// The helm binary, or `None` (after saying so) when there is none outside CI.
///
/// # Panics
/// Under `CI=true` when no helm is found: CI must run the chart checks.
pub fn helm() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("HELM") {
        return Some(PathBuf::from(path));
    }
    let cache = std::env::var_os("KSVC_E2E_CACHE").map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/ksvc-webhook-e2e")
        },
        PathBuf::from,
    );
    let cached = cache.join(format!("helm-{}/helm", pinned_version()));
    if cached.is_file() {
        return Some(cached);
    }
    if Command::new("helm")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Some(PathBuf::from("helm"));
    }
    let why = format!(
        "helm not found ($HELM, {}, or the PATH): build it with scripts/helm-build.sh (needs Go; \
         `make helm-check` runs it) or install helm {} and set HELM",
        cached.display(),
        pinned_version()
    );
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true: {why}"
    );
    eprintln!("SKIPPED: {why}");
    None
}

/// `helm template ksvc-webhook charts/ksvc-webhook --namespace ksvc-system ARGS…`: the
/// rendered objects, or helm's stderr when it refuses.
pub fn template(helm: &Path, args: &[&str]) -> Result<Vec<Value>, String> {
    let out = Command::new(helm)
        .args(["template", "ksvc-webhook"])
        .arg(chart())
        .args(["--namespace", "ksvc-system"])
        .args(args)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(ksvc_webhook::manifest_text::parse(&out.stdout)
        .unwrap()
        .items)
}

/// `kubectl kustomize DIR` (relative to the repository root) parsed into objects.
pub fn kustomize(dir: &str) -> Vec<Value> {
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = Command::new(&kubectl)
        .args(["kustomize", dir])
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("{kubectl} kustomize {dir}: {e} (kubectl renders manifests/)"));
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    ksvc_webhook::manifest_text::parse(&out.stdout)
        .unwrap()
        .items
}
