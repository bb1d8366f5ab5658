# xroce: a pure-Go RoCE v2 stack over AF_XDP.
# `make help` lists the targets. Everything here runs as root on Debian (CI does).

GO        ?= go
PKGS      ?= ./...
BIN       ?= bin/xroce
STATICCHECK_VERSION ?= v0.8.2
GOBIN     := $(shell $(GO) env GOPATH)/bin
FUZZTIME  ?= 20s
FUZZLONG  ?= 10m
FUZZMIN   ?= 10s
BENCHTIME ?= 1s
BENCH     ?= .
export CGO_ENABLED := 0

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# apt-install installs the Debian packages of the commands named in its
# argument (command:package pairs) that are not on PATH, each package once.
define apt-install
	@missing=""; \
	for p in $(1); do \
		cmd=$${p%%:*}; pkg=$${p##*:}; \
		command -v $$cmd >/dev/null 2>&1 || case " $$missing " in *" $$pkg "*) ;; *) missing="$$missing $$pkg";; esac; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "apt-get install$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
endef

# What xroce lab needs besides Go: ip from iproute2 (internal/netns makes
# and deletes the namespaces with `ip netns`). It injects its loss in its
# own XDP programs, not with tc, and xroce dump, which checks its pcap,
# is Go.
DEMO_CMDS := ip:iproute2
# What the tests add: tc (netem in the tests' namespaces), tshark (golden
# decodes), iperf3 and sockperf (the benchmark report), QEMU, debootstrap,
# e2fsprogs and python3 (the rxe VM), tcpdump (interop captures),
# Chromium (the HTML page's test).
TEST_CMDS := tc:iproute2 tshark:tshark iperf3:iperf3 sockperf:sockperf \
	qemu-system-x86_64:qemu-system-x86 debootstrap:debootstrap tcpdump:tcpdump mkfs.ext4:e2fsprogs python3:python3 \
	chromium:chromium

.PHONY: demo-deps
demo-deps: ## Install what make demo needs (Go modules, iproute2).
	$(call apt-install,$(DEMO_CMDS))
	$(GO) mod download

.PHONY: deps
deps: demo-deps ## Install what the build and tests need: demo-deps and tc, tshark, iperf3, sockperf, QEMU, debootstrap, tcpdump, Chromium, staticcheck.
	$(call apt-install,$(TEST_CMDS))
	@test -x $(GOBIN)/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

.PHONY: build
build: ## Build the xroce tool (static, no cgo) into bin/xroce.
	$(GO) build -o $(BIN) ./cmd/xroce

.PHONY: lint
lint: ## gofmt, go vet and staticcheck; fails on any finding.
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GOBIN)/staticcheck $(PKGS)

.PHONY: test
test: deps lint build test-go ## The whole test suite as CI runs it (root: namespaces, AF_XDP, tshark, the rxe VM).
	bash interop/run $(INTEROP)

RACEPKGS := ./link/... ./xdp/... ./afpacket/... ./bpf/... ./internal/... ./qp/... ./roce/... ./nic/... ./examples/... ./stream/... ./cm/... ./mad/...

.PHONY: test-go
test-go: ## The Go steps of `make test`: every benchmark once, the race run, every test (root for most).
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1x -timeout 10m $(PKGS) >/dev/null
	@echo "benchmarks: each ran once, ok"
	CGO_ENABLED=1 $(GO) test -count=1 -race -short -timeout 15m $(RACEPKGS)
	XROCE_1GIB=1 $(GO) test -count=1 -timeout 20m $(PKGS)

STRESS_RUNS ?= 5
STRESS_CPUS ?= 2

.PHONY: test-stress
test-stress: deps build ## `make test-go` STRESS_RUNS times (5) in a row while STRESS_CPUS (2) busy loops keep every core busy; not in CI.
	@pids=""; trap 'kill $$pids 2>/dev/null' EXIT INT TERM; \
	for i in $$(seq $(STRESS_CPUS)); do yes >/dev/null & pids="$$pids $$!"; done; \
	echo "stress: $(STRESS_CPUS) busy loops (pids$$pids)"; \
	for r in $$(seq $(STRESS_RUNS)); do \
		t0=$$(date +%s); echo "stress: run $$r of $(STRESS_RUNS)"; \
		$(MAKE) --no-print-directory test-go || { echo "stress: run $$r of $(STRESS_RUNS) failed"; exit 1; }; \
		echo "stress: run $$r of $(STRESS_RUNS) passed in $$(( $$(date +%s) - t0 )) s"; \
	done; \
	echo "stress: $(STRESS_RUNS) passed, 0 failed"

.PHONY: test-short
test-short: ## Unit tests only (no root needed; root-only tests skip).
	$(GO) test -short -count=1 $(PKGS)

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 20s).
	@for pkg in $$($(GO) list $(PKGS)); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "fuzz $$pkg $$f"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) $$pkg || exit 1; \
		done; \
	done

.PHONY: fuzz-long
fuzz-long: ## Every fuzz target for FUZZLONG each (default 10m), for runs outside CI; stops at the first crasher, which lands in testdata/fuzz.
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZLONG)

.PHONY: bench
bench: ## Run the benchmarks (BENCH=regexp, BENCHTIME=1s) and print them.
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -benchmem $(PKGS)

.PHONY: bench-report
bench-report: ## xroce vs TCP (iperf3, sockperf) on a veth pair, MTU 1500 and 9000, as a markdown table (root, about 2 min).
	$(GO) run ./internal/benchreport -time 3s

.PHONY: bench-paths
bench-paths: ## Every user path of the working tree beside its anchors (2 rounds, about 10 min, root), compared with docs/bench-paths.txt, the last committed run; prints each figure that moved by over 20%.
	bash internal/benchreport/sidebyside.sh -record 2 >/tmp/xroce-bench-paths.txt
	$(GO) run ./internal/benchpaths -new "$$(sed -n 's/^sidebyside: record \([^,]*\),.*/\1/p' /tmp/xroce-bench-paths.txt)" docs/bench-paths.txt /tmp/xroce-bench-paths.txt
	@echo "bench-paths: this run in /tmp/xroce-bench-paths.txt; commit it as docs/bench-paths.txt when it is the new reference"

.PHONY: bench-report-quick
bench-report-quick: ## The same, MTU 1500 only, 1 s per test.
	$(GO) run ./internal/benchreport -mtu 1500 -time 1s

.PHONY: demo
demo: demo-deps build ## The main job: RDMA between two namespaces (tour, loss, bandwidth, latency), then its pcap checked.
	./$(BIN) lab --pcap lab.pcap
	./$(BIN) dump -q lab.pcap

INTEROP ?= default

.PHONY: interop
interop: ## Interop with Linux rxe in a QEMU VM (root; INTEROP=default|all|MODES; default = selftest,loss,tap,xroce,xloss,cm,cmloss).
	bash interop/run $(INTEROP)

# The version release-check publishes: version.Version unless RELEASE_VERSION=v... says otherwise.
RELEASE_VERSION ?= $(shell sed -n 's/^const Version = "\(.*\)"$$/\1/p' cmd/xroce/internal/version/version.go)

.PHONY: release-check
release-check: ## go install .../cmd/xroce@RELEASE_VERSION from a clean GOPATH through a file proxy holding HEAD's module zip (not in CI).
	@set -e; tmp=$$(mktemp -d); \
	trap 'GOPATH=$$tmp/gopath GOMODCACHE= $(GO) clean -modcache 2>/dev/null; rm -rf $$tmp' EXIT; \
	test -z "$$(git status --porcelain --untracked-files=no)" || echo "release-check: uncommitted changes are not in HEAD's zip"; \
	mkdir $$tmp/src; git archive --format=tar HEAD | tar -x -C $$tmp/src; \
	(cd internal/modproxy && $(GO) run . -src $$tmp/src -version $(RELEASE_VERSION) -time $$(git log -1 --format=%cI HEAD) -o $$tmp/proxy); \
	proxy="file://$$tmp/proxy,$$($(GO) env GOPROXY)"; \
	echo "release-check: GOPATH=$$tmp/gopath GOPROXY=$$proxy go install github.com/xroce/xroce/cmd/xroce@$(RELEASE_VERSION)"; \
	cd $$tmp && GOPATH=$$tmp/gopath GOMODCACHE= GOBIN= GOFLAGS=-mod=mod GOPROXY=$$proxy GONOSUMDB=github.com/xroce/xroce GOSUMDB=off \
		CGO_ENABLED=0 $(GO) install github.com/xroce/xroce/cmd/xroce@$(RELEASE_VERSION); \
	line=$$($$tmp/gopath/bin/xroce version); echo "release-check: $$line"; \
	mod=$$($(GO) version -m $$tmp/gopath/bin/xroce | awk '$$1 == "mod" { print $$2 "@" $$3 }'); \
	test "$$mod" = github.com/xroce/xroce@$(RELEASE_VERSION) || { echo "release-check: the binary was built from $$mod"; exit 1; }; \
	$$tmp/gopath/bin/xroce help >/dev/null; \
	echo "release-check: ok, go install github.com/xroce/xroce/cmd/xroce@$(RELEASE_VERSION) works from a clean GOPATH"

.PHONY: clean
clean: ## Remove build output.
	rm -rf bin
