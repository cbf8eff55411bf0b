# redmap — `make help` lists the targets.
GO        ?= go
FUZZTIME  ?= 5s
CHAOS     ?= 10m
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
REVIVE      := github.com/mgechev/revive@v1.11.0
# The packages whose tests take longest, named first so that go test starts
# them first and the quick ones fill the other core around them.
SLOWEST := ./manager ./worker ./cmd/redmap
FUZZ_TARGETS := codec:FuzzDecodeTask codec:FuzzDecodeResult codec:FuzzDecodeElements codec:FuzzDecodeValue codec:FuzzIntsMatchMsgpack worker:FuzzTaskPath manager:FuzzResultPath internal/broker/redisbroker:FuzzDecodeRecords internal/broker/wire:FuzzExpandRanges

.PHONY: help docs test test-unit test-cluster fuzz lint bench demo chaos chaos-cluster redis-server screenshot

help: ## list the targets
	@awk -F':.*## ' '/^[a-z-]+:.*## /{printf "  %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

test: redis-server ## go test -race ./... (every test: the process-level suites too), and beside it deploy/'s manifests and image (a module of its own, mostly waiting on podman); make fuzz fuzzes
	@log=$$(mktemp); (cd deploy && $(GO) test -count=1 ./... >$$log 2>&1; echo $$? >$$log.rc) & \
	$(GO) test -race -count=1 -timeout 45m -parallel 4 $(SLOWEST) ./...; rc=$$?; \
	wait; echo "== $$(date -u +%T) deploy (run beside)"; cat $$log; drc=$$(cat $$log.rc); rm -f $$log $$log.rc; \
	[ $$rc = 0 ] && [ $$drc = 0 ]

test-unit: redis-server ## go test -short -race ./...: make test without the tests that start processes (workers, a Cluster, Sentinels) or run a minute of faults, nor deploy/ or fuzz; one package: go test -short -parallel 8 ./manager
	$(GO) test -short -race -count=1 -parallel 8 ./...

test-cluster: redis-server ## the manager, worker and cache suites again, on a local 3-master Redis Cluster, then with every queue over 3 shards
	REDMAP_TEST_REDIS=cluster $(GO) test -race -count=1 -timeout 45m -parallel 4 ./manager ./worker ./cache
	REDMAP_TEST_REDIS=cluster REDMAP_TEST_SHARDS=3 $(GO) test -race -count=1 -timeout 45m -parallel 4 ./manager ./worker
	REDMAP_TEST_SHARDS=3 $(GO) test -race -count=1 -timeout 45m -parallel 4 ./cmd/redmap

docs: ## draw docs/architecture.svg again from internal/picture (TestPicture checks it is up to date)
	REDMAP_WRITE_DOCS=1 $(GO) test -count=1 -run '^TestPicture$$' .

screenshot: redis-server ## regenerate docs/dashboard.png, docs/dashboard-phone.png, docs/dashboard-history.png, docs/dashboard-busy.png (the browser tests' screenshots of a live fleet) and docs/tracing.png (one traced batch of the squares example)
	REDMAP_SCREENSHOT=$(CURDIR)/docs/dashboard.png $(GO) test -count=1 -run '^TestDashboardInBrowser$$' -v ./dashboard
	REDMAP_SCREENSHOT_LAYOUT=$(CURDIR)/docs/dashboard-busy.png $(GO) test -count=1 -run '^TestDashboardLayoutInBrowser$$' -v ./dashboard
	REDMAP_SCREENSHOT_HISTORY=$(CURDIR)/docs/dashboard-history.png $(GO) test -count=1 -run '^TestDashboardHistoryInBrowser$$' -v ./dashboard
	REDMAP_SCREENSHOT_TRACE=$(CURDIR)/docs/tracing.png $(GO) test -count=1 -run '^TestExamplesExportOverOTLP$$' -v ./otlp

fuzz: ## run every fuzz target (package:target) for FUZZTIME (make fuzz FUZZTIME=5m); a run that fails with no failing input written (golang/go#75804) runs once more
	@for pt in $(FUZZ_TARGETS); do \
		p=$${pt%%:*}; t=$${pt#*:}; \
		echo "fuzz ./$$p $$t for $(FUZZTIME)"; \
		before=$$(ls $$p/testdata/fuzz/$$t 2>/dev/null | wc -l); \
		log=$$(mktemp); \
		if $(GO) test ./$$p -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) >$$log 2>&1; then cat $$log; rm -f $$log; continue; fi; \
		if [ "$$(ls $$p/testdata/fuzz/$$t 2>/dev/null | wc -l)" != "$$before" ]; then cat $$log; rm -f $$log; exit 1; fi; \
		echo "fuzz $$t: the first try ended with no failing input written (go1.26's deadline race, golang/go#75804); its output, indented:"; \
		sed 's/^/    first try: /' $$log; rm -f $$log; \
		echo "fuzz $$t: once more"; \
		$(GO) test ./$$p -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

lint: ## gofmt, go vet, staticcheck, and revive (every exported name documented)
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd deploy && $(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(REVIVE) -config revive.toml -set_exit_status ./...

bench: redis-server ## run the benchmark against the hand-written baselines (make bench BENCHFLAGS=-quick)
	$(GO) run ./bench $(BENCHFLAGS)

demo: ## run the quickstart on an embedded Redis
	$(GO) run ./examples/quickstart

redis-server: ## install redis-server if it is missing (apt-get as root), or say how
	@command -v redis-server >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing redis-server with apt-get"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
		else \
			echo "redis-server is missing; install it (sudo apt-get install -y redis-server, or brew install redis) and run make test again"; \
			exit 1; \
		fi; }

chaos: redis-server ## random faults (workers, Redis, Sentinel) under load for CHAOS (10m); report lost, duplicated, wrong, zero
	REDMAP_CHAOS=$(CHAOS) $(GO) test ./manager -run '^TestChaos$$' -count=1 -v -timeout 30m

chaos-cluster: redis-server ## random faults (masters killed and failed over, slots migrated, workers) on a Cluster with replicas for CHAOS (10m)
	REDMAP_CHAOS_CLUSTER=$(CHAOS) $(GO) test ./manager -run '^TestChaosCluster$$' -count=1 -v -timeout 30m
