package readiness

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/staging"
)

// Kind says which way a lease's content moves.
type Kind uint8

const (
	// Fetch: the backend writes content into the staging slots; once its
	// access is proven over, the engine copies the served rows to the device.
	Fetch Kind = iota + 1
	// Publish: the engine copies device rows into the staging slots, then the
	// backend reads them.
	Publish
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case Fetch:
		return "fetch"
	case Publish:
		return "publish"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Request asks for one lease.
type Request struct {
	Kind Kind
	// Rows to move. Within a layer group, blocks must be distinct and
	// increasing; every row of a fetch is a row readiness counts.
	Rows []staging.Row
	// KnownBlocks is the number of leading blocks the request already has: a
	// fetch's rows start at or after it (a fetch never fetches what it knows).
	// A publish ignores it.
	KnownBlocks int
	// Deadline for the outcome. Zero means RequestTimeout after the submission
	// (the clock starts when the backend is handed the slots, not while the
	// lease waits for them). A deadline that passes before the submission fails
	// the lease with a timeout without exposing anything.
	Deadline time.Time
	// IsLast is passed to the backend as the extent's sequence-end flag.
	IsLast bool
	// Layerwise makes a publish take its device→staging copies layer by
	// layer, as the owner reports each layer computed ([Engine.Computed]),
	// each behind the owner's event (SPEC §4 rule 16): the publish is
	// submitted once every layer landed in staging. Without it a publish
	// copies its rows whole when granted. A fetch's copies go layer by
	// layer anyway (Config.Layers); a fetch that sets it is refused.
	Layerwise bool
}

// Handle names a lease at one generation. A handle whose lease was retired
// (its record reused for a later lease) is refused with ErrStaleHandle; it
// never reaches the newer lease. The zero Handle is never issued.
type Handle struct {
	id, gen uint32
}

// String formats the handle as lease#id.gen.
func (h Handle) String() string { return fmt.Sprintf("lease#%d.%d", h.id, h.gen) }

// IsZero reports the zero Handle, which names no lease.
func (h Handle) IsZero() bool { return h.gen == 0 }

// Index returns the index of the record the handle names: small, dense, and
// reused by later leases (at another generation). Embedders index their own
// per-lease tables by it.
func (h Handle) Index() int { return int(h.id) }

// Uint64 packs the handle into one integer (the C ABI's lease handle): the
// generation in the high half, the record index in the low half. The zero
// Handle packs to 0.
func (h Handle) Uint64() uint64 { return uint64(h.gen)<<32 | uint64(h.id) }

// HandleOf unpacks a handle packed by Uint64. Any integer unpacks to some
// Handle; one that was never issued, or whose lease was retired, is refused
// with ErrStaleHandle wherever it is used.
func HandleOf(v uint64) Handle { return Handle{id: uint32(v), gen: uint32(v >> 32)} }

// Errors returned by the core. Each is wrapped with the details of the case.
var (
	// ErrStaleHandle: the handle's lease was retired, or never existed.
	ErrStaleHandle = errors.New("readiness: stale lease handle")
	// ErrClosed: the engine is closed and admits no new leases.
	ErrClosed = errors.New("readiness: engine closed")
	// ErrDeviceLost: the device is lost; no lease can copy to or from it.
	ErrDeviceLost = errors.New("readiness: device lost")
	// ErrNotReady: readiness is not answerable for the lease (yet).
	ErrNotReady = errors.New("readiness: not ready")
	// ErrLayerFailed: a copy of the layer waited for, or of an earlier one,
	// failed: it never becomes ready (WaitLayer).
	ErrLayerFailed = errors.New("readiness: layer copy failed")
	// ErrRefused: the lifecycle refuses the evidence or the owner's request
	// where the lease stands (a duplicate, late evidence, a layer reported
	// before the grant): the table's declared refusal, which changes
	// nothing. The error's message is the table's reason.
	ErrRefused = errors.New("readiness: refused by the lifecycle")
	// ErrInvalidRequest: the request was malformed; nothing was lent.
	ErrInvalidRequest = errors.New("readiness: invalid request")
	// ErrInvalidEvidence: the evidence was malformed (an unknown kind, a row
	// out of range); nothing changed.
	ErrInvalidEvidence = errors.New("readiness: invalid evidence")
	// ErrUngrantable: quarantine left no contiguous run of slots that could
	// ever hold the request; nothing was lent. It is staging.ErrUngrantable.
	ErrUngrantable = staging.ErrUngrantable
	// ErrHalted: the engine stopped because a safety invariant broke (a bug
	// in kvready) or a containment under the fatal policy. It releases
	// nothing any more; every call that would change anything is refused
	// with an error wrapping it and the cause (errors.As an *InvariantError
	// or a *FatalError). The manager should restart.
	ErrHalted = errors.New("readiness: engine halted")
)

// InvariantError is why an engine halted on a broken safety invariant: a
// state the lifecycle's guarantees rule out, caught where it would have done
// harm (freeing slots a backend or a copy may still touch, reusing an extent a
// backend may still read, returning slots the allocator did not lend). It is
// never a reason to free memory: the engine stops instead.
type InvariantError struct {
	// What broke.
	What  string
	Lease Handle
}

// Error names the invariant and the lease.
func (e *InvariantError) Error() string {
	return fmt.Sprintf("readiness: invariant broken (%v): %s; the engine halted and releases nothing", e.Lease, e.What)
}

// FatalError is why an engine under the fatal containment policy halted: a
// lease was contained (its access or a copy never proven over).
type FatalError struct {
	Containment Containment
}

// Error names the contained lease and why.
func (e *FatalError) Error() string {
	return fmt.Sprintf("readiness: %v contained under the fatal policy (%s); the engine halted and releases nothing",
		e.Containment.Lease, e.Containment.Reason)
}

// OutcomeKind is the logical outcome the engine latched for a lease: a miss
// is its own kind, never a failure, and a cancellation is its own kind, never
// folded into a failure. Its values are the table's results (package fsm
// declares them; the engine latches them).
type OutcomeKind uint8

// The latched outcomes.
const (
	NoOutcome = OutcomeKind(fsm.NoResult)  // no outcome latched (yet)
	Served    = OutcomeKind(fsm.Delivered) // every row delivered
	Partial   = OutcomeKind(fsm.Partly)    // some rows delivered
	Missed    = OutcomeKind(fsm.Miss)      // nothing delivered: a miss (fetch) or an unaccepted publication
	Failed    = OutcomeKind(fsm.Failure)   // the backend's Failed, a submission that escaped, or staging that could not be filled
	Cancelled = OutcomeKind(fsm.Cancel)    // Cancelled by the peer (LeaseInfo.ByPeer) or locally (Cancel, Close)
	Rejected  = OutcomeKind(fsm.Rejection) // SubmissionRejected: nothing escaped
	TimedOut  = OutcomeKind(fsm.Timeout)   // no outcome before the deadline
	Violation = OutcomeKind(fsm.Violation) // the backend broke the contract: nothing it said is trusted
)

// NumOutcomes is the number of outcome kinds: Stats.Outcomes is indexed by
// OutcomeKind, from 0 to NumOutcomes-1.
const NumOutcomes = int(fsm.NumResults)

// String names the outcome: none, served, partial, missed, failed, cancelled,
// rejected, timeout or violation.
func (o OutcomeKind) String() string { return fsm.Result(o).String() }

// Failure reports an outcome that is a failure of some kind: failed,
// cancelled, rejected, timed out or a violation (never a miss).
func (o OutcomeKind) Failure() bool { return fsm.Result(o).Failure() }

// LeaseInfo describes a lease as the engine sees it. It is derived from the
// lease's record by one function, the same before and after the release.
type LeaseInfo struct {
	Handle  Handle
	Kind    Kind
	State   State
	Outcome OutcomeKind
	// ByPeer is set for a cancellation the peer made.
	ByPeer bool
	// Reason says why the lease failed, was cancelled, contained or refused a
	// copy, or why its access is still unproven.
	Reason string
	// ReleaseRequested reports that the owner released the lease and it waits
	// for its fence.
	ReleaseRequested bool
	// Ungrantable reports a waiting lease taken out of the line because
	// quarantine left no contiguous run of slots that could ever hold it. It
	// holds nothing; release it.
	Ungrantable bool
	// Exposed reports that the backend was handed the lease's slots.
	Exposed bool
	// Fenced reports that the backend's access was proven over (or never
	// began).
	Fenced bool
	// Contained reports that the lease's containment deadline passed with
	// something unproven: it is contained, quarantined, or — under the
	// Recover policy — was proven over after all.
	Contained bool
	// CancelDisposition is what the backend answered the engine's one cancel
	// request (zero: none was made, or it has not answered); CancelError is
	// set instead when the request failed or panicked. Neither changes the
	// outcome or the collection of access evidence.
	CancelDisposition contract.CancelDisposition
	CancelError       string
	// Rows is the number of rows the lease moves.
	Rows int
	// Disposition is the lease's physical disposition (rule 19): whether
	// anything may still touch its memory. It is apart from the outcome: a
	// cancelled or failed lease is QUIESCING until its backend's access is
	// proven over, and its memory is reusable only then.
	Disposition Disposition
}

// Transition is one move of one lease, for tracing (Config.OnTransition).
type Transition struct {
	Lease    Handle
	From, To State
	// Cause is what caused the move, as an index into Snapshot.Moves;
	// CauseName names it.
	Cause int
	// Outcome is the outcome the move latched (NoOutcome: unchanged).
	Outcome OutcomeKind

	step fsm.Step // the table's whole step, for the transcripts (export_test.go)
}

// Containment is the signal raised when a lease's containment deadline passes
// with backend access or a local copy unproven: its memory is held out of
// circulation (for ever under the default policy), and the process is in a
// state an operator must know about.
type Containment struct {
	Lease Handle
	// Slots is the number of staging slots quarantined.
	Slots int
	// Reason says what stayed unproven.
	Reason string
	// Deadline is the containment deadline that passed: the request deadline
	// plus the drain grace, or earlier if the drain started earlier.
	Deadline time.Time
}

// refusedError is the lifecycle's refusal of evidence in a lease's state: its
// message is the table's reason, and errors.Is finds ErrRefused.
type refusedError struct{ err error }

func (r refusedError) Error() string   { return r.err.Error() }
func (r refusedError) Unwrap() []error { return []error{ErrRefused, r.err} }
