# The README's commands. `make test` is what CI runs.
GO ?= go

.PHONY: test build run-dev
test:
	$(GO) test -count=1 -timeout 15m ./...

build:
	$(GO) build -o bin/ ./cmd/...

run-dev: build
	./bin/scadad --dev
