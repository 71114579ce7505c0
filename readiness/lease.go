package readiness

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/readiness/core"
	"github.com/kvready/kvready/staging"
)

// The lease vocabulary an embedder reads and writes. The core (package
// readiness/core) and the table (package fsm) keep their own, for those who
// drive the core without the runner; the types here are defined in this
// package's own terms — so that neither the code nor the documentation of an
// embedding names the layers behind the engine — with the same
// representation as theirs where the data is the same (Kind, Handle, State,
// OutcomeKind, Policy: a conversion, free), and copied field by field where
// it is read differently (LeaseInfo, Stats, Transition, Containment). Either
// way the hot paths allocate nothing for it.

// Kind says which way a lease's content moves: Fetch or Publish.
type Kind uint8

const (
	// Fetch: the backend writes content into the staging slots; once its
	// access is proven over, the engine copies the served rows to the device.
	Fetch = Kind(core.Fetch)
	// Publish: the engine copies device rows into the staging slots, then the
	// backend reads them.
	Publish = Kind(core.Publish)
)

// String names the kind: fetch or publish.
func (k Kind) String() string { return core.Kind(k).String() }

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
	// each behind the owner's compute event (SPEC §4 rule 16); it is
	// submitted once every layer landed in staging. Without it a publish
	// copies its rows whole once granted. A fetch's copies go layer by layer
	// anyway (Config.Layers); a fetch that sets it is refused.
	Layerwise bool
}

func (r *Request) core() core.Request {
	return core.Request{Kind: core.Kind(r.Kind), Rows: r.Rows, KnownBlocks: r.KnownBlocks, Deadline: r.Deadline, IsLast: r.IsLast, Layerwise: r.Layerwise}
}

// Handle names a lease at one generation. A handle whose lease was retired
// (its record reused for a later lease) is refused with ErrStaleHandle; it
// never reaches the newer lease. The zero Handle is never issued.
type Handle struct{ h core.Handle }

// String formats the handle as lease#id.gen.
func (h Handle) String() string { return h.h.String() }

// IsZero reports the zero Handle, which names no lease.
func (h Handle) IsZero() bool { return h.h.IsZero() }

// Index returns the index of the record the handle names: small, dense, and
// reused by later leases (at another generation). Embedders index their own
// per-lease tables by it.
func (h Handle) Index() int { return h.h.Index() }

// Uint64 packs the handle into one integer (the C ABI's lease handle): the
// generation in the high half, the record index in the low half. The zero
// Handle packs to 0.
func (h Handle) Uint64() uint64 { return h.h.Uint64() }

// HandleOf unpacks a handle packed by Handle.Uint64. Any integer unpacks to
// some Handle; one that was never issued, or whose lease was retired, is
// refused with ErrStaleHandle wherever it is used.
func HandleOf(v uint64) Handle { return Handle{core.HandleOf(v)} }

// State is where a lease stands in its lifecycle (docs/states.md). Its
// groups — Held, Exposed, Answerable, Pending, Terminal — are what an embedder
// decides on; they are read from the lifecycle's table, never listed by hand.
type State uint8

// NumStates is the number of states: Stats.Leases and Report.Held are
// indexed by State, from 0 to NumStates-1.
const NumStates = int(fsm.NumStates)

// String returns the state's snake_case name, as docs/states.md spells it.
func (s State) String() string { return fsm.State(s).String() }

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

// OutcomeKind is the logical outcome the engine latched for a lease: a miss
// is its own kind, never a failure, and a cancellation is its own kind,
// never folded into a failure.
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

// LeaseInfo describes a lease as the engine sees it: the same before and
// after the release.
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
}

func leaseInfo(i core.LeaseInfo) LeaseInfo {
	return LeaseInfo{Handle: Handle{i.Handle}, Kind: Kind(i.Kind), State: State(i.State), Outcome: OutcomeKind(i.Outcome),
		ByPeer: i.ByPeer, Reason: i.Reason, ReleaseRequested: i.ReleaseRequested, Ungrantable: i.Ungrantable,
		Exposed: i.Exposed, Fenced: i.Fenced, Contained: i.Contained,
		CancelDisposition: i.CancelDisposition, CancelError: i.CancelError, Rows: i.Rows}
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
}

func transition(t core.Transition) Transition {
	return Transition{Lease: Handle{t.Lease}, From: State(t.From), To: State(t.To), Cause: core.Cause(t.Step), Outcome: OutcomeKind(t.Result)}
}

// NumCauses is the number of things that can cause a move: each event, then
// each guarded completion. Snapshot.Moves is indexed by cause.
const NumCauses = core.NumCauses

// CauseName names cause i — the event's name, or the guard's in brackets —
// and returns "" for an index out of range.
func CauseName(i int) string { return core.CauseName(i) }

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

func containment(c core.Containment) Containment {
	return Containment{Lease: Handle{c.Lease}, Slots: c.Slots, Reason: c.Reason, Deadline: c.Deadline}
}

// Policy is what the engine does when a lease's containment deadline passes
// with access or a local copy unproven (SPEC §4 rule 5). Every policy raises
// the containment signal once and never frees what is unproven.
type Policy uint8

const (
	// Quarantine (the default, as the reference does with one lease): the
	// lease's slots leave circulation for ever; the rest of the engine goes
	// on.
	Quarantine = Policy(core.Quarantine)
	// Fatal (the reference's stance: "a fatal lifecycle decision refuses
	// teardown even if late evidence arrives"): the slots are quarantined and
	// the engine halts — it releases nothing any more and reports fatal
	// (ErrHalted wrapping a *FatalError); the manager restarts.
	Fatal = Policy(core.Fatal)
	// Recover (beyond the reference, opt-in): a contained lease whose backend
	// returned an attempt keeps being asked at a slow cadence (RecoverEvery),
	// and a later Quiesce true — with every copy landed — releases its slots,
	// counted and signalled as recovered. Never for a lost device, a local
	// copy that failed, or a submission that escaped without an attempt:
	// those are quarantined as under Quarantine.
	Recover = Policy(core.Recover)
)

// String names the policy: quarantine, fatal or recover.
func (p Policy) String() string { return core.Policy(p).String() }

// ParsePolicy returns the policy named name: quarantine, fatal or recover.
func ParsePolicy(name string) (Policy, error) {
	p, err := core.ParsePolicy(name)
	return Policy(p), err
}

// Errors the engine returns. Each is wrapped with the details of the case.
var (
	// ErrStaleHandle: the handle's lease was retired, or never existed.
	ErrStaleHandle = core.ErrStaleHandle
	// ErrClosed: the engine is closed and admits no new leases.
	ErrClosed = core.ErrClosed
	// ErrDeviceLost: the device is lost; no lease can copy to or from it.
	ErrDeviceLost = core.ErrDeviceLost
	// ErrNotReady: readiness is not answerable for the lease (yet).
	ErrNotReady = core.ErrNotReady
	// ErrLayerFailed: a copy of the layer waited for, or of an earlier one,
	// failed: it never becomes ready (WaitLayer).
	ErrLayerFailed = errors.New("readiness: layer copy failed")
	// ErrInvalidRequest: the request was malformed; nothing was lent.
	ErrInvalidRequest = core.ErrInvalidRequest
	// ErrUngrantable: quarantine left no contiguous run of slots that could
	// ever hold the request; nothing was lent.
	ErrUngrantable = core.ErrUngrantable
	// ErrHalted: the engine stopped because a safety invariant broke (a bug
	// in kvready) or a containment under the fatal policy. It releases
	// nothing any more; every call that would change anything is refused
	// with an error wrapping it and the cause (errors.As an *InvariantError
	// or a *FatalError). The manager should restart.
	ErrHalted = core.ErrHalted
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
	return (&core.InvariantError{What: e.What, Lease: e.Lease.h}).Error()
}

// FatalError is why an engine under the fatal containment policy halted: a
// lease was contained (its access or a copy never proven over).
type FatalError struct {
	Containment Containment
}

// Error names the contained lease and why.
func (e *FatalError) Error() string {
	c := e.Containment
	return (&core.FatalError{Containment: core.Containment{Lease: c.Lease.h, Slots: c.Slots, Reason: c.Reason, Deadline: c.Deadline}}).Error()
}

// haltError restates the core's halt in this package's terms, so that an
// embedder's errors.As finds the *InvariantError or *FatalError it can name.
func haltError(err error) error {
	var ie *core.InvariantError
	var fe *core.FatalError
	switch {
	case errors.As(err, &ie):
		return fmt.Errorf("%w: %w", ErrHalted, &InvariantError{What: ie.What, Lease: Handle{ie.Lease}})
	case errors.As(err, &fe):
		return fmt.Errorf("%w: %w", ErrHalted, &FatalError{Containment: containment(fe.Containment)})
	}
	return err
}

// LayerStatus is where one layer of a fetch stands (Engine.LayerReadiness).
type LayerStatus uint8

// The layer statuses.
const (
	LayerPending = LayerStatus(core.LayerPending) // its copies are not known to have landed yet
	LayerReady   = LayerStatus(core.LayerReady)   // its event completed, or the lease's readiness is answerable
	LayerFailed  = LayerStatus(core.LayerFailed)  // a copy of it or of an earlier layer failed: never ready
	LayerNever   = LayerStatus(core.LayerNever)   // quarantined, or withdrawn before it was served
)

// String names the status: pending, ready, failed or never.
func (s LayerStatus) String() string { return core.LayerStatus(s).String() }

// LayersOf returns Config.Layers for layout: for each layer group, in the
// layout's order, its layers and the byte spans each occupies in a slot laid
// out as the group's pool group's. The engine stages layer group g in memory
// group g (Row.Group is the local layer group), whatever pool group the
// layout puts it in: layer groups that share a pool group each get their own
// memory group, with that pool group's slot width. An invalid layout is
// refused by its own validation.
func LayersOf(layout staging.Layout) ([][]staging.LayerSpans, error) { return core.LayersOf(layout) }
