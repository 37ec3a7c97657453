# syntax=docker/dockerfile:1
# delaybridge container image: a static binary on distroless, running as nonroot.
#   docker build -t delaybridge .
#   docker run --rm delaybridge --help
# Checked statically by deploy/dockerfile_test.go (base image, CGO_ENABLED=0, -trimpath, USER,
# EXPOSE): keep those lines in this form.

# Build stage. The Go version follows the go directive of go.mod.
FROM golang:1.26 AS build
WORKDIR /src
COPY . .
ARG VERSION=dev
# Static (no libc: distroless/static has none), reproducible paths, no symbol table.
# BuildKit cache mounts keep modules and compiled packages between builds; `go build`
# downloads only the modules the binary needs (not the test-only ones, such as k8s.io/api).
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/bridge ./cmd/bridge

# Run stage: no shell, no package manager; CA certificates and /etc/passwd with nonroot.
FROM gcr.io/distroless/static-debian12:nonroot
# On PATH, so that `kubectl exec POD -c bridge -- bridge stats` finds it.
COPY --from=build /out/bridge /usr/local/bin/bridge
# nonroot is uid/gid 65532; numeric, so Kubernetes runAsNonRoot can verify it.
USER 65532:65532
# 8080: BRIDGE_HTTP_ADDR (/healthz, /readyz, /metrics). 8081: BRIDGE_API_ADDR (message API;
# it listens on 127.0.0.1 by default, set BRIDGE_API_ADDR=:8081 to publish it).
EXPOSE 8080 8081
# Docker health without a shell: `bridge healthcheck` GETs /readyz on BRIDGE_HTTP_ADDR.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 CMD ["/usr/local/bin/bridge", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/bridge"]
CMD ["run"]
