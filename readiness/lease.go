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
	// Fetch: the backend writes content into the staging slots, then the
	// engine copies the served rows to the device.
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
	// Deadline for the outcome; zero means now + Config.RequestTimeout.
	Deadline time.Time
	// IsLast is passed to the backend as the extent's sequence-end flag.
	IsLast bool
}

// Handle names a lease at one generation. A handle used after its lease was
// released (and its record perhaps reused) is refused with ErrStaleHandle; it
// never reaches the newer lease.
type Handle struct {
	id, gen uint32
}

// String formats the handle as lease#id.gen.
func (h Handle) String() string { return fmt.Sprintf("lease#%d.%d", h.id, h.gen) }

// Errors returned by the engine. Each is wrapped with the details of the case.
var (
	// ErrStaleHandle: the handle's lease was released or never existed.
	ErrStaleHandle = errors.New("readiness: stale lease handle")
	// ErrClosed: the engine is closed and admits no new leases.
	ErrClosed = errors.New("readiness: engine closed")
	// ErrDeviceLost: the device is lost; no lease can copy to or from it.
	ErrDeviceLost = errors.New("readiness: device lost")
	// ErrNotReady: readiness is not answerable in the lease's state.
	ErrNotReady = errors.New("readiness: not ready")
	// ErrInvalidRequest: the request was malformed; nothing was lent.
	ErrInvalidRequest = errors.New("readiness: invalid request")
)

// OutcomeKind is the logical outcome the engine latched for a lease.
type OutcomeKind uint8

// The latched outcomes. A miss is its own kind, never a failure.
const (
	NoOutcome OutcomeKind = iota
	Served                // every row delivered
	Partial               // some rows delivered
	Missed                // nothing delivered: a miss (fetch) or an unaccepted publication
	Failed                // Failed, a peer or local cancel, a timeout, a rejection or a contract violation
)

var outcomeNames = [...]string{"none", "served", "partial", "missed", "failed"}

// String names the outcome.
func (o OutcomeKind) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// lease is the fixed per-lease record, kept small because the engine keeps one
// per lease in flight and the table of them is indexed, never searched.
type lease struct {
	m       fsm.Slot
	gen     uint32
	kind    Kind
	outcome OutcomeKind
	flags   leaseFlags
	copies  int32 // local copies queued and not yet landed
	ticket  staging.Ticket
	attempt contract.Attempt
	body    *body
}

type leaseFlags uint8

const (
	inUse        leaseFlags = 1 << iota
	quiescing               // a Quiesce call for this lease is queued or running
	draining                // a drain timer is armed
	copiesQueued            // the current phase's copies were queued
)

// body is the variable-size part of a lease: its rows and the structures built
// from them. Bodies are recycled with their capacity, so steady-state lending
// does not allocate.
type body struct {
	rows     []Row
	names    []contract.Name
	ordinals []int
	addrs    []int
	groupRun []staging.GroupRun
	view     staging.View
	extent   contract.CacheExtent
	masks    [][]bool
	counts   []int
	first    int
	isLast   bool
	latched  contract.Outcome // the first outcome, kept to catch a changed answer
	reason   string
	interval staging.Interval
	lentAt   int64
	exposeAt int64
	deadline int64 // clock nanoseconds
}
