package readiness

import (
	"math/bits"
	"time"

	"github.com/kvready/kvready/fsm"
)

// Stats is a snapshot of the counters.
type Stats struct {
	// Leases counts live leases by state (a released lease is retired at
	// once, so Leases[fsm.Released] is 0; see Released).
	Leases [NumStates]int
	// Lent and Released count leases over the engine's life.
	Lent, Released uint64
	// Slots across every pool group.
	SlotsFree, SlotsHeld, SlotsQuarantined int
	// SlotsInherited are the slots earlier engines over the same memory left
	// out of circulation (quarantined, or held by a lease they never
	// finished), found at construction (SPEC §4 rule 17): never lent, and
	// counted in SlotsQuarantined too.
	SlotsInherited int
	// QuarantinedLeases counts leases ever quarantined.
	QuarantinedLeases uint64
	// Outcomes counts latched outcomes by kind. A miss is counted as a miss and
	// never as a failure; a cancellation as a cancellation.
	Outcomes [NumOutcomes]uint64
	// FenceLatency: from the submission to the access fence.
	FenceLatency Histogram
	// ReadyLatency: from Lend to readiness being answerable, for leases
	// whose outcome is no failure (served, partial, missed).
	ReadyLatency Histogram
	// FailureLatency: from Lend to readiness being answerable, for leases
	// that failed (failed, cancelled, rejected, timed out, a violation): the
	// manager recomputes their rows. A store that fails fast shows here,
	// never as fast readiness.
	FailureLatency Histogram
	// Refused counts evidence the table refused (duplicates, late evidence)
	// and StaleEvidence evidence about leases already retired: counted by the
	// runner that reports it (zero for a Core driven directly, which changes
	// nothing at all on a refusal).
	Refused, StaleEvidence uint64
	// Violations counts contract violations the lifecycle accepted (changed
	// answers, unasked names, answers that are no outcome), for both backends;
	// FetcherFaults and PublisherFaults say whose they were.
	Violations uint64
	// FetcherFaults and PublisherFaults count what each backend did that the
	// contract forbids (SPEC §4 rule 15). Each costs at most that backend's own
	// leases; none halts the engine. The runner fills in what only it sees
	// (panics, completions); a Core driven directly counts Violations alone.
	FetcherFaults, PublisherFaults BackendFaults
	// Handoffs counts goroutine hand-offs the runner made: work handed to a
	// Quiesce worker or to the watcher, and the owner woken by another
	// goroutine (a backend's completion, a worker's answer, a landed copy the
	// watcher saw, a deadline timer). Zero for a Core driven directly.
	Handoffs uint64
	// QuiesceProbes counts the non-blocking access probes the runner asked on
	// the owner goroutine (contract.QuiesceProber); QuiesceCalls the blocking
	// calls it handed to workers. Zero for a Core driven directly.
	QuiesceProbes uint64
	// Unproven counts answers, and Quiesce calls timed out, that could not
	// prove access over.
	Unproven uint64
	// QuiesceCalls counts the Quiesce calls the runner made (zero for a Core
	// driven directly); QuiesceRetries counts the asks after an answer that
	// proved nothing, or made explicitly (Retry).
	QuiesceCalls, QuiesceRetries uint64
	// QuiesceTimeouts counts Quiesce calls that outlived QuiesceTimeout.
	QuiesceTimeouts uint64
	// CancelRequests counts the cancel requests the engine asked for (one per
	// lease at most); CancelErrors those that failed or panicked.
	CancelRequests, CancelErrors uint64
	// Ungrantable counts waiting leases taken out of the line because
	// quarantine left no contiguous run that could ever hold them.
	Ungrantable uint64
	// Containments counts leases contained at their containment deadline;
	// Recovered those of them whose access a later Quiesce proved over
	// (Recover policy).
	Containments, Recovered uint64
	// Outstanding is the submissions outstanding at the backend now, and
	// MaxOutstanding their bound (0: none); Leases[fsm.Staged] wait for it.
	Outstanding, MaxOutstanding int
	// InvariantBreaches counts broken safety invariants: 0, or 1 and the
	// engine halted (Err). It is 0 unless kvready has a bug.
	InvariantBreaches uint64
	// Halted reports that the engine stopped (Err says why): a broken
	// invariant, or a containment under the fatal policy.
	Halted bool
}

// BackendFaults counts, for one backend, what it did that the contract
// forbids. A backend's fault is the backend's: it costs at most its own leases
// (a violation fails the lease; what stays unproven is contained), and never
// halts the engine or touches another backend's leases.
type BackendFaults struct {
	// Violations are answers the lifecycle took as contract violations: an
	// answer changed, a name never asked for, a panic in Poll.
	Violations uint64
	// Panics are panics the runner recovered in any call into the backend:
	// Fetch, Publish, Poll, Quiesce, TryQuiesce, RequestCancel, Notify,
	// AdmissionLimit.
	Panics uint64
	// RepeatedCompletions are completion callbacks (contract.Notifier's)
	// called again for an attempt: dropped, so that a storm of them costs one
	// letter per attempt.
	RepeatedCompletions uint64
	// EarlyCompletions are completions that Poll did not bear out (it still
	// answered no outcome): the attempt is polled from then on.
	EarlyCompletions uint64
}

// Total is the sum of every count.
func (f BackendFaults) Total() uint64 {
	return f.Violations + f.Panics + f.RepeatedCompletions + f.EarlyCompletions
}

// Faults returns the counts of the backend that serves kind k.
func (s *Stats) Faults(k Kind) *BackendFaults {
	if k == Publish {
		return &s.PublisherFaults
	}
	return &s.FetcherFaults
}

// histBuckets covers 1 ns to about 9 minutes in powers of two.
const histBuckets = 40

// Histogram counts durations in power-of-two buckets: bucket i holds
// durations in [2^(i-1), 2^i) nanoseconds. It never allocates.
type Histogram struct {
	Counts [histBuckets]uint64
	Total  uint64
	// Sum is the total of every duration counted, in nanoseconds: Sum/Total
	// is the mean.
	Sum uint64
}

func (h *Histogram) add(ns int64) {
	if ns < 0 {
		ns = 0
	}
	i := min(bits.Len64(uint64(ns)), histBuckets-1)
	h.Counts[i]++
	h.Total++
	h.Sum += uint64(ns)
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

// GroupSlots is where the slots of one pool group are.
type GroupSlots struct {
	// Free slots can be granted; Held ones are lent (granted and not yet
	// returned); Quarantined ones are out of circulation for ever.
	Free, Held, Quarantined int
	// SlotBytes is the size of one slot of the group.
	SlotBytes int
}

// Groups fills dst (grown as needed) with the slots of each pool group and
// returns it.
func (c *Core) Groups(dst []GroupSlots) []GroupSlots {
	dst = dst[:0]
	for g := range c.alloc.Groups() {
		free, q := c.alloc.FreeSlots(g), c.alloc.Quarantined(g)
		dst = append(dst, GroupSlots{Free: free, Held: c.alloc.Capacity(g) - free - q, Quarantined: q,
			SlotBytes: c.mem.Group(g).SlotBytes})
	}
	return dst
}

// InFlight is what the backends may still be touching: the live leases
// whose slots were handed to a backend (exposed) and whose access is not yet
// proven over (fenced), leaving out those already contained (their slots
// count as quarantined, or come back through a recovery).
type InFlight struct {
	// Leases counts them.
	Leases int
	// Bytes is the staging bytes of their rows.
	Bytes int64
	// Oldest is the submission time of the one submitted first, on the
	// core's clock; the zero Time when there is none. A stuck transfer shows
	// as an Oldest that stands still while the clock moves on.
	Oldest time.Time
}

// InFlight reads what is in flight now: O(leases in flight and parked), for
// a scrape, never on the lifecycle's path.
func (c *Core) InFlight() InFlight {
	var f InFlight
	oldest := int64(0)
	for i := range c.leases {
		l := &c.leases[i]
		if !l.inUse || !l.m.Marks.Has(fsm.Exposed) || l.m.Marks.Has(fsm.Fenced) ||
			l.m.Marks.Has(fsm.WasContained) || l.m.State.Terminal() {
			continue
		}
		f.Leases++
		b := c.body(uint32(i))
		for _, r := range b.rows {
			f.Bytes += int64(c.mem.Group(r.Group).SlotBytes)
		}
		if at := b.exposedAt; at != 0 && (oldest == 0 || at < oldest) {
			oldest = at
		}
	}
	if oldest != 0 {
		f.Oldest = time.Unix(0, oldest)
	}
	return f
}

// Stats returns a snapshot of the counters.
func (c *Core) Stats() Stats {
	s := c.stats
	s.Halted = c.halted != nil
	s.Outstanding, s.MaxOutstanding = c.outstanding, c.cfg.MaxOutstanding
	s.SlotsInherited = c.claim.Inherited()
	for g := range c.alloc.Groups() {
		free, q := c.alloc.FreeSlots(g), c.alloc.Quarantined(g)
		s.SlotsFree += free
		s.SlotsQuarantined += q
		s.SlotsHeld += c.alloc.Capacity(g) - free - q
	}
	return s
}
