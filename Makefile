# Herald's build, test and lab entry points. `make test` and `make lab` are the
# README's two commands: each installs and builds what it uses.
SHELL := /bin/bash
ROOT := $(CURDIR)
BIN := $(ROOT)/bin
export KUBEBUILDER_ASSETS := $(BIN)/k8s
# kubectl comes from bin/k8s too (hack/test-assets.sh builds it from
# k8s.io/kubernetes/cmd/kubectl): the packaging tests and the e2e lab read
# KUBECTL, and bin/k8s goes first on PATH for every recipe. Set KUBECTL to use
# another kubectl (1.27+).
export KUBECTL ?= $(BIN)/k8s/kubectl
export PATH := $(BIN)/k8s:$(PATH)
GO_TEST_FLAGS ?=

.PHONY: all build test lint race unit deps test-assets tools generate lab lab-down e2e bench bench-go fuzz clean release release-ci metallb-assets

all: build

# The version and commit the binaries report (--version, herald_build_info,
# internal/version). make release sets VERSION; a plain build is "dev".
VERSION ?= dev
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
VERSION_LDFLAGS = -X github.com/herald-lb/herald/internal/version.Version=$(VERSION) -X github.com/herald-lb/herald/internal/version.Commit=$(COMMIT)

# Static and path-independent, as make release and the Dockerfiles build them
# (CGO_ENABLED=0, -trimpath): the release's amd64 build then reuses this
# build's compiled packages from the Go build cache.
build:
	CGO_ENABLED=0 go build -trimpath -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/ ./controller ./speaker ./kubectl-herald

# release writes a release to dist/$(VERSION) (RELEASE_DIR overrides):
# manifests pinned to VERSION, the packaged chart, static linux/amd64 and
# linux/arm64 binaries with their SBOMs, the licences and SHA256SUMS
# (hack/release.sh; docs/install.md, "Installing a release").
# internal/packaging's TestRelease runs it in `make test` with a test version.
RELEASE_DIR ?= $(ROOT)/dist/$(VERSION)
release: test-assets $(BIN)/helm $(BIN)/go-licenses $(BIN)/cyclonedx-gomod
	@if [[ "$(VERSION)" == dev ]]; then echo "make release needs VERSION=vX.Y.Z" >&2; exit 2; fi
	COMMIT=$(COMMIT) hack/release.sh $(VERSION) $(RELEASE_DIR)

# release-ci builds the release make test checks, version RELEASE_CI_VERSION
# (internal/packaging's releaseVersion), into bin/release-ci.
RELEASE_CI_VERSION := v0.0.0-ci.1
RELEASE_CI_DIR := $(BIN)/release-ci/$(RELEASE_CI_VERSION)
release-ci: test-assets $(BIN)/helm $(BIN)/go-licenses $(BIN)/cyclonedx-gomod
	rm -rf $(RELEASE_CI_DIR)
	COMMIT=$(COMMIT) hack/release.sh $(RELEASE_CI_VERSION) $(RELEASE_CI_DIR)

deps:
	hack/install-deps.sh

test-assets:
	hack/test-assets.sh

# metallb-assets builds MetalLB's controller and speaker from their Go module
# (hack/tools/metallb) into bin/metallb, for the migration test (e2e
# TestMigration) and bench-migration. Cold: ~5 min on 2 cores.
metallb-assets:
	hack/metallb-assets.sh

tools: $(BIN)/controller-gen $(BIN)/helm $(BIN)/golangci-lint $(BIN)/go-licenses $(BIN)/cyclonedx-gomod

# The release's licence bundle (go-licenses) and SBOMs (cyclonedx-gomod),
# each in its own tools module.
$(BIN)/go-licenses: hack/tools/licenses/go.mod hack/tools/licenses/go.sum
	cd hack/tools/licenses && go build -o $(BIN)/go-licenses github.com/google/go-licenses
$(BIN)/cyclonedx-gomod: hack/tools/sbom/go.mod hack/tools/sbom/go.sum
	cd hack/tools/sbom && go build -o $(BIN)/cyclonedx-gomod github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod

$(BIN)/controller-gen: hack/tools/gen/go.mod hack/tools/gen/go.sum
	cd hack/tools/gen && go build -o $(BIN)/controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen

# Helm's own release build sets its version and the Kubernetes version it
# assumes without a cluster (`helm template`, `helm lint`) from its
# k8s.io/client-go dependency; without these ldflags a plain build assumes
# Kubernetes 1.20 and `helm template charts/herald` refuses the chart
# (kubeVersion >= 1.27).
HELM_VERSION = $(shell cd hack/tools/helm && go list -m -f '{{.Version}}' helm.sh/helm/v3)
HELM_K8S_MINOR = $(shell cd hack/tools/helm && go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)
$(BIN)/helm: hack/tools/helm/go.mod hack/tools/helm/go.sum
	cd hack/tools/helm && go build -o $(BIN)/helm -ldflags "\
	  -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	  -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$(HELM_K8S_MINOR) \
	  -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(HELM_K8S_MINOR)" \
	  helm.sh/helm/v3/cmd/helm

# Short names for the tools' paths (`make helm`, `make golangci-lint`).
.PHONY: helm golangci-lint controller-gen
helm: $(BIN)/helm
golangci-lint: $(BIN)/golangci-lint
controller-gen: $(BIN)/controller-gen

$(BIN)/golangci-lint: hack/tools/lint/go.mod hack/tools/lint/go.sum
	cd hack/tools/lint && go build -o $(BIN)/golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint

# lint is the lint gate (issue #12): gofmt, go vet, staticcheck, unused,
# unparam, revive, godot, nolintlint, errorlint, and the depguard rules that
# state Herald's layering (which packages may import client-go, gobgp,
# memberlist, netlink, sockets). All in .golangci.yml; results are cached in
# golangci-lint's default cache (~/.cache/golangci-lint).
lint: $(BIN)/golangci-lint
	@echo "lint: gofmt, govet, staticcheck, unused, unparam, revive, godot, nolintlint, errorlint, forbidigo and the depguard import rules of .golangci.yml (pure decision packages, one package per library)"
	$(BIN)/golangci-lint run ./...

# generate rewrites the deepcopy code and CRD YAML from the markers in api/.
generate: $(BIN)/controller-gen
	hack/generate.sh

# diagrams renders the Graphviz sources docs/diagrams/*.dot to the SVGs the
# docs embed (internal/packaging fails when they are stale); dot is Debian's
# graphviz, installed by deps.
.PHONY: diagrams
diagrams: deps
	hack/render-diagrams.sh

# manifests renders manifests/herald.yaml and the chart's copies of the CRDs
# and webhooks from manifests/ (internal/packaging fails when they are stale).
.PHONY: manifests
manifests:
	hack/render-manifests.sh

# test is the README's test command and what CI runs: everything, from a fresh machine.
# The lint gate runs first, after the build and before the tests.
# The e2e labs use the binaries built here (HERALD_LAB_BIN_DIR) instead of
# building their own; -timeout covers the e2e package's labs on a slow machine.
# The release with a test version (make release-ci) is built once, before the
# tests: internal/packaging's TestRelease checks its artefacts and installs
# them on a real API server, e2e's TestReleaseInLab installs it in a lab as a
# user would (HERALD_RELEASE_DIR); a release that cannot be built fails here.
test: deps test-assets metallb-assets tools build release-ci
	$(MAKE) lint
	go vet ./...
	HERALD_LAB_BIN_DIR=$(BIN) HERALD_RELEASE_DIR=$(RELEASE_CI_DIR) go test $(GO_TEST_FLAGS) -timeout 60m -count=1 ./...
	$(MAKE) race

# race runs the concurrent packages' tests again under the race detector
# (issue #12): memberlist membership (internal/members), the layer 2
# announcer in its own network namespaces (internal/layer2, as root), the
# speaker and the Service IP controller against the real API server
# (internal/k8s/speaker, internal/k8s/allocation) and its per-Service state
# (internal/svcstate, 1 s), the API retry loop (internal/k8s/apiretry, 15 s),
# the configuration tracker and the memberlist Secret keeper against the real
# API server (internal/k8s/configload 60 s, internal/k8s/mlsecret 30 s). All
# of their tests, no -short or -run selection: measured on a loaded 2-core
# machine, members 30 s, layer2 20 s, speaker 90 s, allocation 80 s each
# alone, 1 min 50 s in this one go test run (two packages at a time), inside
# the 5 min budget for -race on top of the ~20 min suite (CI has 90 min); the
# three added later were measured alone on 2026-12-01 (2 cores, shared with
# other jobs, load average over 100), their compile time not counted.
# internal/bgp/gobgp runs in a second go test without its full-table tests
# (TestPrefixLimit and its router process TestFullTableRouter: 50k paths,
# minutes without -race; they run in the normal suite): 88 s with a warm
# build cache during a CI run (a cold race build of it took about 8 min at
# load average 200). internal/bfd/..., internal/bgp,
# internal/logging and internal/ipam were added next (together 2 min 7 s
# with their compile on that machine during a CI run; bfdnet 50 s of it).
# internal/k8s/webhook (envtest) added last: 128 s of tests under -race,
# 2026-12-02 during a CI run. internal/k8s/eventrec (envtest; the event
# recorder's worker, queue and shutdown) 56 s under -race, 2026-12-05 during
# a CI run. All of it together is estimated at about 9 min on top of the
# suite (CI has 90 min). The e2e labs and the rest
# stay without -race (a race-built lab would take several times the suite's time).
RACE_PKGS := ./internal/members/ ./internal/layer2/ ./internal/k8s/speaker/ ./internal/k8s/allocation/ ./internal/svcstate/ \
	./internal/k8s/apiretry/ ./internal/k8s/configload/ ./internal/k8s/mlsecret/ \
	./internal/bfd/ ./internal/bfd/bfdnet/ ./internal/bgp/ ./internal/logging/ ./internal/ipam/ \
	./internal/k8s/webhook/ ./internal/k8s/eventrec/
race: test-assets
	go test -race $(GO_TEST_FLAGS) -timeout 20m -count=1 $(RACE_PKGS)
	go test -race $(GO_TEST_FLAGS) -timeout 20m -count=1 -skip 'TestPrefixLimit|TestFullTableRouter' ./internal/bgp/gobgp/

# unit runs only the tests that need no API server and no namespaces.
unit:
	go test -short -count=1 ./...

# lab brings up the local lab with Herald installed from manifests/base by
# `kubectl apply` (INSTALL=kubectl, the default) or from charts/herald by
# `helm install` of release "herald" (INSTALL=helm, with bin/helm), running
# the binaries built here.
# LAB_PREFIX names the lab's network namespaces (default herald-lab):
# two labs on one machine need two prefixes, since lab-down removes every
# namespace of its prefix.
INSTALL ?= kubectl
lab: deps test-assets build $(if $(filter helm,$(INSTALL)),$(BIN)/helm)
	hack/lab.sh up --install=$(INSTALL) --bin-dir=$(BIN) $(if $(RELEASE),--release=$(RELEASE)) $(if $(LAB_PREFIX),--prefix=$(LAB_PREFIX))

lab-down:
	hack/lab.sh down $(if $(LAB_PREFIX),--prefix=$(LAB_PREFIX))

e2e: deps test-assets metallb-assets tools build release-ci
	HERALD_LAB_BIN_DIR=$(BIN) HERALD_RELEASE_DIR=$(RELEASE_CI_DIR) go test -count=1 -timeout 40m ./e2e/...

# bench runs the in-process benchmarks (allocator, decisions, layer 2, BGP),
# then the three measurement commands on real API servers and labs.
bench: bench-go bench-alloc bench-failover bench-bgp

bench-go:
	go test -run '^$$' -bench . -benchmem ./internal/...

# bench-alloc measures create->ingress latency of Herald's controller against an
# ideal allocator (and MetalLB's controller, when make metallb-assets has built
# bin/metallb) on a real kube-apiserver, in bursts of 1,000, 3,000 and 10,000
# Services, and each one's peak RSS holding the same Services (see
# docs/performance.md). BENCH_ALLOC_FLAGS adds flags (-profile-dir DIR, -bursts).
.PHONY: bench-alloc
bench-alloc: test-assets
	go build -o $(BIN)/controller ./controller
	go run ./hack/bench-alloc -controller $(BIN)/controller -metallb $(BIN)/metallb/controller $(BENCH_ALLOC_FLAGS)

# bench-l2balance compares the plain layer 2 election with the balanced one
# (announce.ElectBalanced): max/mean addresses per node for 5, 50 and 1,000
# addresses on 3, 10 and 100 nodes, and addresses moved when a node fails.
# Pure, no lab; prints the table of docs/performance.md ("Balanced layer 2
# placement").
.PHONY: bench-l2balance
bench-l2balance:
	go run ./hack/l2balance

fuzz:
	go test -run '^$$' -fuzz FuzzBuild -fuzztime 60s ./internal/config

# bench-bgp measures Herald's BGP speed in the lab against a real FRR: Service
# created -> prefix in FRR, endpoints gone -> withdrawn (p50/p99 over 100),
# link cut -> FRR withdrew the node's routes with BGP alone (9 s hold time) and
# with BFD 300 ms x 3 (5 rounds each, median/max and ratio), and 10,000
# prefixes to one peer with the speaker's peak RSS (see docs/performance.md).
.PHONY: bench-bgp
bench-bgp: deps test-assets build
	HERALD_LAB_BIN_DIR=$(BIN) go run ./e2e/cmd/bench-bgp --record docs/performance.md

# bench-speaker-mem measures the speaker's memory (VmRSS, VmHWM, Go heap) at
# 0, 1,000 and 10,000 Services with EndpointSlices against MetalLB's speaker
# on the same objects in the same lab run (e2e/cmd/bench-speaker-mem);
# SPKMEM_ARGS adds flags (e.g. -baseline bin/speaker-base -baseline-pprof).
.PHONY: bench-speaker-mem
bench-speaker-mem: deps test-assets metallb-assets build
	HERALD_LAB_BIN_DIR=$(BIN) go run ./e2e/cmd/bench-speaker-mem --record docs/performance.md $(SPKMEM_ARGS)

# bench-failover measures layer 2 failover in the lab: speaker stopped, killed
# or link cut -> the client's neighbour cache names the new node (20 trials
# each), and records the figures in docs/performance.md ("L2 failover").
.PHONY: bench-failover
bench-failover: deps test-assets build
	HERALD_LAB_BIN_DIR=$(BIN) go run ./e2e/cmd/bench-failover --trials 20 --record docs/performance.md

# bench-scale measures layer 2 on many lab nodes (10, 50, 100; a node is a
# network namespace, one API server for all speakers): memberlist
# convergence, SIGKILL failover, the speakers' API requests at rest and in a
# 1,000-Service burst, CPU and RSS per speaker, false failovers under full CPU
# load at 100 nodes; records docs/performance.md ("Layer 2 scale").
# SCALE_ARGS adds flags, e.g. SCALE_ARGS='--speaker-args "--ml-probe-interval=100ms"'.
SCALE_ARGS ?=
.PHONY: bench-scale
bench-scale: deps test-assets build
	HERALD_LAB_BIN_DIR=$(BIN) go run ./e2e/cmd/bench-scale --sizes 10,50,100 --record docs/performance.md $(SCALE_ARGS)

# bench-chaos runs the chaos scenarios in the lab (speaker restarts, controller
# rollout, memberlist key rotation, a peer sending 200k prefixes, ...):
# what each transition loses, target 0, and records the table in
# docs/reliability.md ("Chaos results"). e2e's TestChaos runs the short forms.
# CHAOS_ARGS passes flags (e.g. --scenarios=rollout,mlkey, which replaces
# only those scenarios' rows and notes; see e2e/cmd/bench-chaos);
# CHAOS_RECORD is the file whose section gets the table.
CHAOS_ARGS ?=
CHAOS_RECORD ?= docs/reliability.md
.PHONY: bench-chaos
bench-chaos: deps test-assets build
	HERALD_LAB_BIN_DIR=$(BIN) go run ./e2e/cmd/bench-chaos --record $(CHAOS_RECORD) $(CHAOS_ARGS)

# bench-migration runs the migration test with the real MetalLB in full:
# MetalLB v0.16.2 (built by metallb-assets) in the lab, its own rollout for
# comparison, then 3 rounds of the in-place node-by-node migration to Herald
# and back, and records the table in docs/migrating-from-metallb.md
# ("Measured"). e2e's TestMigration runs the short form.
.PHONY: bench-migration
bench-migration: deps test-assets metallb-assets build
	HERALD_LAB_BIN_DIR=$(BIN) go run ./e2e/cmd/bench-migration --record docs/migrating-from-metallb.md

# bench-migration-helm is bench-migration with Herald installed by its chart
# and manifests/metallb-migration/helm-values.yaml (section "Measured with Helm").
.PHONY: bench-migration-helm
bench-migration-helm: deps test-assets metallb-assets build tools
	HERALD_LAB_BIN_DIR=$(BIN) go run ./e2e/cmd/bench-migration --helm --record docs/migrating-from-metallb.md

clean:
	rm -rf $(BIN)
