# The two commands: `make run` (the main job, no cluster needed) and `make test` (every check).
CARGO ?= cargo

.PHONY: run test fmt clippy unit bench

run:
	$(CARGO) run --quiet -- name --project proj --domain dev --name myapp

test: fmt clippy unit

fmt:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --all-targets -- -D warnings

unit:
	$(CARGO) test --all-targets
