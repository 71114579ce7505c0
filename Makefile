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

# Debian's interpreter: the one python3-pytest and python3-numpy install for.
PYTHON    ?= $(shell [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)
CC        ?= cc

.PHONY: all build deps test alert-rules demo demo-layerwise demo-disagg demo-disagg-ucx demo-redis demo-redis-faults bench diagrams fuzz lint clean device-check proptest-long mutants fakecuda report-screenshots \
	lib lib-testkit python abi-test abi-valgrind bench-abi bench-smoke api-doc

all: build

build:
	$(GO) build $(PKGS)

## deps: install the system packages the tests need (redis-server), or name the command that does.
deps:
	./scripts/deps.sh

## test: vet, then every package under the race detector, then `kvready simulate
## --layerwise` (demo-layerwise), then the C ABI (abi-test), then the alert rules through
## promtool (alert-rules), then, where Chromium is installed (as in CI: .ci/run installs
## it), the report in a real browser (report-screenshots).
test: deps
	$(GO) vet $(PKGS)
	$(GO) vet -tags kvready_testkit ./cabi
	$(GO) test -race -count=1 $(PKGS)
	$(GO) test -race -count=1 -tags kvready_testkit ./cabi
	$(MAKE) bench-smoke
	$(MAKE) demo-layerwise
	$(MAKE) abi-test
	$(MAKE) alert-rules
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then \
		$(MAKE) report-screenshots; \
	else \
		echo "make test: no Chromium here, so the report is checked without a browser only (simulate's report tests); .ci/run installs Debian's chromium and runs make report-screenshots"; \
	fi

## alert-rules: docs/alert-rules.yml checked by Prometheus's own promtool (Debian's
## prometheus package; make deps installs it): the rules load (promtool check rules) and
## the unit tests of docs/alert-rules.test.yml pass (promtool test rules: series in,
## the alerts that must fire, and only those, out).
alert-rules:
	promtool check rules docs/alert-rules.yml
	promtool test rules docs/alert-rules.test.yml

## bench-smoke: every benchmark once (-benchtime=1x), so that one that no longer runs its
## path (the lifecycle changed under it, a goroutine left behind) fails make test, not
## only make bench.
bench-smoke:
	$(GO) test -count=1 -run='^$$' -bench=. -benchtime=1x $(PKGS)

## lib: the C ABI: bin/libkvready.so (go build -buildmode=c-shared ./cabi) and bin/kvready.h,
## the documented header every exported function is compiled against (cgo's own
## generated header is dropped: it would say the same, undocumented). It links no
## test code (cabi TestShippedBinariesLinkNoTestCode).
lib:
	@mkdir -p bin
	$(GO) build -buildmode=c-shared -o bin/libkvready.so ./cabi
	cp cabi/kvready.h bin/kvready.h
	rm -f bin/libkvready.h

## lib-testkit: the test library, bin/libkvready_testkit.so: the same sources built with
## -tags kvready_testkit, so libkvready.so plus the conformance kit
## (kvready_conformance_check), the in-library benchmark and the fault backends
## (instant:, mem:?mode=M). The Python tests and make bench-abi load it; C declares its
## extra functions with -DKVREADY_TESTKIT. One library per process: never both.
lib-testkit: lib
	$(GO) build -tags kvready_testkit -buildmode=c-shared -o bin/libkvready_testkit.so ./cabi
	rm -f bin/libkvready_testkit.h

## python: the Python package with its libraries inside (python/kvready/libkvready.so, which
## it loads, and libkvready_testkit.so, loaded only with KVREADY_LIBRARY=testkit, for
## kvready.conformance), and a wheel built offline into bin/ (python3 -m build
## --no-isolation, Debian's python3-build).
python: lib lib-testkit
	cp bin/libkvready.so python/kvready/libkvready.so
	cp bin/libkvready_testkit.so python/kvready/libkvready_testkit.so
	rm -rf python/build python/kvready.egg-info
	cd python && $(PYTHON) -m build --no-isolation --wheel --outdir ../bin . >/dev/null
	rm -rf python/build python/kvready.egg-info
	@ls bin/kvready-*.whl

## abi-test: the C ABI from C (cabi/testdata/abi_test.c compiled with cc against
## bin/kvready.h, linked with the production bin/libkvready.so) and from Python (the
## pytest suite in python/tests, over the test library bin/libkvready_testkit.so, and
## the production library in subprocesses: the package, the README's C and Python
## programs, examples/python/manager.py over a real redis-server), with cgo's pointer
## checks on.
abi-test: lib lib-testkit python
	$(CC) -O1 -g -Wall -Wextra -Werror -pthread -o bin/abi_test cabi/testdata/abi_test.c -Ibin -Lbin -lkvready -Wl,-rpath,'$$ORIGIN'
	GODEBUG=cgocheck=1 bin/abi_test
	GODEBUG=cgocheck=1 CC=$(CC) KVREADY_LIBRARY=$(CURDIR)/bin/libkvready_testkit.so $(PYTHON) -m pytest -q -p no:cacheprovider python/tests

## abi-valgrind: the C test program (bin/abi_test, as abi-test builds it) under valgrind's
## memcheck with cabi/testdata/go-runtime.supp, the suppressions for the Go runtime's own
## noise inside libkvready.so: it fails on any error left (every one would be the C
## program's) and on a leak of memory the program allocated. About a minute; needs
## valgrind (apt-get install valgrind); not part of make test.
abi-valgrind: lib
	$(CC) -O1 -g -Wall -Wextra -Werror -pthread -o bin/abi_test cabi/testdata/abi_test.c -Ibin -Lbin -lkvready -Wl,-rpath,'$$ORIGIN'
	GODEBUG=cgocheck=1 valgrind --error-exitcode=1 --errors-for-leak-kinds=definite,indirect --leak-check=full \
		--suppressions=cabi/testdata/go-runtime.supp bin/abi_test

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

## demo-layerwise: the main job layer by layer (SPEC §4 rule 16): `kvready simulate
## --layerwise` over the defaults' faults, 500 requests, each fetch's forward pass computed
## layer by layer on the simulated device beside the whole-lease baseline. It exits 1 if the
## checker finds a layer read before its copy landed; prints the layer-by-layer rows and
## the checker's. make test runs it (about a second).
demo-layerwise:
	$(GO) run ./cmd/kvready simulate --layerwise --requests 500 | sed -n '/^layer by layer/,$$p'

## demo-disagg: the main job's story told for disaggregated serving (SPEC §2 "Peer
## transfers", issue #41): prefill processes write each request's KV cache peer to peer into
## the decode side's pages over the simulated network, with every fault it has (writers that
## fail and write on, never report or post after their DONE; DONEs lost, masked, duplicated,
## replayed; reports before data; restarted peers whose puts still land; cancels, deadlines).
## `kvready simulate --disagg --compare-naive`: the engine over backend/peer's Receiver beside an
## engine per prefill host lending its staging slots to backend/peer's Sender, then managers
## that free the pages and the source slots on the transfer's outcome; one workload, one
## checker of the pages and the source slots. It exits 1 if the checker finds anything in
## kvready's run; the naive run's violations are the demonstration. The report is written to
## bin/report-disagg/index.html. About 2 s.
demo-disagg:
	$(GO) run ./cmd/kvready simulate --disagg --compare-naive --report bin/report-disagg

## demo-disagg-ucx: demo-disagg between two real processes over UCX (issue #42 item 3;
## libucx-dev, which make deps installs): `kvready simulate --disagg --transport ucx
## --compare-naive`, over tcp, then over shared memory (--ucx-tls sm). This process is the
## decode manager; the prefill process is kvready re-executed, its Sender putting from slots
## it lends, addresses on its pipes, offers, pages and reports over UCX (Checked mode). The
## prefill is killed mid-transfer (SIGKILL) and restarted as a new incarnation that replays
## the dead life's last offers with their keys (vLLM #55470), and paused past the deadline
## (SIGSTOP, SIGCONT). It exits 1 if the checker finds anything in kvready's run; the naive
## run's landed bytes are the demonstration. Reports in bin/report-disagg-ucx-{tcp,sm}.
## About 10 s. make test does not run it: the same runs are cmd/kvready's and simulate's
## tests (TestSimulateDisaggOverUCX, TestDisaggOverUCX), which it does run.
demo-disagg-ucx:
	$(GO) run ./cmd/kvready simulate --disagg --transport ucx --compare-naive --report bin/report-disagg-ucx-tcp
	$(GO) run ./cmd/kvready simulate --disagg --transport ucx --ucx-tls sm --compare-naive --report bin/report-disagg-ucx-sm

## report-screenshots: render the pages of the demo's report in headless Chromium
## (Debian's chromium, installed here when missing) to PNGs in bin/report-screenshots/,
## each page at 1280 and 760 pixels wide, and check in the same browser what a person
## checks (scripts/report-check.js): plots fit the page width, no legend covers data or
## is clipped, one colour per legend label across the pages; then that each of four
## faults put into a copy of the report fails those checks. make test runs it when
## Chromium is present.
report-screenshots:
	GO=$(GO) ./scripts/report-screenshots.sh

## demo-redis: two KV cache managers, each with its own local tier, one store. Starts a
## throwaway redis-server on a free loopback port, runs `kvready simulate --backend
## 'mem?capacity=256KiB,redis://...'` twice (two processes, one after the other), prints
## both summaries and each tier's hits — the second is served what the first published, by
## Redis at first, then mostly by its own local tier once warm; it fails otherwise — and
## stops the server, on failure too. Not part of `make test`.
demo-redis:
	GO=$(GO) ./scripts/demo-redis.sh

## demo-redis-faults: a store that dies and pauses costs requests, never slots. Starts a
## throwaway redis-server on a free loopback port, runs `kvready simulate --backend redis://...`
## (its real-time defaults), SIGKILLs the server a fifth of the way through and restarts it on
## the same port, pauses it (CLIENT PAUSE) for longer than the deadline half way through, then
## prints the summary and fails unless the run exited 0 with the pool whole and requests served
## again. Bounded (every wait has a timeout); stops the server on failure too.
demo-redis-faults:
	GO=$(GO) ./scripts/demo-redis-faults.sh

## bench: every benchmark with allocations, in one run; the SPEC §5 figures as ratios
## go to docs/performance.md (with the machine, date and Go version). The benchmarks
## whose figures swing most on a shared machine (the lifecycle through the runner's
## goroutines, one transition, concurrent callers, the served masks, the CUDA copy, the real
## store, the tee's copy, the tiers, the UCX transfers beside ucx_perftest between two processes) run BENCHCOUNT times more,
## and every figure is the median of its runs.
BENCHCOUNT ?= 5
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) -timeout=40m $(PKGS) | tee bench.out
	$(GO) test -run='^$$' -bench='^(BenchmarkTransition|BenchmarkLifecycle|BenchmarkWake|BenchmarkConcurrentCallers|BenchmarkServedMasks|BenchmarkCUDACopyEvent|BenchmarkRedisFetch|BenchmarkRedisPublish|BenchmarkRedisLeases|BenchmarkTeeCopy|BenchmarkTiers|BenchmarkUCXTransfer)$$' -benchmem \
		-benchtime=$(BENCHTIME) -count=$(BENCHCOUNT) -timeout=40m ./fsm/ ./readiness/ ./staging/ ./gpu/cuda/ ./backend/redis/ ./backend/tiers/ ./internal/ucxfigure/ | tee -a bench.out
	$(GO) run ./internal/benchreport < bench.out > docs/performance.md
	@grep -A14 '^## SPEC' docs/performance.md
	$(MAKE) bench-abi

## bench-abi: the C ABI's SPEC §5 figures, side by side in one run each: a lifecycle driven
## from C against the same lifecycle driven in Go (cabi/testdata/bench.c), and from Python
## against the same lifecycle driven in Go inside the same library (python/bench/lifecycle.py);
## the C program takes turns with the Go program's BenchmarkLifecycle/engine-256, 5 each, so
## that the SPEC's C ratio compares runs measured side by side;
## written to docs/performance-abi.md, which docs/performance.md links.
bench-abi: lib-testkit
	$(CC) -O2 -Wall -Wextra -Werror -DKVREADY_TESTKIT -o bin/abi_bench cabi/testdata/bench.c -Ibin -Lbin -lkvready_testkit -Wl,-rpath,'$$ORIGIN'
	$(GO) test -c -o bin/lifecycle.test ./readiness/
	rm -f bin/abi_bench.out bin/abi_go.out
	for i in 1 2 3 4 5; do \
		bin/lifecycle.test -test.run='^$$' -test.bench='^BenchmarkLifecycle/engine-256$$' -test.benchtime=$(BENCHTIME) >> bin/abi_go.out || exit 1; \
		bin/abi_bench >> bin/abi_bench.out || exit 1; \
	done
	KVREADY_LIBRARY=$(CURDIR)/bin/libkvready_testkit.so $(PYTHON) python/bench/lifecycle.py --c-results bin/abi_bench.out --go-bench bin/abi_go.out > docs/performance-abi.md
	@cat docs/performance-abi.md

## diagrams: regenerate the state diagrams and docs/states.md from the table.
## SVG is rendered in pure Go (Graphviz compiled to WebAssembly): nothing to install.
## `make test` fails (cmd/kvready TestGeneratedDocsAreFresh) when these are stale.
diagrams:
	@mkdir -p docs/diagrams
	$(GO) run ./cmd/kvready diagram --format mermaid --out docs/diagrams/lifecycle.mmd
	$(GO) run ./cmd/kvready diagram --format dot --out docs/diagrams/lifecycle.dot
	$(GO) run ./cmd/kvready diagram --format svg --out docs/diagrams/lifecycle.svg
	$(GO) run ./cmd/kvready diagram --format markdown --out docs/states.md

## api-doc: regenerate docs/api.md, the embedder's API on one page, from the doc comments.
## `make test` fails (internal/apidoc TestAPIDocIsFresh) when it is stale.
api-doc:
	$(GO) run ./internal/apidoc > docs/api.md

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
	rm -rf bin python/kvready/libkvready.so python/kvready/libkvready_testkit.so python/build python/kvready.egg-info
