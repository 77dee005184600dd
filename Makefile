# rdmad build. `make demo` and `make test` are the two commands a new machine needs.
GO        ?= go
PREFIX    ?= /usr
DESTDIR   ?=
BIN       := bin
# The version: VERSION for a release, VERSION+N.gHASH for a development build
# (packaging/version.sh). REVISION is the commit, from git or, in the source
# tarball of `make dist`, from its REVISION file.
# EXTRA_LDFLAGS adds to the linker flags (packages strip: -s -w).
VERSION   ?= $(shell ./packaging/version.sh)
REVISION  ?= $(shell if [ -e .git ]; then git rev-parse HEAD; else cat REVISION; fi 2>/dev/null)
LDFLAGS   := -X github.com/rdmad/rdmad/daemon/version.Version=$(VERSION) \
	-X github.com/rdmad/rdmad/daemon/version.Revision=$(REVISION) $(EXTRA_LDFLAGS)

.PHONY: all build cockpit test vet fmt-check staticcheck bench bench-go bench-memory demo install e2e clean deps-test package completions dist mutate

# Pinned tools, installed from the Go module proxy into .tools/.
TOOLS       := $(CURDIR)/.tools
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(TOOLS)/$(STATICCHECK_VERSION)/staticcheck
GREMLINS_VERSION := v0.6.0
GREMLINS    := $(TOOLS)/gremlins-$(GREMLINS_VERSION)/gremlins

all: build

build: cockpit
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/rdmad ./cmd/rdmad
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/rdmactl ./cmd/rdmactl

# rdmactl's shell completions, generated from its command tree and
# committed (docs/decisions/cli.md); cmd/rdmactl/internal/cli's tests fail when they are
# not current. They ask rdmactl itself (rdmactl __complete) for the words,
# so adding a command does not change them.
completions:
	$(GO) run ./cmd/rdmactl completion bash >contrib/completion/rdmactl.bash
	$(GO) run ./cmd/rdmactl completion zsh  >contrib/completion/_rdmactl
	$(GO) run ./cmd/rdmactl completion fish >contrib/completion/rdmactl.fish

# The Cockpit page (cockpit/, packaged as cockpit-rdmad) is served as it is:
# no JavaScript build chain. `make cockpit` checks that its manifest is JSON
# and that index.html loads only files of the page and Cockpit's base1.
COCKPIT_FILES := cockpit/manifest.json cockpit/index.html cockpit/rdmad.js cockpit/rdmad.css

cockpit: $(COCKPIT_FILES)
	@./cockpit/check.sh $(COCKPIT_FILES)

# Tools the tests need (dbus-daemon, busctl, systemd-analyze); installs them
# with apt-get when missing so a fresh Debian machine passes.
deps-test:
	./test/install-deps.sh test

# RDMAD_TEST_DEPS=1 tells the tests that deps-test ran: a test that would
# skip for a missing tool that install-deps.sh installs fails instead
# (test/testdeps). -vet=off: go test's vet checks are a subset of the go vet
# this target has just run. SLOW_TESTS, the packages whose tests take
# longest, slowest first, are named before ./... so go test starts them
# first: listed in import path order the slowest, test/pkgtest, started
# last and ran alone for minutes (docs/testing.md, "How long make test takes").
# -timeout 20m: test/pkgtest takes 7-8 minutes on a loaded two-core machine,
# near go test's default of 10 per package. GORACE=atexit_sleep_ms=0: a
# -race binary otherwise sleeps a second before it exits, and the tests
# start hundreds of them (callers of other uids, rdmad, rdmactl); a race is
# still reported when it happens, and fails the process that had it.
# -p: one test binary more than the cores, so that a package whose tests
# mostly wait for the processes they start (bus, service, rdmad) does not
# keep a core idle (on two cores: 347 s with go test's default of 2, 278 s
# with 3).
TEST_PACKAGES := $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
SLOW_TESTS := ./test/pkgtest ./cmd/rdmactl/internal/capture ./daemon/bus ./contrib/ansible \
	./cmd/rdmad ./daemon/service ./units ./docs
test: deps-test fmt-check vet staticcheck
	RDMAD_TEST_DEPS=1 GORACE=atexit_sleep_ms=0 $(GO) test -race -count=1 -vet=off -p $(TEST_PACKAGES) -timeout 20m $(SLOW_TESTS) ./...

$(STATICCHECK):
	GOBIN=$(TOOLS)/$(STATICCHECK_VERSION) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

staticcheck: $(STATICCHECK)
	$(STATICCHECK) ./...

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

# One table at 1, 64 and 1,024 devices with the shell procedure and the
# bare-syscall floor measured in the same run (docs/performance.md).
bench:
	$(GO) run ./test/perf/benchtable

# rdmad's peak memory at 1,024 devices under its costliest load, which
# sizes the unit's MemoryHigh=/MemoryMax= and the DaemonSet's limit
# (docs/performance.md, "Memory bound").
bench-memory:
	$(GO) run ./test/perf/memcap

# Mutation testing of the daemon's core (docs/testing.md), one package at a
# time, smallest first: make mutate, or make mutate MUTATE="dcb roce"; with
# gremlins' mutants and test/mutants' (MUTATE_TOOLS=mutants: only those).
# Slow (hours for all of them on two cores); not part of make test or CI.
MUTATE ?= roce dcb reconcile bus service qos doctor config
MUTATE_TOOLS ?= gremlins mutants
$(GREMLINS):
	GOBIN=$(dir $@) $(GO) install github.com/go-gremlins/gremlins/cmd/gremlins@$(GREMLINS_VERSION)

mutate: $(if $(filter gremlins,$(MUTATE_TOOLS)),$(GREMLINS))
	GREMLINS=$(GREMLINS) MUTATE_TOOLS="$(MUTATE_TOOLS)" test/mutate.sh $(MUTATE)

# The go test benchmarks, for benchstat comparisons of two commits.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./...

demo: build
	./test/demo.sh

clean:
	rm -rf $(BIN) dist

# Distribution packages: dist/rdmad_*.deb and dist/rdmad-*.rpm, built with a
# pinned nfpm installed into .tools/ (docs/decisions/packaging.md).
NFPM_VERSION := v2.45.0
NFPM         := $(TOOLS)/nfpm-$(NFPM_VERSION)/nfpm

$(NFPM):
	GOBIN=$(dir $@) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)

package: $(NFPM)
	VERSION='$(VERSION)' LDFLAGS='$(LDFLAGS)' NFPM='$(NFPM)' GO='$(GO)' MAKE='$(MAKE)' ./packaging/build.sh

# The source tarball a distribution rebuilds without network:
# dist/rdmad-<version>.tar.gz with the Go modules vendored, debian/, the rpm
# spec and a CycloneDX SBOM (also beside it, dist/rdmad-<version>.cdx.json).
# Inside it: GOFLAGS=-mod=vendor GOPROXY=off make build; rpmbuild -bb
# packaging/rpm/rdmad.spec; dpkg-buildpackage -b (docs/decisions/packaging.md).
dist:
	VERSION='$(VERSION)' REVISION='$(REVISION)' GO='$(GO)' ./packaging/dist.sh

include mk/install.mk
include mk/e2e.mk
include mk/reliability.mk
