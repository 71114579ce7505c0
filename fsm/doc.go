// Package fsm declares the lifecycle of a staging lease — the rows of one fetch or
// publish — once, and compiles it into the dense table the readiness engine runs
// from.
//
// The declaration (lifecycle.go) says, for every (state, event) pair, exactly one
// of three things: a Move to a next state; a Latch, which records evidence that
// arrived early (an access proof before the outcome, a release request before the
// fence) so that it fires again after a later move; or a Refuse with a declared
// reason. Nothing is implicit: [Lifecycle] is compiled from the declaration when
// the package loads and the compile step rejects a missing or doubled pair.
//
// Moves and latches are written as github.com/looplab/fsm event descriptions (a
// latch is a self-loop), so [Declaration] can build a looplab machine that the
// tests drive side by side with the table. looplab itself is never on the
// per-lease path: [Table.Fire] is an array lookup with no allocation and no lock.
//
// Like etcd's raft, the package is a pure state machine: it decides, and the
// caller (the engine) performs the effects — granting slots, queuing copies,
// asking Quiesce, returning slots to the allocator.
package fsm
