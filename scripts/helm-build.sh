#!/usr/bin/env bash
# Builds the Helm CLI pinned by e2e/helmbin/go.mod (helm.sh/helm/v4) into
# ~/.cache/ksvc-webhook-e2e/helm-<version>/helm and prints that path. A second run finds the binary
# and builds nothing. Needs Go (GOTOOLCHAIN=local: the installed toolchain, no download of another)
# and the Go module proxy; the binary is never committed.
set -euo pipefail
cd "$(dirname "$0")/../e2e/helmbin"
version=$(awk '$1 == "helm.sh/helm/v4" { print $2 }' go.mod)
if [ -z "$version" ]; then
  echo "helm-build: no helm.sh/helm/v4 line in e2e/helmbin/go.mod" >&2
  exit 1
fi
out="${KSVC_E2E_CACHE:-$HOME/.cache/ksvc-webhook-e2e}/helm-$version"
if [ -x "$out/helm" ]; then
  echo "$out/helm"
  exit 0
fi
if ! command -v go >/dev/null; then
  echo "helm-build: Go is not installed; install Go >= $(awk '$1 == "go" { print $2 }' go.mod) (https://go.dev/dl/) or put a helm $version binary on the PATH" >&2
  exit 1
fi
mkdir -p "$out"
echo "helm-build: building helm $version into $out (a few minutes, once)" >&2
# Helm's version string comes from ldflags, as its own Makefile sets it.
GOTOOLCHAIN=local CGO_ENABLED=0 nice go build -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version" \
  -o "$out/helm.tmp" helm.sh/helm/v4/cmd/helm
mv "$out/helm.tmp" "$out/helm"
echo "$out/helm"
