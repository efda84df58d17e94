# The two commands: `make run` (the main job, no cluster needed) and `make test` (every check).
CARGO ?= cargo

.PHONY: run test fmt clippy unit bench manifests-check image certs bench-load

# The admission server on https://127.0.0.1:8443, with dev certificates made on first run.
run:
	$(CARGO) build --release --quiet
	@test -f certs/tls.crt || ./target/release/ksvc-webhook certs --service ksvc-webhook --namespace ksvc-system --out certs >/dev/null
	./target/release/ksvc-webhook serve --listen 127.0.0.1:8443 --tls-dir certs

# A CA and serving certificate for the in-cluster Service, into certs/ (git-ignored).
certs:
	$(CARGO) run --release --quiet -- certs --service ksvc-webhook --namespace ksvc-system --out certs

# HTTPS load benchmark of the server with oha (see README "Server performance").
bench-load:
	./scripts/bench-load.sh

test: fmt clippy manifests-check unit

fmt:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --all-targets -- -D warnings

unit:
	$(CARGO) test --all-targets

# Render the kustomize base and the cert-manager overlay, and validate every object against the
# Kubernetes OpenAPI schema (kubernetes-validate, installed by .ci/run). cert-manager's CRDs have
# no schema there: they are reported as skipped. tests/manifests.rs checks the content.
MANIFESTS_OUT ?= target/manifests
KUBECTL ?= kubectl
# KServices under examples/ are checked against Knative's CRD schema (shared/ sits beside the repo).
KNATIVE_CRD ?= ../shared/reference/knative-service-crd.yaml
manifests-check:
	@mkdir -p $(MANIFESTS_OUT)
	$(KUBECTL) kustomize manifests > $(MANIFESTS_OUT)/base.yaml
	$(KUBECTL) kustomize manifests/overlays/cert-manager > $(MANIFESTS_OUT)/cert-manager.yaml
	kubernetes-validate --strict $(MANIFESTS_OUT)/base.yaml 2>&1 | tee $(MANIFESTS_OUT)/base.log
	@! grep -E '^(WARN|ERROR)' $(MANIFESTS_OUT)/base.log
	kubernetes-validate --strict $(MANIFESTS_OUT)/cert-manager.yaml 2>&1 | tee $(MANIFESTS_OUT)/cert-manager.log
	@! grep -E '^ERROR' $(MANIFESTS_OUT)/cert-manager.log
	@! grep -E '^WARN' $(MANIFESTS_OUT)/cert-manager.log | grep -v 'api version cert-manager.io/v1 '
	python3 .ci/validate_crd.py $(KNATIVE_CRD) 'examples/*.yaml'

# The container image (needs a docker engine; there is none on the CI machine).
IMAGE ?= ksvc-webhook:0.1.0
image:
	docker build -t $(IMAGE) .
