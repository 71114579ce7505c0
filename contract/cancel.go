package contract

import "fmt"

// RevisionCancelRequest is the contract revision with the local cancellation
// extension: [Revision] plus the suffix "+cancel-request-v1", the reference's
// current SHARED_CONTRACT_REVISION. The suffix names a local extension, not an
// upstream revision. A profile may name either pinned revision, and nothing else.
const RevisionCancelRequest = Revision + "+cancel-request-v1"

// CancelDisposition is what a cancellation request answered: a best-effort
// request was made, or the attempt does not support one. Neither is an outcome,
// and neither says anything about memory access. The zero value is neither
// (Valid reports false): a caller judging a backend's answer should check it.
type CancelDisposition uint8

const (
	// CancelUnsupported: the attempt has no cancellation; nothing was asked.
	CancelUnsupported CancelDisposition = iota + 1
	// CancelRequested: a best-effort request was made (queued work suppressed
	// where feasible, the transport asked to cancel where it can). It
	// guarantees nothing: completion may still win, the first terminal outcome
	// stays, and only Quiesce answering true ends memory access.
	CancelRequested
)

// String names the disposition: "requested", "unsupported", or
// "disposition(N)" for a value outside the two.
func (d CancelDisposition) String() string {
	switch d {
	case CancelRequested:
		return "requested"
	case CancelUnsupported:
		return "unsupported"
	}
	return fmt.Sprintf("disposition(%d)", uint8(d))
}

// Valid reports whether d is one of the two dispositions.
func (d CancelDisposition) Valid() bool { return d == CancelRequested || d == CancelUnsupported }

// Cancellable is an optional capability of an [Attempt]
// (+cancel-request-v1): asking the backend, best effort, to stop the delivery.
//
// RequestCancel never blocks: work that might block runs elsewhere, never
// inside the call. It is idempotent: a second call answers the same and starts
// no new work. A request never rolls back content already published, never
// starts new access to caller memory, never invalidates a quiescence already
// proven and never moves a deadline. It does not change the outcome Poll
// answers except as an ordinary completion would (a Cancelled outcome may
// follow, or completion may win the race), and it never ends memory access:
// only Quiesce answering true does.
type Cancellable interface {
	Attempt
	RequestCancel() (CancelDisposition, error)
}

// RequestCancel asks a, best effort, to stop: a's own answer when it is
// [Cancellable], [CancelUnsupported] for an ordinary attempt. It recovers
// nothing: a panic in the backend's RequestCancel is the caller's to contain.
func RequestCancel(a Attempt) (CancelDisposition, error) {
	if c, ok := a.(Cancellable); ok {
		return c.RequestCancel()
	}
	return CancelUnsupported, nil
}

// Notifier is an optional capability of an [Attempt]: being told when its
// outcome is known, so that the caller is woken instead of polling.
//
// Notify arranges for f to be called exactly once, from any goroutine, once
// Poll answers an outcome — at once, before Notify returns, if it already
// does. f never blocks and must not call back into the attempt's backend. A
// notification says only that Poll has an answer; Poll is still the answer,
// and nothing about it proves anything about memory access. Notify is called
// at most once per attempt.
type Notifier interface {
	Attempt
	Notify(f func())
}
