# kvready — see README.md. Every target runs on a fresh machine with Go and gcc.
SHELL     := /bin/bash
.SHELLFLAGS := -o pipefail -ec
GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 10s
BENCHTIME ?= 1s
# The property suites' budget in CI: sequences per property (see docs/testing.md).
RAPID_CHECKS ?= 300
export RAPID_CHECKS
# go-nvml's cgo preamble uses deprecated NVML declarations: silence exactly that
# warning (and keep Go's default -O2 -g), nothing broader.
CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
export CGO_CFLAGS

.PHONY: all build deps test demo demo-redis bench diagrams fuzz lint clean device-check proptest-long mutants fakecuda report-screenshots

all: build

build:
	$(GO) build $(PKGS)

## deps: install the system packages the tests need (redis-server), or name the command that does.
deps:
	./scripts/deps.sh

## test: vet, then every package under the race detector.
test: deps
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 $(PKGS)

## proptest-long: the property suite with ten times the CI budget, and longer sequences.
proptest-long:
	RAPID_CHECKS=$$(( $(RAPID_CHECKS) * 10 )) RAPID_STEPS=100 $(GO) test -race -count=1 ./proptest/...

## mutants: break each safety guard of the engine in turn (source patches compiled from an overlay);
## the suite must catch every one. Prints N/N mutants killed; fails if one survives.
mutants:
	RAPID_CHECKS=$(RAPID_CHECKS) GO=$(GO) $(GO) run ./proptest/mutants

## demo: the main job. The engine's run must show both safety counters at 0 (the
## command exits 1 otherwise); the naive run, on the same workload in the same
## process, shows the corruption kvready prevents. The HTML report (both runs,
## safety over time first) is written to bin/report/index.html.
demo:
	$(GO) run ./cmd/kvready profile validate docs/examples/profile.json
	$(GO) run ./cmd/kvready simulate --compare-naive --report bin/report

## report-screenshots: render the pages of the demo's report in headless Chromium
## (Debian's chromium, installed here only when missing; never by `make test`) to
## PNGs in bin/report-screenshots/, each page at 1280 and 760 pixels wide.
report-screenshots:
	GO=$(GO) ./scripts/report-screenshots.sh

## demo-redis: two KV cache managers, one store. Starts a throwaway redis-server on a
## free loopback port, runs `kvready simulate --backend redis://...` twice (two processes,
## one after the other), prints both summaries — the second is served what the first
## published — and stops the server, on failure too.
demo-redis:
	GO=$(GO) ./scripts/demo-redis.sh

## bench: every benchmark with allocations, in one run; the SPEC §5 figures as ratios
## go to docs/performance.md (with the machine, date and Go version). The benchmarks
## whose figures swing most on a shared machine (the lifecycle through the runner's
## goroutines, one transition, the served masks) run BENCHCOUNT times more, and every figure is the
## median of its runs.
BENCHCOUNT ?= 5
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) $(PKGS) | tee bench.out
	$(GO) test -run='^$$' -bench='^(BenchmarkTransition|BenchmarkLifecycle|BenchmarkWake|BenchmarkServedMasks|BenchmarkCUDACopyEvent)$$' -benchmem \
		-benchtime=$(BENCHTIME) -count=$(BENCHCOUNT) ./fsm/ ./readiness/ ./staging/ ./gpu/cuda/ | tee -a bench.out
	$(GO) run ./internal/benchreport < bench.out > docs/performance.md
	@grep -A14 '^## SPEC' docs/performance.md

## diagrams: regenerate the state diagrams and docs/states.md from the table.
## SVG is rendered in pure Go (Graphviz compiled to WebAssembly): nothing to install.
## `make test` fails (cmd/kvready TestGeneratedDocsAreFresh) when these are stale.
diagrams:
	@mkdir -p docs/diagrams
	$(GO) run ./cmd/kvready diagram --format mermaid --out docs/diagrams/lifecycle.mmd
	$(GO) run ./cmd/kvready diagram --format dot --out docs/diagrams/lifecycle.dot
	$(GO) run ./cmd/kvready diagram --format svg --out docs/diagrams/lifecycle.svg
	$(GO) run ./cmd/kvready diagram --format markdown --out docs/states.md

## fuzz: a short run of every fuzz target in the module.
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) ./scripts/fuzz.sh

## fakecuda: the fake CUDA driver (C, no CUDA headers) as bin/libfakecuda.so; the tests
## build their own copy. `kvready simulate --device cuda --cuda-library bin/libfakecuda.so`.
fakecuda: bin/libfakecuda.so

bin/libfakecuda.so: gpu/cuda/fakedriver/fakecuda.c
	@mkdir -p bin
	$${CC:-gcc} -O2 -Wall -Wextra -shared -fPIC -pthread -o $@ $<

## device-check: the whole CUDA path on a machine with a GPU and its driver (GPU 0,
## libcuda.so.1; CUDA_LIBRARY=... to use another): gpu/cuda's device tests, the engine
## end to end, `kvready simulate --device cuda --requests 20000` with its checker, an
## NVML health read. Prints a summary; fails if any step fails (see docs/gpu.md).
device-check:
	GO=$(GO) ./scripts/device-check.sh

lint:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

clean:
	$(GO) clean -testcache
	rm -rf bin
