// Package sidebyside measures several ways of doing the same work beside each
// other, a few operations of each way per round, so that every way meets the
// same load of a shared machine at every moment.
//
// Measured one after another, as separate sub-benchmarks, each way meets the
// load of its own second or so; on a machine whose other users (a Redis
// server on the same two cores, a second test run) come and go, that load
// swings by more than the gaps being measured, and a ratio of two such runs
// says more about the moment than about the ways. Round by round, with the
// order rotating so that no way always follows the same one, a slow moment
// falls on every way alike, and each way's median operation drops it.
//
// Switching ways has a cost of its own: the way that runs next finds the
// caches (and its goroutines' threads) as the last way left them, and pays
// more for it the more code and memory it touches. No deployment switches
// between the ways a benchmark compares, so with Options.Block above one a
// way runs that many operations in a row, the first of them a warm-up whose
// time is kept apart (Result.Cold) from the rest (Result.Warm).
//
// Benchmark code only: it imports testing.
package sidebyside

import (
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

// Way is one way of doing the work; Op does it once and fails b if it could
// not.
type Way struct {
	Name string
	Op   func(b *testing.B)
}

// Options say how Run measures.
type Options struct {
	// After, if not nil, runs (untimed) after every operation: to undo what
	// it did, say.
	After func(*testing.B)
	// MinOps is how many operations (warm ones, with Block above one) each
	// way does at least: when b.Loop stops before, untimed rounds make them
	// up (a second of large operations is a handful, too few for a median
	// one slow moment does not move) — unless the run asked for a fixed
	// count (-benchtime=Nx).
	MinOps int
	// Block is how many operations of a way run in a row each round; with
	// more than one, the first of each block is a warm-up, its time kept in
	// Result.Cold. 0 means 1.
	Block int
}

// Result holds each way's median operation, in the order of the ways.
type Result struct {
	// Warm: every operation's time with Block 1; with Block above one,
	// those of the operations after the first of each block.
	Warm []time.Duration
	// Cold: the first operation of each block, with Block above one; nil
	// otherwise.
	Cold []time.Duration
}

// Run does a block of operations of every way per round, for as long as
// b.Loop asks, the first way of each round moving on by one, after a first
// round (untimed) that warms what the ways share.
func Run(b *testing.B, ways []Way, opt Options) Result {
	b.Helper()
	if len(ways) == 0 {
		b.Fatal("sidebyside.Run: no ways to measure")
	}
	block := max(opt.Block, 1)
	warm := make([][]time.Duration, len(ways))
	cold := make([][]time.Duration, len(ways))
	round := func(i int, timed bool) {
		for n := range ways {
			k := (n + i) % len(ways)
			for j := range block {
				start := now()
				ways[k].Op(b)
				took := now().Sub(start)
				if block > 1 && j == 0 {
					cold[k] = append(cold[k], took)
				} else {
					warm[k] = append(warm[k], took)
				}
				if opt.After == nil {
					continue
				}
				if timed {
					b.StopTimer()
				}
				opt.After(b)
				if timed {
					b.StartTimer()
				}
			}
		}
	}
	round(0, true)
	for k := range ways {
		warm[k], cold[k] = warm[k][:0], cold[k][:0]
	}
	b.ResetTimer()
	i := 0
	for ; b.Loop(); i++ {
		round(i, true)
	}
	if !fixedCount() {
		for ; len(warm[0]) < opt.MinOps; i++ {
			round(i, false)
		}
	}
	var r Result
	r.Warm = make([]time.Duration, len(ways))
	for k := range ways {
		r.Warm[k] = Median(warm[k])
	}
	if block > 1 {
		r.Cold = make([]time.Duration, len(ways))
		for k := range ways {
			r.Cold[k] = Median(cold[k])
		}
	}
	return r
}

// Median returns the median of ds (the upper one of an even count), sorting
// ds; 0 for none.
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// now is the clock operations are timed by (a test's own, in the tests).
var now = time.Now

// fixedCount reports whether the run asked for a fixed number of iterations.
func fixedCount() bool {
	bt := flag.Lookup("test.benchtime")
	return bt != nil && strings.HasSuffix(bt.Value.String(), "x")
}
