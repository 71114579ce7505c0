package readiness

import (
	"fmt"
	"slices"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/staging"
)

// lease is the fixed per-lease record, kept small because the core keeps one
// per lease in flight: 12 bytes, and its generation, 4 more, in the core's
// column gens at the same index (which the allocator reads too). Records are
// indexed, never searched. Its lifecycle is the fsm.Slot — state, marks and
// latches — and nothing else: every fact a decision needs follows from the
// slot, the kind and the latched result. Its body is not pointed to: it is
// the record's own, at the record's index in the core's bodies (Core.body),
// so a record pays no pointer for it.
type lease struct {
	m      fsm.Slot
	kind   Kind
	result fsm.Result
	inUse  bool // the record carries a lease (live, or parked for ever)
	// retired is the low byte of the generation the record last retired: a
	// record is reused only with a generation that differs from it.
	retired uint8
}

// ticket is the lease's allocator ticket. The core names its tickets
// (staging.Allocator.RequestTicket) by the lease's record and generation, so
// a record keeps no ticket and the core no map from tickets back to leases.
// The generation is kept once, in the core's column gens: the allocator
// reads it there (staging.Allocator.NameTicketsBy) instead of keeping its
// own. A record's is its live lease's, and once the record retires (retire,
// park) the next lease's; past the column, Lend's next new record's, 1.
func (c *Core) ticket(id uint32) staging.Ticket { return staging.TicketOf(id, c.gens[id]) }

// body is the variable-size part of a lease: its rows, the structures built
// from them, and the evidence that is not needed on every round. A record's
// body is reused with its capacity by the record's next lease, so
// steady-state lending does not allocate.
type body struct {
	rows     []staging.Row
	names    []contract.Name
	ordinals []int
	addrs    []int
	slots    []int32 // staging slot of each row, once granted
	groupRun []staging.GroupRun
	view     staging.View
	// extent is what the backend is handed. It stays the lease's until the
	// fence — for ever if the lease is quarantined — and is rebuilt only when
	// the body carries a new lease.
	extent contract.CacheExtent
	masks  [][]bool
	counts []int
	known  int
	isLast bool
	// byLayer: a layerwise publish, whose layers the owner reports computed.
	byLayer bool
	// first is the backend's first answer, kept to catch a changed one.
	first    contract.Outcome
	byPeer   bool
	reason   string
	unproven string // why access is not proven yet (the latest answer)
	interval staging.Interval
	// The engine's one cancel request: its answer.
	cancelDisp contract.CancelDisposition
	cancelErr  string
	// copiesOut counts the lease's local copies issued and not yet landed:
	// the slots never return while it is positive.
	copiesOut int32
	// Layer by layer (rule 16): how many layers the lease's copies go in,
	// how many of them landed (in order: events on one stream complete in
	// order), and the first failed layer plus one (0: none failed). Layer k
	// reads ready while k < landed and, once one failed, k < failed-1.
	layers, landed, failed int32
	// queued counts a layerwise publish's layers reported computed (their
	// copies queued, in order).
	queued int32
	// layerIv is the interval of the rows the layers carry: the served
	// rows whose copies the device did not refuse.
	layerIv staging.Interval
	// Access proofs: whether a Quiesce call is outstanding, how many answers
	// proved nothing, and the times (core nanoseconds, 0 unset) of the next
	// ask and of the outstanding call's timeout.
	proofOut bool
	unproved uint8
	// outstanding: the lease holds one of the backend's admission slots.
	outstanding bool
	askAt       int64
	proofDue    int64
	// Times on the core's clock, in Unix nanoseconds; 0 is unset.
	lentAt, exposedAt int64
	deadline          int64 // the request deadline for the outcome
	containAt         int64 // the containment deadline: fixed at submission, moved earlier by an earlier drain
}

// maxDeadline is the latest Request.Deadline taken: 2^62 ns after 1970 (in
// 2116), so that a containment deadline — it plus the drain grace, at most
// MaxDuration — fits in int64 nanoseconds.
var maxDeadline = time.Unix(0, 1<<62)

// checkRequest refuses a request the core could never stage, naming what is
// wrong; the order of the rows is checked once they are grouped (newBody).
func (c *Core) checkRequest(req *Request) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, args...)...)
	}
	if req.Kind != Fetch && req.Kind != Publish {
		return bad("kind %v; want Fetch or Publish", req.Kind)
	}
	if len(req.Rows) == 0 {
		return bad("no rows; a lease moves at least one row")
	}
	if req.KnownBlocks < 0 {
		return bad("KnownBlocks = %d; want >= 0", req.KnownBlocks)
	}
	if req.Layerwise && req.Kind == Fetch {
		return bad("Layerwise on a fetch; it is a publish's: a fetch's copies go layer by layer as Config.Layers says")
	}
	if d := req.Deadline; !d.IsZero() && (d.Before(time.Unix(0, 0)) || d.After(maxDeadline)) {
		return bad("deadline %v; want the zero Time (RequestTimeout after the submission) or a time from 1970 to %v, which int64 nanoseconds hold with the drain grace added", d, maxDeadline)
	}
	groups := c.mem.NumGroups()
	for i, r := range req.Rows {
		if r.Group < 0 || r.Group >= groups {
			return bad("row %d: layer group %d; the staging memory has groups 0..%d", i, r.Group, groups-1)
		}
		if r.Block < 0 {
			return bad("row %d: block ordinal %d; want >= 0", i, r.Block)
		}
		if req.Kind == Fetch && r.Block < req.KnownBlocks {
			return bad("row %d: block %d of a fetch that already knows blocks 0..%d (KnownBlocks %d); a fetch moves only blocks it does not know, from KnownBlocks on",
				i, r.Block, req.KnownBlocks-1, req.KnownBlocks)
		}
		if r.Device == 0 {
			return bad("row %d: device address 0; want the device memory of the block", i)
		}
	}
	return nil
}

// newBody validates req against the memory and copies it into the body of
// record id — a retired record's, or the next new one's — grouping rows by
// layer group. Bad input changes nothing a caller can see: the body carries
// no lease until the record does.
func (c *Core) newBody(req Request, id uint32) (*body, error) {
	if err := c.checkRequest(&req); err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) (*body, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, args...)...)
	}
	groups := c.mem.NumGroups()
	b := c.bodyFor(id)
	b.rows = append(b.rows[:0], req.Rows...)
	if !slices.IsSortedFunc(b.rows, byGroup) {
		slices.SortStableFunc(b.rows, byGroup)
	}
	b.names, b.ordinals, b.addrs, b.counts = b.names[:0], b.ordinals[:0], b.addrs[:0], b.counts[:0]
	b.slots = b.slots[:0]
	for range groups {
		b.counts = append(b.counts, 0)
	}
	for i, r := range b.rows {
		if i > 0 && b.rows[i-1].Group == r.Group && b.rows[i-1].Block >= r.Block {
			c.clearBody(b)
			return bad("layer group %d: blocks %d then %d; within a group blocks must increase", r.Group, b.rows[i-1].Block, r.Block)
		}
		b.names = append(b.names, r.Name)
		b.ordinals = append(b.ordinals, r.Block)
		b.addrs = append(b.addrs, 0) // placed when slots are granted
		b.slots = append(b.slots, -1)
		b.counts[r.Group]++
	}
	b.groupRun = b.groupRun[:0]
	start := 0
	for g, n := range b.counts {
		if n == 0 {
			continue
		}
		b.groupRun = append(b.groupRun, staging.GroupRun{
			LayerGroup: g,
			Ordinals:   b.ordinals[start : start+n : start+n],
			Names:      b.names[start : start+n : start+n],
			Addresses:  b.addrs[start : start+n : start+n],
			Part:       g,
		})
		start += n
	}
	if err := b.view.Reset(b.groupRun); err != nil {
		c.clearBody(b)
		return bad("%w", err)
	}
	if err := b.view.Duplicate(); err != nil {
		c.clearBody(b)
		return bad("%w", err)
	}
	b.known, b.isLast, b.byLayer = req.KnownBlocks, req.IsLast, req.Layerwise
	b.deadline = 0
	if !req.Deadline.IsZero() {
		b.deadline = req.Deadline.UnixNano()
	}
	return b, nil
}

func byGroup(x, y staging.Row) int { return x.Group - y.Group }

// bodyChunk is how many bodies the core allocates at once: bodies are by
// record index, in chunks that never move (a Submission's extent points into
// one), so a record needs no pointer to its body. A power of two, so that
// finding a body is a shift and a mask (it is done a few dozen times a
// lease); 32 bodies of 560 bytes take the 18 KiB size class, wasting 16 bytes
// a body, as a body allocated alone did (TestBodyChunkWastesNoMoreThanABody).
const bodyChunk = 32

// body returns record id's body.
func (c *Core) body(id uint32) *body { return &c.bodies[id/bodyChunk][id%bodyChunk] }

// bodyFor returns record id's body, allocating its chunk the first time:
// id is a record the core has, or the next new one.
func (c *Core) bodyFor(id uint32) *body {
	for int(id/bodyChunk) >= len(c.bodies) {
		c.bodies = append(c.bodies, new([bodyChunk]body))
	}
	return c.body(id)
}

// clearBody drops what a body holds of the lease it carried — the backend's
// answers, reasons, clock times — keeping its capacity for the record's next
// lease. Its extent is rebuilt in place by that lease, so it must hold
// nothing a backend may still read: the callers check that first (retire, a
// refused Lend).
func (c *Core) clearBody(b *body) {
	b.first, b.byPeer, b.reason, b.unproven, b.interval = nil, false, "", "", staging.Interval{}
	b.cancelDisp, b.cancelErr, b.copiesOut = 0, "", 0
	b.layers, b.landed, b.failed, b.queued, b.layerIv = 0, 0, 0, 0, staging.Interval{}
	b.proofOut, b.unproved, b.askAt, b.proofDue, b.outstanding = false, 0, 0, 0, false
	b.lentAt, b.exposedAt, b.deadline, b.containAt = 0, 0, 0, 0
}

// slot returns the staging bytes of row i of a granted lease.
func (c *Core) slot(b *body, i int) []byte {
	row, _ := c.mem.Row(b.rows[i].Group, int(b.slots[i]))
	return row
}

// mask returns a pointer to row i's entry in the lease's arrival masks.
func (b *body) mask(i int) *bool {
	for r := range b.masks {
		if i < len(b.masks[r]) {
			return &b.masks[r][i]
		}
		i -= len(b.masks[r])
	}
	return nil
}

// served reports whether the lease's latched result delivered rows.
func served(r fsm.Result) bool { return r == fsm.Delivered || r == fsm.Partly }
