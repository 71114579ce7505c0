package readiness

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/staging"
)

// Kind says which way a lease's content moves.
type Kind uint8

const (
	// Fetch: the backend writes content into the staging slots; once its
	// access is proven over, the engine copies the served rows to the device.
	Fetch Kind = iota + 1
	// Publish: the engine copies device rows into the staging slots, then the
	// backend reads them.
	Publish
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case Fetch:
		return "fetch"
	case Publish:
		return "publish"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Row is one block of one layer group that a request moves: its content name
// (the lender's, copied byte for byte), its local layer group, its block
// ordinal within the request, and the device memory holding the block.
type Row struct {
	Name   contract.Name
	Group  int
	Block  int
	Device gpu.DevicePtr
}

// Request asks for one lease.
type Request struct {
	Kind Kind
	// Rows to move. Within a layer group, blocks must be distinct and
	// increasing; every row of a fetch is a row readiness counts.
	Rows []Row
	// KnownBlocks is the number of leading blocks the request already has: the
	// first block the fetch may extend.
	KnownBlocks int
	// Deadline for the outcome. Zero means RequestTimeout after the submission
	// (the clock starts when the backend is handed the slots, not while the
	// lease waits for them). A deadline that passes before the submission fails
	// the lease with a timeout without exposing anything.
	Deadline time.Time
	// IsLast is passed to the backend as the extent's sequence-end flag.
	IsLast bool
}

// Handle names a lease at one generation. A handle whose lease was retired
// (its record reused for a later lease) is refused with ErrStaleHandle; it
// never reaches the newer lease. The zero Handle is never issued.
type Handle struct {
	id, gen uint32
}

// String formats the handle as lease#id.gen.
func (h Handle) String() string { return fmt.Sprintf("lease#%d.%d", h.id, h.gen) }

// IsZero reports the zero Handle, which names no lease.
func (h Handle) IsZero() bool { return h.gen == 0 }

// Errors returned by the engine. Each is wrapped with the details of the case.
var (
	// ErrStaleHandle: the handle's lease was retired, or never existed.
	ErrStaleHandle = errors.New("readiness: stale lease handle")
	// ErrClosed: the engine is closed and admits no new leases.
	ErrClosed = errors.New("readiness: engine closed")
	// ErrDeviceLost: the device is lost; no lease can copy to or from it.
	ErrDeviceLost = errors.New("readiness: device lost")
	// ErrNotReady: readiness is not answerable for the lease (yet).
	ErrNotReady = errors.New("readiness: not ready")
	// ErrInvalidRequest: the request was malformed; nothing was lent.
	ErrInvalidRequest = errors.New("readiness: invalid request")
	// ErrUngrantable: quarantine left no contiguous run of slots that could
	// ever hold the request; nothing was lent. It is staging.ErrUngrantable.
	ErrUngrantable = staging.ErrUngrantable
)

// OutcomeKind is the logical outcome the engine latched for a lease, as the
// lifecycle declares it (fsm.Result): a miss is its own kind, never a failure,
// and a cancellation is its own kind, never folded into a failure.
type OutcomeKind = fsm.Result

// The latched outcomes.
const (
	NoOutcome = fsm.NoResult  // no outcome latched (yet)
	Served    = fsm.Delivered // every row delivered
	Partial   = fsm.Partly    // some rows delivered
	Missed    = fsm.Miss      // nothing delivered: a miss (fetch) or an unaccepted publication
	Failed    = fsm.Failure   // the backend's Failed, a submission that escaped, or staging that could not be filled
	Cancelled = fsm.Cancel    // Cancelled by the peer (LeaseInfo.ByPeer) or locally (Cancel, Close)
	Rejected  = fsm.Rejection // SubmissionRejected: nothing escaped
	TimedOut  = fsm.Timeout   // no outcome before the deadline
	Violation = fsm.Violation // the backend broke the contract: nothing it said is trusted
)

// LeaseInfo describes a lease as the engine sees it.
type LeaseInfo struct {
	Handle  Handle
	Kind    Kind
	State   fsm.State
	Outcome OutcomeKind
	// ByPeer is set for a cancellation the peer made.
	ByPeer bool
	// Reason says why the lease failed, was cancelled, contained or refused a
	// copy.
	Reason string
	// ReleaseRequested reports that the owner released the lease and it waits
	// for its fence.
	ReleaseRequested bool
	// Ungrantable reports a waiting lease taken out of the line because
	// quarantine left no contiguous run of slots that could ever hold it. It
	// holds nothing; release it.
	Ungrantable bool
	// Exposed reports that the backend was handed the lease's slots.
	Exposed bool
	Rows    int
}

// Transition is one move of one lease, for tracing.
type Transition struct {
	Lease Handle
	fsm.Step
}

// Containment is the signal raised when a lease's containment deadline passes
// with backend access or a local copy unproven: its memory is held out of
// circulation for ever, and the process is in a state an operator must know
// about.
type Containment struct {
	Lease Handle
	// Slots is the number of staging slots quarantined.
	Slots int
	// Reason says what stayed unproven.
	Reason string
	// Deadline is the containment deadline that passed: the request deadline
	// plus the drain grace, or earlier if the drain started earlier.
	Deadline time.Time
}
