#!/usr/bin/env bash
# The e2e control plane on loopback: etcd, kube-apiserver and kube-controller-manager, built by
# scripts/e2e-build.sh, with Knative's CRDs (e2e/crds/) installed. No Knative controller runs.
#
#   scripts/e2e-cluster.sh up     start it (after stopping what a previous run left behind)
#   scripts/e2e-cluster.sh down   stop it: each process by its PID file; the logs stay
#
# Everything lives in $E2E_DIR (default target/e2e/cluster, git-ignored): the CA and
# certificates, the service-account key, etcd's data, one log per process (etcd.log,
# kube-apiserver.log, kube-controller-manager.log), one PID file per process, `kubeconfig` (the
# admin user, O=system:masters), `audit.log` (every request of the two parts' ServiceAccounts and
# every Revision delete, as kube-apiserver's audit log: the RBAC tests read it) and `env`, the file the tests read (KUBECONFIG, the ports, the
# binaries' directories). Every port is a free one on 127.0.0.1, picked at start; E2E_API_PORT
# (and E2E_ETCD_PORT, E2E_ETCD_PEER_PORT, E2E_KCM_PORT) fix one instead. E2E_APISERVER_ARGS adds
# flags to kube-apiserver (feature gates, say); E2E_READY_SECS (default 90) bounds each wait.
#
# A failure prints one sentence and the tail of the log concerned, stops whatever it started, and
# exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=${E2E_DIR:-$ROOT/target/e2e/cluster}
PROCS=(kube-controller-manager kube-apiserver etcd)
READY=${E2E_READY_SECS:-90}

fail() { # sentence [log]
  echo "e2e: $1" >&2
  if [[ -n ${2:-} && -f $2 ]]; then
    echo "--- the last lines of $2:" >&2
    tail -n 25 "$2" >&2
  fi
  stop
  exit 1
}

# stop: SIGTERM each process named by a PID file, if that PID still runs the binary the file
# names (a PID reused by another program is left alone), wait up to 10 s, then SIGKILL.
# The `ksvc-webhook serve` processes of the e2e suite (tests/support/control_plane.rs) leave a
# ksvc-webhook-<pid>.pid each, removed when the test ends: any left are a killed run's.
stop() {
  local name file pid
  for file in "$DIR"/ksvc-webhook-*.pid; do
    [[ -f $file ]] && stop_pid ksvc-webhook "$file"
  done
  for name in "${PROCS[@]}"; do
    [[ -f $DIR/$name.pid ]] && stop_pid "$name" "$DIR/$name.pid"
  done
  return 0
}

stop_pid() { # binary-name pid-file
  local pid
  pid=$(<"$2")
  if [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == */"$1" ]]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$2"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# taken PORT: true when something already listens on 127.0.0.1:PORT.
taken() { python3 -c 'import socket, sys; s = socket.socket(); sys.exit(s.connect_ex(("127.0.0.1", int(sys.argv[1]))) != 0)' "$1"; }

# wait_for NAME LOG SECONDS CHECK…: run CHECK every 0.5 s until it succeeds; fail with the log's
# tail when the process exits or the time is up.
wait_for() {
  local name=$1 log=$2 secs=$3; shift 3
  local pid
  pid=$(<"$DIR/$name.pid")
  for _ in $(seq $((secs * 2))); do
    "$@" >/dev/null 2>&1 && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      if grep -q 'address already in use' "$log"; then
        fail "$name could not listen: a port it was given is already taken (see $log)" "$log"
      fi
      fail "$name exited before it was ready" "$log"
    fi
    sleep 0.5
  done
  fail "$name was not ready within $secs s" "$log"
}

# start NAME COMMAND…: run it in the background, its output into NAME.log, its PID into NAME.pid.
start() {
  local name=$1; shift
  "$@" >"$DIR/$name.log" 2>&1 &
  echo $! >"$DIR/$name.pid"
}

certs() {
  local sign
  sign() { # name subject extensions
    openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
    printf '%b' "$3" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 7 \
      -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  }
  (
    cd "$DIR"
    openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj /CN=ksvc-webhook-e2e-ca \
      -keyout ca.key -out ca.crt 2>/dev/null
    sign apiserver /CN=kube-apiserver \
      'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n'
    sign admin '/O=system:masters/CN=e2e-admin' 'extendedKeyUsage=clientAuth\n'
    sign kcm /CN=system:kube-controller-manager 'extendedKeyUsage=clientAuth\n'
    openssl genrsa -out sa.key 2048 2>/dev/null
    rm -f ./*.csr ./*.ext ca.srl
  ) || fail "openssl could not make the control plane's certificates in $DIR"
}

kubeconfig() { # file user
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$DIR/ca.crt"}}]
users: [{name: $2, user: {client-certificate: "$DIR/$2.crt", client-key: "$DIR/$2.key"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: $2}}]
current-context: e2e
EOF
}

up() {
  local bins start=$SECONDS
  bins=$(scripts/e2e-build.sh) || exit 1
  eval "$bins"
  stop
  rm -rf "$DIR"
  mkdir -p "$DIR"
  chmod 700 "$DIR"

  ETCD_PORT=${E2E_ETCD_PORT:-$(free_port)}
  ETCD_PEER_PORT=${E2E_ETCD_PEER_PORT:-$(free_port)}
  API_PORT=${E2E_API_PORT:-$(free_port)}
  KCM_PORT=${E2E_KCM_PORT:-$(free_port)}
  for port in "$ETCD_PORT" "$ETCD_PEER_PORT" "$API_PORT" "$KCM_PORT"; do
    taken "$port" && fail "port $port on 127.0.0.1 is already taken: stop what listens there, or unset the E2E_*_PORT that names it"
  done
  certs
  cat >"$DIR/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: ["system:serviceaccount:ksvc-system:ksvc-webhook", "system:serviceaccount:ksvc-system:ksvc-webhook-controller"]
  - level: Metadata
    resources: [{group: serving.knative.dev, resources: [revisions]}]
    verbs: [delete, deletecollection]
  - level: None
EOF
  kubeconfig "$DIR/kubeconfig" admin
  kubeconfig "$DIR/kcm.kubeconfig" kcm

  start etcd "$ETCD_BIN/etcd" --name e2e --data-dir "$DIR/etcd" --unsafe-no-fsync --log-level warn \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls ''
  wait_for etcd "$DIR/etcd.log" "$READY" curl -sf "http://127.0.0.1:$ETCD_PORT/health"

  # The webhook client honours HTTPS_PROXY even for *.svc names: no proxy for kube-apiserver.
  start kube-apiserver env -u HTTPS_PROXY -u https_proxy -u HTTP_PROXY -u http_proxy -u ALL_PROXY -u all_proxy \
    NO_PROXY=.svc,localhost,127.0.0.1 \
    "$K8S_BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
    --cert-dir="$DIR/apiserver-certs" \
    --tls-cert-file="$DIR/apiserver.crt" --tls-private-key-file="$DIR/apiserver.key" \
    --client-ca-file="$DIR/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$DIR/sa.key" --service-account-signing-key-file="$DIR/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 --authorization-mode=Node,RBAC --allow-privileged=true \
    --endpoint-reconciler-type=none --profiling=false \
    --audit-policy-file="$DIR/audit-policy.yaml" --audit-log-path="$DIR/audit.log" \
    --audit-log-format=json --audit-log-mode=blocking ${E2E_APISERVER_ARGS:-}
  # `env` execs kube-apiserver in place: the PID is the apiserver's own.
  wait_for kube-apiserver "$DIR/kube-apiserver.log" "$READY" \
    curl -sf --cacert "$DIR/ca.crt" --cert "$DIR/admin.crt" --key "$DIR/admin.key" \
    "https://127.0.0.1:$API_PORT/readyz"

  start kube-controller-manager "$K8S_BIN/kube-controller-manager" --kubeconfig="$DIR/kcm.kubeconfig" \
    --authentication-kubeconfig="$DIR/kcm.kubeconfig" --authorization-kubeconfig="$DIR/kcm.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
    --cert-dir="$DIR/kcm-certs" --use-service-account-credentials=true \
    --service-account-private-key-file="$DIR/sa.key" --root-ca-file="$DIR/ca.crt" \
    --controllers=namespace-controller,garbage-collector-controller,serviceaccount-controller,serviceaccount-token-controller
  wait_for kube-controller-manager "$DIR/kube-controller-manager.log" "$READY" \
    curl -sfk "https://127.0.0.1:$KCM_PORT/healthz"

  local kubectl=("$K8S_BIN/kubectl" --kubeconfig "$DIR/kubeconfig")
  "${kubectl[@]}" apply --server-side -f e2e/crds/ >"$DIR/crds.log" 2>&1 ||
    fail "Knative's CRDs (e2e/crds/) were refused by kube-apiserver" "$DIR/crds.log"
  "${kubectl[@]}" wait --for condition=Established --timeout 60s -f e2e/crds/ >>"$DIR/crds.log" 2>&1 ||
    fail "Knative's CRDs (e2e/crds/) were not Established within 60 s" "$DIR/crds.log"

  cat >"$DIR/env" <<EOF
KUBECONFIG=$DIR/kubeconfig
E2E_DIR=$DIR
E2E_API_PORT=$API_PORT
E2E_ETCD_PORT=$ETCD_PORT
K8S_BIN=$K8S_BIN
ETCD_BIN=$ETCD_BIN
EOF
  echo "e2e: control plane up in $((SECONDS - start)) s: kube-apiserver on https://127.0.0.1:$API_PORT, KUBECONFIG=$DIR/kubeconfig" >&2
}

case ${1:-} in
  up) up ;;
  down)
    stop
    # The logs stay; `env` goes, so that tests run later say the control plane is not up.
    rm -rf "$DIR/etcd" "$DIR/env"
    ;;
  *)
    echo "usage: $0 up|down" >&2
    exit 2
    ;;
esac
