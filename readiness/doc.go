// Package readiness is kvready's engine: it lends staging slots for fetches and
// publishes, submits them to a content-addressed backend, latches the evidence
// that comes back — outcomes, GPU copy completions, access proofs, deadlines,
// device loss, release requests — and drives every lease through the compiled
// lifecycle table of package fsm. The table is the only place where transitions
// are decided.
//
// The engine guarantees that no staging slot is recycled before its fence — the
// backend's access is proven over (Quiesce answered true, the submission was
// rejected, or the slots were never exposed) and every local copy touching them
// has completed — and that a miss is never reported as a failure.
//
// # Threading
//
// Like etcd's raft, the engine is driven by one owner goroutine: every method of
// [Engine] must be called from it. Progress happens only in those calls, chiefly
// [Engine.Progress]. Backend goroutines never call the engine; the engine's own
// background goroutines (one that polls attempts, a few that run Quiesce) only
// observe and hand their observations to the owner through mailboxes, and the
// owner decides.
package readiness
