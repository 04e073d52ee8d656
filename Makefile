# Baton — build, test, demo, bench. Needs Go and Node.js/npm; `make tools` installs the pinned
# Azurite from package-lock.json into node_modules (tests and the demo start it themselves).

GO      ?= go
GOOS    ?= $(shell $(GO) env GOOS)
GOARCH  ?= $(shell $(GO) env GOARCH)
BIN     ?= baton
# Fuzz budget per target in `make test` (CI): a count of generated inputs, not a duration. Go
# 1.26's fuzz coordinator can fail a duration-bounded run with a bare "context deadline
# exceeded" when the time is up while a worker is busy (seen on a loaded 2-core machine; fixed
# in Go 1.27); a count never starts that deadline. Raise it for a longer local hunt.
FUZZTIME ?= 10000x

.PHONY: all build tools browser test vet vulncheck api unit fuzz examples demo bench bench-smoke bench-scale soak clean

all: build

# The custom handler binary named by host.json (customHandler.description.defaultExecutablePath).
build:
	CGO_ENABLED=0 GOOS=$(GOOS) GOARCH=$(GOARCH) $(GO) build -trimpath -o $(BIN) ./handler

# npm writes node_modules/.package-lock.json on install: reinstall only when the lock changes.
# --ignore-scripts: no package's install script runs (Azurite needs none).
tools: node_modules/.package-lock.json
node_modules/.package-lock.json: package.json package-lock.json
	@command -v npm >/dev/null || { echo "npm not found: install Node.js 20+ and npm (e.g. apt-get install -y nodejs npm)"; exit 1; }
	npm ci --ignore-scripts --no-audit --no-fund --loglevel=error

# vet: the static gate `make test` runs first; with warm caches it takes about 10 s on 2 cores, most
# of it govulncheck's call-graph analysis (the first staticcheck run on a cold cache takes ~30 s):
# gofmt; go.mod/go.sum and the tools module's must be what `go mod tidy` makes them; go vet;
# staticcheck (its default checks: all but the doc-comment and naming style ones); vulncheck. Both
# tools are pinned in DEVTOOLS_MOD, a module of their own, so that an app requiring Baton never has
# them in its module graph; `go tool -modfile` builds them from it (bump: cd
# internal/tools/devtools && go get -tool <pkg>@<version> && go mod tidy).
DEVTOOLS_MOD = internal/tools/devtools/go.mod
vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './node_modules/*'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	@d=$$($(GO) mod tidy -diff 2>&1) || { echo "go.mod/go.sum are not tidy (run go mod tidy and commit the result):"; echo "$$d"; exit 1; }
	@d=$$($(GO) -C $(dir $(DEVTOOLS_MOD)) mod tidy -diff 2>&1) || { echo "$(DEVTOOLS_MOD) is not tidy (run go mod tidy in $(dir $(DEVTOOLS_MOD)) and commit the result):"; echo "$$d"; exit 1; }
	$(GO) vet ./...
	$(GO) tool -modfile=$(DEVTOOLS_MOD) staticcheck ./...
	@$(MAKE) --no-print-directory vulncheck

# vulncheck: govulncheck on ./..., offline. vuln.go.dev is out of reach here and on CI, but the
# golang.org/x/vulndb module on the Go module proxy carries the OSV entries (data/osv) that
# vuln.go.dev is built from (only their modified/published dates, taken from git, are unset);
# VULNDB_VERSION pins it, and that module's cmd/indexdb writes the index govulncheck reads
# (-db file://...) once per version into VULNDB_CACHE (about 7 s; 40 MB).
# Bump: go list -m -f '{{.Version}}' golang.org/x/vulndb@latest. GOVULNDB=https://vuln.go.dev
# scans against the live database instead. A vulnerability reached in a required module fails;
# one in the standard library fails only with VULNCHECK_STDLIB=fail, else prints a notice: its
# fix is a newer Go toolchain, which the machine provides, not the module. A database that
# cannot be downloaded or read fails the check: no scan is no proof; so does a clean scan against
# a file:// database whose index/modules.json lists no vulnerability (an empty database passes
# any code).
VULNDB_VERSION ?= v0.0.0-20261105234957-e22db6528018
VULNDB_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/baton-vulndb
GOVULNDB ?=
VULNCHECK_STDLIB ?= warn
vulncheck:
	@set -u; db='$(GOVULNDB)'; \
	if [ -z "$$db" ]; then \
		dir='$(VULNDB_CACHE)/$(VULNDB_VERSION)'; \
		if [ ! -f "$$dir/index/db.json" ]; then \
			if ! err=$$($(GO) mod download golang.org/x/vulndb@$(VULNDB_VERSION) 2>&1); then \
				echo "govulncheck: golang.org/x/vulndb@$(VULNDB_VERSION) cannot be downloaded, so nothing was scanned: $$(echo "$$err" | head -n 1)"; \
				exit 1; \
			fi; \
			src=$$($(GO) list -m -f '{{.Dir}}' golang.org/x/vulndb@$(VULNDB_VERSION)) || exit 1; \
			echo "indexing golang.org/x/vulndb@$(VULNDB_VERSION) into $$dir"; \
			mkdir -p '$(VULNDB_CACHE)' && tmp=$$(mktemp -d '$(VULNDB_CACHE)/tmp.XXXXXX') || exit 1; \
			$(GO) run golang.org/x/vulndb/cmd/indexdb@$(VULNDB_VERSION) -vulns "$$src/data/osv" -out "$$tmp/db" \
				|| { rm -rf "$$tmp"; exit 1; }; \
			mv -T "$$tmp/db" "$$dir" 2>/dev/null || test -f "$$dir/index/db.json" || { rm -rf "$$tmp"; exit 1; }; \
			rm -rf "$$tmp"; \
		fi; \
		db="file://$$dir"; \
	fi; \
	echo "$(GO) tool -modfile=$(DEVTOOLS_MOD) govulncheck -db $$db ./..."; \
	out=$$($(GO) tool -modfile=$(DEVTOOLS_MOD) govulncheck -db "$$db" ./... 2>&1); rc=$$?; \
	if [ $$rc -eq 0 ]; then \
		case "$$db" in file://*) \
			n=$$(cat "$${db#file://}/index/modules.json" 2>/dev/null | grep -o '"id"' | wc -l); \
			if [ "$$n" -eq 0 ]; then \
				echo "govulncheck: the vulnerability database $$db holds no entries (its index/modules.json lists no vulnerability), so the clean scan proves nothing"; \
				exit 1; \
			fi;; \
		esac; \
		echo "govulncheck: no known vulnerability is reached"; exit 0; \
	fi; \
	if [ $$rc -ne 3 ] || [ '$(VULNCHECK_STDLIB)' = fail ] || echo "$$out" | grep -q '^  Module: '; then \
		echo "$$out"; exit 1; \
	fi; \
	echo "$$out" | awk '/^Vulnerability #/ { id = $$3; t = ""; title = 1; next } \
		/^  More info:/ { title = 0 } \
		title { s = $$0; sub(/^ +/, "", s); t = t (t == "" ? "" : " ") s } \
		/^ *Fixed in: / { print "  " id " (fixed in " $$NF "): " t }'; \
	fix=$$(echo "$$out" | sed -n 's/^ *Fixed in: .*@//p' | sort -V | tail -n 1); \
	echo "NOTICE: govulncheck: the standard library of $$($(GO) env GOVERSION) has the known vulnerabilities above reached by this code, all fixed in $$fix: build with that Go or newer (VULNCHECK_STDLIB=fail makes this fail vet)"

# api: rewrites api/baton.txt, the record of the public API (every exported identifier of the
# packages an app imports, with its signature). internal/tools/apirecord's test fails while the
# record and the code differ: run this after an intended API change and commit the result.
api:
	$(GO) run ./internal/tools/apirecord

# The dashboard's headless-browser check (internal/app TestDashboard_Browser) needs Debian's
# chromium: installed here when missing (as root, e.g. on CI), and required by `make unit`.
# The e2e package includes the short chaos soak (TestSoak, docs/reliability.md, both timer
# modes side by side): about 1.5 minutes when every promise holds, more when it finds
# violations and waits out their bounds; the per-package timeout leaves room for that.
browser:
	@bash scripts/ensure-chromium.sh >/dev/null

unit: tools browser
	BATON_REQUIRE_BROWSER=1 $(GO) test -race -count=1 -timeout 20m ./...

# Each fuzz target runs its checked-in seed corpus, then FUZZTIME (a count, or a duration) beyond it.
fuzz:
	@set -e; for spec in $$($(GO) run ./internal/tools/fuzzlist .); do \
		pkg=$${spec%%:*}; fn=$${spec##*:}; \
		echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

# The example apps (examples/*/, each its own module written by `baton init`): build, vet, their
# own tests (batontest) and `go tool baton check` (their generated files are what this Baton
# writes). `make unit` runs each end to end under the local host (package examples).
EXAMPLES := $(patsubst %/go.mod,%,$(wildcard examples/*/go.mod))
examples:
	@set -e; for d in $(EXAMPLES); do \
		echo "example $$d"; \
		(cd $$d && $(GO) build -o /dev/null . && $(GO) vet ./... && $(GO) test -count=1 ./... && $(GO) tool baton check); \
	done

# Every benchmark in ./internal/bench once on a small amount of work (-short): they check what they
# measure (one winner per election, every partition sent and queued, every run finished), so a
# change that breaks one fails here rather than in the next `make bench`. About 3 minutes; run
# after the unit tests, not beside them.
bench-smoke: tools
	$(GO) test -short -run '^$$' -bench . -benchtime 1x -count=1 -timeout 20m ./internal/bench/

test: vet unit fuzz examples bench-smoke

# The demo's control endpoint takes a free loopback port, so demos (and `devhost run`s) run side
# by side; it is printed and announced in .baton/devhost/, where `go run ./cmd/devhost ctl list`
# finds it. DEVHOST_CONTROL=127.0.0.1:<port> (make variable or environment) pins it; "" turns it off.
DEVHOST_CONTROL ?= 127.0.0.1:0
# TRACES=1 also builds and starts the pinned Jaeger (JAEGER_MOD, a module of its own, so an app
# never has it in its module graph; the first build takes about 5 minutes) on its default
# loopback ports: the handlers export their traces and metrics to it over OTLP/HTTP (4318), and
# the demo prints the run's trace from Jaeger's query service (16686: its JSON API, since the
# module carries a placeholder instead of the UI's assets), as BATON_TRACE_URL links the
# dashboard's run page to it. Jaeger stops with the demo; its log is in dist/jaeger.log.
JAEGER_MOD = internal/tools/jaeger/go.mod
JAEGER_BIN = dist/jaeger
demo: tools build
	@set -e; if [ -n "$(TRACES)" ]; then \
		mkdir -p dist; \
		echo "building the pinned Jaeger ($(JAEGER_MOD))"; \
		$(GO) build -modfile=$(JAEGER_MOD) -o $(JAEGER_BIN) github.com/jaegertracing/jaeger/cmd/jaeger; \
		./$(JAEGER_BIN) > dist/jaeger.log 2>&1 & jaeger=$$!; \
		trap 'kill $$jaeger 2>/dev/null' EXIT INT TERM; \
		for i in $$(seq 100); do curl -fs -o /dev/null http://127.0.0.1:16686/ && break; sleep 0.2; done; \
		echo "Jaeger (pid $$jaeger): traces at http://127.0.0.1:16686/api/traces/<trace ID>"; \
		export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_SERVICE_NAME=baton-demo \
			BATON_TRACE_URL='http://127.0.0.1:16686/api/traces/{trace}'; \
	fi; \
	$(GO) run ./cmd/devhost demo -exe ./$(BIN) -job inventory -control '$(DEVHOST_CONTROL)'

# Benchmarks against Azurite (BENCHMARKS.md; about 25 minutes on 2 cores). Each entry is
# package:benchmarks[!skipped]:-benchtime, sized to the benchmark's unit of work (documented on
# it); add new benchmarks here. The raw output goes to BENCH_OUT; the tables printed at the end are the ones in
# BENCHMARKS.md. Benchmarks never fail on a number, but a benchmark that fails (the system
# misbehaved) fails the target after every entry ran.
BENCH_OUT ?= dist/bench.txt
BENCH_RUNS = \
	./internal/engine/election/bloblease/:BlobLock:200x \
	./coordinator/:Plan_Enqueue10000:1x \
	./coordinator/:Heartbeat_ActiveRuns:1x \
	./work/:Worker_StorageCallsPerPartition:2000x \
	./work/:TryFinish_10000:1x \
	./internal/engine/transport/storagequeue/:QueueSender:3x \
	./internal/app/:API_ListRuns:10x \
	./internal/bench/:.!^Benchmark\(Scale\|Throughput\)$$:1x
bench: tools
	@mkdir -p $(dir $(BENCH_OUT))
	@$(GO) run ./internal/bench/cmd/benchtable machine | tee $(BENCH_OUT)
	@for spec in $(BENCH_RUNS); do \
		pkg=$${spec%%:*}; rest=$${spec#*:}; re=$${rest%%:*}; bt=$${rest##*:}; skip=; \
		case "$$re" in *'!'*) skip=$${re#*!}; re=$${re%%!*};; esac; \
		echo "go test -run '^\$$' -bench '$$re'$${skip:+ -skip '$$skip'} -benchtime $$bt -count=1 -timeout 60m $$pkg" | tee -a $(BENCH_OUT); \
		{ $(GO) test -run '^$$' -bench "$$re" $${skip:+-skip "$$skip"} -benchtime $$bt -count=1 -timeout 60m $$pkg 2>&1; echo "exit status $$?"; } \
			| tee -a $(BENCH_OUT); \
	done
	@echo; $(GO) run ./internal/bench/cmd/benchtable $(BENCH_OUT)

# Runs of any size (BENCHMARKS.md), not part of `make bench`: BenchmarkThroughput (Azurite's raw
# rate for one partition's calls, then 3,000-partition runs on 1, 2 and 4 instances with and
# without waves, as a percentage of that limit; about 10 minutes), then BenchmarkScale (one
# synthetic no-op run of 10,000 and one of 100,000 partitions end to end on 4 handler instances
# through a call-counting proxy, a progress line every 10 s; 20-40 minutes on a loaded 2-core
# machine, nearly all of it the 100,000 run). BENCH_SCALE_SIZES=100000 runs one size only. The
# raw output goes to BENCH_SCALE_OUT.
BENCH_SCALE_OUT ?= dist/bench-scale.txt
BENCH_SCALE_SIZES ?= 10000,100000
BENCH_SCALE_RUNS = ./internal/bench/:^BenchmarkThroughput$$:1x ./internal/bench/:^BenchmarkScale$$:1x
bench-scale: tools
	@mkdir -p $(dir $(BENCH_SCALE_OUT))
	@$(GO) run ./internal/bench/cmd/benchtable machine | tee $(BENCH_SCALE_OUT)
	@for spec in $(BENCH_SCALE_RUNS); do \
		pkg=$${spec%%:*}; rest=$${spec#*:}; re=$${rest%%:*}; bt=$${rest##*:}; \
		echo "BENCH_SCALE_SIZES=$(BENCH_SCALE_SIZES) go test -run '^\$$' -bench '$$re' -benchtime $$bt -count=1 -timeout 0 $$pkg" | tee -a $(BENCH_SCALE_OUT); \
		{ BENCH_SCALE_SIZES=$(BENCH_SCALE_SIZES) $(GO) test -run '^$$' -bench "$$re" -benchtime $$bt -count=1 -timeout 0 $$pkg 2>&1; echo "exit status $$?"; } \
			| tee -a $(BENCH_SCALE_OUT); \
	done
	@echo; $(GO) run ./internal/bench/cmd/benchtable $(BENCH_SCALE_OUT)

# The long chaos soak (docs/reliability.md): the e2e app's schedules under random faults for
# SOAK_OCCURRENCES periods of 5 s in each timer mode (all, one; side by side), then the history
# checker. The seed is random unless SOAK_SEED is set and is printed first; replay a failure
# with SOAK_SEED=<seed> [SOAK_MODES=one] make soak. About 9.5 minutes for 100 periods on 2
# cores. `make test` runs a short fixed-seed soak (e2e TestSoak) by default.
SOAK_OCCURRENCES ?= 100
SOAK_SEED ?=
SOAK_MODES ?= all,one
soak: tools
	SOAK_OCCURRENCES=$(SOAK_OCCURRENCES) SOAK_SEED=$(SOAK_SEED) SOAK_MODES=$(SOAK_MODES) \
		$(GO) test -count=1 -v -run '^TestSoak$$' -timeout 0 ./internal/e2e/

clean:
	rm -rf $(BIN) dist
