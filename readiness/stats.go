package readiness

import (
	"math/bits"
	"time"

	"github.com/kvready/kvready/fsm"
)

// Stats is a snapshot of the engine's counters.
type Stats struct {
	// Leases counts live leases by state (released ones are retired at once,
	// so Leases[fsm.Released] is 0; see Released).
	Leases [fsm.NumStates]int
	// Lent and Released count leases over the engine's life.
	Lent, Released uint64
	// Slots across every pool group.
	SlotsFree, SlotsHeld, SlotsQuarantined int
	// QuarantinedLeases counts leases ever quarantined.
	QuarantinedLeases uint64
	// Outcomes counts latched outcomes by kind.
	Outcomes OutcomeCounts
	// FenceLatency: from submission to the access fence.
	FenceLatency Histogram
	// ReadyLatency: from Lend to readiness being answerable.
	ReadyLatency Histogram
	// Refused counts evidence the table refused (duplicates, late evidence).
	Refused uint64
	// StaleEvidence counts evidence about leases already retired.
	StaleEvidence uint64
	// Hopeless counts waiting leases taken out of the line because quarantine
	// left too few slots ever to grant them.
	Hopeless uint64
	// Containments counts drain periods that expired with access unproven.
	Containments uint64
	// InvariantBreaches counts allocator refusals the table should have made
	// impossible. It is 0 unless kvready has a bug.
	InvariantBreaches uint64
}

// OutcomeCounts counts outcomes by kind. A miss is counted as Missed and never
// as Failed.
type OutcomeCounts struct {
	Served, Partial, Missed uint64
	Failed, Cancelled       uint64
	Timeouts, Rejected      uint64
	Violations              uint64
}

// histBuckets covers 1 ns to about 9 minutes in powers of two.
const histBuckets = 40

// Histogram counts durations in power-of-two buckets: bucket i holds
// durations in [2^(i-1), 2^i) nanoseconds. It never allocates.
type Histogram struct {
	Counts [histBuckets]uint64
	Total  uint64
}

func (h *Histogram) init() {}

func (h *Histogram) add(ns int64) {
	if ns < 0 {
		ns = 0
	}
	i := min(bits.Len64(uint64(ns)), histBuckets-1)
	h.Counts[i]++
	h.Total++
}

// Quantile returns an upper bound of the q-quantile (0 ≤ q ≤ 1): the top of
// the bucket that holds it. It returns 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.Total == 0 {
		return 0
	}
	rank := uint64(q * float64(h.Total))
	if rank >= h.Total {
		rank = h.Total - 1
	}
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen > rank {
			if i == 0 {
				return 0
			}
			return time.Duration(uint64(1)<<i - 1)
		}
	}
	return time.Duration(1<<(histBuckets-1) - 1)
}

// Count returns the number of live leases in state s, without copying Stats.
func (e *Engine) Count(s fsm.State) int {
	if s >= fsm.NumStates {
		return 0
	}
	return e.stats.Leases[s]
}

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	for g := range e.alloc.Groups() {
		free, q := e.alloc.FreeSlots(g), e.alloc.Quarantined(g)
		s.SlotsFree += free
		s.SlotsQuarantined += q
		s.SlotsHeld += e.alloc.Capacity(g) - free - q
	}
	return s
}
