# delaybridge. `make run` starts the self-contained dev bridge; `make test` runs every test
# against real servers (spawned redis-server, embedded nats-server).
GO      ?= go
BIN     := bin/bridge
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: build run test test-short lint bench clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/bridge

run: build
	./$(BIN) dev

test:
	$(GO) test -race -count=1 -timeout 20m ./...

test-short:
	$(GO) test -count=1 -short ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

bench:
	@echo "make bench: the end-to-end benchmark (ingest/release rates, lateness, Redis memory and CPU,"
	@echo "side by side with asynq) arrives with the performance issue (#4). Nothing is measured yet."

clean:
	rm -rf bin
