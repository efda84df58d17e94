#!/usr/bin/env bash
# The monitoring checks of `make test`: the PrometheusRule's rules through `promtool check rules`
# and the alert unit tests in manifests/monitoring/tests through `promtool test rules`.
# promtool comes with Debian's `prometheus` package (.ci/run installs it). Without it the checks
# are skipped with a banner, and under CI (CI=true) they fail instead.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/monitoring
python=${PYTHON:-.venv/bin/python}
if ! command -v promtool >/dev/null; then
  banner="SKIPPED: the alert rule checks (promtool check rules / promtool test rules): promtool is not on the PATH. Get it with: apt-get install prometheus"
  echo "$banner" >&2
  # `make test` repeats it at the end.
  [ -z "${SKIP_NOTE:-}" ] || echo "$banner" >> "$SKIP_NOTE"
  [ "${CI:-}" != "true" ] || { echo "CI=true: promtool is required" >&2; exit 1; }
  exit 0
fi
mkdir -p "$out"
# The PrometheusRule's spec is a plain rules file: `groups:`.
"$python" - manifests/monitoring/prometheusrule.yaml "$out/rules.yaml" <<'PY'
import sys, yaml
rule = yaml.safe_load(open(sys.argv[1]))
yaml.safe_dump(rule["spec"], open(sys.argv[2], "w"), sort_keys=False)
PY
promtool check rules "$out/rules.yaml"
cp manifests/monitoring/tests/*.yaml "$out/"
(cd "$out" && promtool test rules ./*_test.yaml)
