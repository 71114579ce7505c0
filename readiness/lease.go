package readiness

import (
	"fmt"

	"github.com/kvready/kvready/fsm"
)

// State is where a lease stands in its lifecycle (docs/states.md). Its
// groups — Held, Exposed, Answerable, Pending, Terminal — are what an embedder
// decides on; they are read from the lifecycle's table, never listed by hand.
// The values are the table's own (package fsm declares the table and draws
// it; the engine runs it).
type State uint8

// The states, in lifecycle order (docs/states.md says what each means and
// what may happen to the lease's slots in it).
const (
	StateWaiting           = State(fsm.Waiting)           // queued for slots, holds none
	StateGranted           = State(fsm.Granted)           // slots held; a publish's device→staging copies in flight
	StateStaged            = State(fsm.Staged)            // staging ready; waiting for admission to the backend
	StateAdmitted          = State(fsm.Admitted)          // admitted: the extent is handed to the backend
	StateRequested         = State(fsm.Requested)         // submitted: outcome pending, the backend may touch the slots
	StateServed            = State(fsm.Served)            // outcome latched: every requested row delivered
	StatePartial           = State(fsm.Partial)           // outcome latched: some rows delivered
	StateMissed            = State(fsm.Missed)            // outcome latched: nothing delivered (a miss, not an error)
	StateFailed            = State(fsm.Failed)            // outcome latched: failed, cancelled, rejected, timed out or a violation
	StateAccessFenced      = State(fsm.AccessFenced)      // backend access proven over; staging→device copies of served rows in flight
	StateCopyUnproven      = State(fsm.CopyUnproven)      // a local copy failed without a completion record: only containment follows
	StateLogicallyComplete = State(fsm.LogicallyComplete) // every local copy landed: readiness is answerable
	StateContained         = State(fsm.Contained)         // the containment deadline passed with access unproven
	StateQuarantined       = State(fsm.Quarantined)       // access end can never be proven: the slots never return
	StateReleased          = State(fsm.Released)          // slots back in the allocator
)

// NumStates is the number of states: Stats.Leases and Report.Held are
// indexed by State, from 0 to NumStates-1.
const NumStates = int(fsm.NumStates)

// String returns the state's snake_case name, as docs/states.md spells it.
func (s State) String() string { return fsm.State(s).String() }

// Meaning says what being in s means for the lease (docs/states.md).
func (s State) Meaning() string { return fsm.State(s).Meaning() }

// Held reports whether a lease in s holds staging slots that will return to
// the allocator: from the grant until it is released or quarantined.
func (s State) Held() bool { return fsm.Lifecycle().Holding(fsm.State(s)) }

// Exposed reports whether the backend may still touch the lease's slots in s:
// its access proof is awaited.
func (s State) Exposed() bool { return fsm.Lifecycle().Exposed(fsm.State(s)) }

// Answerable reports whether readiness can be answered in s (Readiness,
// Arrived): once every local copy has landed, and after the release.
func (s State) Answerable() bool { return fsm.Lifecycle().Answerable(fsm.State(s)) }

// Pending reports whether a lease in s still waits for its outcome: the
// request deadline can still fail it.
func (s State) Pending() bool { return fsm.Lifecycle().Pending(fsm.State(s)) }

// Terminal reports whether nothing can move a lease out of s: released, or
// quarantined (its slots out of circulation for ever).
func (s State) Terminal() bool { return fsm.State(s).Terminal() }

// Disposition is a lease's physical disposition (SPEC §4 rule 19), in the
// reference's words: whether anything — its backend, or a local copy — may
// still touch its memory. The outcome says what happened to the transfer;
// the disposition says whether the memory may be reused, and only
// DispositionNotExposed and the two quiesced dispositions say yes
// (Reusable). It is read from the lifecycle's table, the lease's marks and its
// outcome (docs/states.md lists each state's).
type Disposition uint8

// The physical dispositions.
const (
	DispositionNotExposed      = Disposition(fsm.NotExposed)      // nothing was ever handed the memory, and nothing touches it
	DispositionActive          = Disposition(fsm.Active)          // an accessor may be touching it and its outcome is pending
	DispositionQuiescing       = Disposition(fsm.Quiescing)       // the outcome is latched; the end of an accessor's access is awaited
	DispositionQuiescedSuccess = Disposition(fsm.QuiescedSuccess) // every accessor's access is proven over, after a transfer that did not fail
	DispositionQuiescedFailure = Disposition(fsm.QuiescedFailure) // every accessor's access is proven over, after a transfer that failed
	DispositionInDoubt         = Disposition(fsm.InDoubt)         // an accessor's end can never be proven: never reusable
)

// NumDispositions is the number of physical dispositions.
const NumDispositions = int(fsm.NumPhysical)

// String returns the disposition as the reference spells it: NOT_EXPOSED,
// ACTIVE, QUIESCING, QUIESCED_SUCCESS, QUIESCED_FAILURE or IN_DOUBT.
func (d Disposition) String() string { return fsm.Physical(d).String() }

// Reusable reports whether the disposition proves that the lease's memory may
// be reused (the reference's is_reusable): not exposed, or quiesced.
func (d Disposition) Reusable() bool { return fsm.Physical(d).Reusable() }

// Logical is what a cancel did to the lease's logical lifecycle, in the
// reference's words (lifecycle.py, LogicalDisposition). It never says whether
// the memory may be reused — CancelResult.Physical does: a cancel accepted
// while the backend may still be writing leaves memory that is not reusable
// yet. The zero Logical is no answer, so that a CancelResult never filled in
// claims nothing (SafeToReuse is false for it).
type Logical uint8

// The logical answers of a cancel.
const (
	// LogicalAccepted: the cancel was taken. Cancelled (not by the peer) is
	// latched at once — for a submission already handed out, once the
	// backend answered it — and a lease never submitted is withdrawn.
	LogicalAccepted Logical = iota + 1
	// LogicalAlreadyTerminal: the lease is known and there was nothing left
	// to cancel — its outcome already latched, its access already proven
	// over, or it is already released or quarantined. Nothing changed.
	LogicalAlreadyTerminal
	// LogicalNotFound: the handle names no lease the engine can still read:
	// never issued, or retired and no longer among the KeepReleased leases
	// kept. Nothing changed.
	LogicalNotFound
	// LogicalRejected: the engine refused the call without looking at the
	// lease — it halted. Nothing changed.
	LogicalRejected
)

var logicalNames = [...]string{LogicalAccepted: "ACCEPTED", LogicalAlreadyTerminal: "ALREADY_TERMINAL",
	LogicalNotFound: "NOT_FOUND", LogicalRejected: "REJECTED"}

// String returns the answer as the reference spells it: ACCEPTED,
// ALREADY_TERMINAL, NOT_FOUND or REJECTED (logical(N) for anything else, the
// zero Logical included).
func (l Logical) String() string {
	if l >= LogicalAccepted && int(l) < len(logicalNames) {
		return logicalNames[l]
	}
	return fmt.Sprintf("logical(%d)", uint8(l))
}

// CancelResult is what a cancel answers, the logical and the physical result
// apart, as the reference's CancelResult does: Logical says what the cancel
// did, Physical whether anything may still touch the lease's memory right
// after it. Accepting a cancel proves nothing about access: a submitted
// lease's memory stays unreusable (ACTIVE, QUIESCING) until its backend's
// Quiesce answers true; only a lease never exposed is NOT_EXPOSED at once.
type CancelResult struct {
	// Logical is what the cancel did: ACCEPTED with a nil error, else the
	// refusal's answer (ALREADY_TERMINAL, NOT_FOUND, REJECTED).
	Logical Logical
	// Physical is the lease's disposition when the cancel returned: for a
	// lease the engine can still read (live, or released and kept), its
	// LeaseInfo.Disposition; for a handle it cannot name, IN_DOUBT — the
	// engine never claims reuse of memory it cannot see.
	Physical Disposition
	// Retryable reports that a later cancel of the same handle could be
	// accepted. Every refusal of the engine is final — a latched outcome
	// stays latched (no state that refuses a cancel leads back to one that
	// takes it: TestNoRefusedCancelIsAcceptedLater walks the table), a
	// retired handle never names a lease again, a halted engine never runs
	// again — so the engine always answers false. The field is the
	// reference's, whose callers branch on it.
	Retryable bool
	// Reason says why, in words: what the acceptance left to prove, or the
	// refusal's error.
	Reason string
}

// SafeToReuse reports whether the lease's memory may be reused now: the
// physical disposition is reusable (NOT_EXPOSED or QUIESCED_*), as the
// reference's safe_to_reuse says, whatever the logical answer was. A result
// with no logical answer (the zero CancelResult) is never safe.
func (r CancelResult) SafeToReuse() bool {
	return r.Logical != 0 && r.Physical.Reusable()
}
