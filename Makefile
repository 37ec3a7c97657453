# delaybridge. `make run` starts the self-contained dev bridge; `make test` runs every test
# against real servers (spawned redis-server, embedded nats-server).
GO      ?= go
BIN     := bin/bridge
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: build run test tools test-fault test-short e2e e2e-compose lint bench clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/bridge

run: build
	./$(BIN) dev

test: tools
	$(GO) test -race -count=1 -timeout 20m ./...

# Tools the tests run besides Go and redis-server: promtool (deploy/'s alert rules and
# dashboard queries), from Debian's prometheus package, and chromium (the web console's
# browser test), installed when missing and apt-get can (as root); otherwise the tests say
# what is missing and fail.
tools:
	@command -v promtool >/dev/null 2>&1 || { \
	  echo "promtool not found: installing Debian's prometheus package (only its promtool is used)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 || \
	  { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null; } || \
	  echo "could not install prometheus (promtool); the deploy tests will fail until it is on PATH"; }
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "chromium not found: installing Debian's chromium package (the web console's browser test)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq chromium >/dev/null 2>&1 || \
	  { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || \
	  echo "could not install chromium; the console's browser test will fail until it is on PATH"; }

# Fault suite (e2e/fault, docs/faults.md rows): the bridge built with test-only
# failpoints, killed, stopped and restarted under load; about 12 minutes. FAULT_SEED=N replays
# the random kill loop; FAULT_KILL_LOOP=5m runs it for 5 minutes instead of 15 s.
test-fault:
	$(GO) test -tags fault,failpoints -count=1 -timeout 25m ./e2e/fault/ ./internal/failpoint/ ./internal/clock/

# End-to-end user stories (e2e/) against the stack named by E2E_REDIS_URL, E2E_NATS_URL
# (JetStream on) and E2E_KAFKA_BROKERS, e.g. the one of deploy/docker-compose.yml; each unset
# one is replaced by a server of the tests' own, as in `make test`.
e2e:
	$(GO) test -race -count=1 -timeout 20m ./e2e/

# deploy/docker-compose.yml run for real on the local Docker engine (deploy/compose, build
# tag compose; docker.io installed and dockerd started when missing, a failure otherwise):
# every image built locally (no registry needed; Kafka is a kfake stand-in), the stack up
# with deploy/compose/local.override.yml (host networking, free ports on 127.0.0.1), the
# e2e user stories against it, then uid 65532, `bridge healthcheck` without a shell, a
# draining `stop`, parked messages kept across a restart and `down -v` leaving nothing.
# The compose v2 CLI and the nats CLI are built once from the Go module proxy (cached in
# ~/.cache/delaybridge-e2e). See docs/development.md ("The compose stack for real").
e2e-compose: tools
	$(GO) test -tags compose -count=1 -v -timeout 45m ./deploy/compose/

test-short:
	$(GO) test -count=1 -short ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags fault,failpoints ./e2e/fault/ ./internal/failpoint/ ./internal/clock/
	$(GO) vet -tags compose ./deploy/compose/...

# End-to-end benchmark (e2e/bench): spawned redis-server, embedded NATS JetStream, the built
# bridge (1 and 3 replicas, AOF everysec and always), asynq as the peer baseline and the minimal
# store as the floor (AOF everysec and always), then the fleet (1/16 replicas), idle and Redis
# Cluster rows; prints the tables and writes
# docs/benchmarks.md. ~32 min. Quick look (~4 min, does not touch the docs):
# `go run ./e2e/bench -quick`. Other flags: -runs N,
# -workloads uniform,steady,burst,parked,fleet,idle,cluster, -systems delaybridge,asynq,
# -variants x3-everysec,x1-always, -kafka=false, -fleet-replicas 1,16, -fleet-for 12s,
# -idle-shards 16,1024, -cluster-shards 64, -out FILE, -profile DIR (CPU profiles of the bridges),
# -commands (Redis calls and microseconds per message by command, to stderr).
BENCHFLAGS ?=
bench:
	$(GO) run ./e2e/bench -out docs/benchmarks.md $(BENCHFLAGS)

# The listing rows: 1,000,000 parked over 100 targets and 16 shards; a target's
# first page, a due range's, GET /v1/targets' work and a recount, each the median of 5, in
# 3 runs (about 4 minutes; docs/design.md "Listing").
bench-list:
	LIST_BENCH_N=1000000 $(GO) test -run '^$$' -bench BenchmarkListLargeStore -benchtime 1x -count 3 ./admin/

clean:
	rm -rf bin
