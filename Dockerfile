# syntax=docker/dockerfile:1
# ksvc-webhook container image: `make image` (needs a docker engine).
#
# Build stage: the release binary, against the committed Cargo.lock.
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
# Everything but .dockerignore's entries: Cargo.toml may name benches, tests and examples.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin ksvc-webhook \
 && install -D -m 0755 target/release/ksvc-webhook /out/ksvc-webhook

# Runtime: distroless with glibc and CA roots only (no shell, no package manager), running as
# the image's non-root user 65532 (the Deployment also sets runAsNonRoot).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/ksvc-webhook /ksvc-webhook
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/ksvc-webhook", "serve"]
