# rdmad build. `make demo` and `make test` are the two commands a new machine needs.
GO        ?= go
PREFIX    ?= /usr
DESTDIR   ?=
BIN       := bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo 0.1.0-dev)
LDFLAGS   := -X github.com/rdmad/rdmad/daemon/version.Version=$(VERSION)

.PHONY: all build test vet fmt-check bench demo install e2e clean deps-test

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/rdmad ./cmd/rdmad
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/rdmactl ./cmd/rdmactl

# Tools the tests need (dbus-daemon, busctl, systemd-analyze); installs them
# with apt-get when missing so a fresh Debian machine passes.
deps-test:
	./test/install-deps.sh test

test: deps-test fmt-check vet
	$(GO) test -race -count=1 ./...

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

demo: build
	./test/demo.sh

clean:
	rm -rf $(BIN)

include mk/install.mk
include mk/e2e.mk
