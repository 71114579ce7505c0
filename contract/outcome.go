package contract

import "fmt"

// Outcome is the logical answer of one delivery: exactly one of [Delivered],
// [Failed] or [Cancelled]. The set is closed; no other type implements it.
//
// No outcome of any kind proves that the backend has stopped touching memory.
// Only Quiesce answering true does.
type Outcome interface {
	fmt.Stringer
	outcome()
}

// Delivered lists the units that were fully delivered. An empty Served set is a
// miss (fetch) or an unaccepted publication (publish): an ordinary answer, not an
// error. The destinations of units not served must be left untouched.
type Delivered struct {
	Served NameSet
}

// Miss reports whether nothing was served.
func (d Delivered) Miss() bool { return d.Served.Len() == 0 }

// String describes the outcome.
func (d Delivered) String() string {
	if d.Miss() {
		return "delivered(miss)"
	}
	return fmt.Sprintf("delivered(%d served)", d.Served.Len())
}

// Failed is a logical failure; the destinations' contents are undefined. A miss
// must never be reported as Failed, nor a transport, capacity or registration
// failure as a miss.
type Failed struct {
	Reason string
}

// String describes the outcome.
func (f Failed) String() string { return fmt.Sprintf("failed(%s)", f.Reason) }

// Cancelled is a logical cancellation without delivery, started outside this
// interface. A cancellation by the peer is a transfer error; a local cancellation
// is ordinary termination. Work may go on touching memory after it is reported.
type Cancelled struct {
	ByPeer bool
}

// String describes the outcome.
func (c Cancelled) String() string {
	if c.ByPeer {
		return "cancelled(by peer)"
	}
	return "cancelled(local)"
}

func (Delivered) outcome() {}
func (Failed) outcome()    {}
func (Cancelled) outcome() {}

// Attempt is one submitted delivery.
type Attempt interface {
	// Poll returns nil while the outcome is pending, and never blocks. Once it has
	// returned an outcome it returns the same outcome for ever.
	Poll() Outcome
}
