#!/usr/bin/env bash
# `make e2e`: build what is missing (scripts/e2e-build.sh: kube-apiserver, kube-controller-manager,
# kubectl and etcd, cached per version under ~/.cache/ksvc-webhook-e2e; the test binary), start
# the control plane (scripts/e2e-cluster.sh up), run the e2e suite (tests/e2e) one test at a
# time, and stop everything, whether the suite passed or not. On a failure, the tails of the
# control plane's logs follow the test output. Extra arguments go to the test binary (a filter).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
CARGO=${CARGO:-cargo}

scripts/e2e-build.sh >/dev/null
# helm for tests/e2e/helm.rs (cached the same way, e2e/helmbin).
scripts/helm-build.sh >/dev/null
# Compiled before the control plane starts, so a compile error leaves nothing running.
$CARGO test --test e2e --no-run --quiet

trap 'scripts/e2e-cluster.sh down' EXIT
scripts/e2e-cluster.sh up
status=0
# The least-privilege test reads the audit log of the whole run: it goes last.
$CARGO test --test e2e --quiet -- --ignored --test-threads=1 --skip least_privilege "$@" || status=$?
if [[ $status == 0 && $# == 0 ]]; then
  $CARGO test --test e2e --quiet -- --ignored least_privilege || status=$?
fi
if [[ $status != 0 ]]; then
  for log in kube-apiserver kube-controller-manager etcd; do
    echo "--- the last lines of ${E2E_DIR:-target/e2e/cluster}/$log.log:" >&2
    tail -n 15 "${E2E_DIR:-target/e2e/cluster}/$log.log" >&2 || true
  done
  echo "e2e: the suite failed; every log is in ${E2E_DIR:-target/e2e/cluster}/" >&2
fi
echo "e2e: done in $((SECONDS - start)) s" >&2
exit $status
