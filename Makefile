# The commands of the README and docs/. `make test` is what CI runs.
GO ?= go

.PHONY: test build run-dev lint alerts-test fuzz
test:
	$(GO) test -count=1 -timeout 15m ./...

# staticcheck at a pinned version, fetched and run by `go run` (it is a
# tool, not a dependency of the module).
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	$(GO) run $(STATICCHECK) ./...

# The shipped Prometheus alert rules: syntax, then their unit tests, with
# promtool at a pinned version (also a tool, fetched by `go run`; the first
# run builds it, a few minutes).
PROMTOOL ?= github.com/prometheus/prometheus/cmd/promtool@v0.316.0
alerts-test:
	cd packaging/prometheus && $(GO) run $(PROMTOOL) check rules scadad-alerts.yml && \
		$(GO) run $(PROMTOOL) test rules scadad-alerts_test.yml

# Every fuzz target of a parser or decoder of outside input (docs/faults.md,
# Fuzzing), each for a number of executions sized to about ten seconds on a
# two-core machine. A count, not a duration: with -fuzztime 10s Go's fuzzing
# coordinator can fail a target that found nothing with a bare "context
# deadline exceeded" when a worker is starved as the deadline passes (a
# race in internal/fuzz, seen in CI on FuzzEnqueueRequest); a count has no
# deadline to race. FUZZTIME overrides every budget (10s, 500x). The
# checked-in corpus (testdata/fuzz) runs as plain test cases in `make test`
# too; a crasher go test writes there is committed as the regression case
# with its fix.
FUZZTIME ?=
FUZZ_TARGETS = ./siteconfig:FuzzParse:10000x ./nodeconfig:FuzzParse:100000x \
	./fsm:FuzzDecode:40000x ./fsm:FuzzSnapshot:10000x ./storeforward:FuzzEnqueueRequest:60000x \
	./opcua:FuzzFrontPreDecode:60000x ./opcua:FuzzEncodingLimits:40000x ./gateway:FuzzGatewayMessages:100000x
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; budget=$${rest#*:}; \
		budget=$(if $(FUZZTIME),$(FUZZTIME),$$budget); \
		echo "== fuzz $$name in $$pkg for $$budget"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $$budget $$pkg; \
	done

build:
	$(GO) build -o bin/ ./cmd/...

# Record cmd/scadad/default.pgo again, the CPU profile every build of
# scadad is optimized with (bench/pgo.sh; docs/performance.md).
.PHONY: pgo
pgo:
	bench/pgo.sh

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

# Release packages into dist/: .deb and .rpm (nfpm, pinned, run through
# `go run` like the other tools), a Windows zip and an MSI (Debian's wixl,
# package wixl; packaging/windows/scadad.wxs), then their contents checked
# (packaging/check-packages.sh). VERSION is the release without
# the leading v.
NFPM ?= github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
VERSION ?= 0.2.0-dev
STAMP = -ldflags "-X github.com/scadad/scadad/internal/version.stamped=v$(VERSION)"
# An MSI version is numbers only (0.2.0 of 0.2.0-dev).
MSI_VERSION = $(firstword $(subst -, ,$(VERSION)))
# SIGN_PKCS12 (a .p12 file) and SIGN_PASSFILE (its password in a file)
# sign the MSI with osslsigncode; unset, the MSI is not signed.
SIGN_PKCS12 ?=
SIGN_PASSFILE ?=

.PHONY: packages
packages:
	rm -rf dist && mkdir -p dist/linux dist/windows
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build $(STAMP) -o dist/linux/ ./cmd/scadad ./cmd/scadactl
	sed 's#/usr/local/bin/scadad#/usr/bin/scadad#' packaging/scadad.service > dist/linux/scadad.service
	VERSION=$(VERSION) ARCH=amd64 $(GO) run $(NFPM) package --config packaging/nfpm.yaml --packager deb --target dist/
	VERSION=$(VERSION) ARCH=amd64 $(GO) run $(NFPM) package --config packaging/nfpm.yaml --packager rpm --target dist/
	GOOS=windows GOARCH=amd64 $(GO) build $(STAMP) -o dist/windows/ ./cmd/scadad ./cmd/scadactl
	cp configs/node-a.yaml dist/windows/node.yaml && cp docs/upgrading.md CHANGELOG.md dist/windows/
	cd dist/windows && zip -q ../scadad_$(VERSION)_windows_amd64.zip *
	wixl -a x64 -D Version=$(MSI_VERSION) -D Dist=dist/windows -o dist/scadad_$(VERSION)_windows_amd64.msi packaging/windows/scadad.wxs
	@if [ -n "$(SIGN_PKCS12)" ]; then \
		osslsigncode sign -pkcs12 "$(SIGN_PKCS12)" -readpass "$(SIGN_PASSFILE)" -n scadad -h sha256 \
			-in dist/scadad_$(VERSION)_windows_amd64.msi -out dist/scadad_$(VERSION)_windows_amd64.signed.msi && \
		mv dist/scadad_$(VERSION)_windows_amd64.signed.msi dist/scadad_$(VERSION)_windows_amd64.msi; \
	fi
	packaging/check-packages.sh dist $(VERSION)
