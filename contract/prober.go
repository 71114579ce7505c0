package contract

import "fmt"

// Access is what a non-blocking access probe answered ([QuiesceProber]): the
// physical question Quiesce answers, asked without waiting. The zero value is
// AccessUnknown, the answer that promises least.
type Access uint8

const (
	// AccessUnknown: the backend cannot say without blocking. The caller asks
	// Quiesce, on a goroutine that may block.
	AccessUnknown Access = iota
	// AccessEnded: none of the listed attempts will ever access caller memory
	// again — what Quiesce answering true means.
	AccessEnded
	// AccessUnproven: the end of access cannot be established, and waiting now
	// would not establish it — what Quiesce answering false means. It promises
	// nothing about later: the memory stays retired until a later answer
	// proves access over.
	AccessUnproven
)

// String names the answer: "unknown", "ended", "unproven", or "access(N)"
// for a value outside the three.
func (a Access) String() string {
	switch a {
	case AccessUnknown:
		return "unknown"
	case AccessEnded:
		return "ended"
	case AccessUnproven:
		return "unproven"
	}
	return fmt.Sprintf("access(%d)", uint8(a))
}

// QuiesceProber is an optional capability of a [Fetcher] or [Publisher]:
// Quiesce's question asked without blocking, as cudaEventQuery stands beside
// cudaEventSynchronize and MPI_Test beside MPI_Wait. A caller asks it first,
// on its own thread, and hands the blocking Quiesce to another goroutine only
// when the answer is AccessUnknown. A backend that knows at once whether its
// deliveries ended (its own bookkeeping, goroutines that have returned)
// implements it and spares its caller that hand-off.
//
// TryQuiesce never blocks and never waits on anything but a short lock. It
// answers for the listed attempts only, and never contradicts Quiesce:
// AccessEnded only where Quiesce would answer true at once, AccessUnproven
// only where it would answer false; an error means what Quiesce's error means
// (nothing established). Once it answered AccessEnded for an attempt, the
// attempt never accesses caller memory again, exactly as after Quiesce true.
type QuiesceProber interface {
	TryQuiesce(attempts []Attempt) (Access, error)
}
