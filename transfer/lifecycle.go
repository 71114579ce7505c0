package transfer

import (
	"context"
	"strconv"
)

// Logical is the logical result of a lifecycle operation (a cancel, a
// fence). Accepting a cancel never implies the memory can be reused: that is
// the [Physical] result's to say. The zero value is no result.
type Logical uint8

const (
	// Accepted: the operation took effect.
	Accepted Logical = iota + 1
	// AlreadyTerminal: the session had already concluded (or was already
	// fenced); nothing changed.
	AlreadyTerminal
	// NotFound: no such session, and nothing was recorded.
	NotFound
	// Rejected: the operation was refused (unsupported, or no room to record
	// it): nothing changed, and nothing is promised.
	Rejected
)

var logicalNames = [...]string{"", "ACCEPTED", "ALREADY_TERMINAL", "NOT_FOUND", "REJECTED"}

// String spells the result as the reference does, or "logical(N)".
func (l Logical) String() string {
	if l >= Accepted && l <= Rejected {
		return logicalNames[l]
	}
	return "logical(" + strconv.Itoa(int(l)) + ")"
}

// Physical is the physical disposition of a session's pages: whether
// anything may still touch them. It is the same vocabulary as the engine's
// (fsm.Physical, SPEC §4 rule 19), defined again here because this package
// sits beside contract, below fsm and readiness; the engine integration maps
// one onto the other by name. Unlike fsm.Physical, the zero value is no
// disposition, and it is not reusable: a field nobody set never reads as
// NOT_EXPOSED.
type Physical uint8

const (
	// NotExposed: nothing was ever handed the pages (no address published,
	// no operation posted): reusable.
	NotExposed Physical = iota + 1
	// Active: an accessor may be touching the pages and the outcome is
	// pending.
	Active
	// Quiescing: the outcome is latched; some accessor is not yet settled.
	Quiescing
	// QuiescedSuccess: every accessor settled after a delivery: reusable.
	QuiescedSuccess
	// QuiescedFailure: every accessor settled after a failure or a cancel:
	// reusable.
	QuiescedFailure
	// InDoubt: an accessor's end can no longer be proven in time (the
	// containment deadline passed, or the question cannot be answered): the
	// pages are contained, never reused.
	InDoubt
)

var physicalNames = [...]string{"", "NOT_EXPOSED", "ACTIVE", "QUIESCING", "QUIESCED_SUCCESS", "QUIESCED_FAILURE", "IN_DOUBT"}

// String spells the disposition as the reference does, or "physical(N)".
func (p Physical) String() string {
	if p >= NotExposed && p <= InDoubt {
		return physicalNames[p]
	}
	return "physical(" + strconv.Itoa(int(p)) + ")"
}

// Reusable reports whether p proves the pages may be reused: NotExposed and
// the two Quiesced dispositions, nothing else (the zero value included).
func (p Physical) Reusable() bool {
	return p == NotExposed || p == QuiescedSuccess || p == QuiescedFailure
}

// CancelResult answers a cancel with the logical and the physical result
// apart. Retryable says a later call may answer differently (the physical
// disposition may still become reusable); Reason explains the answer.
type CancelResult struct {
	Logical   Logical
	Physical  Physical
	Retryable bool
	Reason    string
}

// SafeToReuse reports whether the physical result proves the pages may be
// reused. A cancel accepted while accessors are unsettled is not.
func (r CancelResult) SafeToReuse() bool { return r.Physical.Reusable() }

// ShutdownResult is what a bounded shutdown left: the aggregate physical
// disposition (InDoubt whenever InDoubt > 0, and then only), how many
// sessions' pages were still not proven reusable when it returned, and
// whether any was contained at its deadline (Fatal: sticky, late evidence
// cannot reverse it).
type ShutdownResult struct {
	Physical Physical
	InDoubt  int
	Fatal    bool
	Reason   string
}

// SafeToReleaseManagers reports whether every session's pages are proven
// reusable and nothing is fatal: only then may the page managers be torn
// down.
func (r ShutdownResult) SafeToReleaseManagers() bool {
	return r.Physical.Reusable() && r.InDoubt == 0 && !r.Fatal
}

// Lifecycle is the transceiver lifecycle: the backend-neutral surface a
// transfer runtime offers its owner beside the data path. Every operation
// answers for one session by key; an operation a runtime cannot perform
// fails closed — Rejected, or InDoubt — and never fabricates quiescence.
type Lifecycle interface {
	// Capabilities is what this side advertises before any address is
	// published.
	Capabilities() Capabilities
	// Cancel cancels the session: a local Cancelled outcome if none is
	// latched, a fence against new submissions, and the logical and
	// physical results apart. A cancel that overtakes the session's creation
	// leaves a tombstone, so the late creation is refused.
	Cancel(key SessionKey, reason string) CancelResult
	// Poll answers the session's physical disposition now, without
	// blocking. An unknown session is InDoubt: nothing is known of it.
	Poll(key SessionKey) Physical
	// Fence refuses every later submission for the session (vLLM #55470:
	// an operation posted after the lease ended).
	Fence(key SessionKey) Logical
	// Quiesce waits, at most until ctx is done, for the session's pages to
	// be proven reusable or contained, and answers the disposition it
	// reached. A wait that ends first answers a disposition that is not
	// reusable; it proves nothing.
	Quiesce(ctx context.Context, key SessionKey) Physical
	// Shutdown stops admission, cancels every session, waits at most until
	// ctx is done for their pages to settle, and reports those left in
	// doubt.
	Shutdown(ctx context.Context) ShutdownResult
}
