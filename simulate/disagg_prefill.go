package simulate

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	gsim "github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// prefillSide is the prefill side's manager of a disaggregated run: on each
// prefill host, the staging slots its writers' puts read — the source
// pages — and the peer.Sender that puts from them, for the honest writers
// (the scripted adversarial writers keep sources of their own). kvready's
// is a second readiness.Engine per host, lending its slots to the Sender as
// publish leases; the naive foil returns a publication's slots on its
// outcome. The driver's checker watches the slots (lendSource, freeSource).
type prefillSide interface {
	// name is the manager's name in summaries and reports.
	name() string
	// publish lends writer w's share of a's pages to the Sender of its
	// prefill process's current life: copied into staging slots, then put
	// from them once the decode side's offer arrives.
	publish(a *dattempt, w dwriter) error
	// restarted says the prefill process p died and node is its next life:
	// the publications of the dead life end (its Sender will post nothing
	// more, though what it posted may still land), and new ones go to a
	// Sender on node.
	restarted(p transfer.Peer, node *sim.Node) error
	// round is the manager's turn after the network moved: offers and
	// cancels in, puts and reports out, outcomes, slots returned.
	round() error
	// stats are the manager's own counts, for the summary.
	stats() prefillStats
	// pending counts the publications whose slots are neither back with
	// the allocator nor contained: the run is not over while one is.
	pending() int
	// close stops the manager's goroutines, if it has any.
	close()
}

// prefillStats is what a prefill manager did, by its own count.
type prefillStats struct {
	Publishes int            // shares lent to a Sender
	Refused   int            // shares never lent: no slots for them
	Outcomes  map[string]int // publications by outcome, as the manager saw them
}

// newSender makes the Sender of one life of a prefill process and agrees
// it with the decode process: it advertises every capability this version
// defines (it sends DONE only after its flush, so PER_OPERATION_QUIESCENCE
// is true of it). Its deadlines are the run's; the owner's rounds run its
// Progress (no driver goroutine: the run stays deterministic).
func (d *disaggDriver) newSender(node transfer.Transport, clock func() time.Time, slot func(contract.Unit) []byte) (*peer.Sender, error) {
	name, inc := node.Self()
	adv := transfer.Capabilities{Peer: name, Incarnation: inc, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}
	window := 4 * (d.cfg.deadline() + d.cfg.grace())
	s, err := peer.NewSender(peer.SenderConfig{
		Transport: node, Capabilities: adv, Slot: slot, Timeout: d.cfg.deadline(), Clock: clock,
		Limits: transfer.Limits{Sessions: 1 << 16, Tombstones: 1 << 10, Window: window},
	})
	if err != nil {
		return nil, fmt.Errorf("simulate: sender of %s: %w", adv.Peer, err)
	}
	if _, err := s.Connect(d.self()); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("simulate: sender of %s: %w", adv.Peer, err)
	}
	return s, nil
}

// sendPlan is writer w's send plan for a: the whole chunk's span and pages
// (the receiver's places), with w's share of them.
func sendPlan(a *dattempt, w dwriter) (peer.SendPlan, error) {
	return sendPlanOf(a.r.id, a.n, a.r.pages, w.id, w.pages)
}

// sendPlanOf is the send plan of writer as for attempt att of request req,
// whose chunk has pages pages, of which it writes share — the one the
// prefill process of a run over UCX rebuilds from its command line.
func sendPlanOf(req transfer.RequestID, att transfer.AttemptID, pages int, as transfer.AccessorID, share []int) (peer.SendPlan, error) {
	ids := make([]int, pages)
	for j := range ids {
		ids[j] = j
	}
	chunk, err := transfer.NewChunk([]transfer.Group{{Kind: transfer.Paged, Blocks: ids}}, transfer.TokenRange{End: int64(pages * TokensPerBlock)}, true)
	if err != nil {
		return peer.SendPlan{}, err
	}
	sp := peer.SendPlan{Request: req, Attempt: att, To: disaggDecode, As: as, Chunk: chunk, BlockTokens: TokensPerBlock}
	for _, p := range share {
		sp.Share = append(sp.Share, peer.PageRef{Group: 0, Index: p})
	}
	return sp, nil
}

// kvreadyPrefill is the kvready prefill side: on each prefill host, the
// shipped engine lends its staging slots to publish leases — the
// device→staging copy fills the bounce buffer, then the host's Sender puts
// from it — and returns a slot only when the engine says so: once the
// Sender's Quiesce proves every put that reads it completed. The manager
// does what an embedding does: it expects each share's plan, lends its
// rows, runs the Senders' and the engine's rounds, releases a lease once
// its outcome is in, and, when its process's worker dies, cancels the
// dead life's leases (their Sender posts nothing more; the engine still
// waits for what was posted).
type kvreadyPrefill struct {
	d     *disaggDriver
	clock *gsim.ManualClock
	hosts map[transfer.Peer]*prefillHost
	st    prefillStats
}

// prefillHost is one prefill host: its staging slots and device, its
// engine, and the Sender of each life of its process.
type prefillHost struct {
	m       *kvreadyPrefill
	peer    transfer.Peer
	mem     *staging.Memory
	dev     *gsim.Device
	eng     *readiness.Engine
	send    *peer.Sender   // the current life's
	senders []*peer.Sender // every life's, oldest first
	base    int            // the checker's index of slot 0

	mu     sync.Mutex // the engine's goroutines read these through hostPublisher
	byName map[contract.Name]*pubLease
	owner  map[contract.Attempt]*peer.Sender

	byH map[readiness.Handle]*pubLease
}

// pubLease is what the manager keeps of one share's publish lease.
type pubLease struct {
	a        *dattempt
	w        dwriter
	h        readiness.Handle
	send     *peer.Sender
	plan     peer.SendPlan
	pages    []peer.Page
	index    map[contract.Name]int
	dev      gpu.DevicePtr
	slots    []int // the checker's indices of its slots, once published
	outcome  readiness.OutcomeKind
	reported bool
	released bool
	gone     bool
}

func newKvreadyPrefill(d *disaggDriver) (*kvreadyPrefill, error) {
	m := &kvreadyPrefill{d: d, clock: gsim.NewManualClock(d.now()), hosts: map[transfer.Peer]*prefillHost{},
		st: prefillStats{Outcomes: map[string]int{}}}
	for _, p := range d.work.prefills() {
		h, err := m.newHost(p)
		if err != nil {
			m.close()
			return nil, err
		}
		m.hosts[p] = h
	}
	return m, nil
}

func (m *kvreadyPrefill) newHost(p transfer.Peer) (*prefillHost, error) {
	d := m.d
	h := &prefillHost{m: m, peer: p, byName: map[contract.Name]*pubLease{}, owner: map[contract.Attempt]*peer.Sender{},
		byH: map[readiness.Handle]*pubLease{}}
	var err error
	if h.mem, err = staging.NewMemory(staging.GoHeap, staging.Group{Slots: d.cfg.Pages, SlotBytes: SlotBytes}); err != nil {
		return nil, fmt.Errorf("simulate: %s staging: %w", p, err)
	}
	slots := make([][]byte, d.cfg.Pages)
	for s := range slots {
		slots[s], _ = h.mem.Row(0, s)
	}
	h.base = d.chk.watchSources(slots)
	if h.dev, err = gsim.New(0, 2*d.cfg.Pages*SlotBytes, gsim.WithLatency(m.clock, 0)); err != nil {
		return nil, fmt.Errorf("simulate: %s device: %w", p, err)
	}
	stream, err := h.dev.NewStream()
	if err != nil {
		return nil, fmt.Errorf("simulate: %s device: %w", p, err)
	}
	if h.send, err = d.newSender(d.prefillTransport(p), m.clock.Now, h.slot); err != nil {
		return nil, err
	}
	h.senders = append(h.senders, h.send)
	// The engine's deadlines sit beyond the Sender's own (Timeout, fixed at
	// its Publish): it gives up only on a Sender that never concludes, and
	// waits a deadline and a grace after an outcome for the puts to finish.
	h.eng, err = readiness.New(readiness.Config{
		Memory: h.mem, TokensPerBlock: TokensPerBlock, Publisher: hostPublisher{h}, Stream: stream, Clock: m.clock,
		RequestTimeout: 2 * d.cfg.deadline(), DrainGrace: d.cfg.deadline() + d.cfg.grace(),
		RetryBackoff: disaggRoundSteps * DisaggStep, MaxRetryBackoff: 20 * disaggRoundSteps * DisaggStep,
		OnTransition: h.moved, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		_ = h.send.Close()
		return nil, fmt.Errorf("simulate: %s engine: %w", p, err)
	}
	return h, nil
}

// slot is the staging slot a unit names: the bounce buffer the Sender's
// puts read.
func (h *prefillHost) slot(u contract.Unit) []byte {
	row, ok := h.mem.Row(u.LocalGroup, u.Local)
	if !ok {
		return nil
	}
	return row
}

func (m *kvreadyPrefill) name() string { return "kvready" }

func (m *kvreadyPrefill) pending() int {
	n := 0
	for _, h := range m.hosts {
		n += len(h.byH)
	}
	return n
}

func (m *kvreadyPrefill) stats() prefillStats {
	st := m.st
	st.Outcomes = maps.Clone(m.st.Outcomes)
	return st
}

// close stops every host's engine and Sender. Leases still lent (an
// interrupted run) stay so.
func (m *kvreadyPrefill) close() {
	for _, p := range slices.Sorted(maps.Keys(m.hosts)) {
		h := m.hosts[p]
		ctx, cancel := context.WithTimeout(context.Background(), kvSync)
		_, _ = h.eng.Shutdown(ctx)
		cancel()
		for _, s := range h.senders {
			_ = s.Close()
		}
	}
}

// publish expects w's share of a on the current life's Sender, writes the
// share's KV into device rows (what the prefill computed) and lends them as
// a publish lease: the engine copies them into staging slots, then hands
// the slots to the Sender.
func (m *kvreadyPrefill) publish(a *dattempt, w dwriter) error {
	h := m.hosts[w.id.Peer]
	sp, err := sendPlan(a, w)
	if err != nil {
		return err
	}
	pages, err := h.send.Expect(sp)
	if err != nil {
		return err
	}
	dev, err := h.dev.Alloc(len(pages) * SlotBytes)
	if err != nil {
		h.send.Forget(sp.Key(), sp.As)
		m.st.Refused++
		return nil // the device is full of leases held: this share is never published
	}
	l := &pubLease{a: a, w: w, send: h.send, plan: sp, pages: pages, dev: dev, index: map[contract.Name]int{}}
	req := readiness.Request{Kind: readiness.Publish}
	for k, pg := range pages {
		at := dev + gpu.DevicePtr(k*SlotBytes)
		if err := h.dev.Write(at, pageTag{kind: pageData, request: a.r.id, index: pg.Index, attempt: a.n}.content()); err != nil {
			return fmt.Errorf("simulate: %s device: %w", h.peer, err)
		}
		l.index[pg.Name] = k
		req.Rows = append(req.Rows, staging.Row{Name: pg.Name, Group: pg.Group, Block: pg.Block, Device: at})
	}
	h.mu.Lock()
	for _, pg := range pages {
		h.byName[pg.Name] = l
	}
	h.mu.Unlock()
	if l.h, err = h.eng.Lend(req); err != nil {
		h.forget(l)
		if err := h.dev.Free(dev); err != nil {
			return err
		}
		m.st.Refused++
		return nil
	}
	h.byH[l.h] = l
	m.st.Publishes++
	return nil
}

func (h *prefillHost) forget(l *pubLease) {
	l.send.Forget(l.plan.Key(), l.plan.As) // never published: its plan was never consumed
	h.mu.Lock()
	for _, pg := range l.pages {
		delete(h.byName, pg.Name)
	}
	h.mu.Unlock()
}

// restarted starts the Sender of p's next life, and cancels every lease of
// the dead life's Sender the engine still holds: that Sender posts nothing
// more (its publication concludes), and the engine returns each lease's
// slots once the puts it posted completed — landed or dropped.
func (m *kvreadyPrefill) restarted(p transfer.Peer, node *sim.Node) error {
	h := m.hosts[p]
	old := h.send
	send, err := m.d.newSender(node, m.clock.Now, h.slot)
	if err != nil {
		return err
	}
	h.send = send
	h.senders = append(h.senders, send)
	for _, hd := range slices.SortedFunc(maps.Keys(h.byH), compareHandles) {
		if l := h.byH[hd]; l.send == old && !l.gone {
			_, _ = h.eng.Cancel(l.h) // refused once an outcome is latched: the lease goes on to its proof
		}
	}
	return nil
}

func compareHandles(a, b readiness.Handle) int { return cmp.Compare(a.Uint64(), b.Uint64()) }

// round moves the clock to the driver's step, runs every Sender (offers and
// cancels in, puts posted, reports sent once flushed, deadlines) and every
// engine until its goroutines caught up, then acts on what moved.
func (m *kvreadyPrefill) round() error {
	m.clock.Advance(m.d.now().Sub(m.clock.Now()))
	for _, p := range slices.Sorted(maps.Keys(m.hosts)) {
		h := m.hosts[p]
		for _, s := range h.senders {
			s.Progress()
		}
		ctx, cancel := context.WithTimeout(context.Background(), kvSync)
		_, err := h.eng.Sync(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("simulate: the %s engine: %w", p, err)
		}
		if err := h.eng.Err(); err != nil {
			return fmt.Errorf("simulate: the %s engine halted: %w", p, err)
		}
		for _, hd := range slices.SortedFunc(maps.Keys(h.byH), compareHandles) {
			if err := h.act(h.byH[hd]); err != nil {
				return err
			}
		}
	}
	return nil
}

// moved is the engine's transition hook, on the owner goroutine, in the
// order the engine moves: it records the outcome and tells the checker at
// once of slots back with the allocator — before any later grant of them.
func (h *prefillHost) moved(tr readiness.Transition) {
	l := h.byH[tr.Lease]
	if l == nil {
		return
	}
	if tr.Outcome != readiness.NoOutcome && l.outcome == readiness.NoOutcome {
		l.outcome = tr.Outcome
	}
	switch tr.To {
	case readiness.StateReleased:
		l.gone = true
		for _, s := range l.slots {
			h.m.d.chk.freeSource(s)
		}
	case readiness.StateQuarantined:
		l.gone = true
	}
}

// act releases a lease once its outcome is in (its slots return when the
// engine proves its puts over), and forgets one the engine is done with.
func (h *prefillHost) act(l *pubLease) error {
	if l.outcome != readiness.NoOutcome && !l.reported {
		l.reported = true
		h.m.st.Outcomes[l.outcome.String()]++
	}
	if l.reported && !l.released && !l.gone {
		l.released = true
		_ = h.eng.Release(l.h) // refused only once requested: nothing to do then
	}
	if !l.gone {
		return nil
	}
	if l.slots == nil {
		h.forget(l) // withdrawn before its publish
	}
	h.mu.Lock()
	for _, pg := range l.pages {
		delete(h.byName, pg.Name)
	}
	h.mu.Unlock()
	delete(h.byH, l.h)
	return h.dev.Free(l.dev)
}

// hostPublisher is the host's Senders as its engine sees them: a publish
// goes to the Sender its plan was expected on, and an attempt's Quiesce to
// the Sender that made it. Each publish's slots are told to the checker,
// lent, just before the Sender may read them.
type hostPublisher struct{ h *prefillHost }

var (
	_ contract.Publisher     = hostPublisher{}
	_ contract.QuiesceProber = hostPublisher{}
)

// Publish records the extent's slots lent to their share, then publishes on
// the share's Sender.
func (p hostPublisher) Publish(ext contract.CacheExtent) (contract.Attempt, error) {
	h := p.h
	h.mu.Lock()
	var l *pubLease
	if ext.Len() > 0 {
		l = h.byName[ext.Unit(0).Name]
	}
	h.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("%w: simulate: a publish of no share expected", contract.ErrSubmissionRejected)
	}
	l.slots = make([]int, ext.Len())
	for _, u := range ext.All() {
		k := l.index[u.Name]
		l.slots[k] = h.base + u.Local
		h.m.d.chk.lendSource(h.base+u.Local, pageTag{request: l.a.r.id, index: l.pages[k].Index, attempt: l.a.n})
	}
	a, err := l.send.Publish(ext)
	if err == nil {
		h.mu.Lock()
		h.owner[a] = l.send
		h.mu.Unlock()
	}
	return a, err
}

// bySender groups attempts by the Sender that made them.
func (p hostPublisher) bySender(attempts []contract.Attempt) (map[*peer.Sender][]contract.Attempt, error) {
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	out := map[*peer.Sender][]contract.Attempt{}
	for i, a := range attempts {
		s := p.h.owner[a]
		if s == nil {
			return nil, fmt.Errorf("simulate: attempt %d is no publication of %s", i, p.h.peer)
		}
		out[s] = append(out[s], a)
	}
	return out, nil
}

// TryQuiesce is every owning Sender's answer: ended only if each says so.
func (p hostPublisher) TryQuiesce(attempts []contract.Attempt) (contract.Access, error) {
	groups, err := p.bySender(attempts)
	if err != nil {
		return contract.AccessUnproven, err
	}
	all := contract.AccessEnded
	for s, as := range groups {
		acc, err := s.TryQuiesce(as)
		if err != nil {
			return contract.AccessUnproven, err
		}
		if acc != contract.AccessEnded {
			all = contract.AccessUnproven
		}
	}
	return all, nil
}

// Quiesce is TryQuiesce's answer as the contract's; it never waits.
func (p hostPublisher) Quiesce(ctx context.Context, attempts []contract.Attempt) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	acc, err := p.TryQuiesce(attempts)
	return acc == contract.AccessEnded, err
}

// Settle waits for every owning Sender's publications to conclude.
func (p hostPublisher) Settle(ctx context.Context, attempts []contract.Attempt) error {
	groups, err := p.bySender(attempts)
	if err != nil {
		return err
	}
	for s, as := range groups {
		if err := s.Settle(ctx, as); err != nil {
			return err
		}
	}
	return nil
}
