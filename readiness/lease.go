package readiness

import "github.com/kvready/kvready/fsm"

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
