package readiness

import (
	"fmt"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/staging"
)

// What the core answers about a lease: its description, its runs, its
// readiness and its layers' — read from the record, the same before and after
// the release.

// keptLease is what a released lease's handle can still read: its record's
// slot and outcome, and the part of its body LeaseInfo and Readiness read.
type keptLease struct {
	h          Handle
	m          fsm.Slot
	kind       Kind
	result     fsm.Result
	byPeer     bool
	rows       int32
	reason     string
	cancelDisp contract.CancelDisposition
	cancelErr  string
	interval   staging.Interval
	// uncopied: the owner released the fetch before its served rows were
	// copied to the device (rule 4), so its readiness is never answered.
	uncopied bool
}

// released finds a released lease that is still kept.
func (c *Core) released(h Handle) (*keptLease, bool) {
	if h.gen == 0 {
		return nil, false
	}
	for i := range c.kept {
		if c.kept[i].h == h {
			return &c.kept[i], true
		}
	}
	return nil, false
}

// Lease describes the lease h names. The latest KeepReleased released leases
// stay readable (state released), described from the same record fields.
func (c *Core) Lease(h Handle) (LeaseInfo, error) {
	id, err := c.lookup(h)
	if err != nil {
		if k, ok := c.released(h); ok {
			return describe(h, k.m, k.kind, k.result, k.byPeer, k.reason, k.cancelDisp, k.cancelErr, int(k.rows)), nil
		}
		return LeaseInfo{}, err
	}
	l := &c.leases[id]
	b := c.body(id)
	return describe(h, l.m, l.kind, l.result, b.byPeer, b.reason, b.cancelDisp, b.cancelErr, len(b.rows)), nil
}

// describe derives a LeaseInfo from what a record holds: the one place that
// does, for a live lease and a released one alike.
func describe(h Handle, m fsm.Slot, k Kind, r fsm.Result, byPeer bool, reason string, disp contract.CancelDisposition, cancelErr string, rows int) LeaseInfo {
	return LeaseInfo{
		Handle: h, Kind: k, State: State(m.State), Outcome: OutcomeKind(r), ByPeer: byPeer, Reason: reason,
		ReleaseRequested:  m.Latched.Has(fsm.ReleaseRequested),
		Ungrantable:       m.Latched.Has(fsm.SlotsUnavailable),
		Exposed:           m.Marks.Has(fsm.Exposed),
		Fenced:            m.Marks.Has(fsm.Fenced),
		Contained:         m.Marks.Has(fsm.WasContained),
		CancelDisposition: disp,
		CancelError:       cancelErr,
		Rows:              rows,
		Disposition:       Disposition(fsm.Lifecycle().PhysicalOf(m.State, m.Marks, r)),
	}
}

// Runs appends to dst the staging runs the lease holds (one per pool group it
// uses) and returns it. A lease that holds no slots — waiting, released or
// quarantined — adds none.
func (c *Core) Runs(h Handle, dst []staging.Run) ([]staging.Run, error) {
	id, err := c.lookup(h)
	if err != nil {
		return dst, err
	}
	l := &c.leases[id]
	if !c.table.Holding(l.m.State) {
		return dst, nil
	}
	return c.alloc.Runs(c.ticket(id), dst)
}

// Readiness returns where a fetched request may resume: answerable once every
// local copy has landed (logically_complete), and still after the release.
// With full attention the interval starts at 0 and ends at TokensPerBlock ×
// the end of the contiguous run of blocks, from KnownBlocks, whose rows
// arrived in every layer group. A window group (Config.Attention) needs only
// its sinks and its window at the resume position. A miss or a failure
// answers what was already known: [0, KnownBlocks × TokensPerBlock] with full
// attention; the lease's outcome says which it was.
func (c *Core) Readiness(h Handle) (staging.Interval, error) {
	id, err := c.lookup(h)
	if err != nil {
		k, ok := c.released(h)
		switch {
		case !ok:
			return staging.Interval{}, err
		case k.kind != Fetch:
			return staging.Interval{}, fmt.Errorf("%w: %v is a publish; readiness is a fetch's answer", ErrNotReady, h)
		case k.m.State == fsm.Quarantined:
			return staging.Interval{}, fmt.Errorf("%w: %v was quarantined and released: its readiness is never answered", ErrNotReady, h)
		case k.uncopied || !c.table.Answerable(k.m.State):
			return staging.Interval{}, fmt.Errorf("%w: %v was released before its copies were issued", ErrNotReady, h)
		}
		return k.interval, nil
	}
	l := &c.leases[id]
	switch {
	case l.kind != Fetch:
		return staging.Interval{}, fmt.Errorf("%w: %v is a publish; readiness is a fetch's answer", ErrNotReady, h)
	case !c.table.Answerable(l.m.State):
		return staging.Interval{}, fmt.Errorf("%w: %v is %v; readiness is answered once every local copy has landed", ErrNotReady, h, l.m.State)
	case c.body(id).copiesOut != 0:
		// answer checked it where readiness became answerable.
		c.halt(fmt.Sprintf("readiness read with %d local copies of the lease not landed", c.body(id).copiesOut), id)
		return staging.Interval{}, c.Err()
	}
	return c.body(id).interval, nil
}

// LayerStatus is where one layer of a fetch stands (SPEC §4 rule 16).
type LayerStatus uint8

const (
	// LayerPending: the layer's copies are not known to have landed yet.
	LayerPending LayerStatus = iota
	// LayerReady: the layer's event completed, or the lease's readiness is
	// answerable (every layer landed, or nothing was to be copied: a miss
	// or a failure answers what was already known, for every layer).
	LayerReady
	// LayerFailed: a copy of this layer, or of an earlier one, failed (or
	// its device was lost): it never reads ready. The lease's served rows
	// did not arrive; its readiness is what a failed copy gives (never
	// answered), and its slots are held until containment.
	LayerFailed
	// LayerNever: the lease was quarantined, or withdrawn before it was
	// served (released or cancelled before its submission): the layer is
	// never answered.
	LayerNever
)

// String names the status.
func (s LayerStatus) String() string {
	switch s {
	case LayerPending:
		return "pending"
	case LayerReady:
		return "ready"
	case LayerFailed:
		return "failed"
	case LayerNever:
		return "never"
	}
	return fmt.Sprintf("layer_status(%d)", uint8(s))
}

// LayerReadiness answers whether layer (an index in the core's layer order,
// 0..Layers()-1) of the fetch h is ready, and with LayerReady the interval
// the layer answers — the lease's interval once its readiness is
// answerable; before, that of the served rows the layer carries, the same
// for every layer, so that the lease's interval is the minimum over its
// layers. It costs O(1) and allocates nothing for a valid handle and layer;
// a stale handle, a publish or a layer out of range is an error.
func (c *Core) LayerReadiness(h Handle, layer int) (staging.Interval, LayerStatus, error) {
	if layer < 0 || layer >= c.Layers() {
		return staging.Interval{}, LayerNever, fmt.Errorf("%w: layer %d of %v; the engine's layers are 0..%d", ErrInvalidRequest, layer, h, c.Layers()-1)
	}
	id, err := c.lookup(h)
	if err != nil {
		k, ok := c.released(h)
		switch {
		case !ok:
			return staging.Interval{}, LayerNever, err
		case k.kind != Fetch:
			return staging.Interval{}, LayerNever, fmt.Errorf("%w: %v is a publish; readiness is a fetch's answer", ErrNotReady, h)
		case k.m.State == fsm.Quarantined || k.uncopied || !c.table.Answerable(k.m.State):
			return staging.Interval{}, LayerNever, nil
		}
		return k.interval, LayerReady, nil
	}
	l := &c.leases[id]
	b := c.body(id)
	switch {
	case l.kind != Fetch:
		return staging.Interval{}, LayerNever, fmt.Errorf("%w: %v is a publish; readiness is a fetch's answer", ErrNotReady, h)
	case c.table.Answerable(l.m.State):
		return b.interval, LayerReady, nil
	case b.failed != 0 && int32(layer) >= b.failed-1:
		return staging.Interval{}, LayerFailed, nil
	case l.m.State.Terminal():
		return staging.Interval{}, LayerNever, nil
	case int32(layer) < b.landed:
		return b.layerIv, LayerReady, nil
	}
	return staging.Interval{}, LayerPending, nil
}

// Arrived appends to dst, for a fetch whose readiness is answerable, the
// block ordinals of each layer group whose rows landed on the device, one
// slice per group in the order of the request's groups, and returns it: after
// a partial hit, which rows arrived (not only the contiguous interval).
func (c *Core) Arrived(h Handle, dst []staging.GroupBlocks) ([]staging.GroupBlocks, error) {
	id, err := c.lookup(h)
	if err != nil {
		return dst, err
	}
	l := &c.leases[id]
	switch {
	case l.kind != Fetch:
		return dst, fmt.Errorf("%w: %v is a publish; arrivals are a fetch's answer", ErrNotReady, h)
	case !c.table.Answerable(l.m.State):
		return dst, fmt.Errorf("%w: %v is %v; arrivals are answered once every local copy has landed", ErrNotReady, h, l.m.State)
	}
	b := c.body(id)
	row := 0
	for _, run := range b.groupRun {
		gb := staging.GroupBlocks{Group: run.LayerGroup}
		for k, ord := range run.Ordinals {
			if served(l.result) {
				if m := b.mask(row + k); m != nil && *m {
					gb.Blocks = append(gb.Blocks, ord)
				}
			}
		}
		row += len(run.Ordinals)
		dst = append(dst, gb)
	}
	return dst, nil
}

// Count returns the number of leases in state s, without copying Stats.
func (c *Core) Count(s State) int {
	if int(s) >= NumStates {
		return 0
	}
	return c.stats.Leases[s]
}
