package readiness

import "github.com/kvready/kvready/readiness/core"

// The lease vocabulary is the core's; the runner adds goroutines, not types.
// These aliases let an embedding import one package.
type (
	// Kind says which way a lease's content moves: Fetch or Publish.
	Kind = core.Kind
	// Row is one block of one layer group a request moves.
	Row = core.Row
	// Request asks for one lease.
	Request = core.Request
	// Handle names a lease at one generation.
	Handle = core.Handle
	// LeaseInfo describes a lease as the engine sees it.
	LeaseInfo = core.LeaseInfo
	// OutcomeKind is the logical outcome latched for a lease.
	OutcomeKind = core.OutcomeKind
	// Transition is one move of one lease, for tracing.
	Transition = core.Transition
	// Containment is the signal raised when a lease is contained.
	Containment = core.Containment
	// Stats is a snapshot of the counters.
	Stats = core.Stats
	// BackendFaults counts what one backend did that the contract forbids.
	BackendFaults = core.BackendFaults
	// Histogram counts durations in power-of-two buckets.
	Histogram = core.Histogram
	// GroupSlots is where the slots of one pool group are.
	GroupSlots = core.GroupSlots
	// GroupBlocks is one layer group's arrived block ordinals.
	GroupBlocks = core.GroupBlocks
	// InvariantError is why an engine halted on a broken safety invariant.
	InvariantError = core.InvariantError
	// FatalError is why an engine under the fatal containment policy halted.
	FatalError = core.FatalError
)

// The kinds of lease.
const (
	Fetch   = core.Fetch
	Publish = core.Publish
)

// The latched outcomes.
const (
	NoOutcome = core.NoOutcome
	Served    = core.Served
	Partial   = core.Partial
	Missed    = core.Missed
	Failed    = core.Failed
	Cancelled = core.Cancelled
	Rejected  = core.Rejected
	TimedOut  = core.TimedOut
	Violation = core.Violation
)

// The errors, as the core defines them.
var (
	ErrStaleHandle     = core.ErrStaleHandle
	ErrClosed          = core.ErrClosed
	ErrDeviceLost      = core.ErrDeviceLost
	ErrNotReady        = core.ErrNotReady
	ErrInvalidRequest  = core.ErrInvalidRequest
	ErrInvalidEvidence = core.ErrInvalidEvidence
	ErrUngrantable     = core.ErrUngrantable
	ErrHalted          = core.ErrHalted
)

// NumCauses is the number of things that can cause a move (core.NumCauses).
const NumCauses = core.NumCauses

// Cause returns the index in Snapshot.Moves of what caused a move.
var Cause = core.Cause

// CauseName names a cause index as fsm.Step.Cause does.
var CauseName = core.CauseName

// HandleOf unpacks a handle packed by Handle.Uint64.
var HandleOf = core.HandleOf
