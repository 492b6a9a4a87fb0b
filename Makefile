# fabraid build and test entry points. `make test` is what CI runs.
# Every target that needs host packages or Go modules installs them first
# (scripts/setup-host.sh: apt packages; go: modules through the proxy).

GO        ?= go
BIN       := bin
GOFLAGS_STATIC := CGO_ENABLED=0
LDFLAGS   := -s -w -X main.version=$(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# VM tests: a package's guests wait for free CPU slots, so allow plenty.
VMTEST_TIMEOUT ?= 80m

.PHONY: all build test unit race vmtest vmbench clusterbench faultschedule reprotect scale lint demo demo-node clean setup rpm rpm-spec

all: build

setup:
	@bash scripts/setup-host.sh

build:
	@mkdir -p $(BIN)
	$(GOFLAGS_STATIC) $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

# The whole suite: unit tests, race tests of the concurrent code, and the
# VM tests that boot real kernels in qemu guests.
test: setup lint
	$(GOFLAGS_STATIC) FABRAID_VMTEST=1 $(GO) test -count=1 -timeout $(VMTEST_TIMEOUT) ./...
	$(MAKE) race

# Unit tests only: no root, qemu or guest kernel needed (VM tests skip).
unit:
	$(GOFLAGS_STATIC) $(GO) test -count=1 ./...

race:
	CGO_ENABLED=1 $(GO) test -count=1 -race ./engine/...

# VM tests only.
vmtest: setup
	$(GOFLAGS_STATIC) FABRAID_VMTEST=1 $(GO) test -count=1 -timeout $(VMTEST_TIMEOUT) -run 'TestIntegration' ./...

# In-guest benchmarks (TestBench*VM): one JSON line per benchmark, each with
# a "ratio" field; method and results in docs/performance.md. The product
# benchmark (internal/productbench, ~15 min) also writes CPU profiles of the
# engine to FABRAID_VMBENCH_PROFILES (default: a new /tmp/fabraid-vmbench-*).
vmbench: setup
	@out=$$($(GOFLAGS_STATIC) FABRAID_VMTEST=1 FABRAID_VMBENCH=1 $(GO) test -count=1 -timeout $(VMTEST_TIMEOUT) \
		-run '^TestBench.*VM$$' -v ./... 2>&1); rc=$$?; \
	printf '%s\n' "$$out" | sed -n 's/.*VMBENCH //p'; \
	if [ $$rc -ne 0 ]; then printf '%s\n' "$$out" | tail -50; fi; exit $$rc

# The cluster benchmark (internal/clusterbench, ~30 min for 3 rounds): three
# guests, a 4+2 volume over them (--journal 8M, the journal a member of
# 1 GiB or more gets by default) read and written from a non-owner through
# its NVMe head, against md RAID-6 (no journal, no PPL) over
# nvme-tcp-imported drives exported the same way; healthy, then with a
# member node powered off, its resync when it returns, a rebuild onto a
# spare, and the consumer's queue_size. Prints a
# VMBENCH JSON line per row and a table; rounds from
# FABRAID_CLUSTERBENCH_ROUNDS (default 3); the whole log (with the top of the
# owner engine's CPU profiles, kept in FABRAID_CLUSTERBENCH_PROFILES) stays in
# CLUSTERBENCH_LOG. FABRAID_CLUSTERBENCH_KERNEL=7 boots Debian sid's 7.x
# (default 6.12), whose ublk reads zero copy; FABRAID_CLUSTERBENCH_ZEROCOPY=off
# runs fabraidd with ublk_zero_copy = off (the copy path; default auto);
# FABRAID_CLUSTERBENCH_PHASES=healthy stops after the healthy rows. Zero copy
# vs copy takes two runs (one fabraidd setting per node): compare each run's
# fabraid/md. Method and results: docs/performance.md.
CLUSTERBENCH_LOG ?= /tmp/fabraid-clusterbench.log
clusterbench: setup
	@$(GOFLAGS_STATIC) FABRAID_VMTEST=1 FABRAID_VMBENCH=1 $(GO) test -count=1 -timeout $(VMTEST_TIMEOUT) \
		-run '^TestClusterBenchVM$$' -v ./internal/clusterbench >$(CLUSTERBENCH_LOG) 2>&1; rc=$$?; \
	sed -n 's/.*VMBENCH /VMBENCH /p; s/.*CLUSTERBENCH //p' $(CLUSTERBENCH_LOG); \
	if [ $$rc -ne 0 ]; then tail -50 $(CLUSTERBENCH_LOG); echo "full log: $(CLUSTERBENCH_LOG)"; fi; exit $$rc

# The cluster fault schedule for a long run (internal/cluster
# TestIntegrationFaultSchedule; not part of make test, 5-12 min): seeded
# kills and partitions of the three guests under a flushing writer, every
# flushed block read back after each round. FAULT_ROUNDS rounds (default
# 10: 607 s on 4 Dec 2026), FAULT_SEED to replay a printed seed; each round's fault,
# owner and longest write gap are in the log.
FAULT_ROUNDS ?= 10
faultschedule: setup
	$(GOFLAGS_STATIC) FABRAID_VMTEST=1 FABRAID_FAULT_ROUNDS=$(FAULT_ROUNDS) $(if $(FAULT_SEED),FABRAID_FAULT_SEED=$(FAULT_SEED)) \
		$(GO) test -count=1 -timeout $(VMTEST_TIMEOUT) -run '^TestIntegrationFaultSchedule$$' -v ./internal/cluster

# Re-protection (internal/cluster TestIntegrationReprotect, issue 26): four
# guests, a node powered off past down_out_interval (20 s here), its members
# rebuilt on the fourth node's drives; 8-9 min, so not part of make test.
reprotect: setup
	$(GOFLAGS_STATIC) FABRAID_VMTEST=1 FABRAID_VMTEST_REPROTECT=1 $(GO) test -count=1 -timeout $(VMTEST_TIMEOUT) -run '^TestIntegrationReprotect$$' -v ./internal/cluster

# The control-plane scale benchmark (internal/scalesim, issue 27): SCALE_NODES
# simulated nodes (10 drives each, one 4+2 volume per node unless
# SCALE_VOLUMES) against a real three-member etcd in one process, 60 s
# steady, then an owner's and a 20-node rack's power cut; one SCALE line.
# SCALE_ATTACH=N gives each volume an attach list of N nodes (its owner
# and N-1 others; default none: every node consumes every volume).
SCALE_NODES ?= 100
scale:
	FABRAID_SCALE_NODES=$(SCALE_NODES) $(if $(SCALE_VOLUMES),FABRAID_SCALE_VOLUMES=$(SCALE_VOLUMES)) \
		$(if $(SCALE_ATTACH),FABRAID_SCALE_ATTACH=$(SCALE_ATTACH)) \
		$(GO) test -count=1 -timeout 60m -run '^TestScaleSim$$' -v ./internal/scalesim

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# The main job: three guests on Debian's 6.12 kernel make a fabraid cluster
# (init, join, a 4+2 volume over the three nodes, the power cut of its owner,
# read from volume show, under I/O, another node's takeover, the old owner's
# return as a non-owner with a partial resync, scrub); it prints what it
# observed and fails when that is not a failover. demo-node: the one-node path.
demo: setup build
	$(GOFLAGS_STATIC) $(GO) run ./internal/demo -fabraid $(BIN)/fabraid -fabraidd $(BIN)/fabraidd

demo-node: setup build
	$(GOFLAGS_STATIC) $(GO) run ./internal/demo -mode node -fabraid $(BIN)/fabraid -fabraidd $(BIN)/fabraidd

# RPMs for el9 and el10, x86_64 and aarch64, into dist/ (docs/install.md).
# SOURCE_DATE_EPOCH (default: last commit time); FABRAID_RPM_SIGNING_KEY
# (armored OpenPGP private key file) and FABRAID_RPM_SIGNING_PASSPHRASE sign.
rpm:
	$(GO) run ./internal/rpmbuild/mkrpm -out dist

# Regenerates packaging/rpm/fabraid.spec from the same definition.
rpm-spec:
	$(GO) run ./internal/rpmbuild/mkrpm -spec packaging/rpm/fabraid.spec

clean:
	rm -rf $(BIN) dist
	@echo "kernel cache kept in .cache/vmtest (rm -rf .cache to drop it)"
