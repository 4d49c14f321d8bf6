# syntax=docker/dockerfile:1
#
# One image holding every Cellbind binary: the four servers (cellbind-auth-service,
# cellbind-cell-endpoint, cellbind-control-plane, cellbind-demo-app) and cellctl, in
# /usr/local/bin as in the installed layout. There is no ENTRYPOINT: each container names its
# binary and its configuration, e.g.
#   docker run --rm -v "$PWD/etc:/etc/cellbind:ro" cellbind:0.1.0 \
#     cellbind-cell-endpoint --config /etc/cellbind/cell-endpoint.toml
# (deploy/k8s sets `command` and `args` per container). No port is exposed here: every
# listener's address is a configuration key (deploy/README.md lists the example ports).
#
# Build: docker build -t cellbind:0.1.0 .

# The toolchain of the workspace (Rust 1.95). Bookworm (glibc 2.36) to match the runtime
# image: a binary built against a newer glibc does not start on Debian 12.
ARG RUST_IMAGE=rust:1.95-slim-bookworm
# Debian 12 slim: glibc and libgcc_s (which the binaries link dynamically) and little else;
# SQLite is compiled into the binaries, and every TLS peer is checked against a configured CA,
# so no CA bundle is needed.
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
# The cache mounts keep the crate registry and the target directory between builds; the
# binaries are copied out of the cached target directory in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bins \
        -p cellbind-auth-service \
        -p cellbind-cell-endpoint \
        -p cellbind-control-plane \
        -p cellbind-demo-app \
        -p cellbind-cellctl \
 && mkdir -p /out/bin /out/var/lib/cellbind \
 && cp target/release/cellbind-auth-service \
       target/release/cellbind-cell-endpoint \
       target/release/cellbind-control-plane \
       target/release/cellbind-demo-app \
       target/release/cellctl \
       /out/bin/

FROM ${RUNTIME_IMAGE} AS runtime
LABEL org.opencontainers.image.title="cellbind" \
      org.opencontainers.image.description="Cellbind servers (auth-service, edge, control plane, demo app) and cellctl" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/bin/ /usr/local/bin/
# The runtime user: uid/gid 65532, no login shell, no home.
RUN groupadd --system --gid 65532 cellbind \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin cellbind
# The state directory (data_dir / state_dir live below it), owned by the runtime user so that
# a fresh named volume mounted there is writable; Kubernetes mounts its volumes there too.
COPY --from=build --chown=65532:65532 /out/var/lib/ /var/lib/
# Numeric, so that Kubernetes' runAsNonRoot can check it.
USER 65532:65532
# No HEALTHCHECK: the image has no HTTPS client to run one.
# Probe the management listener instead (`GET /healthz`, `GET /readyz` over HTTPS on `management_listen`), as the
# Kubernetes manifests in deploy/k8s do.
CMD ["cellctl", "--help"]
