#!/usr/bin/env bash
# HTTPS load benchmark of `ksvc-webhook serve` with oha, on 127.0.0.1 only.
#
# The server is pinned to CPU 0 and oha to CPU 1. Posts a ~2 KB and a ~200 KB KService
# AdmissionReview at concurrency 1, 16 and 64 over HTTP/1.1 keep-alive, then 2 KB with a new TLS
# connection per request. Prints requests/s, p50/p99 latency, server CPU per request (utime+stime
# from /proc/PID/stat) and the server's resident memory (VmRSS now, VmHWM peak).
#
# Knobs (env): DURATION (per run, default 10s), PORT (default 18443), SERVER_CPU (0),
# LOAD_CPU (1), CONCURRENCY ("1 16 64"), SKIP_BUILD=1 to use the existing release binary,
# BIN (the binary, default ./target/release/ksvc-webhook: another build, to compare side by side),
# SERVER_ARGS (extra `serve` flags), SERVER_ENV (extra env of the server, e.g.
# "MIMALLOC_ARENA_EAGER_COMMIT=0"), RUST_LOG (server log level, default info), OTLP=1 to export
# one span per review (`--otlp-endpoint --otlp-untraced-reviews`) to scripts/otlp-sink.py on OTLP_PORT (default 14318),
# pinned with oha to LOAD_CPU; the sink's counts and the server's export warnings are printed
# at the end. PEER=noop|decide runs the same load against examples/peer_webhook.rs instead: the
# smallest axum + rustls webhook (noop: serde_json in, a fixed patch out; decide: admission's own
# decision), the yardsticks for latency and handshake cost (docs/performance.md).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
PORT=${PORT:-18443}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
CONCURRENCY=${CONCURRENCY:-"1 16 64"}
BIN=${BIN:-./target/release/ksvc-webhook}

command -v oha >/dev/null || { echo "oha missing: cargo install oha --locked" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 missing (used to build fixtures and read results)" >&2; exit 1; }
[[ ${SKIP_BUILD:-0} == 1 ]] || cargo build --release --quiet
if [[ -n ${PEER:-} ]]; then
  [[ ${SKIP_BUILD:-0} == 1 ]] || cargo build --release --quiet --example peer_webhook
  PEER_BIN=$(dirname "$BIN")/examples/peer_webhook
fi

WORK=$(mktemp -d)
SERVER_PID=
SINK_PID=
cleanup() {
  [[ -n $SERVER_PID ]] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  [[ -n $SINK_PID ]] && kill "$SINK_PID" 2>/dev/null && wait "$SINK_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

"$BIN" certs --service ksvc-webhook --namespace ksvc-system --out "$WORK/certs" >/dev/null

# Fixtures: a managed-app KService CREATE review, padded with env vars to the wanted size.
python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
def review(target):
    env = []
    ksvc = {
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"name": "myapp-proj-dev", "namespace": "apps",
                     "labels": {"flyte.org/project": "proj", "flyte.org/domain": "dev",
                                "flyte.org/app-name": "myapp"},
                     "annotations": {"flyte.org/app-managed": "true"}},
        "spec": {"template": {
            "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1"}},
            "spec": {"containers": [{"name": "app", "image": "ghcr.io/example/app:1.2.3",
                                      "ports": [{"containerPort": 8080}], "env": env,
                                      "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}},
    }
    gvk = {"group": "serving.knative.dev", "version": "v1", "kind": "Service"}
    gvr = {"group": "serving.knative.dev", "version": "v1", "resource": "services"}
    doc = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "kind": gvk, "resource": gvr,
        "requestKind": gvk, "requestResource": gvr, "name": "myapp-proj-dev", "namespace": "apps",
        "operation": "CREATE", "userInfo": {"username": "system:serviceaccount:apps:deployer",
                                            "groups": ["system:serviceaccounts"]},
        "object": ksvc, "oldObject": None, "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}
    i = 0
    while len(json.dumps(doc)) < target:
        env.append({"name": f"SETTING_{i:05d}", "value": f"value-{i:05d}-" + "v" * 40})
        i += 1
    return json.dumps(doc, separators=(",", ":"))
for name, size in (("2k", 2048), ("200k", 200 * 1024)):
    with open(f"{work}/review-{name}.json", "w") as f:
        f.write(review(size))
PY

if [[ ${OTLP:-0} == 1 ]]; then
  OTLP_PORT=${OTLP_PORT:-14318}
  taskset -c "$LOAD_CPU" python3 scripts/otlp-sink.py "$OTLP_PORT" >"$WORK/sink.log" 2>&1 &
  SINK_PID=$!
  for _ in $(seq 50); do
    curl -sf -X POST "http://127.0.0.1:$OTLP_PORT/v1/traces" -o /dev/null && break
    sleep 0.1
  done
  SERVER_ARGS="${SERVER_ARGS:-} --otlp-endpoint http://127.0.0.1:$OTLP_PORT --otlp-untraced-reviews"
fi

# No cluster here: certificates from files, no watch loop (its cache would never sync, and
# /readyz waits for it). Memory as the Deployment runs it (mimalloc commits on demand). Every
# oha connection comes from 127.0.0.1: the per-address share is raised to the listener's cap
# (the production limits otherwise), so concurrency up to 256 is served.
if [[ -n ${PEER:-} ]]; then
  taskset -c "$SERVER_CPU" "$PEER_BIN" "127.0.0.1:$PORT" "$WORK/certs" "$PEER" >"$WORK/server.log" 2>&1 &
else
  env MIMALLOC_ARENA_EAGER_COMMIT=0 ${SERVER_ENV:-} RUST_LOG="${RUST_LOG:-info}" taskset -c "$SERVER_CPU" \
    "$BIN" serve --listen "127.0.0.1:$PORT" --tls-dir "$WORK/certs" --log-format json \
    --self-managed-certs=false --no-watch --max-connections-per-ip=256 ${SERVER_ARGS:-} \
    >"$WORK/server.log" 2>&1 &
fi
SERVER_PID=$!
URL="https://ksvc-webhook.ksvc-system.svc:$PORT/mutate"
CONNECT_TO="ksvc-webhook.ksvc-system.svc:$PORT:127.0.0.1:$PORT"
for _ in $(seq 100); do
  curl -sf --cacert "$WORK/certs/ca.crt" --connect-to "$CONNECT_TO" \
    "https://ksvc-webhook.ksvc-system.svc:$PORT/readyz" >/dev/null && break
  sleep 0.1
done

TICKS=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }
mem() { awk '/^VmRSS|^VmHWM/ {printf "%s %.1f MiB  ", $1, $2/1024}' "/proc/$SERVER_PID/status"; }

run() { # label fixture concurrency [oha flags...]
  local label=$1 fixture=$2 conc=$3; shift 3
  local before after
  before=$(cpu_ticks)
  taskset -c "$LOAD_CPU" oha -z "$DURATION" -w -c "$conc" -m POST -T application/json \
    -D "$WORK/review-$fixture.json" --cacert "$WORK/certs/ca.crt" --connect-to "$CONNECT_TO" \
    --no-tui --output-format json "$@" "$URL" >"$WORK/out.json"
  after=$(cpu_ticks)
  python3 - "$WORK/out.json" "$label" "$fixture" "$conc" "$((after - before))" "$TICKS" "$(mem)" <<'PY'
import json, sys
out, label, fixture, conc, ticks, hz, mem = sys.argv[1:]
r = json.load(open(out))
s, p = r["summary"], r["latencyPercentiles"]
codes = r.get("statusCodeDistribution", {})
ok = int(codes.get("200", 0))
total = sum(int(v) for v in codes.values())
errors = sum(int(v) for v in r.get("errorDistribution", {}).values())
cpu_us = int(ticks) / int(hz) * 1e6 / max(total, 1)
# How busy the server's core was: below ~90 % the load generator (or a neighbour) was the limit;
# 1e6 / cpu_us is then what the server alone could answer on its core.
busy = s['requestsPerSec'] * cpu_us / 1e4
print(f"{label:<10} {fixture:>5} c={conc:<3} {s['requestsPerSec']:>9.0f} req/s  "
      f"p50 {p['p50']*1e3:7.3f} ms  p99 {p['p99']*1e3:7.3f} ms  "
      f"cpu/req {cpu_us:6.1f} us  server busy {busy:3.0f} %  ok {ok}/{total} err {errors}  {mem}")
PY
}

echo "server CPU $SERVER_CPU, oha CPU $LOAD_CPU, $DURATION per run, $(nproc) CPUs, $(oha --version)," \
  "server env: ${SERVER_ENV:-none}, args: ${SERVER_ARGS:-none}," \
  "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
run warmup 2k 16 >/dev/null
for fixture in 2k 200k; do
  for conc in $CONCURRENCY; do
    run keepalive "$fixture" "$conc"
  done
done
run new-conn 2k 16 --disable-keepalive
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ -n $SINK_PID ]]; then
  # A Ctrl-C skips the drain; the server exports what is queued before it exits.
  kill -INT "$SERVER_PID" && wait "$SERVER_PID" || true
  SERVER_PID=
  kill "$SINK_PID" && wait "$SINK_PID" || true
  SINK_PID=
  cat "$WORK/sink.log"
  grep -E "dropped|not all exported|ExportError" "$WORK/server.log" | cut -c1-300 || echo "no span dropped or lost"
fi
