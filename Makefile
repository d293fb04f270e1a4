# heatscope build. `make run` records for 30 s; `make test` runs every test.
export PATH := $(PATH):/usr/local/go/bin
GO ?= go
BIN := bin/heatscope
# Build tags: gcs,azure adds those object store providers (README, "A fleet").
TAGS ?=
# BPF tests in different packages must not compete for the CPUs they measure.
TESTFLAGS ?= -count=1 -p 1 -timeout 20m

# What `heatscope version` prints: a tag, commits since, the commit, -dirty;
# and the full commit.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X github.com/heatscope/heatscope/internal/buildinfo.version=$(VERSION) \
	-X github.com/heatscope/heatscope/internal/buildinfo.commit=$(COMMIT)

# Where make install puts bin/heatscope (DESTDIR for staged installs).
PREFIX ?= /usr/local

.PHONY: build generate test test-kernels bench run fuzz clean install image

build:
	$(GO) build -tags "$(TAGS)" -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/heatscope

install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/heatscope

# The container image (Containerfile): a static binary, the CA certificates
# and nothing else, built with buildah and tagged $(IMAGE):$(IMAGE_TAG) and
# $(IMAGE):latest in the local store. Push it with
# `buildah push $(IMAGE):$(IMAGE_TAG) docker://REGISTRY/heatscope:$(IMAGE_TAG)`.
IMAGE ?= localhost/heatscope
IMAGE_TAG ?= $(or $(VERSION),dev)
CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
image:
	@test -r $(CA_BUNDLE) || { echo "make image: no CA bundle at $(CA_BUNDLE) (apt-get install ca-certificates, or CA_BUNDLE=FILE)"; exit 1; }
	@command -v buildah >/dev/null || { echo "make image: needs buildah (apt-get install buildah)"; exit 1; }
	rm -rf bin/image
	mkdir -p bin/image/rootfs/usr/bin bin/image/rootfs/etc/ssl/certs bin/image/rootfs/proc bin/image/rootfs/sys \
	  bin/image/rootfs/dev bin/image/rootfs/tmp bin/image/rootfs/var/lib/heatscope
	CGO_ENABLED=0 $(GO) build -tags "$(TAGS)" -ldflags "$(LDFLAGS)" -o bin/image/rootfs/usr/bin/heatscope ./cmd/heatscope
	install -m 0644 $(CA_BUNDLE) bin/image/rootfs/etc/ssl/certs/ca-certificates.crt
	buildah bud --quiet --layers=false -f Containerfile \
	  --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) \
	  --build-arg CREATED=$$(date -u +%Y-%m-%dT%H:%M:%SZ) \
	  -t $(IMAGE):$(IMAGE_TAG) -t $(IMAGE):latest bin/image
	@echo "built $(IMAGE):$(IMAGE_TAG) (and :latest) from $(COMMIT)"

# Rebuilds the committed bpf2go output; needs clang, llvm and bpftool.
generate:
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h
	$(GO) generate ./bpf/

test:
	$(GO) vet ./...
	$(GO) vet -tags gcs,azure ./bucket/ ./cmd/heatscope/
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	# The OTLP tests' OpenTelemetry Collector, built into ~/.cache/heatscope-otelcol
	# first (about 3 minutes of CPU the first time, nothing after), so that no
	# package's timeout pays for it.
	$(GO) test -count=1 -timeout 30m -run TestStartRestart ./internal/otelcoltest/
	$(GO) test $(TESTFLAGS) ./...
	$(GO) test $(TESTFLAGS) -tags gcs,azure ./bucket/

# The kernel matrix (test/kernels/): boots Debian's x86-64 and arm64
# kernels in qemu (TCG) with a static heatscope and runs the BPF-facing
# checks on each, a table per kernel (about 6 minutes on 2 CPUs; needs
# qemu-system-x86, qemu-system-arm, gcc, gcc-aarch64-linux-gnu and
# Debian's archive).
test-kernels:
	$(GO) vet -tags kernels ./test/kernels/
	$(GO) test -tags kernels -count=1 -v -timeout 40m -run TestKernelMatrix ./test/kernels/

# Every benchmark (as root, ~20 minutes); figures land in bench/results/.
bench: build
	bash bench/run.sh

# LISTEN=ADDR serves the UI elsewhere than 127.0.0.1:7070 while it records.
run: build
	$(BIN) record --duration 30s --data ./heatscope-data --output profile.pb.gz --top 20 $(if $(LISTEN),--listen $(LISTEN))

# Short fuzzing runs of every fuzz target (FUZZTIME each).
FUZZTIME ?= 20s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

clean:
	rm -rf bin profile.pb.gz
