#!/usr/bin/env bash
# The admission cost a user feels, by hand (docs/performance.md, "Through kube-apiserver"): KService
# creates through the e2e control plane's real kube-apiserver, with the webhook registered and
# running, then with its two registrations deleted. Two clients each time:
#   - `kubectl create -f -`, one process per create, as a user types it;
#   - direct API creates (POST) over one kept-alive TLS connection, the API server's own time.
# Prints p50, p90, p99 and the mean of each. Loopback only; stops everything it started.
#
# Knobs (env): N (creates per run, default 200), SKIP_BUILD=1 (use the release binary as it is).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-200}
export E2E_DIR=${E2E_DIR:-$PWD/target/e2e/latency}
[[ ${SKIP_BUILD:-0} == 1 ]] || cargo build --release --quiet
BIN=$PWD/target/release/ksvc-webhook

WEBHOOK_PID=
cleanup() {
  [[ -n $WEBHOOK_PID ]] && kill "$WEBHOOK_PID" 2>/dev/null && wait "$WEBHOOK_PID" 2>/dev/null
  scripts/e2e-cluster.sh down
}
trap cleanup EXIT
scripts/e2e-cluster.sh up
# shellcheck disable=SC1091
source "$E2E_DIR/env"
export KUBECONFIG
KUBECTL=$K8S_BIN/kubectl
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# The install of tests/support/control_plane.rs: manifests/ through e2e/overlay, this port.
mkdir -p target/e2e/latency-install
cat >target/e2e/latency-install/kustomization.yaml <<EOF
resources: [../../../e2e/overlay]
patches:
  - target: {group: admissionregistration.k8s.io, kind: MutatingWebhookConfiguration}
    patch: '[{"op": "replace", "path": "/webhooks/0/clientConfig/service/port", "value": $PORT}]'
  - target: {group: admissionregistration.k8s.io, kind: ValidatingWebhookConfiguration}
    patch: '[{"op": "replace", "path": "/webhooks/0/clientConfig/service/port", "value": $PORT}]'
EOF
"$KUBECTL" apply -k target/e2e/latency-install >/dev/null
TOKEN=$("$KUBECTL" create token ksvc-webhook -n ksvc-system --duration 2h)
cat >"$E2E_DIR/ksvc-webhook.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "https://127.0.0.1:$E2E_API_PORT", certificate-authority: "$E2E_DIR/ca.crt"}}]
users: [{name: sa, user: {token: "$TOKEN"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: sa, namespace: ksvc-system}}]
current-context: e2e
EOF
mkdir -p "$E2E_DIR/webhook-tls"
KSVC_WEBHOOK_POD_NAME=latency KSVC_WEBHOOK_POD_NAMESPACE=ksvc-system \
  "$BIN" serve --listen "127.0.0.1:$PORT" --tls-dir "$E2E_DIR/webhook-tls" --self-managed-certs=true \
  --kubeconfig "$E2E_DIR/ksvc-webhook.kubeconfig" --log-format=json >"$E2E_DIR/ksvc-webhook-latency.log" 2>&1 &
WEBHOOK_PID=$!
echo "$WEBHOOK_PID" >"$E2E_DIR/ksvc-webhook-$WEBHOOK_PID.pid"
for _ in $(seq 120); do
  bundle=$("$KUBECTL" get mutatingwebhookconfiguration zz-ksvc-webhook.flyte.org -o jsonpath='{.webhooks[0].clientConfig.caBundle}')
  [[ -n $bundle ]] && break
  sleep 0.5
done
[[ -n $bundle ]] || { echo "the webhook did not publish its CA within 60 s; see $E2E_DIR/ksvc-webhook-latency.log" >&2; exit 1; }

measure() { # label namespace
  "$KUBECTL" create namespace "$2" >/dev/null
  python3 - "$1" "$2" "$N" "$KUBECTL" "$E2E_API_PORT" "$E2E_DIR" <<'PY'
import json, ssl, statistics, subprocess, sys, time, http.client
label, ns, n, kubectl, port, d = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
def ksvc(i):
    return {"apiVersion": "serving.knative.dev/v1", "kind": "Service",
            "metadata": {"namespace": ns, "name": f"app-{i}-proj-dev",
                         "labels": {"flyte.org/project": "proj", "flyte.org/domain": "dev", "flyte.org/app-name": f"app-{i}"}},
            "spec": {"template": {"spec": {"containers": [{"image": "ghcr.io/example/myapp:1.4.2",
                     "ports": [{"containerPort": 8080}], "env": [{"name": "LOG_LEVEL", "value": "info"}]}]}}}}
def stats(name, ms):
    ms = sorted(ms)
    q = lambda p: ms[min(len(ms) - 1, int(round(p * (len(ms) - 1))))]
    print(f"{label:>22} | {name:<28} | n={len(ms)} p50 {q(0.5):6.1f} ms  p90 {q(0.9):6.1f} ms  p99 {q(0.99):6.1f} ms  mean {statistics.mean(ms):6.1f} ms")
kubectl_ms = []
for i in range(n):
    body = json.dumps(ksvc(i)).encode()
    t = time.perf_counter()
    subprocess.run([kubectl, "create", "-f", "-", "-o", "name"], input=body, check=True, stdout=subprocess.DEVNULL)
    kubectl_ms.append((time.perf_counter() - t) * 1000)
ctx = ssl.create_default_context(cafile=f"{d}/ca.crt")
ctx.load_cert_chain(f"{d}/admin.crt", f"{d}/admin.key")
conn = http.client.HTTPSConnection("127.0.0.1", int(port), context=ctx)
api_ms = []
for i in range(n, 2 * n):
    body = json.dumps(ksvc(i))
    t = time.perf_counter()
    conn.request("POST", f"/apis/serving.knative.dev/v1/namespaces/{ns}/services", body, {"Content-Type": "application/json"})
    r = conn.getresponse(); r.read()
    api_ms.append((time.perf_counter() - t) * 1000)
    assert r.status == 201, (r.status, i)
stats("kubectl create (process)", kubectl_ms)
stats("POST, kept-alive TLS", api_ms)
PY
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
measure "webhook registered" latency-with
"$KUBECTL" delete mutatingwebhookconfiguration zz-ksvc-webhook.flyte.org >/dev/null
"$KUBECTL" delete validatingwebhookconfiguration ksvc-webhook-revision-guard.flyte.org >/dev/null
# kube-apiserver drops a deleted webhook from its admission chain within a second.
sleep 2
measure "no webhook" latency-without
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# A create in the first run that was not mutated would make the comparison meaningless.
"$KUBECTL" get ksvc -n latency-with -o jsonpath='{range .items[*]}{.metadata.annotations.flyte\.org/spec-sha}{"\n"}{end}' |
  grep -c . | xargs -I{} echo "{} of $((2 * N)) creates with the webhook carry a spec SHA"
