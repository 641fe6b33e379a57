# The README's commands. `make test` is what CI runs.
GO ?= go

.PHONY: test build run-dev lint
test:
	$(GO) test -count=1 -timeout 15m ./...

# staticcheck at a pinned version, fetched and run by `go run` (it is a
# tool, not a dependency of the module).
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	$(GO) run $(STATICCHECK) ./...

build:
	$(GO) build -o bin/ ./cmd/...

run-dev: build
	./bin/scadad --dev

# Jepsen-style fault suite (integration/faults/README.md). Needs root and
# `ip`/`tc` for network namespaces; otherwise it runs a loudly degraded
# loopback mode. SEED replays a schedule; ROUNDS sets the soak length.
.PHONY: faults soak
SEED ?= 0
ROUNDS ?= 300
faults:
	$(GO) test -count=1 -timeout 15m -v -run TestFaults ./integration/faults/ -seed $(SEED)

soak:
	$(GO) test -count=1 -timeout 0 -v -run TestFaults ./integration/faults/ -seed $(SEED) -rounds $(ROUNDS) -modes witness -out faults-report
