// Package fsm declares the lifecycle of a staging lease — the rows of one fetch or
// publish — once, and compiles it into the dense table the readiness engine runs
// from. This is revision 3 of SPEC §4: nothing is copied out of staging before the
// backend's access is proven over, and what entering a state does is declared
// with the state, as data ([Effect], [Mark]), as is what an accepted move or
// latch stores from its evidence ([Store]).
//
// The declaration (lifecycle.go) says, for every (state, event) pair, exactly one
// of three things: a Move to a next state, which may latch the lease's logical
// outcome (a [Result]: served, missed, cancelled, timeout, …); a Latch, which
// records evidence that arrived early (an access proof before the outcome, a
// release request before the fence) together with what keeping it means there,
// so that [Table.Redeliver] fires it again after a later move; or a Refuse with a
// declared reason. Beside the pairs, a state may declare completion moves: guarded
// moves it takes the moment a lease enters it, before its own work, when a
// [Guard] holds for the lease (a fetch skips the staging copies, a rejected lease
// was never exposed, a miss has nothing to copy). The engine reports the guards
// that hold as [Facts]; [Table.Complete] tries the state's completions in
// declaration order. Nothing is implicit and the engine invents no event to push a
// lease along: [Lifecycle] is compiled from the declaration when the package loads,
// and the compile step rejects a missing or doubled pair, a move to itself, a
// latch without meaning, a refusal without reason or an out-of-range value.
//
// The state groups the engine asks about — which states hold slots
// ([Table.Holding]), are exposed to the backend ([Table.Exposed]), can be
// contained ([Table.Containable]), answer readiness ([Table.Answerable]) or are
// entered with an outcome ([Table.Outcome]) — are derived from the compiled table,
// never listed by hand, so a change to the declaration changes its consequences
// everywhere at once.
//
// Package fsm/declaration renders the lifecycle as github.com/looplab/fsm
// event descriptions (a latch is a self-loop, a completion the event
// "[guard]"); the tests drive a looplab machine built from it beside the table
// to check the compiler, and check the lifecycle itself against an oracle
// written from the SPEC. looplab is never on the per-lease path, and nothing
// the engine links imports it: [Table.Fire] is an array lookup with no
// allocation and no lock. Package diagram draws the same table.
//
// Like etcd's raft, the package is a pure state machine: it decides, and the
// caller (the engine) performs what entering a state asks for — granting slots,
// queuing copies, submitting, asking Quiesce, returning slots to the allocator,
// signalling containment.
package fsm
