// Package core is kvready's lifecycle engine without I/O: it lends staging
// slots, applies evidence about each lease to the compiled table of package fsm
// (SPEC §4, revision 3), and hands its caller, in [Ready], the work the table
// calls for. Like etcd raft's RawNode it starts no goroutine, calls no backend
// or device and reads no clock: time is whatever its caller passes to
// [Core.Tick].
//
// # One door
//
// Every piece of evidence — a backend outcome, a Quiesce answer, a copy event,
// a cancellation answer, a device loss — enters through [Core.Step]. The
// evidence is classified into one table event, the table answers, and only an
// accepted move or latch touches the lease. A refusal returns an error and
// changes nothing: no state, latch, reason, by_peer flag or counter. The owner's
// calls ([Core.Release], [Core.Cancel], [Core.Retry], [Core.Close]), the clock
// (deadlines, Quiesce timeouts, the retry back-off: clock.go) and the pump
// (grants, admissions: pump.go) go through the same door, as evidence of their
// own kinds.
//
// What an accepted move or latch stores from its evidence (a reason, the first
// answer, by_peer, a cancel reply, a proof answered) and what entering a state
// does (place, copy in, submit, ask for a proof, copy out, free, quarantine,
// contain, recover) are declared in the table as stores and effects, and
// perform (effects.go) does both in one place. Effects never do I/O: they
// append work to [Ready].
//
// # The round
//
//	c.Tick(now)
//	rd := c.Ready()
//	// perform rd.Submissions, rd.Copies, rd.Proofs, rd.Cancels ...
//	c.Advance()
//	// report what came back through c.Step
//
// A caller performs what [Ready] holds and calls [Core.Advance] before the
// next round; the answers come back later through [Core.Step]. Package
// readiness wraps a Core in the runner managers embed: the goroutines that
// watch attempts and run Quiesce calls, the device stream and the wake-up
// channel. The transcripts in testdata/transcripts print every Ready of the
// SPEC's rules, one per file.
//
// # Errors
//
// Caller mistakes are errors that wrap [ErrInvalidRequest], [ErrStaleHandle]
// and their kin; nothing panics on bad input. A broken invariant (the
// allocator's bookkeeping, a table entry no state should reach; assert.go and
// docs/engine.md list them) halts the core: [Core.Err] returns an [*InvariantError] and the core releases nothing
// from then on, so a bug stops at the broken invariant instead of recycling
// memory another request still owns. The fatal containment policy halts it the
// same way with a [*FatalError].
package readiness
