# The whole set-up is two commands: `make demo` and `make test`.
SHELL := /bin/bash
# go-ceph's build tag for the installed librbd (pacific on Debian 12):
# build/ceph-tags.sh. Empty before `make deps` installs librbd-dev.
CEPH_TAGS ?= $(shell build/ceph-tags.sh 2>/dev/null)
export GOFLAGS = -tags=$(CEPH_TAGS) -buildvcs=false
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BIN := bin/rbdplugin
GO_SOURCES := $(shell find cmd internal -name '*.go' 2>/dev/null) go.mod go.sum

# Debian packages: Ceph daemons for the local test cluster, librbd/librados
# headers and a C toolchain for go-ceph, the node's mapping, encryption
# (cryptsetup) and filesystem tools, PyKMIP's server for the KMIP KMS's
# tests, shellcheck for `make lint`, CA certificates for the Go module proxy.
# scripts/programs.txt lists every program the project runs and the package
# it comes from; `make lint` checks the two against each other, `make fresh`
# proves the list on a machine with nothing installed.
DEB_PACKAGES := ceph-mon ceph-osd ceph-mgr ceph-base ceph-common librbd-dev librados-dev rbd-fuse rbd-nbd rbd-mirror \
	cryptsetup-bin e2fsprogs xfsprogs util-linux fuse3 kmod gcc libc6-dev pkg-config iproute2 procps uuid-runtime python3-pykmip \
	shellcheck ca-certificates

.PHONY: all deps build test unit fuzz integration instances lint demo clean fresh helm-test
all: build

deps:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		if [ "$$(id -u)" != 0 ]; then echo "run 'make deps' as root (apt-get)"; exit 1; fi; \
		apt-get update -qq -o Acquire::Retries=3 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Acquire::Retries=3 --no-install-recommends $$missing >/dev/null; \
	fi
	go mod download

# bin/rbdplugin is the tests' build: with the faultinject tag, which
# compiles in --test-crash-at (cmd/rbdplugin/crash.go). The image
# (build/Dockerfile) is built without it. Recursive (=), as CEPH_TAGS: the
# tags are read when a recipe runs, after make deps installed librbd-dev.
comma := ,
TEST_TAGS = $(if $(CEPH_TAGS),$(CEPH_TAGS)$(comma))faultinject
build: $(BIN)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
$(BIN): $(GO_SOURCES)
	go build -tags=$(TEST_TAGS) -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.librbd=$$(dpkg-query -W -f='$${Version}' librbd-dev)" -o $(BIN) ./cmd/rbdplugin

lint:
	@bad=$$(gofmt -l cmd internal e2e deploy); if [ -n "$$bad" ]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi
	go vet ./...
	go vet -tags=$(CEPH_TAGS),e2e_k8s ./e2e/k8s/
	go vet -tags=$(CEPH_TAGS),helm ./e2e/manifests/
	shellcheck -x scripts/*.sh .ci/run
	go run ./scripts/programs check
	go run ./scripts/doclinks

unit:
	go test -count=1 ./cmd/... ./internal/... ./e2e/manifests/ ./scripts/...
	go test -count=1 -tags=$(TEST_TAGS) ./cmd/rbdplugin/

# Integration and conformance run against a real single-node Ceph cluster that
# scripts/with-cluster.sh boots for the run and always tears down. The
# suites named in INTEGRATION_EXCLUDE (e2e/NAME) are left out, and so is
# e2e/dr, which needs two clusters (make dr-test).
INTEGRATION_EXCLUDE ?=
INTEGRATION_LEFT_OUT = manifests dr $(INTEGRATION_EXCLUDE)
space := $() $()
integration: build
	scripts/with-cluster.sh go test -count=1 -p 1 -timeout 60m $$(go list ./e2e/... | \
		grep -v -E '/e2e/($(subst $(space),|,$(strip $(INTEGRATION_LEFT_OUT))))$$')

# Disaster recovery (docs/disaster-recovery.md): two clusters on 127.0.0.2
# and 127.0.0.3, peered for RBD snapshot mirroring, an rbd-mirror daemon on
# each (scripts/dr-cluster.sh, always torn down), and e2e/dr through the
# plugin's CSI and csi-addons sockets: relocation, failover, failback,
# refusals, the sweep beside a mirror copy, an encrypted volume, a
# flattened clone and an attachment on each site. DR_FLAGS='-run TestRefusals'
# picks tests. DR_SUITE=forky runs it all on Tentacle, in the cached forky
# root as the Ceph matrix does (scripts/dr-cluster.sh suite); DR_FLAGS then
# go to the test binary (-test.run=TestRefusals).
DR_FLAGS ?=
DR_SUITE ?=
.PHONY: dr-test
dr-test: deps build
	if [ -n "$(DR_SUITE)" ]; then scripts/dr-cluster.sh suite $(DR_SUITE) $(DR_FLAGS); \
	else scripts/dr-cluster.sh run go test -count=1 -timeout 30m -v $(DR_FLAGS) ./e2e/dr/; fi

# Short bounded runs of every fuzz target (the seed corpora run in `unit`);
# scripts/fuzz.sh tells a real finding from the fuzz engine's spurious
# "hung or terminated unexpectedly" reports.
FUZZTIME ?= 5s
fuzz:
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

# Several Kubernetes clusters on one pool: the controller suite twice at
# once, as two driver instances, then alone the tests that disturb the
# whole cluster (scripts/instances.sh).
instances: build
	scripts/with-cluster.sh scripts/instances.sh

# instances runs the whole controller suite, so integration leaves it out.
test: INTEGRATION_EXCLUDE = controller
test: lint unit fuzz integration instances

# The Helm chart (deploy/helm/rbdcsi): helm lint --strict, every value file
# of deploy/helm/values rendered and decoded strictly, the same objects as
# deploy/kubernetes for its settings, bad values refused by the schema.
# helm is built from its Go module into the e2e cache (scripts/k8s-build.sh).
HELM_CACHE ?= $(or $(RBDCSI_E2E_CACHE),/var/cache/rbdcsi-e2e)
helm-test:
	scripts/k8s-build.sh helm
	RBDCSI_HELM=$(HELM_CACHE)/bin/helm go test -count=1 -tags=$(CEPH_TAGS),helm -run Helm ./e2e/manifests/

demo: deps build
	scripts/with-cluster.sh scripts/demo.sh

# `make demo` on a Debian 12 root with nothing installed but Go and make
# (scripts/fresh.sh): a clean clone of HEAD in a throwaway overlay on a
# cached debootstrap minbase, in a chroot in private mount and PID namespaces.
fresh:
	scripts/fresh.sh

clean:
	rm -rf bin results

# The plugin's image: build/Dockerfile built with buildah (scripts/image.sh),
# no Docker engine or registry needed, into an OCI archive under dist/ that
# `ctr images import`, `podman load` or `skopeo copy` take.
# DEBIAN_SUITE=forky gives Tentacle's Ceph clients.
DEBIAN_SUITE ?= trixie
IMAGE ?= docker.io/rbdcsi/rbdplugin:$(VERSION)$(if $(filter-out trixie,$(DEBIAN_SUITE)),-$(DEBIAN_SUITE))
.PHONY: image
image:
	scripts/image.sh build $(DEBIAN_SUITE) dist/rbdplugin-$(VERSION)-$(DEBIAN_SUITE).tar $(IMAGE)

# A release in dist/ (scripts/release.sh): both images, the Helm chart, the
# install manifest rbdcsi.yaml, the site overlay and SHA256SUMS.
# make release VERSION=v0.3.0
.PHONY: release
release:
	scripts/release.sh $(VERSION)

# Benchmarks (docs/development.md, "Performance"): P1-P9 and P11 through the real plugin binary
# against a throwaway local cluster, every figure a ratio against a
# baseline measured in the same run, every side started under one
# environment, every target fixed in e2e/bench/targets.go. Prints the
# table, how the sides ran and the targets, and writes
# results/bench-<time>.json and .md. Options: BENCH_FLAGS='-rounds 1 -cycles 1000'
# (all of them: bin/rbdbench -h).
BENCH_FLAGS ?=
.PHONY: bench
bench: build
	go build -o bin/rbdbench ./e2e/bench
	go build -o bin/rbdfloor ./e2e/bench/floor
	go build -o bin/rbdgrpcfloor ./e2e/bench/grpcfloor
	scripts/with-cluster.sh bin/rbdbench -plugin $(BIN) -floor bin/rbdfloor -grpc-floor bin/rbdgrpcfloor -out results $(BENCH_FLAGS)

# P10, the data path (docs/development.md, "Performance"), a target of its
# own since a guest takes minutes to boot: in a QEMU guest running Debian's
# kernel, fio on block volumes the plugin stages with krbd, rbd-nbd and LUKS2
# on krbd, against rbd bench (librbd) in the same guest and run
# (scripts/bench-data.sh), into results/bench-data-<time>.json and .md.
# Options: BENCH_DATA_FLAGS='-data-rounds 1' (bin/rbdbench -h, the -data-* ones).
BENCH_DATA_FLAGS ?=
.PHONY: bench-data
bench-data: deps
	scripts/bench-data.sh $(BENCH_DATA_FLAGS)

# The node suite on a real kernel (docs/development.md, "A real kernel"): QEMU guests
# running Debian's kernel map through krbd and nbd against a real cluster,
# then, with both mappers, a force detach across the two guests, all
# inside a network namespace the script makes and removes. The kernel
# is cached under $(or $(RBDCSI_KERNEL_CACHE),/var/cache/rbdcsi-kernel).
# KERNEL_TEST_RUN='TestBlock' picks tests; arguments pick mappers:
# make kernel-test KERNEL_TEST_MAPPERS=krbd.
KERNEL_TEST_MAPPERS ?= krbd nbd
.PHONY: kernel-test
kernel-test: deps build
	scripts/kernel-test.sh $(KERNEL_TEST_MAPPERS)

# The integration suites (contract, controller, node, sanity) against Ceph
# 18.2 Reef and 20.2 Tentacle clusters, with the plugin built against each
# release's librbd and this machine's Pacific-built one (docs/reference.md, "Ceph
# releases"). Each cluster runs in a chroot of a Debian suite's root, cached
# under $(or $(RBDCSI_ROOTFS_CACHE),/var/cache/rbdcsi-rootfs). MATRIX_RUN='TestCreate'
# picks tests; cells pick cells: make ceph-matrix MATRIX_CELLS=reef.
MATRIX_CELLS ?=
.PHONY: ceph-matrix
ceph-matrix: deps
	scripts/ceph-matrix.sh $(MATRIX_CELLS)

# End-to-end on a real single-node Kubernetes v1.37.1 built on this machine
# (docs/development.md, "End-to-end on Kubernetes"): builds or reuses Kubernetes, the
# sidecars and their images under $(or $(RBDCSI_E2E_CACHE),/var/cache/rbdcsi-e2e),
# makes a release of this checkout (scripts/release.sh) and imports its
# images, boots the node and Ceph, then per pass (kustomize, Helm, group
# snapshots) installs by running docs/install.md and runs e2e/k8s; tears
# everything down. E2E_FLAGS='-run TestAttach' picks scenarios.
E2E_FLAGS ?=
.PHONY: e2e
e2e: deps build
	scripts/k8s-e2e.sh $(E2E_FLAGS)
