package fsm

// This file is the lifecycle's single source of truth (SPEC §4, revision 2):
// every state, every event, every guard, and what every (state, event) pair
// does — a move, a latch or a refusal with its reason — plus the guarded
// completion moves a state takes the moment it is entered. The engine runs from
// the table compiled from it, the diagrams and docs/states.md are drawn from it,
// and the tests check it against an oracle written independently of it. Change
// the lifecycle here and nowhere else.

// State is where one lease (the staging rows of one fetch or publish) stands.
// A lease has exactly one state; evidence that arrives early is kept in its
// [Latches], not in extra states.
type State uint8

// The states, in lifecycle order. The order is part of the declaration: the
// diagrams and the docs list states in it.
const (
	Waiting           State = iota // queued for slots, holds none
	Granted                        // slots held; a publish's device→staging copies in flight
	Staged                         // staging ready; the extent is handed to the backend
	Requested                      // submitted: outcome pending, the backend may touch the slots
	Served                         // outcome latched: every requested row delivered
	Partial                        // outcome latched: some rows delivered
	Missed                         // outcome latched: nothing delivered (a miss, not an error)
	Failed                         // outcome latched: failed, cancelled, rejected, timed out or a violation
	AccessFenced                   // backend access proven over; staging→device copies of served rows in flight
	CopyUnproven                   // a local copy failed without a completion record: only containment follows
	LogicallyComplete              // every local copy landed: readiness is answerable
	Quarantined                    // access end can never be proven: the slots never return
	Released                       // slots back in the allocator
	// NumStates is the number of states; it is not a state.
	NumStates
)

// Event is one piece of evidence about a lease, or an owner's request. Its
// numeric order is the order in which latched events are re-delivered.
type Event uint8

// The events.
const (
	SlotsGranted      Event = iota // the allocator lent the lease its slots
	SlotsUnavailable               // quarantine left no contiguous run that could ever hold the lease
	CopiesLanded                   // the event recorded after the lease's local copies completed
	CopyRefused                    // the device refused a copy before it started: nothing touches memory
	CopyFailed                     // a local copy failed without a completion record, or its device was lost
	Submitted                      // the backend accepted the submission and returned an attempt
	Rejected                       // the backend answered SubmissionRejected: nothing escaped
	SubmitEscaped                  // the submission failed without an attempt: something may have escaped
	OutcomeServed                  // Delivered, naming every requested row
	OutcomePartial                 // Delivered, naming some of the requested rows
	OutcomeMissed                  // Delivered, naming none of them
	OutcomeFailed                  // the Failed outcome
	OutcomeCancelled               // the Cancelled outcome (the peer's, or the owner's local cancel)
	ContractViolation              // a changed answer, names never asked for, or an answer that is no outcome
	Deadline                       // the request deadline passed with no outcome
	AccessProven                   // Quiesce answered true: the backend never touches the slots again
	AccessUnproven                 // Quiesce answered false, failed or timed out: the drain has started
	Containment                    // the containment deadline passed with access or a copy unproven
	ReleaseRequested               // the owner is done with the lease
	Close                          // engine shutdown
	// NumEvents is the number of events; it is not an event.
	NumEvents
)

// Guard is a fact about a lease that a completion move tests the moment the
// lease enters a state. Guards read only what the lease already holds — its
// kind, its latches, what it was exposed to — never a clock the engine would
// have to invent an event for.
type Guard uint8

// The guards.
const (
	IsFetch           Guard = iota // a fetch: nothing is copied into staging before submission
	Withdrawn                      // released or closed before it was ever submitted
	StagingIncomplete              // a device→staging copy was refused: the staging rows are not all valid
	DeadlinePassed                 // the request deadline passed before the submission
	NeverExposed                   // the backend never saw the slots (rejected, or never submitted)
	NothingToCopy                  // no staging→device copy to issue: a publish, nothing served, or the owner released it
	// NumGuards is the number of guards; it is not a guard.
	NumGuards
)

// Result is the logical outcome a move latches for the lease. It is declared
// with the move, so the engine never maps states to outcomes by hand.
type Result uint8

// The results. A miss is its own result, never a failure; a cancellation is
// its own result, never folded into a failure.
const (
	NoResult  Result = iota
	Delivered        // served: every requested row delivered
	Partly           // partial: some rows delivered
	Miss             // nothing delivered: a miss (fetch) or an unaccepted publication
	Failure          // the backend's Failed outcome, or a submission that escaped without an attempt
	Cancel           // Cancelled, by the peer or locally (the owner, or Close)
	Rejection        // SubmissionRejected: nothing escaped
	Timeout          // no outcome before the request deadline
	Violation        // the backend broke the contract; nothing it said is trusted
	// NumResults is the number of results; it is not a result.
	NumResults
)

var stateInfo = [NumStates]describedState{
	Waiting: {"waiting", "Queued for staging slots, in arrival order.",
		"Holds none."},
	Granted: {"granted", "Slots held; nothing exposed to the backend yet.",
		"A publish's device→staging copies may be in flight."},
	Staged: {"staged", "Staging ready; the extent is handed to the backend.",
		"Exposed from the moment the backend is called."},
	Requested: {"requested", "Submitted; the outcome is pending.",
		"The backend may read or write them at any time."},
	Served: {"served", "Outcome latched: every requested row delivered. Nothing copied yet.",
		"The backend may still touch them until Quiesce answers true."},
	Partial: {"partial", "Outcome latched: some requested rows delivered. Nothing copied yet.",
		"The backend may still touch them until Quiesce answers true."},
	Missed: {"missed", "Outcome latched: nothing delivered. A miss, never an error.",
		"The backend may still touch them until Quiesce answers true."},
	Failed: {"failed", "Outcome latched: failed, cancelled, rejected, timed out or a contract violation. The drain has started.",
		"The backend may still touch them until Quiesce answers true (a rejection proves it never did)."},
	AccessFenced: {"access_fenced", "Backend access proven over. Entering it issues the staging→device copies of the served whole rows.",
		"No backend touches them; the copies issued on entry may still read them."},
	CopyUnproven: {"copy_unproven", "A local copy failed without a completion record, or its device was lost.",
		"The copy may still touch them: they are held until containment."},
	LogicallyComplete: {"logically_complete", "Every local copy landed: readiness is answerable.",
		"Nothing touches them: they return once the owner releases the lease."},
	Quarantined: {"quarantined", "The end of access can never be proven. Terminal.",
		"Out of circulation for ever, with everything the backend was handed."},
	Released: {"released", "Slots returned to the allocator. Terminal; readiness stays readable.",
		"Owned by the allocator."},
}

var eventInfo = [NumEvents]struct{ name, meaning string }{
	SlotsGranted:      {"slots_granted", "The allocator lent the lease its staging slots."},
	SlotsUnavailable:  {"slots_unavailable", "Quarantine left no contiguous run of slots that could ever hold the lease."},
	CopiesLanded:      {"copies_landed", "The event recorded after the lease's local copies completed."},
	CopyRefused:       {"copy_refused", "The device refused a copy before it started: nothing touches the memory."},
	CopyFailed:        {"copy_failed", "A local copy failed without a completion record, or its device was lost."},
	Submitted:         {"submitted", "The backend accepted the fetch or publish and returned an attempt."},
	Rejected:          {"rejected", "The backend answered SubmissionRejected: nothing escaped."},
	SubmitEscaped:     {"submit_escaped", "The submission failed without an attempt (an error, a panic): something may have escaped."},
	OutcomeServed:     {"outcome_served", "Delivered, naming every requested row."},
	OutcomePartial:    {"outcome_partial", "Delivered, naming some of the requested rows."},
	OutcomeMissed:     {"outcome_missed", "Delivered, naming none of the requested rows."},
	OutcomeFailed:     {"outcome_failed", "The Failed outcome."},
	OutcomeCancelled:  {"outcome_cancelled", "The Cancelled outcome: the peer's, or the owner's local cancel."},
	ContractViolation: {"contract_violation", "A changed answer, names that were never asked for, or an answer that is no outcome."},
	Deadline:          {"deadline", "The request deadline passed with no outcome."},
	AccessProven:      {"access_proven", "Quiesce answered true: the backend will never touch the slots again."},
	AccessUnproven:    {"access_unproven", "Quiesce answered false, failed or timed out: cannot be established yet."},
	Containment:       {"containment", "The containment deadline, fixed at submission, passed with access or a copy unproven."},
	ReleaseRequested:  {"release_requested", "The owner is done with the lease."},
	Close:             {"close", "Engine shutdown."},
}

var guardInfo = [NumGuards]struct{ name, meaning string }{
	IsFetch:           {"fetch", "The lease is a fetch: nothing is copied into staging before it is submitted."},
	Withdrawn:         {"withdrawn", "The owner released it, or the engine closed, before it was submitted."},
	StagingIncomplete: {"staging_incomplete", "A device→staging copy was refused: the staging rows are not all valid."},
	DeadlinePassed:    {"deadline_passed", "The request deadline passed before the submission."},
	NeverExposed:      {"never_exposed", "The backend never saw the slots: the submission was rejected, or never made."},
	NothingToCopy:     {"nothing_to_copy", "No staging→device copy to issue: a publish, no served row, or the owner released the lease."},
}

var resultNames = [NumResults]string{
	NoResult: "none", Delivered: "served", Partly: "partial", Miss: "missed", Failure: "failed",
	Cancel: "cancelled", Rejection: "rejected", Timeout: "timeout", Violation: "violation",
}

// Refusal reasons shared by several states. Each says why the evidence changes
// nothing, so that an error built from it explains itself.
const (
	whyAlreadyGranted = "slots already granted"
	whyHoldsNothing   = "holds no slots: no local copy is involved"
	whyNotStaged      = "not staged: only a staged lease is submitted"
	whyNotSubmitted   = "not submitted: no outcome, violation or deadline applies before submission"
	whyNotExposed     = "nothing exposed to the backend: no access to prove, drain or contain"
	whyNoCopy         = "no local copy in flight in this state"
	whyAnswered       = "submission already answered"
	whyLatched        = "outcome already latched: the first outcome wins (a changed answer arrives as contract_violation)"
	whyMissStays      = "a latched miss stays a miss: nothing is copied either way; the violation is counted"
	whyFailedStays    = "outcome already latched as a failure"
	whyFenced         = "access already proven over: the fence stands and a late answer is only counted"
	whyNoDeadline     = "no outcome pending: the deadline no longer applies"
	whyCopyUnproven   = "a failed copy is never proven: only containment follows"
	whyComplete       = "every copy landed and access is proven: nothing is unproven"
	whyQuarantined    = "quarantined slots never return: the end of access can never be proven"
	whyReleased       = "released: the handle is stale"
)

// declaration is the lifecycle. Every (state, event) pair appears exactly once —
// as a move, a latch or a refusal — and compile refuses anything else.
var declaration = []block{
	{
		state: Waiting,
		moves: []move{
			on(SlotsGranted, Granted),
			// Waiting holds nothing, so leaving it needs no fence.
			on(ReleaseRequested, Released),
			on(Close, Released).latching(Cancel),
		},
		latches: []latch{
			keep("taken out of the line for good: it waits for the owner's release", SlotsUnavailable),
		},
		refusals: []refusal{
			refuse(whyHoldsNothing, CopiesLanded, CopyRefused, CopyFailed),
			refuse(whyNotStaged, Submitted, Rejected, SubmitEscaped),
			refuse(whyNotSubmitted, OutcomeServed, OutcomePartial, OutcomeMissed, OutcomeFailed, OutcomeCancelled, ContractViolation, Deadline),
			refuse(whyNotExposed, AccessProven, AccessUnproven, Containment),
		},
	},
	{
		state:       Granted,
		completions: []completion{when(IsFetch, Staged)},
		moves: []move{
			on(CopiesLanded, Staged),
			on(CopyFailed, CopyUnproven),
		},
		latches: []latch{
			keep("the row's staging content is missing: the publish will not be submitted", CopyRefused),
			keep("the device→staging copies must land first", ReleaseRequested, Close),
		},
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable),
			refuse(whyNotStaged, Submitted, Rejected, SubmitEscaped),
			refuse(whyNotSubmitted, OutcomeServed, OutcomePartial, OutcomeMissed, OutcomeFailed, OutcomeCancelled, ContractViolation, Deadline),
			refuse(whyNotExposed, AccessProven, AccessUnproven, Containment),
		},
	},
	{
		state: Staged,
		completions: []completion{
			// Checked in this order, the moment staging is ready: nothing is
			// exposed for a lease nobody wants, or cannot be correct, or is late.
			when(Withdrawn, AccessFenced),
			when(StagingIncomplete, Failed).latching(Failure),
			when(DeadlinePassed, Failed).latching(Timeout),
		},
		moves: []move{
			on(Submitted, Requested),
			// The rejection proves nothing escaped: failed's never_exposed
			// completion fences it at once.
			on(Rejected, Failed).latching(Rejection),
			// Something may have escaped and there is no attempt to quiesce:
			// only containment can end it.
			on(SubmitEscaped, Failed).latching(Failure),
		},
		latches: []latch{
			keep("the submission already handed out goes ahead; the lease is released once fenced", ReleaseRequested, Close),
		},
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable),
			refuse("staging is ready: no local copy in flight", CopiesLanded, CopyRefused, CopyFailed),
			refuse(whyNotSubmitted, OutcomeServed, OutcomePartial, OutcomeMissed, OutcomeFailed, OutcomeCancelled, ContractViolation, Deadline),
			refuse(whyNotExposed, AccessProven, AccessUnproven, Containment),
		},
	},
	{
		state: Requested,
		moves: []move{
			on(OutcomeServed, Served).latching(Delivered),
			on(OutcomePartial, Partial).latching(Partly),
			on(OutcomeMissed, Missed).latching(Miss),
			on(OutcomeFailed, Failed).latching(Failure),
			on(OutcomeCancelled, Failed).latching(Cancel),
			on(ContractViolation, Failed).latching(Violation),
			on(Deadline, Failed).latching(Timeout),
			on(Containment, Quarantined),
		},
		latches: []latch{
			keep("access may end before the outcome arrives; it fences only once the outcome is in", AccessProven),
			keep("the drain has started: containment at the fixed deadline unless a later Quiesce answers true", AccessUnproven),
			keep("the outcome and the fence come first", ReleaseRequested),
			// Close cancels a lease still waiting for its outcome at once (its
			// local outcome_cancelled); the close stays latched so that the
			// lease is released once complete.
			keep("released once complete; Close cancels a pending lease locally at once", Close),
		},
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable),
			refuse(whyAnswered, Submitted, Rejected, SubmitEscaped),
			refuse("no local copy before the fence", CopiesLanded, CopyRefused, CopyFailed),
		},
	},
	delivered(Served),
	delivered(Partial),
	{
		state: Missed,
		moves: []move{
			on(AccessProven, AccessFenced),
			on(Containment, Quarantined),
		},
		latches: []latch{
			keep("the drain has started: containment at the fixed deadline unless a later Quiesce answers true", AccessUnproven),
			keep("access must be proven over first", ReleaseRequested, Close),
		},
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable),
			refuse(whyAnswered, Submitted, Rejected, SubmitEscaped),
			refuse(whyLatched, OutcomeServed, OutcomePartial, OutcomeMissed, OutcomeFailed, OutcomeCancelled),
			refuse(whyMissStays, ContractViolation),
			refuse(whyNoDeadline, Deadline),
			refuse("no local copy before the fence", CopiesLanded, CopyRefused, CopyFailed),
		},
	},
	{
		state:       Failed,
		completions: []completion{when(NeverExposed, AccessFenced)},
		moves: []move{
			on(AccessProven, AccessFenced),
			on(Containment, Quarantined),
		},
		latches: []latch{
			keep("the drain goes on: containment at the fixed deadline unless a later Quiesce answers true", AccessUnproven),
			keep("access must be proven over first", ReleaseRequested, Close),
		},
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable),
			refuse(whyAnswered, Submitted, Rejected, SubmitEscaped),
			refuse(whyFailedStays, OutcomeServed, OutcomePartial, OutcomeMissed, OutcomeFailed, OutcomeCancelled, ContractViolation),
			refuse(whyNoDeadline, Deadline),
			refuse("no local copy before the fence", CopiesLanded, CopyRefused, CopyFailed),
		},
	},
	{
		state:       AccessFenced,
		completions: []completion{when(NothingToCopy, LogicallyComplete)},
		moves: []move{
			on(CopiesLanded, LogicallyComplete),
			on(CopyFailed, CopyUnproven),
			on(Containment, Quarantined),
		},
		latches: []latch{
			keep("that row does not count as arrived; nothing touches its memory", CopyRefused),
			keep("copies already issued must land first; nothing more is copied", ReleaseRequested, Close),
		},
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable),
			refuse(whyAnswered, Submitted, Rejected, SubmitEscaped),
			refuse(whyFenced, OutcomeServed, OutcomePartial, OutcomeMissed, OutcomeFailed, OutcomeCancelled, ContractViolation, AccessProven, AccessUnproven),
			refuse(whyNoDeadline, Deadline),
		},
	},
	{
		state: CopyUnproven,
		moves: []move{
			on(Containment, Quarantined),
		},
		latches: []latch{
			keep("the slots are held until containment", ReleaseRequested, Close),
		},
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable),
			refuse(whyAnswered, Submitted, Rejected, SubmitEscaped),
			refuse(whyCopyUnproven, CopiesLanded, CopyRefused, CopyFailed, AccessProven, AccessUnproven),
			refuse(whyFenced, OutcomeServed, OutcomePartial, OutcomeMissed, OutcomeFailed, OutcomeCancelled, ContractViolation),
			refuse(whyNoDeadline, Deadline),
		},
	},
	{
		state: LogicallyComplete,
		moves: []move{
			on(ReleaseRequested, Released),
			on(Close, Released),
		},
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable),
			refuse(whyAnswered, Submitted, Rejected, SubmitEscaped),
			refuse(whyFenced, OutcomeServed, OutcomePartial, OutcomeMissed, OutcomeFailed, OutcomeCancelled, ContractViolation, AccessProven, AccessUnproven),
			refuse("every local copy already landed", CopiesLanded, CopyRefused, CopyFailed),
			refuse(whyNoDeadline, Deadline),
			refuse(whyComplete, Containment),
		},
	},
	{
		state: Quarantined,
		latches: []latch{
			keep("the owner is done: the handle goes stale, the slots and what the backend was handed stay out for ever", ReleaseRequested),
		},
		refusals: []refusal{refuse(whyQuarantined, allBut(ReleaseRequested)...)},
	},
	{
		state:    Released,
		refusals: []refusal{refuse(whyReleased, allBut()...)},
	},
}

// delivered declares served and partial, which differ only in how many rows the
// outcome named.
func delivered(s State) block {
	return block{
		state: s,
		moves: []move{
			on(AccessProven, AccessFenced),
			// A changed answer or an unasked name: the served rows are not
			// trusted, and nothing has been copied yet.
			on(ContractViolation, Failed).latching(Violation),
			on(Containment, Quarantined),
		},
		latches: []latch{
			keep("the drain has started: containment at the fixed deadline unless a later Quiesce answers true", AccessUnproven),
			keep("access must be proven over first; then nothing is copied", ReleaseRequested, Close),
		},
		refusals: []refusal{
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable),
			refuse(whyAnswered, Submitted, Rejected, SubmitEscaped),
			refuse(whyLatched, OutcomeServed, OutcomePartial, OutcomeMissed, OutcomeFailed, OutcomeCancelled),
			refuse(whyNoDeadline, Deadline),
			refuse("no local copy before the fence", CopiesLanded, CopyRefused, CopyFailed),
		},
	}
}
