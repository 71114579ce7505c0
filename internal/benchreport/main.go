// Command benchreport turns `go test -bench -benchmem` output into
// docs/performance.md: the SPEC §5 figures as ratios measured in one run, each
// against its goal, then every benchmark measured.
//
//	go test -run='^$' -bench=. -benchmem ./... | go run ./internal/benchreport > docs/performance.md
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

func main() {
	rep, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	if len(rep.order) == 0 {
		fmt.Fprintln(os.Stderr, "benchreport: no benchmark results in the input")
		os.Exit(1)
	}
	render(os.Stdout, rep, time.Now().UTC(), runtime.Version(), runtime.NumCPU())
}

// figure is one SPEC §5 target: how it is computed and what it must reach.
type figure struct {
	what    string
	value   func(*report) (float64, bool)
	unit    string
	goal    string
	met     func(float64) bool
	measure string // the benchmarks it comes from
}

// sideBySide is the lifecycle's shapes measured beside each other
// (readiness/bench_test.go, lifecycleSideBySide): the runner's SPEC §5
// ratios to the core.
const sideBySide = "BenchmarkLifecycle/side-by-side"

func ratio(num, numUnit, den, denUnit string) func(*report) (float64, bool) {
	return func(r *report) (float64, bool) {
		a, ok1 := r.metric(num, numUnit)
		b, ok2 := r.metric(den, denUnit)
		if !ok1 || !ok2 || b == 0 {
			return 0, false
		}
		return a / b, true
	}
}

// copyBound is the most a rate through a stack can reach, beside alone's
// (benchmark alone's metric aloneUnit, MB/s), when a step that moves the same
// bytes at step's rate (MB/s) is added, in series, to every operation:
// 1 / (1 + alone/step).
func copyBound(alone, aloneUnit, step string) func(*report) (float64, bool) {
	return func(r *report) (float64, bool) {
		a, ok1 := r.metric(alone, aloneUnit)
		c, ok2 := r.metric(step, "MB/s")
		if !ok1 || !ok2 || c == 0 {
			return 0, false
		}
		return 1 / (1 + a/c), true
	}
}

func value(name, unit string) func(*report) (float64, bool) {
	return func(r *report) (float64, bool) { return r.metric(name, unit) }
}

var figures = []figure{
	{"one transition: looplab Event ÷ compiled table", ratio("BenchmarkTransition/looplab", "ns/op", "BenchmarkTransition/table", "ns/op"),
		"×", "≥ 50×", func(v float64) bool { return v >= 50 }, "BenchmarkTransition"},
	{"lease lifecycle: looplab transitions alone ÷ the core driven synchronously", ratio("BenchmarkLifecycle/looplab", "ns/op", "BenchmarkLifecycle/core", "ns/op"),
		"×", "≥ 30×", func(v float64) bool { return v >= 30 }, "BenchmarkLifecycle"},
	{"lease lifecycle: the core ÷ bare table (atomic state), in view", ratio("BenchmarkLifecycle/core", "ns/op", "BenchmarkLifecycle/table", "ns/op"),
		"×", "≤ 10×", func(v float64) bool { return v <= 10 }, "BenchmarkLifecycle"},
	{"lease lifecycle: the runner, 256 leases in flight a round ÷ the core", value(sideBySide, "x-engine-256"),
		"×", "≤ 1.1×", func(v float64) bool { return v <= 1.1 }, sideBySide},
	{"lease lifecycle: the same, the first round of each way's four (right after another way's), in view", value(sideBySide, "x-engine-256-cold"),
		"×", "—", nil, sideBySide},
	{"lease lifecycle: the runner, one lease in flight ÷ the core", value(sideBySide, "x-engine"),
		"×", "≤ 1.5×", func(v float64) bool { return v <= 1.5 }, sideBySide},
	{"lease lifecycle: the core driven one lease a round ÷ the core (256 a round), in view", value(sideBySide, "x-core-one"),
		"×", "—", nil, sideBySide},
	{"lease lifecycle: the runner, one lease in flight ÷ the core driven one lease a round, in view", value(sideBySide, "x-engine-core-one"),
		"×", "—", nil, sideBySide},
	{"lease lifecycle: goroutine hand-offs per lease, the runner (proofs answered inline)", value("BenchmarkLifecycle/engine", "handoffs/op"),
		"hand-offs/lease", "≤ 1", func(v float64) bool { return v <= 1 }, "BenchmarkLifecycle/engine"},
	{"lease lifecycle: a Quiesce that may block (worker path), 256 in flight ÷ the core, in view", ratio("BenchmarkLifecycle/engine-256-worker", "ns/op", "BenchmarkLifecycle/core", "ns/op"),
		"×", "—", nil, "BenchmarkLifecycle"},
	{"lease lifecycle: a Quiesce that may block (worker path), one in flight ÷ the core, in view", ratio("BenchmarkLifecycle/engine-worker", "ns/op", "BenchmarkLifecycle/core", "ns/op"),
		"×", "—", nil, "BenchmarkLifecycle"},
	{"owner woken after a backend's answer ÷ a bare channel ping-pong", ratio("BenchmarkWake/engine", "ns/op", "BenchmarkWake/channel", "ns/op"),
		"×", "≤ 2×", func(v float64) bool { return v <= 2 }, "BenchmarkWake"},
	{"lease lifecycle: allocations, the core", value("BenchmarkLifecycle/core", "allocs/op"),
		"allocs/lease", "0", func(v float64) bool { return v == 0 }, "BenchmarkLifecycle/core"},
	{"lease lifecycle: allocations, the runner (256 in flight)", value("BenchmarkLifecycle/engine-256", "allocs/op"),
		"allocs/lease", "0", func(v float64) bool { return v == 0 }, "BenchmarkLifecycle/engine-256"},
	{"lease lifecycle: allocations, the runner (one in flight)", value("BenchmarkLifecycle/engine", "allocs/op"),
		"allocs/lease", "0", func(v float64) bool { return v == 0 }, "BenchmarkLifecycle/engine"},
	{"engine state per staging slot, 8-row leases", value("BenchmarkSlotMemory/rows=8", "B/slot"),
		"B/slot", "≤ 64", func(v float64) bool { return v <= 64 }, "BenchmarkSlotMemory/rows=8"},
	{"engine state per staging slot, 1-row leases", value("BenchmarkSlotMemory/rows=1", "B/slot"),
		"B/slot", "≤ 64", func(v float64) bool { return v <= 64 }, "BenchmarkSlotMemory/rows=1"},
	{"idle progress round: 1,000,000 in flight ÷ 1,000", ratio("BenchmarkProgressIdle/inflight=1000000", "ns/op", "BenchmarkProgressIdle/inflight=1000", "ns/op"),
		"×", "≤ 2×", func(v float64) bool { return v <= 2 }, "BenchmarkProgressIdle"},
	{"served masks per name at 4096 names", value("BenchmarkServedMasks/4096", "ns/name"),
		"ns/name", "≤ 20", func(v float64) bool { return v <= 20 }, "BenchmarkServedMasks/4096"},
	{"served masks ÷ bare map lookup of the served set", ratio("BenchmarkServedMasks/4096", "ns/name", "BenchmarkServedMasks/4096/maplookup", "ns/name"),
		"×", "≤ 1.5×", func(v float64) bool { return v <= 1.5 }, "BenchmarkServedMasks"},
	{"main job: leases/s at 200,000 requests ÷ at 20,000", ratio("BenchmarkScale/requests=200000", "leases/s", "BenchmarkScale/requests=20000", "leases/s"),
		"×", "≥ 0.8×", func(v float64) bool { return v >= 0.8 }, "BenchmarkScale"},
	{"concurrent callers (rule 18): leases/s with 8 goroutines calling one engine ÷ with one", value("BenchmarkConcurrentCallers/side-by-side", "x-callers-8"),
		"×", "≥ 0.8×", func(v float64) bool { return v >= 0.8 }, "BenchmarkConcurrentCallers/side-by-side"},
	{"metrics: engine with a Prometheus collector ÷ engine", value(sideBySide, "x-metrics"),
		"×", "≤ 1.05×", func(v float64) bool { return v <= 1.05 }, sideBySide},
	{"main job: peak live heap at 200,000 requests ÷ at 20,000", ratio("BenchmarkScale/requests=200000", "MiB-peak", "BenchmarkScale/requests=20000", "MiB-peak"),
		"×", "≤ 1.5×", func(v float64) bool { return v <= 1.5 }, "BenchmarkScale"},
	{"copy + event record + query: gpu/cuda on the fake driver ÷ gpu/sim", ratio("BenchmarkCUDACopyEvent/cuda", "ns/op", "BenchmarkCUDACopyEvent/sim", "ns/op"),
		"×", "≤ 3×", func(v float64) bool { return v <= 3 }, "BenchmarkCUDACopyEvent"},
	{"readiness with sliding windows ÷ full attention, 4 groups × 512 blocks", ratio("BenchmarkReadinessWindows/groups=4,blocks=512", "ns/op", "BenchmarkReadiness/groups=4,blocks=512", "ns/op"),
		"×", "≤ 2×", func(v float64) bool { return v <= 2 }, "BenchmarkReadinessWindows"},
	{"readiness with sliding windows: allocations", value("BenchmarkReadinessWindows/groups=4,blocks=512", "allocs/op"),
		"allocs/op", "0", func(v float64) bool { return v == 0 }, "BenchmarkReadinessWindows"},
}

// redisRows are the row sizes of BenchmarkRedisFetch, BenchmarkRedisPublish
// and BenchmarkRedisLeases (backend/redis/bench_test.go).
var redisRows = []string{"64KiB", "512KiB", "2MiB"}

func init() {
	// SPEC §5: the backend against the best bare client, go-redis or
	// rueidis, each moving the same keys and values its fastest way,
	// measured lease by lease (BenchmarkRedisLeases reports x-best): one
	// after another, as BenchmarkRedisFetch and BenchmarkRedisPublish run
	// them, each way meets the load of its own second, which on a shared
	// machine swings by more than the gaps measured.
	for _, bench := range []struct {
		op, what, refs string
	}{
		{"fetch", "Fetch", "MGET, zero-copy GET, rueidis streamed GET"},
		{"publish", "Publish", "MSET, SET NX, rueidis MSET, rueidis SET NX"},
	} {
		for _, row := range redisRows {
			name := "BenchmarkRedisLeases/" + bench.op + "/row=" + row
			figures = append(figures, figure{
				what:    fmt.Sprintf("a real store, %s rows: backend/redis %s ÷ the best bare client (%s; MB/s, lease by lease)", row, bench.what, bench.refs),
				value:   value(name, "x-best"),
				unit:    "×",
				goal:    "≥ 0.9×",
				met:     func(v float64) bool { return v >= 0.9 },
				measure: name,
			})
		}
	}
	// Tiers (SPEC §4 rule 19, §5): a local hit beside backend/mem alone, and
	// a fetch Redis serves through the stack beside backend/redis alone
	// (backend/tiers/bench_test.go).
	figures = append(figures,
		figure{
			what:    "tiers: a fetch served by the local tier ÷ the same fetch through backend/mem alone (per lease, through the runner, round by round)",
			value:   value("BenchmarkTiers/local", "x-hit"),
			unit:    "×",
			goal:    "≤ 1.1×",
			met:     func(v float64) bool { return v <= 1.1 },
			measure: "BenchmarkTiers/local",
		},
		figure{
			what:    "tiers: the same, the first round of each way's four (right after the other way's), in view",
			value:   value("BenchmarkTiers/local", "x-hit-cold"),
			unit:    "×",
			goal:    "—",
			measure: "BenchmarkTiers/local",
		},
		figure{
			what:    "tiers: the same with 64KiB rows (a KV block a lease, its copy into staging on both ways), in view",
			value:   value("BenchmarkTiers/local/row=64KiB", "x-hit"),
			unit:    "×",
			goal:    "—",
			measure: "BenchmarkTiers/local/row=64KiB",
		},
		figure{
			what:    "tiers: allocations of a local hit ÷ backend/mem alone, in view",
			value:   ratio("BenchmarkTiers/local", "allocs/lease-hit", "BenchmarkTiers/local", "allocs/lease-alone"),
			unit:    "×",
			goal:    "—",
			measure: "BenchmarkTiers/local",
		})
	// Each Redis way of the tier figure is measured side by side with
	// backend/redis alone, in one sub-benchmark (internal/sidebyside), which
	// reports every way's ratio to alone: the figure is the median of the
	// runs' own ratios.
	for _, row := range redisRows {
		name := "BenchmarkTiers/redis/row=" + row
		figures = append(figures, figure{
			what:    fmt.Sprintf("tiers: a fetch served by Redis through the tiers (a local miss, promoted) ÷ backend/redis alone, %s rows (MB/s, side by side)", row),
			value:   value(name, "x-promoted"),
			unit:    "×",
			goal:    "≥ 0.9×",
			met:     func(v float64) bool { return v >= 0.9 },
			measure: name,
		}, figure{
			what:    fmt.Sprintf("tiers: the same, the first lease of each way's three (right after another way's), %s rows, in view", row),
			value:   value(name, "x-promoted-cold"),
			unit:    "×",
			goal:    "—",
			measure: name,
		}, figure{
			what:    fmt.Sprintf("tiers: the most the tee's copy lets it reach, in series with the fetch, %s rows: 1 ÷ (1 + alone MB/s ÷ tee copy MB/s), in view", row),
			value:   copyBound(name, "MB/s-alone", "BenchmarkTeeCopy/row="+row),
			unit:    "×",
			goal:    "—",
			measure: "BenchmarkTeeCopy/row=" + row,
		}, figure{
			what:    fmt.Sprintf("tiers: the same without promotion ÷ backend/redis alone, %s rows (MB/s, side by side), in view", row),
			value:   value(name, "x-unpromoted"),
			unit:    "×",
			goal:    "—",
			measure: name,
		}, figure{
			what:    fmt.Sprintf("tiers: the same with the copy after the fetch (a lower tier that does not tee) ÷ backend/redis alone, %s rows (MB/s, side by side), in view", row),
			value:   value(name, "x-copied"),
			unit:    "×",
			goal:    "—",
			measure: name,
		}, figure{
			what:    fmt.Sprintf("tiers: the most a lower tier that does not tee can reach, the copy after the fetch in series, %s rows: 1 ÷ (1 + alone MB/s ÷ promotion MB/s), in view", row),
			value:   copyBound(name, "MB/s-alone", "BenchmarkTiers/promotion/row="+row),
			unit:    "×",
			goal:    "—",
			measure: "BenchmarkTiers/promotion/row=" + row,
		})
	}
	// In view: the publication beside SET NX per key, what content addresses
	// need (a stored unit is never rewritten and keeps its expiry) and what
	// the backend sends with a TTL; without one it sends MSETNX a run.
	for _, row := range redisRows {
		name := "BenchmarkRedisLeases/publish/row=" + row
		figures = append(figures, figure{
			what:    fmt.Sprintf("a real store, %s rows: backend/redis Publish ÷ bare pipelined SET NX of the same keys (MB/s, lease by lease), in view", row),
			value:   value(name, "x-bare-setnx"),
			unit:    "×",
			goal:    "—",
			measure: name,
		})
	}
}

func render(w io.Writer, r *report, now time.Time, goVersion string, cpus int) {
	fmt.Fprintln(w, "# Performance")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Generated by `make bench`: one `go test -bench -benchmem` run of every benchmark, then")
	fmt.Fprintln(w, "more runs of those whose figures swing most on a shared machine (one transition, the lifecycle,")
	fmt.Fprintln(w, "concurrent callers, the served masks, the CUDA copy, the real store, the tiers, the UCX transfers); each figure is the median of its runs, and each ratio")
	fmt.Fprintln(w, "compares benchmarks measured side by side. Ratios mean more than absolute times. Do not edit by hand.")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- date: %s\n- machine: %s/%s, %d CPUs, %s\n- Go: %s\n\n",
		now.Format("2006-01-02 15:04 UTC"), r.env["goos"], r.env["goarch"], cpus, orDash(r.env["cpu"]), goVersion)
	fmt.Fprintln(w, "The C ABI's figures (a lifecycle driven from C and from Python) are measured by `make")
	fmt.Fprintln(w, "bench-abi`, outside `go test`: see [performance-abi.md](performance-abi.md).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## SPEC §5 figures")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| figure | measured | goal | met | from |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- |")
	for _, f := range figures {
		v, ok := f.value(r)
		if !ok {
			fmt.Fprintf(w, "| %s | not measured | %s | — | `%s` |\n", f.what, f.goal, f.measure)
			continue
		}
		met := "no"
		switch {
		case f.met == nil: // in view, no goal
			met = "—"
		case f.met(v):
			met = "yes"
		}
		fmt.Fprintf(w, "| %s | %s %s | %s | %s | `%s` |\n", f.what, num(v), f.unit, f.goal, met, f.measure)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Notes: every lifecycle figure is per whole one-row fetch lifecycle on the simulated device,")
	fmt.Fprintln(w, "with a zero-allocation backend. `core` is the I/O-free core (`readiness.Core`) driven")
	fmt.Fprintln(w, "synchronously, 256 leases a round; `engine-256` is the runner users embed (`readiness.Engine`)")
	fmt.Fprintln(w, "with 256 leases in flight a round, over a backend that answers its proof without blocking")
	fmt.Fprintln(w, "(`contract.QuiesceProber`, as backend/mem and backend/redis do): the proof is asked on the owner")
	fmt.Fprintln(w, "and copy events are queried there (SPEC §4 rule 14); `engine` has one lease in flight (the")
	fmt.Fprintln(w, "latency case), and `core-one` is the core driven by the same hand as `core` one lease a round, the")
	fmt.Fprintln(w, "shape `engine` runs in. The runner's ratios to the core, and the collector's to the runner, are")
	fmt.Fprintln(w, "measured side by side (`BenchmarkLifecycle/side-by-side`): `core`, `engine-256`, `engine-metrics`,")
	fmt.Fprintln(w, "`core-one` and `engine` take turns, each a block of four operations of 256 leases (one round of")
	fmt.Fprintln(w, "256, or 256 rounds of one), the order rotating, and each ratio is of the ways' median operations")
	fmt.Fprintln(w, "after the first of each block (`-cold`: the first, right after another way's). Run one after")
	fmt.Fprintln(w, "another as sub-benchmarks of their own, which give the absolute ns/op and allocations, the same")
	fmt.Fprintln(w, "shapes read `engine-256` ÷ `core` from 1.05 to 1.39 between quiet `make bench` runs with no")
	fmt.Fprintln(w, "code change; side by side, 1.12–1.19 in three runs on 2026-12-04.")
	fmt.Fprintln(w, "Concurrent callers likewise (`BenchmarkConcurrentCallers/side-by-side`): one caller and eight")
	fmt.Fprintln(w, "goroutines on one engine take turns, each operation 256 whole lifecycles (Lend, Wait, Release),")
	fmt.Fprintln(w, "blocks of four; the sub-benchmarks `callers=1` and `callers=8` give each its own leases/s.")
	fmt.Fprintln(w, "`-worker` is the same backend without its probe: every proof a blocking Quiesce")
	fmt.Fprintln(w, "on a worker goroutine, paid per round (256) or per lease (one). `handoffs/op` counts goroutine")
	fmt.Fprintln(w, "hand-offs per lease (`Stats.Handoffs`). `BenchmarkWake` is a notifying")
	fmt.Fprintln(w, "backend's answer waking the owner, beside a bare channel ping-pong between two goroutines. The bare")
	fmt.Fprintln(w, "table is the SPEC §5 anchor: a `[state][event]` array with an atomic state word, transitions")
	fmt.Fprintln(w, "only. `BenchmarkScale` is `kvready simulate` with its defaults, checker on; `MiB-peak` is")
	fmt.Fprintln(w, "the peak of live heap objects sampled during the run. `B/slot` counts the engine's own state (lease")
	fmt.Fprintln(w, "records, lifecycle state, allocator, timers, tables); `B/slot-total` adds the row")
	fmt.Fprintln(w, "descriptors it keeps for the caller (names, view, extent units, masks), which the heap")
	fmt.Fprintln(w, "profile attributes (every allocation sampled) to the functions that build them. Those include")
	fmt.Fprintln(w, "the lease's body struct, 192 of whose 560 bytes are engine state, not descriptors (the first")
	fmt.Fprintln(w, "answer, the outcome's reason and interval, the cancel answer, the proof, copy and admission")
	fmt.Fprintln(w, "bookkeeping, six clock times): counted in, they would add 192 B/slot at one row a lease and 24")
	fmt.Fprintln(w, "at eight (`TestBodyEngineStateIsDocumented` holds these numbers to the struct).")
	fmt.Fprintln(w, "What `B/slot` is made of at one row a lease, per lease in flight (every table grows by a sixteenth,")
	fmt.Fprintln(w, "about 5% on top): the core's record (state, marks, latches, kind, result) 12 bytes, and the lease's")
	fmt.Fprintln(w, "generation, 4, kept once: the allocator reads the core's column of generations")
	fmt.Fprintln(w, "(`staging.Allocator.NameTicketsBy`) and the runner's attempt table names a lease by its id; the")
	fmt.Fprintln(w, "allocator's state and run, 9; the timer (its time, its lease, the lease's place in the heap), 16;")
	fmt.Fprintln(w, "the runner's attempt, an interface, 16, and four bits. A record finds its body by its index (chunks")
	fmt.Fprintln(w, "of 32 bodies) and holds no pointer to it. Until issue #40 the generation was kept three times")
	fmt.Fprintln(w, "(record, allocator, attempt table) and each record pointed to its body: 78.7 B/slot.")
	fmt.Fprintln(w, "What the runner adds to the core (issue #40, measured beside it on this shared machine in the owner")
	fmt.Fprintln(w, "thread's CPU time, medians of 3,000 alternating chunks, and counted in instructions with callgrind):")
	fmt.Fprintln(w, "with one lease in flight each lease is a round of its own, and the core itself, driven by hand one")
	fmt.Fprintln(w, "lease a round on the same simulated device, costs about 1.3× its lease at 256 a round (not for a")
	fmt.Fprintln(w, "round's fixed work, under 1% of its instructions, but for its whole code fetched again each lease: the fourth")
	fmt.Fprintln(w, "pass below); on top of that the")
	fmt.Fprintln(w, "runner takes its lock four times a lease (Lend, Progress, Release and the benchmark's Count after")
	fmt.Fprintln(w, "the round: rule 18), reads the clock once a round, checks the row's device address through the")
	fmt.Fprintln(w, "stream (Lend: the device's lock and a lookup), guards every backend call against a panic and hands")
	fmt.Fprintln(w, "each answer through the core's door. In instructions (before the changes below) `engine` was")
	fmt.Fprintln(w, "1.27× the core and `engine-256` 1.08×; beyond them the time went mostly to clock reads, 70–110 ns")
	fmt.Fprintln(w, "each on this virtual machine (`time.Now`). Since the last note the runner's default clock reads")
	fmt.Fprintln(w, "the monotonic clock alone (one read a round, not `time.Now`'s two), the simulated device at zero")
	fmt.Fprintln(w, "latency reads no clock for its copies, events and queries (it read one for each, three a one-lease")
	fmt.Fprintln(w, "round), and the benchmark's owner counts once a round, after it, as the C and Python owners do (it")
	fmt.Fprintln(w, "also counted before it):")
	fmt.Fprintln(w, "`engine` ÷ core went from 1.70 to 1.58, `engine-256` from 1.17 to 1.14, side by side. What is left")
	fmt.Fprintln(w, "of `engine`, 1.22× the core's own one-lease round: the four locks (Count's alone about 2%), the")
	fmt.Fprintln(w, "clock read and the device address check (about 2% each), and the runner's own instructions (the")
	fmt.Fprintln(w, "guards, the attempt table, the proofs' batch, the Ready loop), none of them above 2%; of")
	fmt.Fprintln(w, "`engine-256`, the locks of Lend and Release, the address check (2%) and the same instructions per")
	fmt.Fprintln(w, "lease.")
	fmt.Fprintln(w, "Issue #40 item 4 (measured beside the tree before it on this shared machine, load 1.4–7 from other")
	fmt.Fprintln(w, "sessions: process CPU time differenced between runs of 250,000 and 20,000 leases, medians of 9")
	fmt.Fprintln(w, "alternating runs; wall-clock ns/op, medians of 6, agreed within 3%): the core's door took each step")
	fmt.Fprintln(w, "the table fired as a returned value, a step and an error too wide for Go's result registers,")
	fmt.Fprintln(w, "written to the stack in narrow stores and read back whole at once — a load the processor cannot")
	fmt.Fprintln(w, "serve from stores still in flight, so it waits for them, several times a lease. `fsm.Table.FireTo`,")
	fmt.Fprintln(w, "`CompleteTo` and `RedeliverTo` now write the door's step in place. The same wait was paid once a")
	fmt.Fprintln(w, "lease on the kept ring's entry, the submission's Ready entry, the runner's submission result and")
	fmt.Fprintln(w, "re-poll evidence, and on every copy and event the simulated device queued: all written in place")
	fmt.Fprintln(w, "now. Rings wrap by a comparison, not a 64-bit division (the allocator's line, the kept ring,")
	fmt.Fprintln(w, "`gpu.Completions`, the simulated stream); a served fetch's interval is computed once, at its")
	fmt.Fprintln(w, "copies, not again at its answer; the simulated device finds an address without a comparison")
	fmt.Fprintln(w, "closure. The core went to 0.83× its cost, `engine` to 0.94×, `engine-256` to 0.88×: `engine` ÷ core")
	fmt.Fprintln(w, "from 1.54 to 1.73, `engine-256` ÷ core from 1.11 to 1.17, side by side. The runner's cost above the")
	fmt.Fprintln(w, "core did not shrink with it (with one lease in flight about 470 ns a lease, with 256 about 110), so")
	fmt.Fprintln(w, "its ratios rose as the core fell. It is made of what the paragraph above lists: per round the")
	fmt.Fprintln(w, "clock read (33–60 ns on this virtual machine) and the device's lock to record and query the event;")
	fmt.Fprintln(w, "per lease the engine's lock four times (16–20 ns a lock and unlock), the device address check, the")
	fmt.Fprintln(w, "guarded backend calls, the attempt table and the door's wrapper, none above 2% alone.")
	fmt.Fprintln(w, "A second pass on issue #40 item 4 (measured beside the tree before it on this shared machine, load")
	fmt.Fprintln(w, "5–8 from other sessions: the owner thread's CPU time per lease in alternating chunks of 2,048")
	fmt.Fprintln(w, "leases, medians of 400 chunks a run and of 5 alternating runs; instructions counted with callgrind")
	fmt.Fprintln(w, "over the measured loop alone): the event after a round's copies is recorded and queried in one")
	fmt.Fprintln(w, "device call (`gpu.RecordQuerier`, which gpu/sim's stream is: one hold of the device's lock a")
	fmt.Fprintln(w, "round, not two; asked only when no older copy event is pending, its answer taken as a `Query`'s);")
	fmt.Fprintln(w, "the default clock is read as nanoseconds, without building a `time.Time` for `Tick` to take apart;")
	fmt.Fprintln(w, "Ready work most Readys hold none of (overdue calls, cancels, forgotten attempts, containments,")
	fmt.Fprintln(w, "recoveries) is passed by with one test, and a Ready without copies skips the copy queue; a")
	fmt.Fprintln(w, "submission and its attempt's first Poll share one panic guard; `Lend` asks the stream about its")
	fmt.Fprintln(w, "rows before taking the engine's lock (no instruction saved: a caller checking its rows no longer")
	fmt.Fprintln(w, "holds up the others). Instructions per lease: `engine` 16,004 → 15,635 (−2.3%), `engine-256`")
	fmt.Fprintln(w, "unchanged within callgrind's noise here (±0.5%: the collector's work lands in the loop); `engine`")
	fmt.Fprintln(w, "÷ core 1.72 → 1.66, `engine-256` ÷ core 1.160 → 1.143, the core's own cost unchanged within the")
	fmt.Fprintln(w, "noise. Wall-clock ns/op swung up to 3× at that load; in a quiet quarter hour after it (load")
	fmt.Fprintln(w, "0.1–1), medians of 6 alternating runs: `engine` ÷ core 1.73 → 1.68, `engine-256` ÷ core 1.155 →")
	fmt.Fprintln(w, "1.166 (its runs spread 1.09–1.20 on either tree: the change is below what wall-clock resolves")
	fmt.Fprintln(w, "here), looplab ÷ core 30.1 → 31.8 (the core unchanged: noise). Judged and left: a round that reads")
	fmt.Fprintln(w, "no clock — with one lease in flight every round grants a lease, whose deadline, exposure time and")
	fmt.Fprintln(w, "latency counters need the time, so a round can skip the read only where nothing is granted, armed")
	fmt.Fprintln(w, "or measured, which the one-lease round never is (the read is about 35 ns here: rounds given the")
	fmt.Fprintln(w, "previous round's time instead ran `engine` ÷ core 0.05 lower); `Count` from counts the owner")
	fmt.Fprintln(w, "publishes — the lock it saves measured at most 0.01 of `engine` ÷ core (`Count` with no lock at")
	fmt.Fprintln(w, "all, side by side), and publishing costs an atomic store (an `XCHG` on amd64, as dear as the")
	fmt.Fprintln(w, "lock's own two atomic operations) for each state whose count a call changed, about five a lease")
	fmt.Fprintln(w, "with one in flight; a sim device whose address check takes no lock (a copy-on-write table of")
	fmt.Fprintln(w, "allocations) — at most 0.01–0.03 here, and a copy of the table at every `Alloc` and `Free`, which")
	fmt.Fprintln(w, "`kvready simulate` makes per request. What is left of `engine` above the core, about 480 ns a")
	fmt.Fprintln(w, "lease: the core's own one-lease round (about 0.3× a lease, its code fetched again for each lease); four engine")
	fmt.Fprintln(w, "locks and four device locks a lease (the address check, the copy, the event, the benchmark's")
	fmt.Fprintln(w, "`CompleteAll`) where the core's lease at 256 a round pays one device lock; the clock read; and the")
	fmt.Fprintln(w, "instructions above the core's (about 3,000 a lease, the one-lease round's own share included: the")
	fmt.Fprintln(w, "Ready loop, four Readys in three passes a round, the guards, the attempt table, the proof's batch,")
	fmt.Fprintln(w, "the door's wrapper), none above 3% alone. Of `engine-256`, about 105 ns: three locks a lease")
	fmt.Fprintln(w, "(`Lend`, its address check, `Release`) and about 1,000 instructions, the same parts. Neither goal")
	fmt.Fprintln(w, "is met: what is left is many parts of a few percent each, and the larger ones are guards (rule")
	fmt.Fprintln(w, "18's lock, the address check at the door, the panic guards) or the time a deadline needs.")
	fmt.Fprintln(w, "A third pass on issue #40 item 4 (2026-12-03, this shared machine at load 2.4–8 from other sessions)")
	fmt.Fprintln(w, "measured where the one-lease shape's cost lies, and changed nothing in the engine: the owner")
	fmt.Fprintln(w, "thread's CPU time per lease (`CLOCK_THREAD_CPUTIME_ID` around alternating chunks of 2,048 leases of")
	fmt.Fprintln(w, "`core`, `core-one`, `engine` and `engine-256` in one process, medians of 400 chunks, four runs), and")
	fmt.Fprintln(w, "callgrind's instruction count with its cache and branch simulation (a model: this virtual machine")
	fmt.Fprintln(w, "exposes no hardware counters) over the measured loop alone. `core-one` ÷ `core` is 1.47–1.52: the")
	fmt.Fprintln(w, "core itself, with one lease a round, costs about as much above its batched lease as the `engine`")
	fmt.Fprintln(w, "goal allows the runner in all; `engine` ÷ `core-one` is 1.18–1.19, `engine` ÷ `core` 1.73–1.82,")
	fmt.Fprintln(w, "`engine-256` ÷ `core` 1.10–1.13 (`core-one`'s hand records, completes and polls the copies' event in three device calls a round where the runner makes two, so if anything it flatters `engine` ÷ `core-one`). The one-lease shape is not dear in instructions (`core-one` runs")
	fmt.Fprintln(w, "13,930 a lease, `core` 12,380: +12%, most of it the hand's own work a round: copying the Ready,")
	fmt.Fprintln(w, "recording, completing and polling the event) but in the processor's front end: at 256 a round each")
	fmt.Fprintln(w, "phase's code runs 256 times while it is cached, at one a round the whole lifecycle's code is fetched")
	fmt.Fprintln(w, "again every lease: 735 simulated first-level instruction-cache misses a lease against 3 (some 47 KB")
	fmt.Fprintln(w, "of the core's, the staging allocator's and the simulated device's code), and 145 mispredicted branches against 39. With a")
	fmt.Fprintln(w, "few leases a round the cost fades as the code is shared among them: the runner with 2, 4, 16 and")
	fmt.Fprintln(w, "256 in flight a round costs 1.46, 1.26, 1.10 and 1.10× `core` (the same measure, one run). The")
	fmt.Fprintln(w, "runner on top of that shape adds about 1,700 instructions, 234 instruction-cache misses and 15")
	fmt.Fprintln(w, "mispredicts a lease (`engine`: 15,630, 969, 159). `engine-256` runs 13,690 instructions a lease with")
	fmt.Fprintln(w, "the core's cache and branch behaviour (4.5 misses, 44 mispredicts): what is left there is")
	fmt.Fprintln(w, "instructions, about 1,300 a lease (+10.5%) spread over the runner's wrappers — `Lend` and its")
	fmt.Fprintln(w, "address check about 285, the attempt table's keep and drop 180, the copy queue 175, the submission,")
	fmt.Fprintln(w, "its first poll and their guard 180, `accept` 90, `Release` 85, the door's wrapper 70, the proof's")
	fmt.Fprintln(w, "batch and answer 160 — none above a quarter of it. So `engine` ≤ 1.5× `core` is out of the runner's")
	fmt.Fprintln(w, "reach: it holds only if the core's own one-lease round gets cheaper, by a lease running less code")
	fmt.Fprintln(w, "once a round (the core's as much as the runner's), not by fewer locks or clock reads, which are 5 ns")
	fmt.Fprintln(w, "and 28–31 ns here; `engine-256` ≤ 1.1×, at its edge in the owner's CPU time (1.10–1.13) and above it")
	fmt.Fprintln(w, "in wall-clock `make bench` (1.17), needs those wrappers to lose a few hundred instructions a lease,")
	fmt.Fprintln(w, "from parts of 70 to 285 each.")
	fmt.Fprintln(w, "A fourth pass on issue #40 item 4 (2026-12-03, 22:15–22:30 UTC, this shared machine at load 1.4–3.3 from other")
	fmt.Fprintln(w, "sessions) looked in the core for work a one-lease round pays that a 256-lease round shares, and changed nothing:")
	fmt.Fprintln(w, "callgrind over the hand's round alone (20,480 leases a shape; `--dump-instr` to count the distinct instructions and")
	fmt.Fprintln(w, "cache lines a lease runs), a CPU profile, and wall-clock ns/op (8 runs of 200,000 leases). The core's instructions are")
	fmt.Fprintln(w, "the same in both shapes: its packages (readiness, staging, fsm, contract) run 11,229 a lease at one a round and")
	fmt.Fprintln(w, "11,136 at 256 (+94, under 1%). A round's fixed work is small and mostly paid back: the Ready's resets after each")
	fmt.Fprintln(w, "pass (120 instructions), taking the allocator's grants as a batch a round (120), the tick and its timers (72) and")
	fmt.Fprintln(w, "the admission line (26), against a timer heap of one lease (−74 on its sifts) and smaller differences either way.")
	fmt.Fprintln(w, "Of `core-one`'s 1,420 instructions above `core`, the hand's are about 710 (copying the Ready's slices, with the")
	fmt.Fprintln(w, "runtime's copy and write barriers) and the simulated device's 615 (an event recorded, completed and polled each")
	fmt.Fprintln(w, "round). The CPU profile is flat (no function above 8% of its own time in either shape). What a one-lease round")
	fmt.Fprintln(w, "pays is the front end: a lease")
	fmt.Fprintln(w, "runs 5,935 distinct instructions of the core (readiness 3,660, staging 1,967, contract 160, fsm 148) on 663 distinct")
	fmt.Fprintln(w, "cache lines, 41 KB of code, each about once; `engine` adds the runner's 1,990 on 238 lines, 1,040 lines (65 KB) in")
	fmt.Fprintln(w, "all, against a 32 KB first-level instruction cache. So all of it is fetched again every lease (simulated misses a")
	fmt.Fprintln(w, "lease: `core` 4, `core-one` 747, `engine` 959, `engine-256` 7) and every branch is seen once a lease (simulated")
	fmt.Fprintln(w, "mispredicts 24, 122, 131 and 31; the model keeps no history, so it likely overstates a real predictor's). Packed without")
	fmt.Fprintln(w, "gaps the same code would fill 26 KB (the core's) and 40 KB (`engine`'s): the gaps are the cold paths a Go function")
	fmt.Fprintln(w, "lays out between its hot blocks (error formatting, `growslice` and write-barrier calls). Moving `newBody`'s refusals")
	fmt.Fprintln(w, "out of line (its gap, 18 lines, was the largest) took 15 misses a lease off `core-one` (749 to 734, 2%) and 29")
	fmt.Fprintln(w, "instructions; the cold paths of the five functions with the largest gaps taken out of line (`newBody`, `copyOut`,")
	fmt.Fprintln(w, "`Lend`, `classifyAnswer`, `store`) took 13 of the 845 lines a lease touches and 2 of its misses, the rest lost to")
	fmt.Fprintln(w, "the layout moving. The gaps of every core function add up to about 135 lines (18% of the misses), so at most that")
	fmt.Fprintln(w, "is there to take; side by side in wall clock (6 pairs, load 2.3–2.7) the five-function change was unresolvable")
	fmt.Fprintln(w, "(per-pair ratios 0.62–2.05 for `core-one`, 0.67–1.29 for `engine`), and it was not kept. Wall-clock medians of the per-run ratios: `core-one` ÷ `core` 1.55, `engine` ÷ `core-one` 1.19, `engine` ÷")
	fmt.Fprintln(w, "`core` 1.78, `engine-256` ÷ `core` 1.09. No round's work is left in the core to cut: `engine` ≤ 1.5× `core` asks a")
	fmt.Fprintln(w, "lease to run from cache, once, code that `core` runs from cache because it runs it 256 times in a row, and what")
	fmt.Fprintln(w, "separates the two shapes is the size of the lifecycle's code, not work per round. Shape for shape, one lease a round")
	fmt.Fprintln(w, "each, the runner costs 1.19× the core (`engine` ÷ `core-one`).")
	fmt.Fprintln(w, "Absolute goals")
	fmt.Fprintln(w, "(ns per name) were set on SPEC §5's machine, where a bare map lookup took about 13 ns;")
	fmt.Fprintln(w, "the `maplookup` row shows what it takes on this one, and the ratio row beside it travels.")
	fmt.Fprintln(w, "The CUDA figure divides by `gpu/sim`, so a faster simulator raises it: issue #40's work filled the")
	fmt.Fprintln(w, "simulated stream's ring in place (91.6 to 69.5 ns a cycle between the two `make bench` runs of")
	fmt.Fprintln(w, "2026-12-03, on a host 10–17% slower in the second), while `gpu/cuda` on the fake driver, three")
	fmt.Fprintln(w, "crossings into C a cycle (`crossing` is one through purego), is the same code, slower with the host (239 to 273 ns).")
	fmt.Fprintln(w, "`engine-metrics` is `engine-256` with a `metrics.Collector` as its Observer, registered (not")
	fmt.Fprintln(w, "scraped): what exporting to Prometheus costs a manager between scrapes (docs/operations.md).")
	fmt.Fprintln(w, "`rounds/op` counts `Progress` rounds per lease: how many depends on how soon the engine's")
	fmt.Fprintln(w, "goroutines answer, so on the machine's load, and the lifecycle's ns/op follows it.")
	fmt.Fprintln(w, "The real-store figures move one lease of 16 rows through `backend/redis` (submit, outcome,")
	fmt.Fprintln(w, "Quiesce) against a local redis-server, beside the bare clients moving the same keys and values")
	fmt.Fprintln(w, "lease by lease (`BenchmarkRedisLeases`: each iteration moves one lease each way, in an order that")
	fmt.Fprintln(w, "rotates, and each way counts its median lease), and divide by the fastest of them")
	fmt.Fprintln(w, "(docs/backend-redis.md): fetch beside go-redis's")
	fmt.Fprintln(w, "pipelined MGET (`bare`), go-redis reading each value straight into its row (`bare-zerocopy`) and")
	fmt.Fprintln(w, "rueidis streaming each into its row (`bare-rueidis`); publish beside go-redis's MSET (`bare`), one")
	fmt.Fprintln(w, "`SET NX` per key (`bare-setnx`, what content addresses need, and what the backend sends with a")
	fmt.Fprintln(w, "TTL), rueidis's MSET (`bare-rueidis`) and rueidis's `SET NX` per key (`bare-rueidis-setnx`); the")
	fmt.Fprintln(w, "backend is opened with `Open`, as a deployment opens it: go-redis clients of its own, its")
	fmt.Fprintln(w, "publications through one that sends each pipeline with one writev straight from the staging")
	fmt.Fprintln(w, "rows, and, without a TTL, each run of up to 16 names as one `MSETNX` (a run that stored none")
	fmt.Fprintln(w, "because a name of it was stored goes again as `SET NX` a name). On a 2-CPU")
	fmt.Fprintln(w, "machine the server shares the cores with the client, and single")
	fmt.Fprintln(w, "runs swing by a third: `BenchmarkRedisFetch` and `BenchmarkRedisPublish`, which measure each way")
	fmt.Fprintln(w, "in its own second, give the absolute figures below, not the ratios.")
	fmt.Fprintln(w, "The tier figures (docs/tiers.md): `local` runs whole one-row fetch lifecycles through the")
	fmt.Fprintln(w, "runner, 64 in flight a round, every row served by backend/mem — behind a stack of tiers whose")
	fmt.Fprintln(w, "local tier holds it (`hit`), or alone (`alone`) — four rounds each way in turn, each way's figure")
	fmt.Fprintln(w, "its median round after the first of each four; each lease moves one 64-byte row, so it is almost")
	fmt.Fprintln(w, "all the runner's and the stack's own work, and `local/row=64KiB` (in view) is the same with a KV")
	fmt.Fprintln(w, "block a lease, whose copy into staging both ways pay. `redis/row=SIZE` fetches 16-row leases from a real")
	fmt.Fprintln(w, "redis-server four ways, three leases each way a round and the order rotating, so that every way")
	fmt.Fprintln(w, "meets the same load (the server's, on the same two cores, included); each way's figure is its")
	fmt.Fprintln(w, "median lease after the first of each three, and each ratio the median of the runs' own; the")
	fmt.Fprintln(w, "`-cold` ratios, in view, are those of the first of each block, right after another way's (what")
	fmt.Fprintln(w, "switching between ways costs: no deployment switches). `alone`: backend/redis alone.")
	fmt.Fprintln(w, "`promoted`: a stack whose local tier misses the lease (two leases alternate over a local tier")
	fmt.Fprintln(w, "that holds one) and promotes the rows Redis served into it. `unpromoted`: the same stack with")
	fmt.Fprintln(w, "promotion off; the gap between it and `alone` is the stack's own, the rest the promotion's.")
	fmt.Fprintln(w, "Redis tees (docs/tiers.md): it lands")
	fmt.Fprintln(w, "a copy of each row in a buffer of the local tier's as it reads the row, and the local tier adopts")
	fmt.Fprintln(w, "the buffers once Redis's access is proven over, so the copy runs beside the socket reads, not")
	fmt.Fprintln(w, "after them; `copied` is the same stack with Redis seen as a tier that does not tee (the")
	fmt.Fprintln(w, "copy from staging after the fetch), beside it. `BenchmarkTeeCopy/row=SIZE` (backend/redis) is the")
	fmt.Fprintln(w, "tee's copy alone, from a hot chunk into cold buffers: where it cannot run beside the reads (two")
	fmt.Fprintln(w, "cores, redis-server on one) it is in series with the fetch, and 1 ÷ (1 + alone MB/s ÷ its MB/s)")
	fmt.Fprintln(w, "is the most `promoted` can reach, shown in view. `promotion/row=SIZE` is the promotion of a lower tier that does not tee (a")
	fmt.Fprintln(w, "publication of the lease's rows from staging into a full local tier, to its proof): rule 19")
	fmt.Fprintln(w, "keeps such a copy before the lease's proof, so with it in series the figure could be at most")
	fmt.Fprintln(w, "1 ÷ (1 + alone MB/s ÷ promotion MB/s), the bound shown in view.")
	fmt.Fprintln(w)
	renderLayers(w, r)
	renderUCX(w, r)
	fmt.Fprintln(w, "## Every benchmark")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| benchmark | metrics (median of runs) |")
	fmt.Fprintln(w, "| --- | --- |")
	for _, name := range r.order {
		res := r.results[name]
		var parts []string
		for _, unit := range []string{"ns/op", "B/op", "allocs/op"} {
			if v, ok := res.metrics[unit]; ok {
				parts = append(parts, num(v)+" "+unit)
			}
		}
		for unit, v := range res.metrics {
			if unit != "ns/op" && unit != "B/op" && unit != "allocs/op" {
				parts = append(parts, num(v)+" "+unit)
			}
		}
		fmt.Fprintf(w, "| `%s` | %s |\n", name, strings.Join(sortedTail(parts, 3), ", "))
	}
}

// sortedTail keeps the first n parts in place and sorts the rest, so output
// does not depend on map order.
func sortedTail(parts []string, n int) []string {
	if len(parts) <= n {
		return parts
	}
	tail := parts[n:]
	for i := 1; i < len(tail); i++ {
		for j := i; j > 0 && tail[j] < tail[j-1]; j-- {
			tail[j], tail[j-1] = tail[j-1], tail[j]
		}
	}
	return parts
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
