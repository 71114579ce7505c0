package fsm

import (
	"slices"

	looplab "github.com/looplab/fsm"
)

// This file is the lifecycle's single source of truth: every state, every event,
// and what every (state, event) pair does — a move, a latch or a refusal with its
// reason. The engine runs from the table compiled from it, the tests check it and
// the diagrams are drawn from it. Change the lifecycle here and nowhere else.

// State is where one lease (the staging rows of one fetch or publish) stands.
// A lease has exactly one state; evidence that arrives early is kept in its
// [Latches], not in extra states.
type State uint8

// The states, in lifecycle order. The order is part of the declaration: diagrams
// and docs list states in it.
const (
	Waiting           State = iota // queued for slots, holds none
	Granted                        // slots held, nothing exposed to the backend
	Staged                         // staging ready, not yet submitted
	Requested                      // submitted: outcome pending, backend may touch memory
	Served                         // outcome latched: every requested row delivered
	Partial                        // outcome latched: some rows delivered
	Missed                         // outcome latched: nothing delivered (a miss, not an error)
	Failed                         // outcome latched: Failed, Cancelled, violation or deadline
	LogicallyComplete              // outcome latched and every local copy landed
	AccessFenced                   // backend access proven over and local copies landed
	Quarantined                    // access end cannot be proven: the slots never return
	Released                       // slots back in the allocator, generation bumped
	// NumStates is the number of states; it is not a state.
	NumStates
)

// Event is one piece of evidence about a lease. Its numeric order is the order in
// which latched events are re-delivered.
type Event uint8

// The events.
const (
	SlotsGranted      Event = iota // the allocator lent the lease its slots
	CopiesLanded                   // every local copy of the current phase completed (fired with zero copies too)
	Submitted                      // the backend accepted the fetch or publish
	Rejected                       // the backend answered SubmissionRejected: nothing escaped
	OutcomeServed                  // Delivered naming every requested row
	OutcomePartial                 // Delivered naming some of the requested rows
	OutcomeMissed                  // Delivered naming none of them
	OutcomeFailed                  // the Failed outcome
	OutcomeCancelled               // the Cancelled outcome
	ContractViolation              // a changed answer, or rows that were never asked for
	Deadline                       // the request deadline passed with no outcome
	CopyFailed                     // a local copy failed without a completion record
	AccessProven                   // Quiesce answered true (or nothing was ever exposed)
	AccessUnproven                 // Quiesce answered false or failed
	DrainExpired                   // the drain grace period ran out
	DeviceLost                     // the GPU holding the lease's copies was lost
	ReleaseRequested               // the owner asked for the slots back
	Withdrawn                      // the engine drops a lease that was never submitted
	Close                          // engine shutdown
	// NumEvents is the number of events; it is not an event.
	NumEvents
)

// describedState says what a state means and what may happen to its slots; the
// docs generator prints both.
type describedState struct {
	name, meaning, slots string
}

var stateInfo = [NumStates]describedState{
	Waiting: {"waiting", "Queued for staging slots.",
		"Holds none."},
	Granted: {"granted", "Slots held; nothing exposed to the backend yet.",
		"A publish's device→staging copy may be in flight."},
	Staged: {"staged", "Staging ready, not yet submitted.",
		"Nothing exposed: no backend and no copy touches them."},
	Requested: {"requested", "Submitted; the outcome is pending.",
		"The backend may read or write them at any time."},
	Served: {"served", "Outcome latched: every requested row delivered.",
		"The backend may still touch them; staging→device copies of served rows may be in flight."},
	Partial: {"partial", "Outcome latched: some requested rows delivered.",
		"The backend may still touch them; staging→device copies of served rows may be in flight."},
	Missed: {"missed", "Outcome latched: nothing delivered. A miss, never an error.",
		"The backend may still touch them; no local copy."},
	Failed: {"failed", "Outcome latched: Failed, Cancelled, a contract violation, a rejection or a deadline.",
		"The backend may still touch them; copies of rows served before a violation may be in flight."},
	LogicallyComplete: {"logically_complete", "Outcome latched and every local copy landed: readiness is answerable.",
		"The backend may still touch them until access is proven over."},
	AccessFenced: {"access_fenced", "Backend access proven over and every local copy landed.",
		"Nothing touches them: they may be released."},
	Quarantined: {"quarantined", "The end of access cannot be proven. Terminal.",
		"Out of circulation for ever; never recycled."},
	Released: {"released", "Slots returned to the allocator, generation bumped. Terminal.",
		"Owned by the allocator; any handle to the lease is stale."},
}

var eventInfo = [NumEvents]struct{ name, meaning string }{
	SlotsGranted:      {"slots_granted", "The allocator lent the lease its staging slots."},
	CopiesLanded:      {"copies_landed", "Every local copy of the lease's current phase completed (fired with zero copies too)."},
	Submitted:         {"submitted", "The backend accepted the fetch or publish: it may now touch the slots."},
	Rejected:          {"rejected", "The backend answered SubmissionRejected: nothing escaped."},
	OutcomeServed:     {"outcome_served", "Delivered, naming every requested row."},
	OutcomePartial:    {"outcome_partial", "Delivered, naming some of the requested rows."},
	OutcomeMissed:     {"outcome_missed", "Delivered, naming none of the requested rows."},
	OutcomeFailed:     {"outcome_failed", "The Failed outcome."},
	OutcomeCancelled:  {"outcome_cancelled", "The Cancelled outcome."},
	ContractViolation: {"contract_violation", "The backend changed its answer or served rows it was not asked for."},
	Deadline:          {"deadline", "The request deadline passed with no outcome."},
	CopyFailed:        {"copy_failed", "A local copy failed without a completion record."},
	AccessProven:      {"access_proven", "Quiesce answered true (or the lease was never exposed): the backend will never touch the slots again."},
	AccessUnproven:    {"access_unproven", "Quiesce answered false or failed."},
	DrainExpired:      {"drain_expired", "The drain grace period ran out before access or copies ended."},
	DeviceLost:        {"device_lost", "The GPU holding the lease's local copies was lost (NVML)."},
	ReleaseRequested:  {"release_requested", "The owner asked for the slots back."},
	Withdrawn:         {"withdrawn", "The engine drops a lease that was never submitted."},
	Close:             {"close", "Engine shutdown."},
}

// Refusal reasons shared by several states. Each names why the evidence changes
// nothing, so that an error built from it explains itself.
const (
	whyAlreadyGranted  = "slots already granted"
	whyNotStaged       = "not staged yet: only a staged lease is submitted"
	whyNotSubmitted    = "not submitted: no outcome, violation or deadline can apply"
	whyNotExposed      = "nothing exposed to the backend: no access to prove or drain"
	whyHoldsNothing    = "holds no slots: no local copy or device memory is involved"
	whyStagingReady    = "staging is ready: no local copy in flight"
	whyAlreadyAnswered = "submission already answered"
	whyNoCopyYet       = "no local copy in flight before the outcome"
	whyExposed         = "exposed to the backend: it cannot be withdrawn, only fenced"
	whyOutcomeLatched  = "outcome already latched: the first outcome wins (a changed answer arrives as contract_violation)"
	whyMissStays       = "a latched miss stays a miss; the violation is counted separately"
	whyMissNoCopy      = "a miss copies nothing: no local copy in flight"
	whyFailedLatched   = "outcome already latched as failed"
	whyReadinessFixed  = "readiness already answerable: the outcome stands and a late violation is counted separately"
	whyCopiesLanded    = "every local copy already landed"
	whyFenceStands     = "access already proven over: the fence stands"
	whyFencedRelease   = "already fenced: release it instead"
	whyQuarantined     = "quarantined slots never return: the end of access cannot be proven"
	whyReleased        = "released: the handle is stale"
)

// outcomes is every event that reports a backend outcome, plus the deadline that
// stands in for a missing one.
var outcomes = []Event{OutcomeServed, OutcomePartial, OutcomeMissed, OutcomeFailed, OutcomeCancelled, Deadline}

// outcomesAndViolation adds the contract violation, which only a state that can
// still turn into failed accepts.
var outcomesAndViolation = slices.Concat(outcomes, []Event{ContractViolation})

// declaration is the lifecycle. Moves and latches are looplab/fsm EventDescs (a
// latch is a self-loop: Dst equals its Src); refusals carry their reason. Every
// (state, event) pair must appear exactly once; compile refuses anything else.
var declaration = []block{
	{
		state: Waiting,
		edges: edges(
			move(Waiting, SlotsGranted, Granted),
			// Waiting holds nothing, so leaving it needs no fence.
			move(Waiting, ReleaseRequested, Released),
			move(Waiting, Withdrawn, Released),
			move(Waiting, Close, Released),
		),
		refusals: []refusal{
			refuse(whyHoldsNothing, CopiesLanded, CopyFailed, DeviceLost),
			refuse(whyNotStaged, Submitted, Rejected),
			refuse(whyNotSubmitted, outcomesAndViolation...),
			refuse(whyNotExposed, AccessProven, AccessUnproven, DrainExpired),
		},
	},
	{
		state: Granted,
		edges: edges(
			move(Granted, CopiesLanded, Staged),
			// A publish's device→staging copy that cannot be proven finished may
			// still write into the slots.
			move(Granted, CopyFailed, Quarantined),
			move(Granted, DeviceLost, Quarantined),
			move(Granted, DrainExpired, Quarantined),
			latch(Granted, ReleaseRequested, Withdrawn, Close),
		),
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted),
			refuse(whyNotStaged, Submitted, Rejected),
			refuse(whyNotSubmitted, outcomesAndViolation...),
			refuse(whyNotExposed, AccessProven, AccessUnproven),
		},
	},
	{
		state: Staged,
		edges: edges(
			move(Staged, Submitted, Requested),
			// The engine follows a rejection with access_proven: nothing escaped.
			move(Staged, Rejected, Failed),
			// Never exposed: there is no backend access to prove.
			move(Staged, Withdrawn, AccessFenced),
			latch(Staged, ReleaseRequested, Close),
		),
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted),
			refuse(whyStagingReady, CopiesLanded, CopyFailed, DeviceLost),
			refuse(whyNotSubmitted, outcomesAndViolation...),
			refuse(whyNotExposed, AccessProven, AccessUnproven, DrainExpired),
		},
	},
	{
		state: Requested,
		edges: edges(
			move(Requested, OutcomeServed, Served),
			move(Requested, OutcomePartial, Partial),
			move(Requested, OutcomeMissed, Missed),
			move(Requested, OutcomeFailed, Failed),
			move(Requested, OutcomeCancelled, Failed),
			move(Requested, ContractViolation, Failed),
			move(Requested, Deadline, Failed),
			move(Requested, AccessUnproven, Quarantined),
			move(Requested, DrainExpired, Quarantined),
			// Access may be proven before the outcome arrives; it counts only
			// once the outcome and the local copies are in.
			latch(Requested, AccessProven, ReleaseRequested, Close),
		),
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted),
			refuse(whyAlreadyAnswered, Submitted, Rejected),
			refuse(whyNoCopyYet, CopiesLanded, CopyFailed, DeviceLost),
			refuse(whyExposed, Withdrawn),
		},
	},
	servedBlock(Served),
	servedBlock(Partial),
	{
		state: Missed,
		edges: edges(
			move(Missed, CopiesLanded, LogicallyComplete),
			move(Missed, AccessUnproven, Quarantined),
			move(Missed, DrainExpired, Quarantined),
			latch(Missed, AccessProven, ReleaseRequested, Close),
		),
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted),
			refuse(whyAlreadyAnswered, Submitted, Rejected),
			refuse(whyOutcomeLatched, outcomes...),
			refuse(whyMissStays, ContractViolation),
			refuse(whyMissNoCopy, CopyFailed, DeviceLost),
			refuse(whyExposed, Withdrawn),
		},
	},
	{
		state: Failed,
		edges: edges(
			move(Failed, CopiesLanded, LogicallyComplete),
			move(Failed, CopyFailed, Quarantined),
			move(Failed, DeviceLost, Quarantined),
			move(Failed, AccessUnproven, Quarantined),
			move(Failed, DrainExpired, Quarantined),
			latch(Failed, AccessProven, ReleaseRequested, Close),
		),
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted),
			refuse(whyAlreadyAnswered, Submitted, Rejected),
			refuse(whyFailedLatched, outcomesAndViolation...),
			refuse(whyExposed, Withdrawn),
		},
	},
	{
		state: LogicallyComplete,
		edges: edges(
			move(LogicallyComplete, AccessProven, AccessFenced),
			move(LogicallyComplete, AccessUnproven, Quarantined),
			move(LogicallyComplete, DrainExpired, Quarantined),
			latch(LogicallyComplete, ReleaseRequested, Close),
		),
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted),
			refuse(whyAlreadyAnswered, Submitted, Rejected),
			refuse(whyReadinessFixed, outcomesAndViolation...),
			refuse(whyCopiesLanded, CopiesLanded, CopyFailed, DeviceLost),
			refuse(whyExposed, Withdrawn),
		},
	},
	{
		state: AccessFenced,
		edges: edges(
			move(AccessFenced, ReleaseRequested, Released),
			move(AccessFenced, Close, Released),
		),
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted),
			refuse(whyAlreadyAnswered, Submitted, Rejected),
			refuse(whyReadinessFixed, outcomesAndViolation...),
			refuse(whyCopiesLanded, CopiesLanded, CopyFailed, DeviceLost),
			refuse(whyFenceStands, AccessProven, AccessUnproven, DrainExpired),
			refuse(whyFencedRelease, Withdrawn),
		},
	},
	{
		state:    Quarantined,
		refusals: []refusal{refuse(whyQuarantined, everyEvent()...)},
	},
	{
		state:    Released,
		refusals: []refusal{refuse(whyReleased, everyEvent()...)},
	},
}

// servedBlock declares served and partial, which differ only in how many rows the
// outcome named: both may have staging→device copies of served rows in flight.
func servedBlock(s State) block {
	return block{
		state: s,
		edges: edges(
			move(s, CopiesLanded, LogicallyComplete),
			move(s, CopyFailed, Quarantined),
			move(s, DeviceLost, Quarantined),
			move(s, AccessUnproven, Quarantined),
			move(s, DrainExpired, Quarantined),
			// A changed answer or an unasked name discovered after the outcome.
			move(s, ContractViolation, Failed),
			latch(s, AccessProven, ReleaseRequested, Close),
		),
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted),
			refuse(whyAlreadyAnswered, Submitted, Rejected),
			refuse(whyOutcomeLatched, outcomes...),
			refuse(whyExposed, Withdrawn),
		},
	}
}

// block is everything declared about one state.
type block struct {
	state    State
	edges    []looplab.EventDesc // moves, and latches as self-loops
	refusals []refusal
}

// refusal declares that events change nothing in a state, and why.
type refusal struct {
	reason string
	events []Event
}

func refuse(reason string, events ...Event) refusal {
	return refusal{reason: reason, events: events}
}

func move(src State, e Event, dst State) []looplab.EventDesc {
	return []looplab.EventDesc{{Name: e.String(), Src: []string{src.String()}, Dst: dst.String()}}
}

// latch declares events that are recorded in src and re-delivered after a later
// move. looplab/fsm spells that as a self-loop.
func latch(src State, events ...Event) []looplab.EventDesc {
	out := make([]looplab.EventDesc, 0, len(events))
	for _, e := range events {
		out = append(out, looplab.EventDesc{Name: e.String(), Src: []string{src.String()}, Dst: src.String()})
	}
	return out
}

func edges(groups ...[]looplab.EventDesc) []looplab.EventDesc {
	var out []looplab.EventDesc
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

func everyEvent() []Event {
	out := make([]Event, NumEvents)
	for i := range out {
		out[i] = Event(i)
	}
	return out
}
