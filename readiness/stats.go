package readiness

import (
	"time"

	"github.com/kvready/kvready/readiness/core"
)

// Stats is a snapshot of the engine's counters.
type Stats struct {
	// Leases counts live leases by state (a released lease is retired at
	// once, so its count is 0; see Released).
	Leases [NumStates]int
	// Lent and Released count leases over the engine's life.
	Lent, Released uint64
	// Slots across every pool group.
	SlotsFree, SlotsHeld, SlotsQuarantined int
	// QuarantinedLeases counts leases ever quarantined.
	QuarantinedLeases uint64
	// Outcomes counts latched outcomes by kind. A miss is counted as a miss and
	// never as a failure; a cancellation as a cancellation.
	Outcomes [NumOutcomes]uint64
	// FenceLatency: from the submission to the access fence.
	FenceLatency Histogram
	// ReadyLatency: from Lend to readiness being answerable.
	ReadyLatency Histogram
	// Refused counts evidence the lifecycle refused (duplicates, late
	// evidence) and StaleEvidence evidence about leases already retired.
	Refused, StaleEvidence uint64
	// Violations counts contract violations the lifecycle accepted (changed
	// answers, unasked names, answers that are no outcome), for both backends;
	// FetcherFaults and PublisherFaults say whose they were.
	Violations uint64
	// FetcherFaults and PublisherFaults count what each backend did that the
	// contract forbids (SPEC §4 rule 15). Each costs at most that backend's own
	// leases; none halts the engine.
	FetcherFaults, PublisherFaults BackendFaults
	// Handoffs counts goroutine hand-offs: work handed to a Quiesce worker or
	// to the watcher, and the owner woken by another goroutine (a backend's
	// completion, a worker's answer, a landed copy the watcher saw, a
	// deadline timer).
	Handoffs uint64
	// QuiesceProbes counts the non-blocking access probes asked on the owner
	// goroutine (contract.QuiesceProber); QuiesceCalls the blocking calls
	// handed to workers.
	QuiesceProbes uint64
	// Unproven counts answers, and Quiesce calls timed out, that could not
	// prove access over.
	Unproven uint64
	// QuiesceCalls counts the Quiesce calls made; QuiesceRetries counts the
	// asks after an answer that proved nothing, or made explicitly (Retry).
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
	// MaxOutstanding their bound (0: none); staged leases wait for it.
	Outstanding, MaxOutstanding int
	// InvariantBreaches counts broken safety invariants: 0, or 1 and the
	// engine halted (Err). It is 0 unless kvready has a bug.
	InvariantBreaches uint64
	// Halted reports that the engine stopped (Err says why): a broken
	// invariant, or a containment under the fatal policy.
	Halted bool
}

// stats copies the core's counters. Stats is a value the size of a few cache
// lines, read per call, never on the lifecycle's path.
func stats(s *core.Stats) Stats {
	out := Stats{
		Lent: s.Lent, Released: s.Released,
		SlotsFree: s.SlotsFree, SlotsHeld: s.SlotsHeld, SlotsQuarantined: s.SlotsQuarantined,
		QuarantinedLeases: s.QuarantinedLeases,
		FenceLatency:      Histogram(s.FenceLatency), ReadyLatency: Histogram(s.ReadyLatency),
		Refused: s.Refused, StaleEvidence: s.StaleEvidence, Violations: s.Violations,
		FetcherFaults: BackendFaults(s.FetcherFaults), PublisherFaults: BackendFaults(s.PublisherFaults),
		Handoffs: s.Handoffs, QuiesceProbes: s.QuiesceProbes, Unproven: s.Unproven,
		QuiesceCalls: s.QuiesceCalls, QuiesceRetries: s.QuiesceRetries, QuiesceTimeouts: s.QuiesceTimeouts,
		CancelRequests: s.CancelRequests, CancelErrors: s.CancelErrors, Ungrantable: s.Ungrantable,
		Containments: s.Containments, Recovered: s.Recovered,
		Outstanding: s.Outstanding, MaxOutstanding: s.MaxOutstanding,
		InvariantBreaches: s.InvariantBreaches, Halted: s.Halted,
	}
	copy(out.Leases[:], s.Leases[:])
	copy(out.Outcomes[:], s.Outcomes[:])
	return out
}

// Faults returns the counts of the backend that serves kind k.
func (s *Stats) Faults(k Kind) *BackendFaults {
	if k == Publish {
		return &s.PublisherFaults
	}
	return &s.FetcherFaults
}

// The types below are declared field for field as the core's, so that the
// conversion from the core's counters is free; the compiler refuses it the
// moment the two differ.

// BackendFaults counts, for one backend, what it did that the contract
// forbids. A backend's fault is the backend's: it costs at most its own leases
// (a violation fails the lease; what stays unproven is contained), and never
// halts the engine or touches another backend's leases.
type BackendFaults struct {
	// Violations are answers the lifecycle took as contract violations: an
	// answer changed, a name never asked for, a panic in Poll.
	Violations uint64
	// Panics are panics recovered in any call into the backend: Fetch,
	// Publish, Poll, Quiesce, TryQuiesce, RequestCancel, Notify,
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
func (f BackendFaults) Total() uint64 { return core.BackendFaults(f).Total() }

// Histogram counts durations in power-of-two buckets: bucket i holds
// durations in [2^(i-1), 2^i) nanoseconds.
type Histogram struct {
	Counts [40]uint64
	Total  uint64
	// Sum is the total of every duration counted, in nanoseconds: Sum/Total
	// is the mean.
	Sum uint64
}

// Quantile returns an upper bound of the q-quantile (0 ≤ q ≤ 1): the top of
// the bucket that holds it. It returns 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration { return (*core.Histogram)(h).Quantile(q) }

// GroupSlots is where the slots of one pool group are.
type GroupSlots struct {
	// Free slots can be granted; Held ones are lent (granted and not yet
	// returned); Quarantined ones are out of circulation for ever.
	Free, Held, Quarantined int
	// SlotBytes is the size of one slot of the group.
	SlotBytes int
}

// InFlight is what the backends may still be touching: the live leases
// whose slots were handed to a backend (exposed) and whose access is not yet
// proven over (fenced), leaving out those already contained.
type InFlight struct {
	// Leases counts them.
	Leases int
	// Bytes is the staging bytes of their rows.
	Bytes int64
	// Oldest is the submission time of the one submitted first, on the
	// engine's clock; the zero Time when there is none. A stuck transfer
	// shows as an Oldest that stands still while the clock moves on.
	Oldest time.Time
}
