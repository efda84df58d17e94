#!/usr/bin/env bash
# The chart check of `make test` that needs helm: find helm ($HELM, or built once from
# e2e/helmbin by scripts/helm-build.sh when Go is installed, or the PATH), then
# `helm lint --strict` of charts/ksvc-webhook in both certificate modes. tests/chart.rs (run by
# `make unit`) finds the same binary and diffs the chart with manifests/. Without Go and helm
# the check is skipped with a banner, and under CI (CI=true) it fails instead.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${HELM:-}" ]; then
  helm=$HELM
elif command -v go >/dev/null; then
  helm=$(./scripts/helm-build.sh)
elif command -v helm >/dev/null; then
  helm=helm
else
  banner="SKIPPED: the Helm chart checks (helm lint, tests/chart.rs): neither helm nor Go is on the PATH. Get Go (https://go.dev/dl/; scripts/helm-build.sh then builds helm) or set HELM=/path/to/helm"
  echo "$banner" >&2
  # `make test` repeats it at the end.
  [ -z "${SKIP_NOTE:-}" ] || echo "$banner" >> "$SKIP_NOTE"
  [ "${CI:-}" != "true" ] || { echo "CI=true: helm is required" >&2; exit 1; }
  exit 0
fi
"$helm" lint --strict charts/ksvc-webhook
"$helm" lint --strict charts/ksvc-webhook --set certificates.mode=certManager
