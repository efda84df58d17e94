#!/usr/bin/env bash
# Builds the e2e control plane's programs from their pinned Go modules, once per version:
# kube-apiserver, kube-controller-manager and kubectl from e2e/k8sbin (k8s.io/kubernetes), etcd
# from e2e/etcdbin (go.etcd.io/etcd/server/v3). Each module's version is read from its go.mod.
#
# The binaries go to a cache outside the repository, one directory per version:
#   $E2E_CACHE/k8s-<version>/{kube-apiserver,kube-controller-manager,kubectl}
#   $E2E_CACHE/etcd-<version>/etcd
# (E2E_CACHE defaults to ~/.cache/ksvc-webhook-e2e). A directory is only moved into place when
# its build succeeded, so a killed build leaves nothing half-made. A second run builds nothing.
# Prints on stdout the two directories, as shell assignments `K8S_BIN=…` and `ETCD_BIN=…`; its
# progress (what it builds and how long it took) goes to stderr.
#
# Needs Go (1.26 or newer); GOTOOLCHAIN=local so that Go never downloads another toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${E2E_CACHE:-$HOME/.cache/ksvc-webhook-e2e}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false

if ! command -v go >/dev/null; then
  echo "make e2e needs Go 1.26 or newer to build kube-apiserver and etcd: install it from https://go.dev/dl/ (or apt-get install golang-1.26) and put it on the PATH" >&2
  exit 1
fi

# The version a wrapper module requires of a module, from `go mod edit -json` (Go's own parser).
required() {
  (cd "$1" && go mod edit -json) |
    python3 -c 'import json, sys; print(next(r["Version"] for r in json.load(sys.stdin)["Require"] if r["Path"] == sys.argv[1]))' "$2"
}

K8S_VERSION=$(required e2e/k8sbin k8s.io/kubernetes)
ETCD_VERSION=$(required e2e/etcdbin go.etcd.io/etcd/server/v3)
K8S_BIN=$CACHE/k8s-$K8S_VERSION
ETCD_BIN=$CACHE/etcd-$ETCD_VERSION

# build <module dir> <target dir> <ldflags> <package…>: go build into a scratch directory beside
# the target, then rename it into place. A main package whose path ends in a major version
# (go.etcd.io/etcd/server/v3) is named after the element before it (`server`): RENAME="server etcd"
# names it. The build log is kept beside the cache for a failure.
build() {
  local dir=$1 target=$2 ldflags=$3; shift 3
  local scratch=$target.partial.$$ log=$target.build.log start=$SECONDS
  mkdir -p "$CACHE"
  rm -rf "$scratch"
  mkdir -p "$scratch"
  echo "e2e: building $(basename "$target") ($*) into $target; the first build takes 10-25 minutes on 2 cores" >&2
  if ! (cd "$dir" && nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$scratch/" "$@") >"$log" 2>&1; then
    rm -rf "$scratch"
    echo "e2e: building $(basename "$target") failed (go build in $dir); the end of $log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  if [[ -n ${RENAME:-} ]]; then mv "$scratch/${RENAME% *}" "$scratch/${RENAME#* }"; fi
  rm -rf "$target"
  mv "$scratch" "$target"
  echo "e2e: built $(basename "$target") in $((SECONDS - start)) s" >&2
}

if [[ ! -x $ETCD_BIN/etcd ]]; then
  RENAME="server etcd" build e2e/etcdbin "$ETCD_BIN" "-s -w" go.etcd.io/etcd/server/v3
fi

if [[ ! -x $K8S_BIN/kube-apiserver || ! -x $K8S_BIN/kube-controller-manager || ! -x $K8S_BIN/kubectl ]]; then
  minor=${K8S_VERSION#v1.}
  minor=${minor%%.*}
  ldflags="-s -w"
  # What `--version` and /version report, as hack/lib/version.sh sets it for a release build.
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  build e2e/k8sbin "$K8S_BIN" "$ldflags" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl
fi

echo "K8S_BIN=$K8S_BIN"
echo "ETCD_BIN=$ETCD_BIN"
