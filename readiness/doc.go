// Package readiness is kvready's engine: it lends staging slots for fetches and
// publishes, hands them to a content-addressed backend, latches the evidence
// that comes back — outcomes, access proofs, GPU copy completions, deadlines,
// device loss, release requests — and drives every lease through the compiled
// lifecycle table of package fsm (SPEC §4, revision 3). The table is the only
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
// # Core and runner
//
// Package [github.com/kvready/kvready/readiness/core] is the lifecycle without
// I/O, like etcd raft's RawNode: every piece of evidence enters it through one
// door, is applied to the table, and the work the table calls for comes back
// in a Ready — submissions, copies, access proofs to ask for, cancellations,
// containment signals. It starts no goroutine and calls no backend or device;
// its clock is whatever its caller passes to Tick.
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
// An embedder imports this package alone of the two: its Config is flat, and
// the lease's vocabulary — Request, Handle, State with its groups, LeaseInfo,
// Stats, Policy, the errors — is defined here (docs/api.md lists it on one
// page). The row a request moves is [staging.Row], shared with the core.
//
// # Threading
//
// One owner goroutine calls every method of a Core or an Engine. Backend
// goroutines never call the engine; the engine's own goroutines only observe
// and hand their observations to the owner through mailboxes, and the owner
// decides.
package readiness
