// Package sidebyside measures several ways of doing the same work beside each
// other, one operation of each way per round, so that every way meets the same
// load of a shared machine at every moment.
//
// Measured one after another, as separate sub-benchmarks, each way meets the
// load of its own second or so; on a machine whose other users (a Redis
// server on the same two cores, a second test run) come and go, that load
// swings by more than the gaps being measured, and a ratio of two such runs
// says more about the moment than about the ways. Round by round, with the
// order rotating so that no way always follows the same one, a slow moment
// falls on every way alike, and each way's median operation drops it.
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

// Run does one operation of every way per round, for as long as b.Loop asks,
// the first way of each round moving on by one, after a first round (untimed)
// that warms what the ways share. after, if not nil, runs (untimed) after
// every operation: to undo what it did, say. When b.Loop stops before every
// way did minOps operations, untimed rounds make them up (a second of large
// operations is a handful, too few for a median one slow moment does not move)
// — unless the run asked for a fixed count (-benchtime=Nx).
//
// It returns each way's median operation, in the order of ways.
func Run(b *testing.B, ways []Way, after func(*testing.B), minOps int) []time.Duration {
	b.Helper()
	if len(ways) == 0 {
		b.Fatal("sidebyside.Run: no ways to measure")
	}
	took := make([][]time.Duration, len(ways))
	round := func(i int, timed bool) {
		for n := range ways {
			k := (n + i) % len(ways)
			start := time.Now()
			ways[k].Op(b)
			took[k] = append(took[k], time.Since(start))
			if after == nil {
				continue
			}
			if timed {
				b.StopTimer()
			}
			after(b)
			if timed {
				b.StartTimer()
			}
		}
	}
	round(0, true)
	for k := range took {
		took[k] = took[k][:0]
	}
	b.ResetTimer()
	i := 0
	for ; b.Loop(); i++ {
		round(i, true)
	}
	if !fixedCount() {
		for ; len(took[0]) < minOps; i++ {
			round(i, false)
		}
	}
	medians := make([]time.Duration, len(ways))
	for k := range took {
		medians[k] = Median(took[k])
	}
	return medians
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

// fixedCount reports whether the run asked for a fixed number of iterations.
func fixedCount() bool {
	bt := flag.Lookup("test.benchtime")
	return bt != nil && strings.HasSuffix(bt.Value.String(), "x")
}
