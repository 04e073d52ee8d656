# Baton — build, test, demo, bench. Needs Go and Node.js/npm; `make tools` installs the pinned
# Azurite from package-lock.json into node_modules (tests and the demo start it themselves).

GO      ?= go
GOOS    ?= $(shell $(GO) env GOOS)
GOARCH  ?= $(shell $(GO) env GOARCH)
BIN     ?= baton
# Fuzz time per target in `make test` (CI); raise it for a longer local hunt.
FUZZTIME ?= 5s

.PHONY: all build tools browser test vet unit fuzz demo bench clean

all: build

# The custom handler binary named by host.json (customHandler.description.defaultExecutablePath).
build:
	CGO_ENABLED=0 GOOS=$(GOOS) GOARCH=$(GOARCH) $(GO) build -trimpath -o $(BIN) ./handler

# npm writes node_modules/.package-lock.json on install: reinstall only when the lock changes.
tools: node_modules/.package-lock.json
node_modules/.package-lock.json: package.json package-lock.json
	@command -v npm >/dev/null || { echo "npm not found: install Node.js 20+ and npm (e.g. apt-get install -y nodejs npm)"; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './node_modules/*'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...

# The dashboard's headless-browser check (handler TestDashboard_Browser) needs Debian's
# chromium: installed here when missing (as root, e.g. on CI), and required by `make unit`.
browser:
	@bash scripts/ensure-chromium.sh >/dev/null

unit: tools browser
	BATON_REQUIRE_BROWSER=1 $(GO) test -race -count=1 -timeout 12m ./...

# Each fuzz target runs for FUZZTIME on its checked-in seed corpus and beyond.
fuzz:
	@set -e; for spec in $$($(GO) run ./internal/fuzzlist .); do \
		pkg=$${spec%%:*}; fn=$${spec##*:}; \
		echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

test: vet unit fuzz

demo: tools build
	$(GO) run ./cmd/devhost demo -exe ./$(BIN)

# Benchmarks against Azurite (BENCHMARKS.md; about 17 minutes on 2 cores). Each entry is
# package:benchmarks:-benchtime, sized to the benchmark's unit of work (documented on it); add new
# benchmarks here. The raw output goes to BENCH_OUT; the tables printed at the end are the ones in
# BENCHMARKS.md. Benchmarks never fail on a number, but a benchmark that fails (the system
# misbehaved) fails the target after every entry ran.
BENCH_OUT ?= dist/bench.txt
BENCH_RUNS = \
	./coordinator/:BlobLock:200x \
	./coordinator/:Tick_Enqueue10000:1x \
	./work/:Worker_StorageCallsPerPartition:2000x \
	./work/:TryFinish_10000:1x \
	./transport/:QueueSender:3x \
	./handler/:API_ListRuns:10x \
	./bench/:.:1x
bench: tools
	@mkdir -p $(dir $(BENCH_OUT))
	@$(GO) run ./bench/cmd/benchtable machine | tee $(BENCH_OUT)
	@for spec in $(BENCH_RUNS); do \
		pkg=$${spec%%:*}; rest=$${spec#*:}; re=$${rest%%:*}; bt=$${rest##*:}; \
		cmd="go test -run '^\$$' -bench '$$re' -benchtime $$bt -count=1 -timeout 60m $$pkg"; \
		echo "$$cmd" | tee -a $(BENCH_OUT); \
		{ $(GO) test -run '^$$' -bench "$$re" -benchtime $$bt -count=1 -timeout 60m $$pkg 2>&1; echo "exit status $$?"; } \
			| tee -a $(BENCH_OUT); \
	done
	@echo; $(GO) run ./bench/cmd/benchtable $(BENCH_OUT)

clean:
	rm -rf $(BIN) dist
