#!/usr/bin/env bash
# The monitoring checks of `make test`: every alert's runbook_url is absolute and its anchor is a
# heading of docs/runbooks.md; the PrometheusRule's rules through `promtool check rules` and the
# alert unit tests in manifests/monitoring/tests through `promtool test rules`.
# promtool comes with Debian's `prometheus` package (.ci/run installs it). Without it the checks
# are skipped with a banner, and under CI (CI=true) they fail instead.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/monitoring
python=${PYTHON:-.venv/bin/python}
# Every alert's runbook_url is absolute: the rule's runbook-base-url annotation, `#` and an anchor
# that a heading of docs/runbooks.md makes (GitHub's anchors: lowercase, punctuation dropped,
# spaces as hyphens). Needs no promtool.
"$python" - manifests/monitoring/prometheusrule.yaml docs/runbooks.md <<'PY'
import re, sys, yaml
rule = yaml.safe_load(open(sys.argv[1]))
base = rule["metadata"]["annotations"]["ksvc-webhook.flyte.org/runbook-base-url"]
assert re.match(r"^https?://[^#\s]+$", base), f"runbook-base-url is not an absolute URL: {base}"
anchors = set()
for line in open(sys.argv[2]):
    heading = re.match(r"^#{1,6} (.+)$", line.rstrip("\n"))
    if heading:
        text = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower())
        anchors.add(text.replace(" ", "-"))
problems = []
count = 0
for group in rule["spec"]["groups"]:
    for r in group["rules"]:
        if "alert" not in r:
            continue
        count += 1
        url = r.get("annotations", {}).get("runbook_url", "")
        prefix, _, anchor = url.partition("#")
        if prefix != base:
            problems.append(f"{r['alert']}: runbook_url {url!r} does not start with {base}#")
        elif anchor not in anchors:
            problems.append(f"{r['alert']}: #{anchor} is no heading of {sys.argv[2]}")
if problems:
    sys.exit("runbook links:\n  " + "\n  ".join(problems))
print(f"runbook links: all {count} alerts link a heading of {sys.argv[2]} under {base}")
PY
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
