package peer

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/kvready/kvready/contract"
)

// LatencyBuckets is how many buckets a submit-to-settled histogram has
// (ReceiverStats.Settle, SenderStats.Settle): bucket i counts durations in
// [2^(i-1), 2^i) nanoseconds, the last one everything longer, as the
// engine's readiness.Histogram does, so that one exporter reads both.
const LatencyBuckets = 40

// latency counts submit-to-settled durations. It is atomic so that Stats
// never takes a lock the sessions' hot path holds; a scrape may see one
// bucket a count ahead of the sum, which a histogram tolerates.
type latency struct {
	counts [LatencyBuckets]atomic.Uint64
	sum    atomic.Uint64 // nanoseconds
}

// add counts one duration; a negative one (a clock stepped back) counts as
// zero.
func (l *latency) add(d time.Duration) {
	ns := max(d.Nanoseconds(), 0)
	l.counts[min(bits.Len64(uint64(ns)), LatencyBuckets-1)].Add(1)
	l.sum.Add(uint64(ns))
}

// load copies the buckets and the sum.
func (l *latency) load() (counts [LatencyBuckets]uint64, sum time.Duration) {
	for i := range counts {
		counts[i] = l.counts[i].Load()
	}
	return counts, time.Duration(l.sum.Load())
}

// outcomes counts the outcomes latched, by kind.
type outcomes struct {
	delivered, failed, cancelled atomic.Uint64
}

func (c *outcomes) add(o contract.Outcome) {
	switch o.(type) {
	case contract.Delivered:
		c.delivered.Add(1)
	case contract.Cancelled:
		c.cancelled.Add(1)
	default: // Failed, and nothing else: translate maps every kind onto these three
		c.failed.Add(1)
	}
}
