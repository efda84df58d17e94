# The two commands: `make run` (the main job, no cluster needed) and `make test` (every check).
CARGO ?= cargo

.PHONY: run demo install test e2e fmt clippy unit bench bench-core bench-load soak manifests-check monitoring-check helm-check image certs

# Where cargo builds it: CARGO_TARGET_DIR when set, as cargo itself honours it.
BIN := $(or $(CARGO_TARGET_DIR),./target)/release/ksvc-webhook

# The main job without a cluster: the offline demo, then the admission server on
# https://127.0.0.1:8443 with dev certificates made on first run and the example sidecar
# catalogue. The watch loop finds no cluster, says so once and keeps retrying; admission works.
run: demo
	@test -f certs/tls.crt || $(BIN) certs --service ksvc-webhook --service-namespace ksvc-system --out certs >/dev/null
	$(BIN) serve --listen 127.0.0.1:8443 --tls-dir certs --metrics-listen 127.0.0.1:9090 \
		--sidecars examples/sidecars.yaml --status-auth=false

# The admission core on the examples, no server: a mutated managed app, and a rejection.
demo:
	$(CARGO) build --release --quiet
	@echo '--- ksvc-webhook mutate -f examples/sidecar-ksvc.yaml --sidecars examples/sidecars.yaml --diff'
	@$(BIN) mutate -f examples/sidecar-ksvc.yaml --sidecars examples/sidecars.yaml --diff
	@echo '--- ksvc-webhook review -f examples/invalid-review.json'
	@$(BIN) review -f examples/invalid-review.json
	@echo '--- ksvc-webhook mutate -f examples/invalid-ksvc.yaml (rejected, exit 1)'
	@! $(BIN) mutate -f examples/invalid-ksvc.yaml

# The binary into ~/.cargo/bin (on the PATH rustup sets up), built from the locked dependencies.
install:
	$(CARGO) install --path . --locked

# A CA and serving certificate for the in-cluster Service, into certs/ (git-ignored).
certs:
	$(CARGO) run --release --quiet -- certs --service ksvc-webhook --service-namespace ksvc-system --out certs

# Benchmarks: the criterion benches of the core, then the HTTPS load run.
bench: bench-core bench-load

bench-core:
	$(CARGO) bench --bench review --bench sidecars --bench watch --bench drift

# HTTPS load benchmark of the server with oha (see docs/performance.md).
bench-load:
	./scripts/bench-load.sh

# Every attack of docs/reliability.md ("The soak") at once against the built binary for
# SOAK_SECS (60) seconds, while a well-formed client measures its reviews; prints a summary.
soak:
	$(CARGO) test --test server hostile::soak -- --ignored --nocapture

# A check that could not run (the Knative CRD schema or promtool missing) is repeated here, at
# the end.
test: fmt clippy manifests-check monitoring-check helm-check unit
	@cat $(MANIFESTS_OUT)/skipped.txt >&2 2>/dev/null || true

# The e2e suite against a real kube-apiserver, etcd and kube-controller-manager built from their
# Go modules (scripts/e2e.sh: builds what is missing, starts, runs tests/e2e, stops). Needs Go.
e2e:
	@command -v go >/dev/null || { echo "make e2e needs Go 1.26 or newer to build kube-apiserver and etcd from their modules: install it from https://go.dev/dl/ and put it on the PATH" >&2; exit 1; }
	CARGO=$(CARGO) ./scripts/e2e.sh

fmt:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --all-targets

# Render the kustomize base, the cert-manager and network-policy overlays, and validate every object against the
# Kubernetes OpenAPI schema (kubernetes-validate). cert-manager's CRDs have no schema there: they
# are reported as skipped. tests/manifests.rs checks the content.
MANIFESTS_OUT ?= target/manifests
KUBECTL ?= kubectl
# KServices under examples/ are checked against Knative's CRD schema (the copy the e2e control
# plane installs). Without the file the check says loudly that it skipped, and fails under CI (CI=true).
KNATIVE_CRD ?= e2e/crds/knative-service-crd.yaml
# The Python tools of the manifest checks live in a project-local virtualenv, made on first use
# from the pinned list, so a fresh machine needs nothing but python3 and kubectl.
VENV ?= .venv
VALIDATE := $(VENV)/bin/kubernetes-validate
$(VENV)/.installed: scripts/manifests-requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r scripts/manifests-requirements.txt
	@touch $@

manifests-check: $(VENV)/.installed
	@command -v $(KUBECTL) >/dev/null || { echo "kubectl not found: it renders manifests/ (kubectl kustomize)" >&2; exit 1; }
	@mkdir -p $(MANIFESTS_OUT)
	@rm -f $(MANIFESTS_OUT)/skipped.txt
	$(KUBECTL) kustomize manifests > $(MANIFESTS_OUT)/base.yaml
	$(KUBECTL) kustomize manifests/overlays/cert-manager > $(MANIFESTS_OUT)/cert-manager.yaml
	$(KUBECTL) kustomize manifests/overlays/network-policy > $(MANIFESTS_OUT)/network-policy.yaml
	$(VALIDATE) --strict $(MANIFESTS_OUT)/base.yaml 2>&1 | tee $(MANIFESTS_OUT)/base.log
	@! grep -E '^(WARN|ERROR)' $(MANIFESTS_OUT)/base.log
	$(VALIDATE) --strict $(MANIFESTS_OUT)/cert-manager.yaml 2>&1 | tee $(MANIFESTS_OUT)/cert-manager.log
	@! grep -E '^ERROR' $(MANIFESTS_OUT)/cert-manager.log
	@! grep -E '^WARN' $(MANIFESTS_OUT)/cert-manager.log | grep -v 'api version cert-manager.io/v1 '
	$(VALIDATE) --strict $(MANIFESTS_OUT)/network-policy.yaml 2>&1 | tee $(MANIFESTS_OUT)/network-policy.log
	@! grep -E '^(WARN|ERROR)' $(MANIFESTS_OUT)/network-policy.log
	$(VENV)/bin/python .ci/validate_crd.py --skip-note $(MANIFESTS_OUT)/skipped.txt $(KNATIVE_CRD) 'examples/*.yaml'

# The alert rules of manifests/monitoring: `promtool check rules` and the alerts' unit tests
# (`promtool test rules`). Skipped with a banner where promtool is missing (apt-get install
# prometheus); under CI it must be there.
monitoring-check: $(VENV)/.installed
	PYTHON=$(VENV)/bin/python SKIP_NOTE=$(MANIFESTS_OUT)/skipped.txt ./scripts/monitoring-check.sh

# The Helm chart: helm (built once from e2e/helmbin by scripts/helm-build.sh; needs Go) lints
# it; tests/chart.rs, in `unit`, diffs it with manifests/. Skipped with a banner without Go or
# helm; under CI it must be there.
helm-check:
	@mkdir -p $(MANIFESTS_OUT)
	SKIP_NOTE=$(MANIFESTS_OUT)/skipped.txt ./scripts/helm-check.sh

# The container image (needs a docker engine; there is none on the CI machine).
IMAGE ?= ksvc-webhook:0.1.0
image:
	docker build -t $(IMAGE) .
