package fsm

// This file is the lifecycle's single source of truth (SPEC §4, revision 3):
// every state, every event, every guard, what every (state, event) pair does —
// a move, a latch or a refusal with its reason — the guarded completion moves
// a state takes the moment it is entered, and what entering each state (and
// keeping each latch) does: its effects, declared as data. The engine runs from
// the table compiled from it, the diagrams and docs/states.md are drawn from it,
// and the tests check it against an oracle written independently of it. Change
// the lifecycle here and nowhere else.

// State is where one lease (the staging rows of one fetch or publish) stands.
// A lease has exactly one state; evidence that arrives early is kept in its
// [Latches], what it has been through in its [Marks], not in extra states.
type State uint8

// The states, in lifecycle order. The order is part of the declaration: the
// diagrams and the docs list states in it.
const (
	Waiting           State = iota // queued for slots, holds none
	Granted                        // slots held; a publish's device→staging copies in flight (a layerwise publish's, layer by layer)
	Staged                         // staging ready; waiting for admission to the backend
	Admitted                       // admitted: the extent is handed to the backend
	Requested                      // submitted: outcome pending, the backend may touch the slots
	Served                         // outcome latched: every requested row delivered
	Partial                        // outcome latched: some rows delivered
	Missed                         // outcome latched: nothing delivered (a miss, not an error)
	Failed                         // outcome latched: failed, cancelled, rejected, timed out or a violation
	AccessFenced                   // backend access proven over; staging→device copies of served rows in flight
	CopyUnproven                   // a local copy failed without a completion record: only containment follows
	LogicallyComplete              // every local copy landed: readiness is answerable
	Contained                      // the containment deadline passed with access unproven (recover policy: asked again, slowly)
	Quarantined                    // access end can never be proven: the slots never return
	Released                       // slots back in the allocator
	// NumStates is the number of states; it is not a state.
	NumStates
)

// Event is one piece of evidence about a lease, or an owner's request. Its
// numeric order is the order in which latched events are re-delivered.
//
// Backend evidence and the owner's requests are distinct events: the owner's
// cancel is [CancelRequested], never the backend's [OutcomeCancelled], and
// engine shutdown is [Close].
type Event uint8

// The events.
const (
	SlotsGranted      Event = iota // the allocator lent the lease its slots
	SlotsUnavailable               // quarantine left no contiguous run that could ever hold the lease
	AdmissionGranted               // the backend's admission bound has room for the lease's submission
	CopiesLanded                   // the event recorded after the lease's local copies completed
	CopyRefused                    // the device refused a copy before it started: nothing touches memory
	CopyFailed                     // a local copy failed without a completion record, or its device was lost
	Submitted                      // the backend accepted the submission and returned an attempt
	Rejected                       // the backend answered SubmissionRejected: nothing escaped
	SubmitEscaped                  // the submission failed without an attempt: something may have escaped
	ExtentRefused                  // staging refused to build the extent: nothing was handed to the backend
	OutcomeServed                  // Delivered, naming every requested row
	OutcomePartial                 // Delivered, naming some of the requested rows
	OutcomeMissed                  // Delivered, naming none of them
	OutcomeFailed                  // the backend's Failed outcome
	OutcomeCancelled               // the backend's Cancelled outcome (a peer's cancel, or one made outside the engine)
	ContractViolation              // a changed answer, names never asked for, or an answer that is no outcome
	Deadline                       // the request deadline passed with no outcome
	CancelRequested                // the owner cancels the lease (a local Cancelled, then one request to the backend; before submission, a withdrawal)
	AccessProven                   // Quiesce answered true: the backend never touches the slots again
	AccessUnproven                 // Quiesce answered false, failed or did not answer in time: the drain has started
	Containment                    // the containment deadline passed with access or a copy unproven
	CancelAnswered                 // the backend answered the engine's cancel request (a disposition, or an error)
	ReleaseRequested               // the owner is done with the lease
	Close                          // engine shutdown
	Retry                          // ask Quiesce now: the owner's Retry, or the back-off before asking again ran out
	LayerLanded                    // the event recorded after one layer's copies completed, the lease's last layer excepted (that one is CopiesLanded)
	LayerComputed                  // the owner reports one layer of a layerwise publish computed: its device→staging copies may be queued behind the owner's event
	// NumEvents is the number of events; it is not an event.
	NumEvents
)

// Guard is a fact about a lease that a completion move tests the moment the
// lease enters a state. Guards read only what the lease already holds — its
// kind, its latches and marks, what it was served — never a clock the engine
// would have to invent an event for.
type Guard uint8

// The guards.
const (
	IsFetch           Guard = iota // a fetch: nothing is copied into staging before submission
	Withdrawn                      // released or closed before it was ever submitted
	StagingIncomplete              // a device→staging copy was refused: the staging rows are not all valid
	DeadlinePassed                 // the request deadline passed before the submission
	NeverExposed                   // the backend never saw the slots (rejected, or never submitted)
	NothingToCopy                  // no staging→device copy to issue: a publish, nothing served, or the owner released it
	NotRecoverable                 // a contained lease stays out for good: the policy is not recover, or nothing can prove it
	CancelWithdrawn                // cancelled (by the owner, or Close) before anything was exposed: withdrawn, its slots back without a release
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

// Effect is one thing entering a state, or keeping a latch, does. The engine
// performs effects through one switch and nowhere else: it is the only code
// that places rows, queues copies, submits, asks for proofs, frees,
// quarantines or retires a handle.
type Effect uint8

// The effects, in the order the engine performs those of one state.
const (
	Place         Effect = iota // record where each row's staging slot is
	CopyIn                      // queue a publish's device→staging copies (a layerwise publish's come layer by layer)
	Admit                       // join the line for admission to the backend (its bound on outstanding submissions)
	TakeAdmission               // hold one of the backend's admission slots until access ends or the lease is contained
	Submit                      // build the extent the backend keeps and hand it over
	ArmDeadline                 // fix the request deadline and the containment deadline (deadline + drain grace)
	StartDrain                  // the drain starts: the containment deadline moves earlier, never later
	RequestCancel               // ask the backend, best effort and once, to stop (only with an attempt)
	AskProof                    // ask Quiesce: now, or after back-off when the last answer proved nothing (only with an attempt)
	EndAccess                   // access is over: the admission slot goes back, no proof is awaited any more
	Forget                      // the attempt is no longer needed: access is proven over (only with an attempt)
	CopyOut                     // queue the staging→device copies of the served whole rows
	DropRow                     // the refused row does not count as arrived
	Answer                      // compute readiness: every local copy landed
	Withdraw                    // take the request out of the allocator's line
	Contain                     // raise the containment signal, once; the admission slot is given back
	Recover                     // count and signal a contained lease whose access was proven over after all
	Quarantine                  // the slots leave circulation for ever (under the fatal policy, the engine halts)
	Park                        // the owner gave up its claim: the handle goes stale but stays readable; the record and what the backend was handed are kept for ever
	Free                        // the slots return to the allocator
	Retire                      // the handle goes stale; the record is reused
	CopyLayer                   // queue one computed layer's device→staging copies behind the owner's event, then its event
	EndLayers                   // a layerwise publish takes no more layers: an event is recorded after the copies already queued
	// NumEffects is the number of effects; it is not an effect.
	NumEffects
)

// Mark is a fact a lease acquires by a move and never loses: what it has been
// through, which no state alone says.
type Mark uint8

// The marks.
const (
	Exposed      Mark = iota // the backend was handed the slots (it may have touched them)
	Attempted                // the backend returned an attempt: there is something to ask Quiesce about
	Fenced                   // the backend's access was proven over (or never began)
	WasContained             // the containment deadline passed with something unproven
	// NumMarks is the number of marks; it is not a mark.
	NumMarks
)

// Store is one thing an accepted move or latch takes from its evidence and
// keeps on the lease: declared beside the move's effects, so that what an
// event stores in a state is read in one place. A re-delivered or completion
// move stores nothing: its evidence is gone, only the event was kept.
type Store uint8

// The stores, in the order the engine performs them: all of them before the
// step's effects.
const (
	StoreReason      Store = iota // the evidence's reason becomes the lease's reason
	StoreByPeer                   // a Cancelled outcome's by_peer is kept
	StoreFirst                    // the first answer is latched, with the served masks of a Delivered one
	StoreProofAnswer              // the outstanding Quiesce call is over: answered, or its timeout passed (then it is overdue)
	StoreUnproven                 // why access is unproven is kept and counted; it becomes the reason unless a failure's stands
	StoreCopiesDone               // the lease's local copies are no longer in flight
	StoreCancelReply              // the backend's answer to the cancel request: its disposition or its error
	StoreViolation                // a contract violation is counted and logged
	StoreRetry                    // the back-off ends; a retry the clock made is counted
	StoreLayerLanded              // the layers up to the one whose event completed read ready
	StoreLayerFailed              // the first layer whose copy failed is kept: it and every later layer never read ready
	// NumStores is the number of stores; it is not a store.
	NumStores
)

var storeInfo = [NumStores]struct{ name, meaning string }{
	StoreReason:      {"reason", "The evidence's reason becomes the lease's reason."},
	StoreByPeer:      {"by_peer", "Whether the peer cancelled (a Cancelled outcome's by_peer) is kept with the result."},
	StoreFirst:       {"first_answer", "The first answer is latched; a Delivered one with its served masks. A later answer is compared with it."},
	StoreProofAnswer: {"proof_answered", "The outstanding Quiesce call is over: answered, or its timeout passed (it is counted and reported overdue)."},
	StoreUnproven:    {"unproven", "Why access is unproven is kept and counted (an answer also lengthens the back-off); it becomes the reason unless a failure's reason stands."},
	StoreCopiesDone:  {"copies_done", "The lease's local copies are no longer in flight."},
	StoreCancelReply: {"cancel_reply", "The backend's answer to the cancel request: its disposition, or its error (counted)."},
	StoreViolation:   {"violation", "The contract violation is counted and logged."},
	StoreRetry:       {"retry", "The back-off ends: the proof is asked at once. A retry the clock made is counted."},
	StoreLayerLanded: {"layer_landed", "The layers up to the one whose event completed read ready (events on one stream complete in order); never a layer at or past a failed one."},
	StoreLayerFailed: {"layer_failed", "The first layer whose copy failed is kept: the waits for it and every later layer end at once, and none of them ever reads ready."},
}

// effectNeeds declares the marks an effect needs: a lease without them
// passes the effect by. Only an attempt can be cancelled, asked about or
// forgotten: an escaped submission returned none.
var effectNeeds = [NumEffects]Marks{
	RequestCancel: 1 << Attempted,
	AskProof:      1 << Attempted,
	Forget:        1 << Attempted,
}

var stateInfo = [NumStates]describedState{
	Waiting: {"waiting", "Queued for staging slots, in arrival order.",
		"Holds none."},
	Granted: {"granted", "Slots held; nothing exposed to the backend yet. A layerwise publish takes its layers here, as the owner reports them computed.",
		"A publish's device→staging copies may be in flight."},
	Staged: {"staged", "Staging ready; waiting, in arrival order, for admission to the backend (its bound on outstanding submissions).",
		"Held; nothing exposed yet."},
	Admitted: {"admitted", "Admitted: the extent is handed to the backend.",
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
	Contained: {"contained", "The containment deadline passed with backend access unproven. Under the recover policy the backend is asked again, slowly; under the others the lease moves on to quarantined at once.",
		"Held, out of use: they return only if a later Quiesce answers true (recover policy)."},
	Quarantined: {"quarantined", "The end of access can never be proven. Terminal.",
		"Out of circulation for ever, with everything the backend was handed."},
	Released: {"released", "Slots returned to the allocator. Terminal; readiness stays readable.",
		"Owned by the allocator."},
}

var eventInfo = [NumEvents]struct{ name, meaning string }{
	SlotsGranted:      {"slots_granted", "The allocator lent the lease its staging slots."},
	SlotsUnavailable:  {"slots_unavailable", "Quarantine left no contiguous run of slots that could ever hold the lease."},
	AdmissionGranted:  {"admission_granted", "The backend's admission bound has room: the lease's submission may go out."},
	CopiesLanded:      {"copies_landed", "The event recorded after the lease's local copies completed."},
	CopyRefused:       {"copy_refused", "The device refused a copy before it started: nothing touches the memory."},
	CopyFailed:        {"copy_failed", "A local copy failed without a completion record, or its device was lost."},
	Submitted:         {"submitted", "The backend accepted the fetch or publish and returned an attempt."},
	Rejected:          {"rejected", "The backend answered SubmissionRejected: nothing escaped."},
	SubmitEscaped:     {"submit_escaped", "The submission failed without an attempt (an error, a panic): something may have escaped."},
	ExtentRefused:     {"extent_refused", "Staging refused to build the extent: nothing was handed to the backend."},
	OutcomeServed:     {"outcome_served", "Delivered, naming every requested row."},
	OutcomePartial:    {"outcome_partial", "Delivered, naming some of the requested rows."},
	OutcomeMissed:     {"outcome_missed", "Delivered, naming none of the requested rows."},
	OutcomeFailed:     {"outcome_failed", "The backend's Failed outcome."},
	OutcomeCancelled:  {"outcome_cancelled", "The backend's Cancelled outcome: a peer's cancel, or one made outside the engine."},
	ContractViolation: {"contract_violation", "A changed answer, names that were never asked for, or an answer that is no outcome."},
	Deadline:          {"deadline", "The request deadline passed with no outcome."},
	CancelRequested:   {"cancel_requested", "The owner cancels the lease: a local Cancelled is latched first, then one request goes to the backend; before submission it withdraws the lease, its slots back at once."},
	AccessProven:      {"access_proven", "Quiesce answered true: the backend will never touch the slots again."},
	AccessUnproven:    {"access_unproven", "Quiesce answered false, failed or did not answer in time: cannot be established yet."},
	Containment:       {"containment", "The containment deadline, fixed at submission, passed with access or a copy unproven."},
	CancelAnswered:    {"cancel_answered", "The backend answered the engine's cancel request: a disposition, or an error."},
	ReleaseRequested:  {"release_requested", "The owner is done with the lease."},
	Close:             {"close", "Engine shutdown."},
	Retry:             {"retry", "Ask Quiesce now: the owner's Retry, or the back-off before asking again ran out."},
	LayerLanded:       {"layer_landed", "The event recorded after one layer's copies completed (every layer but the last: its event is copies_landed). Events on one stream complete in order, so every earlier layer landed too."},
	LayerComputed:     {"layer_computed", "The owner reports the next layer of a layerwise publish computed: an event on its compute stream, or now. Layers are reported in order, once each."},
}

var guardInfo = [NumGuards]struct{ name, meaning string }{
	IsFetch:           {"fetch", "The lease is a fetch: nothing is copied into staging before it is submitted."},
	Withdrawn:         {"withdrawn", "The owner released it, or the engine closed, before it was submitted."},
	StagingIncomplete: {"staging_incomplete", "A device→staging copy was refused: the staging rows are not all valid."},
	DeadlinePassed:    {"deadline_passed", "The request deadline passed before the submission."},
	NeverExposed:      {"never_exposed", "The backend never saw the slots: the submission was rejected, or never made."},
	NothingToCopy:     {"nothing_to_copy", "No staging→device copy to issue: a publish, no served row, or the owner released the lease."},
	NotRecoverable:    {"not_recoverable", "The contained lease stays out for good: the policy is quarantine or fatal, or nothing can prove its end (no attempt, a local copy involved, a lost device)."},
	CancelWithdrawn:   {"cancel_withdrawn", "The lease was cancelled locally (by the owner, or Close) before the backend was handed anything, or the owner's cancel waits for a submission that is then rejected: it is withdrawn, its slots back without waiting for a release."},
}

var effectInfo = [NumEffects]struct{ name, meaning string }{
	Place:         {"place", "Record where each row's staging slot is."},
	CopyIn:        {"copy_in", "Queue the publish's device→staging copies; one event recorded after them. A layerwise publish queues none: each layer's come with layer_computed."},
	Admit:         {"admit", "Join the line, in arrival order, for admission to the backend: its bound on submissions outstanding."},
	TakeAdmission: {"take_admission", "Hold one of the backend's admission slots: it goes back once access ends or the lease is contained."},
	Submit:        {"submit", "Build the extent (it stays the lease's until the fence) and hand it to the backend."},
	ArmDeadline:   {"arm_deadline", "Fix the request deadline and the containment deadline: the request deadline plus the drain grace."},
	StartDrain:    {"start_drain", "The drain starts: the containment deadline moves to its start plus the drain grace if that is earlier, never later."},
	RequestCancel: {"request_cancel", "Ask the backend once, best effort, to stop (only where it returned an attempt). It proves nothing."},
	AskProof:      {"ask_proof", "Ask Quiesce: at once the first time, after back-off when the last answer proved nothing; never twice at a time."},
	EndAccess:     {"end_access", "The backend's access is over: the admission slot goes back, the fence latency is measured, no proof is awaited any more."},
	Forget:        {"forget", "Drop the attempt: the backend's access is proven over."},
	CopyOut:       {"copy_out", "Queue the staging→device copies of the served whole rows; one event recorded after them."},
	DropRow:       {"drop_row", "The refused row does not count as arrived."},
	Answer:        {"answer", "Compute readiness: every local copy landed."},
	Withdraw:      {"withdraw", "Take the request out of the allocator's line: the leases behind it move on."},
	Contain:       {"contain", "Raise the containment signal, once, and give the lease's admission slot back."},
	Recover:       {"recover", "Count and signal a contained lease whose access a later Quiesce proved over (recover policy)."},
	Quarantine:    {"quarantine", "The slots leave circulation for ever; under the fatal policy the engine halts."},
	Park:          {"park", "The owner gave up its claim: the handle goes stale but reads as quarantined (among the latest released); the record, its slots and everything the backend was handed stay out for ever."},
	Free:          {"free", "Return the slots to the allocator (only once access is proven over and every copy landed)."},
	Retire:        {"retire", "The handle goes stale: its generation moves on and the record is reused."},
	CopyLayer:     {"copy_layer", "Queue the computed layer's device→staging copies of every row behind the owner's event; one event recorded after them."},
	EndLayers:     {"end_layers", "A layerwise publish released, cancelled or closed before every layer was reported takes no more: one event is recorded after the copies already queued, and its completion is copies_landed. Nothing is submitted."},
}

var markInfo = [NumMarks]struct{ name, meaning string }{
	Exposed:      {"exposed", "The backend was handed the slots."},
	Attempted:    {"attempted", "The backend returned an attempt."},
	Fenced:       {"fenced", "The backend's access was proven over."},
	WasContained: {"contained", "The containment deadline passed with something unproven."},
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
	whyNoCancelSent   = "no cancel request was made: there is no answer to record"
	whyNoCopy         = "no local copy in flight in this state"
	whyAnswered       = "submission already answered"
	whyLatched        = "outcome already latched: the first outcome wins (a changed answer arrives as contract_violation)"
	whyDelivered      = "outcome already latched: the first outcome wins, and a delivered lease is not cancelled"
	whyMissStays      = "a latched miss stays a miss: nothing is copied either way"
	whyFailedStays    = "outcome already latched as a failure"
	whyCancelSent     = "outcome already latched as a failure: its one cancel request is sent by the engine"
	whyFenced         = "access already proven over: the fence stands and a late answer changes nothing"
	whyNoDeadline     = "no outcome pending: the deadline no longer applies"
	whyCopyUnproven   = "a failed copy is never proven: only containment follows"
	whyComplete       = "every copy landed and access is proven: nothing is unproven"
	whyQuarantined    = "quarantined slots never return: the end of access can never be proven"
	whyReleased       = "released: the handle is stale"
	whyAfterFence     = "access is proven over: there is nothing left to cancel"
	whyNothingToClose = "nothing to shut down: the lease is quarantined for good"
	whyNoProof        = "no access proof is awaited in this state: there is nothing to ask again"
	whyRetry          = "Quiesce is asked at once, unless a call is outstanding (its answer asks again)"
	whyEarlyUnproven  = "the outcome is still to come: an answer that proves nothing yet starts no drain, and containment stays at the deadline fixed at submission"
	whyNoLayers       = "only a granted publish takes computed layers: its layers were all reported and staged"
)

// outcomeEvents are the backend's answers once latched: refused alike in most
// states.
var outcomeEvents = []Event{OutcomeServed, OutcomePartial, OutcomeMissed, OutcomeFailed, OutcomeCancelled}

func with(events []Event, more ...Event) []Event {
	return append(append([]Event(nil), events...), more...)
}

// declaration is the lifecycle. Every (state, event) pair appears exactly once —
// as a move, a latch or a refusal — and compile refuses anything else.
var declaration = []block{
	{
		state: Waiting,
		moves: []move{
			on(SlotsGranted, Granted),
			// Waiting holds nothing, so leaving it needs no fence.
			on(ReleaseRequested, Released),
			on(Close, Released).latching(Cancel).storing(StoreReason),
			// The owner's cancel before submission withdraws the lease
			// (SPEC §2): Cancelled locally, no request (there is no
			// attempt), and nothing to fence.
			on(CancelRequested, Released).latching(Cancel).storing(StoreReason),
		},
		latches: []latch{
			keep("taken out of the line for good: it waits for the owner's release", SlotsUnavailable).storing(StoreReason).doing(Withdraw),
		},
		refusals: []refusal{
			refuse("holds no slots yet: a layerwise publish reports its layers once granted", LayerComputed),
			refuse(whyNoProof, Retry),
			refuse(whyHoldsNothing, CopiesLanded, LayerLanded, CopyRefused, CopyFailed),
			refuse(whyNotStaged, AdmissionGranted, Submitted, Rejected, SubmitEscaped, ExtentRefused),
			refuse(whyNotSubmitted, with(outcomeEvents, ContractViolation, Deadline)...),
			refuse(whyNotExposed, AccessProven, AccessUnproven, Containment),
			refuse(whyNoCancelSent, CancelAnswered),
		},
	},
	{
		state:       Granted,
		entry:       effects(Place),
		rest:        effects(CopyIn),
		completions: []completion{when(IsFetch, Staged)},
		moves: []move{
			on(CopiesLanded, Staged).storing(StoreCopiesDone),
			on(CopyFailed, CopyUnproven).storing(StoreReason, StoreLayerFailed),
		},
		latches: []latch{
			keep("the row's staging content is missing: the publish will not be submitted", CopyRefused).storing(StoreReason),
			// A layerwise publish (rule 16): each layer the owner reports
			// computed is copied behind the owner's event, layer by layer;
			// the last layer's event is copies_landed.
			keep("that layer's device→staging copies are queued behind the owner's event", LayerComputed).doing(CopyLayer),
			keep("that layer and every earlier one landed in staging; the publish waits for its last layer", LayerLanded).storing(StoreLayerLanded),
			// Withdrawn before every layer was reported: no more are taken,
			// and the event after the copies already queued lands the lease.
			keep("the device→staging copies must land first; a layerwise publish takes no more layers", ReleaseRequested, Close).doing(EndLayers),
			keep("the device→staging copies must land first; then the cancel withdraws the lease (a layerwise publish takes no more layers)", CancelRequested).storing(StoreReason).doing(EndLayers),
		},
		refusals: []refusal{
			refuse(whyNoProof, Retry),
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable),
			refuse(whyNotStaged, AdmissionGranted, Submitted, Rejected, SubmitEscaped, ExtentRefused),
			refuse(whyNotSubmitted, with(outcomeEvents, ContractViolation, Deadline)...),
			refuse(whyNotExposed, AccessProven, AccessUnproven, Containment),
			refuse(whyNoCancelSent, CancelAnswered),
		},
	},
	{
		state: Staged,
		rest:  effects(Admit),
		completions: []completion{
			// Checked in this order, the moment staging is ready: nothing is
			// exposed for a lease nobody wants, or cannot be correct, or is late.
			// The owner's cancel (kept while a publish's copies landed) wins.
			when(CancelWithdrawn, AccessFenced).latching(Cancel),
			when(Withdrawn, AccessFenced),
			when(StagingIncomplete, Failed).latching(Failure),
			when(DeadlinePassed, Failed).latching(Timeout),
		},
		moves: []move{
			on(AdmissionGranted, Admitted),
			// Nothing is exposed while the lease waits for admission: the
			// owner's release or the engine's close withdraws it at once (the
			// event stays latched, to release it once fenced), and an explicit
			// deadline that passes fails it without exposing anything.
			on(ReleaseRequested, AccessFenced).keeping(),
			on(Close, AccessFenced).latching(Cancel).keeping().storing(StoreReason),
			on(Deadline, Failed).latching(Timeout).storing(StoreReason),
			// The owner's cancel withdraws it: Cancelled locally and never
			// exposed, so the fence holds at once and no copy is in flight;
			// logically_complete's [cancel_withdrawn] then releases it
			// without the owner's release.
			on(CancelRequested, AccessFenced).latching(Cancel).storing(StoreReason),
		},
		refusals: []refusal{
			refuse(whyNoLayers, LayerComputed),
			refuse(whyNoProof, Retry),
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable),
			refuse("staging is ready: no local copy in flight", CopiesLanded, LayerLanded, CopyRefused, CopyFailed),
			refuse("waiting for admission: nothing was submitted yet", Submitted, Rejected, SubmitEscaped, ExtentRefused),
			refuse(whyNotSubmitted, with(outcomeEvents, ContractViolation)...),
			refuse(whyNotExposed, AccessProven, AccessUnproven, Containment),
			refuse(whyNoCancelSent, CancelAnswered),
		},
	},
	{
		state: Admitted,
		entry: effects(TakeAdmission),
		rest:  effects(Submit),
		moves: []move{
			on(Submitted, Requested).marking(Exposed, Attempted),
			// The rejection proves nothing escaped: failed's never_exposed
			// completion fences it at once.
			on(Rejected, Failed).latching(Rejection).storing(StoreReason),
			// Something may have escaped and there is no attempt to quiesce:
			// only containment can end it.
			on(SubmitEscaped, Failed).latching(Failure).marking(Exposed).storing(StoreReason),
			// Nothing was handed over: failed's never_exposed completion
			// fences it at once.
			on(ExtentRefused, Failed).latching(Failure).storing(StoreReason),
		},
		latches: []latch{
			keep("the submission already handed out goes ahead; the lease is released once fenced", ReleaseRequested, Close),
			keep("the submission already handed out goes ahead; the cancel follows its answer (one request, if it returned an attempt)", CancelRequested).storing(StoreReason),
		},
		refusals: []refusal{
			refuse(whyNoLayers, LayerComputed),
			refuse(whyNoProof, Retry),
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable),
			refuse("already admitted", AdmissionGranted),
			refuse("staging is ready: no local copy in flight", CopiesLanded, LayerLanded, CopyRefused, CopyFailed),
			refuse(whyNotSubmitted, with(outcomeEvents, ContractViolation, Deadline)...),
			refuse(whyNotExposed, AccessProven, AccessUnproven, Containment),
			refuse(whyNoCancelSent, CancelAnswered),
		},
	},
	{
		state: Requested,
		entry: effects(ArmDeadline),
		moves: []move{
			on(OutcomeServed, Served).latching(Delivered).storing(StoreFirst),
			on(OutcomePartial, Partial).latching(Partly).storing(StoreFirst),
			on(OutcomeMissed, Missed).latching(Miss).storing(StoreFirst),
			on(OutcomeFailed, Failed).latching(Failure).storing(StoreReason, StoreFirst),
			on(OutcomeCancelled, Failed).latching(Cancel).storing(StoreReason, StoreByPeer, StoreFirst),
			on(ContractViolation, Failed).latching(Violation).storing(StoreReason, StoreViolation),
			on(Deadline, Failed).latching(Timeout).storing(StoreReason),
			// The owner's cancel wins over an outcome the engine has not yet
			// observed; the request to the backend follows (failed's entry).
			on(CancelRequested, Failed).latching(Cancel).storing(StoreReason),
			// Close cancels a lease still waiting for its outcome at once, as
			// the owner's cancel does, and stays latched so that the lease is
			// released once complete.
			on(Close, Failed).latching(Cancel).keeping().storing(StoreReason),
			on(Containment, Contained).storing(StoreReason),
		},
		latches: []latch{
			keep("access may end before the outcome arrives; it fences only once the outcome is in", AccessProven).storing(StoreProofAnswer),
			// Only the owner's Retry asks for a proof this early. An honest
			// backend is still at work, so its false proves nothing yet and
			// is no failure: a drain started here would pull the containment
			// deadline in from the one fixed at submission (rule 5) and
			// quarantine a healthy lease whose outcome is still to come.
			keep(whyEarlyUnproven, AccessUnproven).storing(StoreProofAnswer, StoreUnproven),
			keep("the outcome and the fence come first", ReleaseRequested),
			keep(whyRetry, Retry).storing(StoreRetry).doing(AskProof),
		},
		refusals: []refusal{
			refuse(whyNoLayers, LayerComputed),
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable, AdmissionGranted),
			refuse(whyAnswered, Submitted, Rejected, SubmitEscaped, ExtentRefused),
			refuse("no local copy before the fence", CopiesLanded, LayerLanded, CopyRefused, CopyFailed),
			refuse(whyNoCancelSent, CancelAnswered),
		},
	},
	delivered(Served),
	delivered(Partial),
	{
		state: Missed,
		rest:  effects(AskProof),
		moves: []move{
			on(AccessProven, AccessFenced).storing(StoreProofAnswer),
			on(Containment, Contained).storing(StoreReason),
		},
		latches: []latch{
			keep("the drain has started: containment at the fixed deadline unless a later Quiesce answers true", AccessUnproven).storing(StoreProofAnswer, StoreUnproven).doing(StartDrain, AskProof),
			keep("access must be proven over first", ReleaseRequested, Close),
			keep(whyRetry, Retry).storing(StoreRetry).doing(AskProof),
		},
		refusals: []refusal{
			refuse(whyNoLayers, LayerComputed),
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable, AdmissionGranted),
			refuse(whyAnswered, Submitted, Rejected, SubmitEscaped, ExtentRefused),
			refuse(whyLatched, outcomeEvents...),
			refuse(whyMissStays, ContractViolation),
			refuse(whyNoDeadline, Deadline),
			refuse(whyDelivered, CancelRequested),
			refuse("no local copy before the fence", CopiesLanded, LayerLanded, CopyRefused, CopyFailed),
			refuse(whyNoCancelSent, CancelAnswered),
		},
	},
	{
		state:       Failed,
		entry:       effects(StartDrain, RequestCancel),
		rest:        effects(AskProof),
		completions: []completion{when(NeverExposed, AccessFenced)},
		moves: []move{
			on(AccessProven, AccessFenced).storing(StoreProofAnswer),
			on(Containment, Contained).storing(StoreReason),
		},
		latches: []latch{
			keep("the drain goes on: containment at the fixed deadline unless a later Quiesce answers true", AccessUnproven).storing(StoreProofAnswer, StoreUnproven).doing(StartDrain, AskProof),
			keep("access must be proven over first", ReleaseRequested, Close),
			keep(whyRetry, Retry).storing(StoreRetry).doing(AskProof),
			keep("recorded on the lease: it changes neither the outcome nor the collection of access evidence", CancelAnswered).storing(StoreCancelReply),
		},
		refusals: []refusal{
			refuse(whyNoLayers, LayerComputed),
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable, AdmissionGranted),
			refuse(whyAnswered, Submitted, Rejected, SubmitEscaped, ExtentRefused),
			refuse(whyFailedStays, with(outcomeEvents, ContractViolation)...),
			refuse(whyNoDeadline, Deadline),
			refuse(whyCancelSent, CancelRequested),
			refuse("no local copy before the fence", CopiesLanded, LayerLanded, CopyRefused, CopyFailed),
		},
	},
	{
		state:       AccessFenced,
		entry:       effects(EndAccess, Forget),
		rest:        effects(CopyOut),
		marks:       marks(Fenced),
		completions: []completion{when(NothingToCopy, LogicallyComplete)},
		moves: []move{
			on(CopiesLanded, LogicallyComplete).storing(StoreCopiesDone),
			on(CopyFailed, CopyUnproven).storing(StoreReason, StoreLayerFailed),
			on(Containment, Contained).storing(StoreReason),
		},
		latches: []latch{
			// Per-layer progress (rule 16) is a latch, not a state per layer:
			// the fence, the copies in flight and what may happen next are the
			// same whichever layer last landed.
			keep("that layer and every earlier one read ready; the lease waits for its last layer", LayerLanded).storing(StoreLayerLanded),
			keep("that row does not count as arrived; nothing touches its memory", CopyRefused).storing(StoreReason).doing(DropRow),
			keep("copies already issued must land first; nothing more is copied", ReleaseRequested, Close),
			keep("recorded on the lease: it changes neither the outcome nor the collection of access evidence", CancelAnswered).storing(StoreCancelReply),
		},
		refusals: []refusal{
			refuse(whyNoLayers, LayerComputed),
			refuse(whyNoProof, Retry),
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable, AdmissionGranted),
			refuse(whyAnswered, Submitted, Rejected, SubmitEscaped, ExtentRefused),
			refuse(whyFenced, with(outcomeEvents, ContractViolation, AccessProven, AccessUnproven)...),
			refuse(whyNoDeadline, Deadline),
			refuse(whyAfterFence, CancelRequested),
		},
	},
	{
		state: CopyUnproven,
		entry: effects(StartDrain),
		moves: []move{
			on(Containment, Contained).storing(StoreReason),
		},
		latches: []latch{
			keep("the slots are held until containment", ReleaseRequested, Close),
			keep("recorded on the lease: it changes neither the outcome nor the collection of access evidence", CancelAnswered).storing(StoreCancelReply),
			// A layer's event recorded before the failed copy may still
			// complete: what it proves holds, short of the failed layer.
			keep("a layer before the failed one landed: it reads ready; the failed layer and every later one never do", LayerLanded).storing(StoreLayerLanded),
		},
		refusals: []refusal{
			refuse(whyNoLayers, LayerComputed),
			refuse(whyNoProof, Retry),
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable, AdmissionGranted),
			refuse(whyAnswered, Submitted, Rejected, SubmitEscaped, ExtentRefused),
			refuse(whyCopyUnproven, CopiesLanded, CopyRefused, CopyFailed, AccessProven, AccessUnproven),
			refuse(whyFenced, with(outcomeEvents, ContractViolation)...),
			refuse(whyNoDeadline, Deadline),
			refuse(whyAfterFence, CancelRequested),
		},
	},
	{
		state: LogicallyComplete,
		entry: effects(Answer),
		// A lease the owner cancelled before anything was exposed is
		// withdrawn: its slots return at once.
		completions: []completion{when(CancelWithdrawn, Released)},
		moves: []move{
			on(ReleaseRequested, Released),
			on(Close, Released),
		},
		latches: []latch{
			keep("recorded on the lease: it changes neither the outcome nor the collection of access evidence", CancelAnswered).storing(StoreCancelReply),
		},
		refusals: []refusal{
			refuse(whyNoLayers, LayerComputed),
			refuse(whyNoProof, Retry),
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable, AdmissionGranted),
			refuse(whyAnswered, Submitted, Rejected, SubmitEscaped, ExtentRefused),
			refuse(whyFenced, with(outcomeEvents, ContractViolation, AccessProven, AccessUnproven)...),
			refuse("every local copy already landed", CopiesLanded, LayerLanded, CopyRefused, CopyFailed),
			refuse(whyNoDeadline, Deadline),
			refuse(whyAfterFence, CancelRequested),
			refuse(whyComplete, Containment),
		},
	},
	{
		// Under the quarantine and fatal policies (and for what nothing could
		// ever prove: no attempt, a local copy, a lost device) the lease is
		// passed through at once to quarantined; under recover it rests here,
		// out of use, and the backend is asked again at a slow cadence.
		state:       Contained,
		entry:       effects(Contain),
		rest:        effects(AskProof),
		marks:       marks(WasContained),
		completions: []completion{when(NotRecoverable, Quarantined)},
		moves: []move{
			on(AccessProven, AccessFenced).storing(StoreProofAnswer).doing(Recover),
			// A backend that changed its answer is never trusted again: its
			// rows are never copied, its slots never return. The outcome
			// latched before stays (a miss stays a miss); the violation is
			// counted and its reason kept.
			on(ContractViolation, Quarantined).storing(StoreReason, StoreViolation),
			// Shutdown stops waiting for a proof that may never come.
			on(Close, Quarantined),
		},
		latches: []latch{
			keep("still unproven: asked again at the slow cadence", AccessUnproven).storing(StoreProofAnswer, StoreUnproven).doing(AskProof),
			keep("the slots return only if a later Quiesce answers true", ReleaseRequested),
			keep(whyRetry, Retry).storing(StoreRetry).doing(AskProof),
			keep("recorded on the lease: it changes neither the outcome nor the collection of access evidence", CancelAnswered).storing(StoreCancelReply),
		},
		refusals: []refusal{
			refuse(whyNoLayers, LayerComputed),
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable, AdmissionGranted),
			refuse(whyAnswered, Submitted, Rejected, SubmitEscaped, ExtentRefused),
			refuse("no local copy before the fence", CopiesLanded, LayerLanded, CopyRefused, CopyFailed),
			refuse("contained: the outcome latched before stays", with(outcomeEvents, CancelRequested)...),
			refuse("already contained", Deadline, Containment),
		},
	},
	{
		state: Quarantined,
		entry: effects(Quarantine),
		latches: []latch{
			// Releasing a quarantined lease is accepted: the owner gives up its
			// claim. Waiting for its release returns (the handle reads as
			// quarantined); its slots never return.
			keep("the owner gives up its claim: accepted; the slots and what the backend was handed stay out for ever, and the handle reads as quarantined", ReleaseRequested).doing(Park),
			keep("recorded on the lease: it changes neither the outcome nor the collection of access evidence", CancelAnswered).storing(StoreCancelReply),
		},
		refusals: []refusal{
			refuse(whyNothingToClose, Close),
			refuse(whyQuarantined, allBut(ReleaseRequested, CancelAnswered, Close)...),
		},
	},
	{
		state:    Released,
		entry:    effects(Free, Retire),
		refusals: []refusal{refuse(whyReleased, allBut()...)},
	},
}

// delivered declares served and partial, which differ only in how many rows the
// outcome named.
func delivered(s State) block {
	return block{
		state: s,
		rest:  effects(AskProof),
		moves: []move{
			on(AccessProven, AccessFenced).storing(StoreProofAnswer),
			// A changed answer or an unasked name: the served rows are not
			// trusted, and nothing has been copied yet.
			on(ContractViolation, Failed).latching(Violation).storing(StoreReason, StoreViolation),
			on(Containment, Contained).storing(StoreReason),
		},
		latches: []latch{
			keep("the drain has started: containment at the fixed deadline unless a later Quiesce answers true", AccessUnproven).storing(StoreProofAnswer, StoreUnproven).doing(StartDrain, AskProof),
			keep("access must be proven over first; then nothing is copied", ReleaseRequested, Close),
			keep(whyRetry, Retry).storing(StoreRetry).doing(AskProof),
		},
		refusals: []refusal{
			refuse(whyNoLayers, LayerComputed),
			refuse(whyAlreadyGranted, SlotsGranted, SlotsUnavailable, AdmissionGranted),
			refuse(whyAnswered, Submitted, Rejected, SubmitEscaped, ExtentRefused),
			refuse(whyLatched, outcomeEvents...),
			refuse(whyNoDeadline, Deadline),
			refuse(whyDelivered, CancelRequested),
			refuse("no local copy before the fence", CopiesLanded, LayerLanded, CopyRefused, CopyFailed),
			refuse(whyNoCancelSent, CancelAnswered),
		},
	}
}
