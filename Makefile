# kpsim: see README.md. Every target works on a fresh machine with Go, gcc, git and make.
GO       ?= go
SCENARIO ?= smoke
BACKEND  ?=
OUT      ?= out
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS  := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
KPSIM    := bin/kpsim

.PHONY: all build test scenario test-kernel compare compare-releases parity kube-proxy kube-proxy-test side-by-side nftables-agreement iptables-agreement sweep sweep-plan sweep-cell sweep-merge clean FORCE
all: build

build: $(KPSIM)
$(KPSIM): FORCE
	$(GO) build -ldflags '$(LDFLAGS)' -o $@ ./cmd/kpsim

# actionlint checks every workflow in .github/workflows. It is pinned in
# tools/go.mod (a module of its own, so that a linter's dependencies never
# move kpsim's) and built from source by `go tool`. The files are named:
# by itself it looks for them in a git checkout only (not in an archive).
ACTIONLINT := $(GO) tool -modfile=tools/go.mod actionlint
WORKFLOWS  := $(wildcard .github/workflows/*.yml .github/workflows/*.yaml)

# go test's output as usual (hack/testsummary reads its -json form), then
# every skipped test by the reason it gave, then the package results again,
# and go test's exit status. A test that needs a host tool not on PATH
# (ipset, iptables-*, ip, shellcheck, vagrant, rsync) skips and names it;
# KPSIM_REQUIRE_HOST_TOOLS=1 fails it instead (.ci/run sets it).
test:
	$(GO) vet ./...
	$(ACTIONLINT) $(WORKFLOWS)
	$(GO) run ./hack/testsummary $(GO) test -json ./...

# Runs a scenario (default: smoke, on the in-memory kernel: no root needed),
# prints a summary, and writes a results file and an HTML report into $(OUT)/.
scenario: build
	@mkdir -p $(OUT)
	$(KPSIM) run -s $(SCENARIO) $(if $(BACKEND),--set backend=$(BACKEND)) -o $(OUT)/$(notdir $(basename $(SCENARIO))).json
	$(KPSIM) report $(OUT)/$(notdir $(basename $(SCENARIO))).json -o $(OUT)/$(notdir $(basename $(SCENARIO))).html

# Boots Debian's kernel in QEMU (the host kernel has no IPVS) and runs the
# kernel conformance suite and an end-to-end scenario with real traffic in it.
test-kernel:
	VERSION='$(VERSION)' COMMIT='$(COMMIT)' bash kernel/vm/run.sh

# kpsim's proxier and kube-proxy v1.37.1 in IPVS mode on the same 5,000-service
# scenario in one boot of the VM (kpsim, v1.37.1, kpsim): prints per figure (first
# sync, ten changes, periodic sync, restart) each run's time and the release's over
# kpsim's (upstream/e2e TestSideBySide). A measurement, not a test CI runs: 15
# minutes under emulation here (docs/kernel-backend.md, "Side by side").
side-by-side:
	KPSIM_VM_ONLY=side-by-side KPSIM_VM_TIMEOUT=$${KPSIM_VM_TIMEOUT:-4800} VERSION='$(VERSION)' COMMIT='$(COMMIT)' bash kernel/vm/run.sh

# Compares kpsim at BASE (a git ref) with the working tree on the in-memory
# kernel: make compare BASE=HEAD~1 [SCENARIOS=smoke] [RUNS=5] [LATENCY=report|gate]
RUNS      ?= 5
SCENARIOS ?= smoke
LATENCY   ?= report
compare:
	BASE='$(BASE)' SCENARIOS='$(SCENARIOS)' RUNS='$(RUNS)' LATENCY='$(LATENCY)' OUT='$(OUT)/compare' bash hack/compare.sh

# Compares two kube-proxy releases on a scenario on the in-memory kernel,
# RUNS runs each (a release's run is one sample): exit 1 only on a
# regression (more broken traffic, failed syncs, slower syncs).
#   make compare-releases BASE_RELEASE=v1.37.1 HEAD_RELEASE=v1.30.3 [SCENARIO=...] [RUNS=8] [SETS="k=v ..."] [LATENCY=gate|report]
# Unset, SCENARIO, RUNS and LATENCY are this target's defaults, not the
# Makefile's (smoke, make compare's 5 runs, report).
BASE_RELEASE ?=
HEAD_RELEASE ?=
compare-releases:
	BASE_RELEASE='$(BASE_RELEASE)' HEAD_RELEASE='$(HEAD_RELEASE)' SCENARIO='$(if $(filter file,$(origin SCENARIO)),restart-stale-ipsets,$(SCENARIO))' \
		RUNS='$(if $(filter file,$(origin RUNS)),8,$(RUNS))' SETS='$(SETS)' LATENCY='$(if $(filter file,$(origin LATENCY)),gate,$(LATENCY))' \
		OUT='$(OUT)/compare-releases' bash hack/compare-releases.sh

# Holds kpsim's proxier against kube-proxy v1.37.1's own IPVS proxier (run on
# upstream's fakes) on a corpus of random clusters, one per seed: exit 1 on
# any difference kube-proxy's own indeterminism does not explain. A nested Go
# module (upstream/kube-proxy-v1.37): the first run downloads and builds
# k8s.io/kubernetes (about 4 minutes and 3.4 GB of Go cache). The default
# seeds are held out: development uses others.
PARITY_SEEDS ?= 100000-100499
parity:
	cd upstream/kube-proxy-v1.37 && $(call clock-overlay,v1.37) && $(GO) vet $(call clock-flags,v1.37) ./... && \
		$(GO) test $(call clock-flags,v1.37) ./... && $(GO) run $(call clock-flags,v1.37) ./cmd/parity -seeds $(PARITY_SEEDS)

# A sweep (docs/reference.md, Sweeps): make sweep SPEC=sweeps/restart-scale.yaml plans
# the spec, runs its cells one after another, merges them and writes one
# report, $(SWEEP_OUT)/report.html; it fails when a cell did. The workflow
# sweep.yml runs the same targets, sweep-cell as one job per cell.
SPEC      ?= sweeps/restart-scale.yaml
SWEEP_OUT ?= $(OUT)/sweep/$(basename $(notdir $(SPEC)))
CELL      ?=

# A spec that names kube-proxy releases runs them in their own binaries
# (make kube-proxy), which kpsim sweep run finds beside bin/kpsim.
sweep-plan: build
	@if grep -q 'kube-proxy@' $(SPEC); then $(MAKE) --no-print-directory kube-proxy; fi
	@mkdir -p $(SWEEP_OUT)
	$(KPSIM) sweep plan $(SPEC) -o $(SWEEP_OUT)/plan.json

# A kube-proxy release's cell (its name says kube-proxy-vX.Y.Z) runs in the
# release's binary (proxier.ReleaseBinaries): built here when neither
# kpsim-kube-proxy-vX.Y.Z nor kpsim-kube-proxy-vX.Y is there (a sweep
# workflow's cell job), the checked-in module of vX.Y if there is one, else
# the release's own (make kube-proxy RELEASE=vX.Y.Z).
sweep-cell: build
	@r=$$(echo '$(CELL)' | sed -n 's/.*_kube-proxy-\(v[0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*\)_.*/\1/p'); m=$${r%.*}; \
	if [ -n "$$r" ] && [ ! -x $(KUBE_PROXY_BIN)/kpsim-kube-proxy-$$r ] && [ ! -x $(KUBE_PROXY_BIN)/kpsim-kube-proxy-$$m ]; then \
		if [ -f upstream/kube-proxy-$$m/go.mod ]; then $(MAKE) --no-print-directory $(KUBE_PROXY_BIN)/kpsim-kube-proxy-$$m; \
		else $(MAKE) --no-print-directory kube-proxy RELEASE=$$r; fi; \
	fi
	@mkdir -p $(SWEEP_OUT)/cells
	$(KPSIM) sweep run $(SPEC) $(CELL) -o $(SWEEP_OUT)/cells

sweep-merge: build
	$(KPSIM) sweep merge $(SWEEP_OUT) -o $(SWEEP_OUT)/index.json
	$(KPSIM) report $(SWEEP_OUT)/index.json -o $(SWEEP_OUT)/report.html

sweep: sweep-plan
	@failed=0; \
	for cell in $$($(KPSIM) sweep plan $(SPEC) --format names); do \
		$(MAKE) --no-print-directory sweep-cell CELL=$$cell || failed=$$((failed + 1)); \
	done; \
	$(MAKE) --no-print-directory sweep-merge || exit 1; \
	if [ $$failed -gt 0 ]; then echo "make sweep: $$failed cells failed: see $(SWEEP_OUT)/report.html"; exit 1; fi

# kpsim binaries whose proxier implementations include a kube-proxy
# release's own proxiers: bin/kpsim-kube-proxy-v1.37 runs
# proxier.implementation=kube-proxy@v1.37.1 (the release its nested module,
# upstream/kube-proxy-v1.37, pins). A cold build of k8s.io/kubernetes takes
# about 4 minutes and 3.4 GB of Go build cache per release; Go's build cache
# ($$(go env GOCACHE)) keeps them, so a rebuild only links.
# KUBE_PROXY_BIN puts them elsewhere (make test-kernel: into the VM's tree).
#
# Any other release is one command: make kube-proxy RELEASE=v1.36.3 writes
# its module (upstream/kube-proxy/cmd/releasemodule: the release's staging
# modules pinned from its own go.mod) under RELEASE_MODULES and builds
# bin/kpsim-kube-proxy-v1.36.3; KUBERNETES=/path/to/kubernetes builds that
# checkout instead (a local patch: bin/kpsim-kube-proxy-v1.36.3-local).
# make kube-proxy-test RELEASE=... runs the generated module's test.
KUBE_PROXY_RELEASES ?= v1.30 v1.34 v1.37
KUBE_PROXY_BIN      ?= bin
RELEASE_MODULES      = $(abspath $(or $(KPSIM_RELEASE_MODULES),$(HOME)/.cache/kpsim/release-modules))
ifdef RELEASE
KUBE_PROXY_BUILDS := $(RELEASE)$(if $(KUBERNETES),-local)
else
KUBE_PROXY_BUILDS := $(KUBE_PROXY_RELEASES)
endif
# $(call release-dir,NAME): a checked-in release module, or a written one.
release-dir = $(if $(wildcard upstream/kube-proxy-$(1)/go.mod),upstream/kube-proxy-$(1),$(RELEASE_MODULES)/$(1))
release-module = $(if $(wildcard upstream/kube-proxy-$(1)/go.mod),true,\
	(cd upstream/kube-proxy && $(GO) run ./cmd/releasemodule -o $(RELEASE_MODULES)/$(1) $(if $(KUBERNETES),-kubernetes '$(KUBERNETES)') $(patsubst %-local,%,$(1))))
# The build tags that choose the adapter's files for the release
# (upstream/kube-proxy/adapter*.go), as releasemodule says.
release-tags = $$(cd $(CURDIR)/upstream/kube-proxy && $(GO) run ./cmd/releasemodule -tags $(patsubst %-local,%,$(1)))
# A release is built with its own reads of the time on the run's clock
# (upstream/kube-proxy/releaseclock): clockoverlay writes, for the
# k8s.io/kubernetes the module builds with, a copy (links, and rewritten
# proxy sources) and a module file that replaces k8s.io/kubernetes with it,
# handed to go build, vet and test as -modfile. Its place is fixed, so
# that the go build cache keeps what it compiled from it across clones.
# $(call clock-overlay,v1.37) writes it for a release module, run in it.
CLOCK_OVERLAY = $(abspath $(or $(KPSIM_CLOCK_OVERLAY),$(HOME)/.cache/kpsim/clock-overlay))
clock-overlay = $(GO) run github.com/kpsim/kpsim/upstream/kube-proxy/cmd/clockoverlay -o $(CLOCK_OVERLAY)/$(1)
clock-flags = -modfile=$(CLOCK_OVERLAY)/$(1)/go.mod
clock-ldflags = -X github.com/kpsim/kpsim/upstream/kube-proxy.replacedBy=$$(cat $(CLOCK_OVERLAY)/$(1)/replaced)
kube-proxy: $(KUBE_PROXY_BUILDS:%=$(KUBE_PROXY_BIN)/kpsim-kube-proxy-%)
$(KUBE_PROXY_BIN)/kpsim-kube-proxy-%: FORCE
	$(call release-module,$*) && tags="$(call release-tags,$*)" && cd $(call release-dir,$*) && $(call clock-overlay,$*) && \
		$(GO) build $(call clock-flags,$*) -tags "$$tags" -ldflags "$(LDFLAGS) $(call clock-ldflags,$*)" -o $(abspath $@) ./cmd/kpsim

# Vets every release module and the code they share (compiled against each
# release), and runs their tests: each release on upstream's fakes through a
# restart whose handlers lag.
kube-proxy-test: $(KUBE_PROXY_BUILDS:%=kube-proxy-test-%)
kube-proxy-test-%: FORCE
	$(call release-module,$*) && tags="$(call release-tags,$*)" && cd $(call release-dir,$*) && $(call clock-overlay,$*) && \
		$(GO) vet $(call clock-flags,$*) -tags "$$tags" ./... github.com/kpsim/kpsim/upstream/kube-proxy/... && \
		$(GO) test $(call clock-flags,$*) -tags "$$tags" ./... github.com/kpsim/kpsim/upstream/kube-proxy/...

# The sim against this machine's own kernel for kube-proxy v1.37.1 in nftables mode (no VM:
# nf_tables and nft, as root): calibrates, then runs upstream/e2e/testdata/nftables-agreement.yaml
# at 1,000 and 5,000 services and nftables-agreement-mixed.yaml (churn, deletes, affinity, a
# restart) on both and compares tables, operations and times (upstream/e2e
# TestNFTablesAgreement; its log and results under $(OUT)/nftables-agreement).
nftables-agreement: $(KUBE_PROXY_BIN)/kpsim-kube-proxy-v1.37
	$(call agreement,nftables-agreement,TestNFTablesAgreement,NFTABLES-AGREEMENT)

# The same in iptables mode (iptables in a network namespace, as root): calibrates this kernel's
# iptables-restore at iptables mode's sizes, then runs nftables-agreement.yaml in iptables mode
# at 1,000 and 5,000 services on both (upstream/e2e TestIPTablesAgreement).
iptables-agreement: $(KUBE_PROXY_BIN)/kpsim-kube-proxy-v1.37
	$(call agreement,iptables-agreement,TestIPTablesAgreement,IPTABLES-AGREEMENT)

# $(call agreement,NAME,TEST,PREFIX): runs upstream/e2e's TEST, its log and results under
# $(OUT)/NAME, and prints its lines that start with PREFIX.
agreement = mkdir -p '$(OUT)/$(1)' && \
	KPSIM_E2E_BIN_DIR='$(abspath $(KUBE_PROXY_BIN))' KPSIM_E2E_OUT='$(abspath $(OUT))/$(1)' \
		$(GO) test -count=1 -v -timeout 20m -run '^$(2)$$' ./upstream/e2e/ >'$(OUT)/$(1)/test.log' 2>&1; \
		s=$$?; grep -E '^($(3)|--- |ok|FAIL|PASS)|Error' '$(OUT)/$(1)/test.log'; exit $$s
