package simulate

import (
	"errors"
	"fmt"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/internal/words"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// naiveManager is the foil: the staging side of a KV cache manager written the
// way the incidents in kvready's specification were. It uses the same staging
// memory, backend and device as the engine, and its own allocator, but it
// takes an outcome, an error or a timeout as proof that the backend is done: it
// frees the slots right then. It never asks Quiesce. It is here only to be
// watched by the checker; nothing in kvready uses it.
type naiveManager struct {
	d       *driver
	current *lease // the lease whose submission comes next
	alloc   *staging.Allocator
	parts   staging.Parts
	stream  gpu.Stream
	builder staging.ExtentBuilder
	leases  map[staging.Ticket]*naiveLease
	active  []*naiveLease
	closed  bool
}

type naiveState uint8

const (
	naiveWaiting naiveState = iota
	naiveCopyIn
	naiveRequested
	naiveCopyOut
	naiveDone
	numNaiveStates
)

var naiveStateNames = [numNaiveStates]string{"waiting", "copying_in", "requested", "copying_out", "done"}

type naiveLease struct {
	l        *lease
	ticket   staging.Ticket
	state    naiveState
	freed    bool
	view     staging.View
	runs     []staging.GroupRun
	attempt  contract.Attempt
	ev       gpu.Event
	deadline int64 // virtual ns since the start
	masks    [][]bool
}

func newNaiveManager(d *driver, s gpu.Stream) (*naiveManager, error) {
	groups := d.mem.Groups()
	slots := make([]int, len(groups))
	for g, grp := range groups {
		slots[g] = grp.Slots
	}
	alloc, err := staging.NewAllocator(slots)
	if err != nil {
		return nil, err
	}
	return &naiveManager{d: d, alloc: alloc, parts: d.mem.Parts(), stream: s, leases: map[staging.Ticket]*naiveLease{}}, nil
}

func (n *naiveManager) nextSubmission() *lease {
	l := n.current
	n.current = nil
	return l
}

// capacity: the naive manager never contains anything (it frees instead).
func (n *naiveManager) capacity() capacity { return capacity{} }

func (n *naiveManager) halted() error { return nil }

func (n *naiveManager) woken() <-chan struct{} { return nil }

func (n *naiveManager) why() string {
	return words.Count(len(n.active), "lease") + " still active in the naive manager"
}

func (n *naiveManager) lend(l *lease) error {
	if n.closed {
		return fmt.Errorf("naive manager closed")
	}
	counts := make([]int, len(l.req.names))
	for g := range counts {
		counts[g] = len(l.needed[g])
	}
	t, err := n.alloc.Request(counts)
	if err != nil {
		return err
	}
	nl := &naiveLease{l: l, ticket: t, deadline: int64(l.lentAt + n.d.cfg.Deadline)}
	_ = readiness.Fetch
	n.leases[t] = nl
	n.active = append(n.active, nl)
	return nil
}

func (n *naiveManager) step() (int, error) {
	defer n.compact()
	for _, t := range n.alloc.TakeGrants(nil) {
		if nl := n.leases[t]; nl != nil {
			n.grant(nl)
		}
	}
	now := int64(n.d.clk.since())
	for _, nl := range n.active {
		switch nl.state {
		case naiveCopyIn:
			if st, err := n.stream.Query(nl.ev); err != nil || st != gpu.Pending {
				if err != nil || st == gpu.Failed {
					n.fail(nl, "copy into staging failed")
					continue
				}
				n.submit(nl)
			}
		case naiveRequested:
			if o := nl.attempt.Poll(); o != nil {
				n.outcome(nl, o)
			} else if now >= nl.deadline {
				n.failAs(nl, readiness.TimedOut, "timeout") // the bug: the timeout is taken as the end of access
			}
		case naiveCopyOut:
			if st, err := n.stream.Query(nl.ev); err != nil || st != gpu.Pending {
				if err != nil || st == gpu.Failed {
					nl.l.outcome = readiness.Failed
					nl.l.reason = "copy to the device failed"
					n.done(nl, false)
					continue
				}
				n.done(nl, true)
			}
		}
	}
	return 0, nil // it runs on the virtual clock only, which never asks
}

// compact drops the leases that are done.
func (n *naiveManager) compact() {
	kept := n.active[:0]
	for _, nl := range n.active {
		if nl.state != naiveDone {
			kept = append(kept, nl)
		}
	}
	clear(n.active[len(kept):])
	n.active = kept
}

// grant places the rows in the granted slots and starts the lease.
func (n *naiveManager) grant(nl *naiveLease) {
	runs, err := n.alloc.Runs(nl.ticket, nil)
	if err != nil {
		n.fail(nl, err.Error())
		return
	}
	n.d.mu.Lock()
	n.d.chk.granted(nl.l, runs)
	n.d.mu.Unlock()
	l := nl.l
	for i, r := range runs {
		gr := staging.GroupRun{LayerGroup: r.Group, Part: r.Group}
		part := n.parts.Part(r.Group)
		for k, o := range l.needed[r.Group] {
			gr.Ordinals = append(gr.Ordinals, o)
			gr.Names = append(gr.Names, l.req.names[r.Group][o])
			gr.Addresses = append(gr.Addresses, part.SlotAddress(runs[i].First+k))
		}
		nl.runs = append(nl.runs, gr)
	}
	if err := nl.view.Reset(nl.runs); err != nil {
		n.fail(nl, err.Error())
		return
	}
	if l.kind == readiness.Fetch {
		n.submit(nl)
		return
	}
	blocks := len(l.req.names[0])
	for _, gr := range nl.runs {
		for k, o := range gr.Ordinals {
			if err := n.stream.CopyDtoH(n.slot(gr.Addresses[k], gr.LayerGroup), l.req.row(blocks, gr.LayerGroup, o)); err != nil {
				n.fail(nl, err.Error())
				return
			}
		}
	}
	ev, err := n.stream.Record()
	if err != nil {
		n.fail(nl, err.Error())
		return
	}
	nl.ev, nl.state = ev, naiveCopyIn
}

func (n *naiveManager) slot(addr, g int) []byte {
	part := n.parts.Part(g)
	row, _ := n.d.mem.Row(g, (addr-part.Address)/part.SlotBytes)
	return row
}

func (n *naiveManager) submit(nl *naiveLease) {
	var ext contract.CacheExtent
	if err := n.builder.Build(&ext, &nl.view, n.parts, []byte(staging.ExtentName), false); err != nil {
		n.fail(nl, err.Error())
		return
	}
	n.current = nl.l
	var a contract.Attempt
	var err error
	if nl.l.kind == readiness.Fetch {
		a, err = n.d.t.Fetch(ext, nil)
	} else {
		a, err = n.d.t.Publish(ext)
	}
	if errors.Is(err, contract.ErrSubmissionRejected) {
		n.failAs(nl, readiness.Rejected, "submission rejected: "+err.Error())
		return
	}
	if err != nil {
		n.fail(nl, "submission failed: "+err.Error())
		return
	}
	nl.attempt, nl.state = a, naiveRequested
}

// outcome takes the outcome as the end of the backend's access: it frees the
// slots at once, then copies the served rows out of them.
func (n *naiveManager) outcome(nl *naiveLease, o contract.Outcome) {
	l := nl.l
	switch o := o.(type) {
	case contract.Delivered:
		masks, err := staging.ServedMasksInto(nl.masks, &nl.view, o.Served)
		if err != nil {
			n.fail(nl, err.Error())
			return
		}
		nl.masks = masks
		switch k := o.Served.Len(); {
		case k == 0:
			l.outcome = readiness.Missed
		case k == nl.view.Rows():
			l.outcome = readiness.Served
		default:
			l.outcome = readiness.Partial
		}
	case contract.Failed:
		n.fail(nl, "failed: "+o.Reason)
		return
	case contract.Cancelled:
		n.failAs(nl, readiness.Cancelled, o.String())
		return
	default:
		n.failAs(nl, readiness.Violation, fmt.Sprint(o))
		return
	}
	n.free(nl) // the bug: an outcome is not proof that access has ended
	if l.kind != readiness.Fetch || l.outcome == readiness.Missed {
		n.done(nl, true)
		return
	}
	blocks := len(l.req.names[0])
	for i, gr := range nl.runs {
		for k, o := range gr.Ordinals {
			if !nl.masks[i][k] {
				continue
			}
			if err := n.stream.CopyHtoD(l.req.row(blocks, gr.LayerGroup, o), n.slot(gr.Addresses[k], gr.LayerGroup)); err != nil {
				l.outcome, l.reason = readiness.Failed, err.Error()
				n.done(nl, false)
				return
			}
		}
	}
	ev, err := n.stream.Record()
	if err != nil {
		l.outcome, l.reason = readiness.Failed, err.Error()
		n.done(nl, false)
		return
	}
	nl.ev, nl.state = ev, naiveCopyOut
}

func (n *naiveManager) fail(nl *naiveLease, reason string) { n.failAs(nl, readiness.Failed, reason) }

// failAs ends the lease with a failure of the given kind (classified as the
// engine classifies it, so that the two runs' counts compare) and frees its
// slots at once: the bug.
func (n *naiveManager) failAs(nl *naiveLease, kind readiness.OutcomeKind, reason string) {
	nl.l.outcome, nl.l.reason = kind, reason
	n.free(nl)
	n.done(nl, true)
}

// free returns the slots, whatever the backend may still be doing.
func (n *naiveManager) free(nl *naiveLease) {
	if nl.freed {
		return
	}
	nl.freed = true
	if nl.state == naiveWaiting && !n.alloc.Granted(nl.ticket) {
		_ = n.alloc.Cancel(nl.ticket)
	} else {
		_ = n.alloc.Free(nl.ticket)
	}
	delete(n.leases, nl.ticket)
	nl.l.final = released
	n.d.ended(nl.l)
}

// done reports the outcome; ready says the copies landed.
func (n *naiveManager) done(nl *naiveLease, ready bool) {
	if nl.state == naiveDone {
		return
	}
	nl.state = naiveDone
	l := nl.l
	if ready && l.kind == readiness.Fetch {
		masks := nl.masks
		if l.outcome != readiness.Served && l.outcome != readiness.Partial {
			masks, _ = staging.ServedMasks(&nl.view, contract.NameSet{})
		}
		if masks == nil {
			masks, _ = staging.ServedMasks(&nl.view, contract.NameSet{})
		}
		if iv, err := staging.WindowedReadinessOfView(TokensPerBlock, l.first, n.d.cfg.Attention(), &nl.view, masks); err == nil {
			l.interval, l.ready = iv, true
		}
	}
	n.d.outcome(l)
}

func (n *naiveManager) release(*lease) {} // already freed on the outcome

// layer: the naive manager has no per-layer readiness (Validate refuses it
// with Layerwise).
func (n *naiveManager) layer(*lease, int) readiness.LayerStatus { return readiness.LayerNever }

// computed refuses: the naive manager copies whole leases (Validate refuses
// --layerwise with it).
func (n *naiveManager) computed(*lease, int, gpu.Event) error {
	return errors.New("simulate: the naive manager takes no layers")
}

func (n *naiveManager) states() []StateCount {
	var counts [numNaiveStates]int
	for _, nl := range n.active {
		counts[nl.state]++
	}
	out := make([]StateCount, 0, numNaiveStates)
	for s, c := range counts {
		out = append(out, StateCount{State: naiveStateNames[s], Leases: c})
	}
	return out
}

func (n *naiveManager) finish() {
	n.closed = true
	for range 1000 {
		if len(n.active) == 0 {
			return
		}
		n.d.clk.Advance(n.d.cfg.Deadline)
		n.d.t.tick(n.d.clk.since())
		_, _ = n.step()
	}
}
