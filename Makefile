# The two commands: `make run` (the main job, no cluster needed) and `make test` (every check).
CARGO ?= cargo

.PHONY: run test fmt clippy unit bench certs bench-load

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

test: fmt clippy unit

fmt:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --all-targets -- -D warnings

unit:
	$(CARGO) test --all-targets
