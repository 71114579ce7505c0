// Package readiness is kvready's engine: it lends staging slots for fetches and
// publishes, hands them to a content-addressed backend, latches the evidence
// that comes back — outcomes, access proofs, GPU copy completions, deadlines,
// device loss, release requests — and drives every lease through the compiled
// lifecycle table of package fsm (SPEC §4, revision 5). The table is the only
// place where transitions are decided.
//
// The engine guarantees that no staging slot is recycled before its fence —
// the backend's access proven over (Quiesce answered true, the submission was
// rejected, or the slots were never exposed) and every local copy touching it
// landed; that logical delivery never races backend access — a fetch's served
// rows are copied to the device only after the fence, and never once the owner
// has released the lease; and that a miss is never reported as a failure.
// Access that is never proven is retried, and contained at a deadline fixed at
// submission — never assumed.
//
// # Core and runner: one vocabulary, two drivers
//
// [Core] is the lifecycle without I/O, like etcd raft's RawNode: every piece
// of evidence — a backend outcome, a Quiesce answer, a copy event, a
// cancellation answer, a device loss — enters it through one door,
// [Core.Step]; the evidence is classified into one table event, the table
// answers, and only an accepted move or latch touches the lease. A refusal
// returns an error and changes nothing: no state, latch, reason, by_peer flag
// or counter. The owner's calls, the clock (deadlines, Quiesce timeouts, the
// retry back-off) and the pump (grants, admissions) go through the same door.
// What an accepted step stores and what entering a state does are declared in
// the table and performed in one place; the work comes back in a [Ready] —
// submissions, copies, access proofs to ask for, cancellations, containment
// signals:
//
//	c.Tick(now)
//	rd := c.Ready()
//	// perform rd.Submissions, rd.Copies, rd.Proofs, rd.Cancels ...
//	c.Advance()
//	// report what came back through c.Step
//
// The core starts no goroutine and calls no backend or device; its clock is
// whatever its caller passes to [Core.Tick]. It lives in this package as the
// files core*.go, and a test keeps them that way (docs/engine.md says why).
//
// [Engine] is the runner managers embed, like raft's node.go around RawNode: a
// core plus the goroutines that observe the backend — one watches attempts, a
// few run Quiesce calls, retrying with back-off until a true answer or the
// containment deadline — and the stream the copies go through. Its rounds
// ([Engine.Progress]) never block; [Engine.Wake] tells the owner when a round
// has work and [Engine.Wait] waits, with a context, for a lease to become
// ready or released, so an embedding needs no sleep loop. [Engine.Sync] waits
// for the goroutines to catch up, for deterministic tests and simulations of
// the same runner.
//
// Both share one vocabulary, defined once: [Config], [Request], [Handle],
// [Kind], [State] with its named constants and groups, [OutcomeKind],
// [LeaseInfo], [Stats], [Policy], the errors (docs/api.md lists them on one
// page). The row a request moves is [staging.Row].
//
// # Errors
//
// Caller mistakes are errors that wrap [ErrInvalidRequest], [ErrStaleHandle]
// and their kin; nothing panics on bad input. A broken invariant (docs/engine.md
// lists them) halts the engine: Err returns [ErrHalted] wrapping an
// [*InvariantError], and nothing is released from then on, so a bug stops at
// the broken invariant instead of recycling memory another request still
// owns. The fatal containment policy halts it the same way with a
// [*FatalError].
//
// # Threading
//
// An Engine is safe for concurrent use (SPEC §4 rule 18): every method may
// be called from any goroutine, and calls are serialised — one caller at a
// time touches the core — while a wait (Wait, WaitLayer, Sync, Shutdown)
// releases the engine whenever it sleeps, so it never blocks other calls. The
// goroutine whose call runs a round is "the owner" for that round: the
// callbacks (OnTransition, OnContainment, OnRecovery, OnHalt, the Observer)
// run on it, with the engine held, and must not call the engine. A Core is
// not safe for concurrent use: its one caller is its driver, as raft's
// RawNode's is. Backend goroutines never call the engine; the engine's own
// goroutines only observe and hand their observations to the owner through
// mailboxes, and the owner decides.
package readiness
