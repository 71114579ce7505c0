package simulate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	gsim "github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
	"github.com/kvready/kvready/transfer"
)

// kvreadyDisagg is the kvready manager of a disaggregated run: the shipped
// engine (readiness.Engine) lends its staging slots — the pages the prefill
// writers write — to fetches served by backend/peer's Receiver over the
// simulated network, and copies the served pages into device rows once the
// whole cohort of writers is proven settled. The manager only does what an
// embedding does: it negotiates with each prefill process's life before
// publishing anything to it, tells the receiver each attempt's plan, lends
// the rows, runs the engine's and the receiver's rounds, reads a lease once
// it is ready, and releases it. It decides nothing about when a page may
// return: the engine does.
type kvreadyDisagg struct {
	d      *disaggDriver
	leased bool
	clock  *gsim.ManualClock
	mem    *staging.Memory
	dev    *gsim.Device
	recv   *peer.Receiver
	eng    *readiness.Engine
	agreed map[transfer.Peer]transfer.Incarnation
	byH    map[readiness.Handle]*kvLease
	byKey  map[transfer.SessionKey]*kvLease
	lent   int // pages of leases lent and not yet granted or gone
}

// kvLease is what the manager keeps of one attempt's lease.
type kvLease struct {
	a        *dattempt
	h        readiness.Handle
	plan     peer.Plan
	pages    []peer.Page
	index    map[contract.Name]int // a page's index in the chunk
	dev      gpu.DevicePtr
	granted  bool // its slots were granted (or it left the line)
	outcome  readiness.OutcomeKind
	ready    bool // logically complete: its served pages are in the device rows
	reported bool // its outcome was told to the driver
	released bool // Release was called
	gone     bool // released or quarantined: the engine is done with it
}

// kvSync bounds one round's wait for the engine's goroutines: only a
// goroutine that never returns could hold it up.
const kvSync = 30 * time.Second

func newKvreadyDisagg(d *disaggDriver) (disaggManager, error) { return newKvreadyDisaggLeased(d, true) }

// newKvreadyDisaggLeased is newKvreadyDisagg with the receiver's generation
// leases on or off. Off, a session relies on its writers' own submission
// fence, which a writer that submits late breaks: the tests show the
// checker catching that through the engine.
func newKvreadyDisaggLeased(d *disaggDriver, leased bool) (*kvreadyDisagg, error) {
	m := &kvreadyDisagg{d: d, leased: leased, clock: gsim.NewManualClock(d.now()), agreed: map[transfer.Peer]transfer.Incarnation{},
		byH: map[readiness.Handle]*kvLease{}, byKey: map[transfer.SessionKey]*kvLease{}}
	var err error
	if m.mem, err = staging.NewMemory(staging.GoHeap, staging.Group{Slots: d.cfg.Pages, SlotBytes: SlotBytes}); err != nil {
		return nil, fmt.Errorf("simulate: staging: %w", err)
	}
	// The checker watches the engine's staging slots: they are the pages.
	pages := make([][]byte, d.cfg.Pages)
	for s := range pages {
		pages[s], _ = m.mem.Row(0, s)
	}
	d.watchPages(pages)
	if m.dev, err = gsim.New(0, 2*d.cfg.Pages*SlotBytes, gsim.WithLatency(m.clock, 0)); err != nil {
		return nil, fmt.Errorf("simulate: device: %w", err)
	}
	stream, err := m.dev.NewStream()
	if err != nil {
		return nil, fmt.Errorf("simulate: device: %w", err)
	}
	if m.recv, err = m.newReceiver(); err != nil {
		return nil, err
	}
	m.eng, err = readiness.New(readiness.Config{
		Memory: m.mem, TokensPerBlock: TokensPerBlock, Fetcher: watchedFetcher{m.recv, m}, Stream: stream, Clock: m.clock,
		RequestTimeout: d.cfg.deadline(), DrainGrace: d.cfg.grace(),
		RetryBackoff: disaggRoundSteps * DisaggStep, MaxRetryBackoff: 20 * disaggRoundSteps * DisaggStep,
		OnTransition: m.moved,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		_ = m.recv.Close()
		return nil, fmt.Errorf("simulate: engine: %w", err)
	}
	return m, nil
}

// newReceiver makes the decode side's receiver over the checker's view of
// the decode transport: every session's pages under a registration of
// their own, revoked once its outcome is latched. Its deadlines are the
// engine's, so neither gives up before the other; the owner's rounds run
// its Progress (no driver goroutine: the run stays deterministic).
func (m *kvreadyDisagg) newReceiver() (*peer.Receiver, error) {
	d := m.d
	window := 4 * (d.cfg.deadline() + d.cfg.grace())
	r, err := peer.NewReceiver(peer.ReceiverConfig{
		Transport: d.decode, Capabilities: d.self(), Leased: m.leased,
		Slot: func(u contract.Unit) []byte {
			row, ok := m.mem.Row(u.LocalGroup, u.Local)
			if !ok {
				return nil
			}
			return row
		},
		Timeout: d.cfg.deadline(), Grace: d.cfg.grace(), Clock: m.clock.Now,
		Limits: transfer.Limits{Sessions: 1 << 16, Tombstones: 1 << 10, Window: window},
		Offer:  m.offered,
	})
	if err != nil {
		return nil, fmt.Errorf("simulate: receiver: %w", err)
	}
	return r, nil
}

func (m *kvreadyDisagg) name() string { return "kvready" }

// close stops the engine and the receiver. Leases still lent at the end
// (an interrupted run) stay so: nothing is released to stop.
func (m *kvreadyDisagg) close() {
	ctx, cancel := context.WithTimeout(context.Background(), kvSync)
	defer cancel()
	_, _ = m.eng.Shutdown(ctx)
	_ = m.recv.Close()
}

// watchedFetcher is the receiver as the engine sees it: each fetch's slots
// are told to the checker (lent, their sentinel written) just before the
// receiver exposes them.
type watchedFetcher struct {
	*peer.Receiver
	m *kvreadyDisagg
}

// Fetch records the extent's slots lent to their attempt, then fetches.
func (f watchedFetcher) Fetch(ext contract.CacheExtent, route contract.Route) (contract.Attempt, error) {
	if l := f.m.leaseOf(ext); l != nil {
		pages := make([]int, ext.Len())
		for _, u := range ext.All() {
			pages[l.index[u.Name]] = u.Local
		}
		f.m.d.lend(l.a, pages)
	}
	return f.Receiver.Fetch(ext, route)
}

func (m *kvreadyDisagg) leaseOf(ext contract.CacheExtent) *kvLease {
	if ext.Len() == 0 {
		return nil
	}
	for _, l := range m.byKey {
		if _, ok := l.index[ext.Unit(0).Name]; ok {
			return l
		}
	}
	return nil
}

// offered is the receiver handing one writer its addresses: the driver
// spawns the writer drawn for it, on the life of its prefill process the
// session was agreed with — none if that life is gone (an offer to a dead
// process goes nowhere).
func (m *kvreadyDisagg) offered(o peer.Offer) error {
	l := m.byKey[o.Session]
	if l == nil {
		return fmt.Errorf("simulate: an offer for %s, which no lease expects", o.Session)
	}
	if adv, err := m.d.advert(o.Writer.Peer); err != nil || adv.Incarnation != o.Incarnation {
		return nil
	}
	at := make(map[int]peer.OfferPage, len(o.Pages))
	for _, pg := range o.Pages {
		at[pg.Index] = pg
	}
	return m.d.spawn(l.a, o.Writer, func(p int) ([]byte, int) { return at[p].Key, at[p].Offset })
}

// deadline and grace are the configuration's, in whole steps.
func (c DisaggConfig) deadline() time.Duration { return time.Duration(c.deadlineSteps()) * DisaggStep }
func (c DisaggConfig) grace() time.Duration    { return time.Duration(c.graceSteps()) * DisaggStep }

// submit negotiates with the current life of each writer's prefill process
// (once per life), tells the receiver the attempt's plan and lends its rows,
// when the pool has room for it; otherwise the attempt waits.
func (m *kvreadyDisagg) submit(a *dattempt) (bool, error) {
	if m.eng.Stats().SlotsFree-m.lent < a.r.pages {
		return false, nil
	}
	if err := m.connect(a); err != nil {
		return false, err
	}
	l, err := m.expect(a)
	if err != nil {
		return false, err
	}
	req := readiness.Request{Kind: readiness.Fetch}
	for j, pg := range l.pages {
		req.Rows = append(req.Rows, staging.Row{Name: pg.Name, Group: pg.Group, Block: pg.Block, Device: l.dev + gpu.DevicePtr(j*SlotBytes)})
	}
	h, err := m.eng.Lend(req)
	if err != nil {
		m.recv.Forget(l.plan.Key())
		_ = m.dev.Free(l.dev)
		if errors.Is(err, staging.ErrUngrantable) {
			return false, nil // quarantine left no run: it waits for one that will not come
		}
		return false, err
	}
	l.h = h
	m.byH[h], m.byKey[l.plan.Key()] = l, l
	m.lent += len(l.pages)
	return true, nil
}

// connect negotiates with every life of a prefill process a writer of a
// runs on that the receiver has not agreed with yet.
func (m *kvreadyDisagg) connect(a *dattempt) error {
	for _, w := range a.writers {
		adv, err := m.d.advert(w.id.Peer)
		if err != nil {
			return err
		}
		if m.agreed[w.id.Peer] == adv.Incarnation {
			continue
		}
		if _, err := m.recv.Connect(adv); err != nil {
			return fmt.Errorf("simulate: negotiating with %s#%d: %w", adv.Peer, adv.Incarnation, err)
		}
		m.agreed[w.id.Peer] = adv.Incarnation
	}
	return nil
}

// expect builds a's plan — one PAGED group, a page per block of the prompt
// — records it with the receiver and allocates the device rows its pages
// are copied into.
func (m *kvreadyDisagg) expect(a *dattempt) (*kvLease, error) {
	dev, err := m.dev.Alloc(a.r.pages * SlotBytes)
	if err != nil {
		return nil, fmt.Errorf("simulate: device rows: %w", err)
	}
	ids := make([]int, a.r.pages)
	for j := range ids {
		ids[j] = int(dev)/SlotBytes + j
	}
	chunk, err := transfer.NewChunk([]transfer.Group{{Kind: transfer.Paged, Blocks: ids}}, a.tokens(), true)
	if err != nil {
		_ = m.dev.Free(dev)
		return nil, err
	}
	l := &kvLease{a: a, dev: dev, index: map[contract.Name]int{},
		plan: peer.Plan{Request: a.r.id, Attempt: a.n, Chunk: chunk, BlockTokens: TokensPerBlock}}
	for _, w := range a.writers {
		l.plan.Writers = append(l.plan.Writers, w.id)
	}
	if l.pages, err = m.recv.Expect(l.plan); err != nil {
		_ = m.dev.Free(dev)
		return nil, fmt.Errorf("simulate: expecting %s: %w", a.key(), err)
	}
	for j, pg := range l.pages {
		l.index[pg.Name] = j
	}
	return l, nil
}

// cancel asks the engine to cancel a's lease: withdrawn if not yet
// submitted, the receiver's session cancelled otherwise. The pages return
// when the engine says so.
func (m *kvreadyDisagg) cancel(a *dattempt) {
	if l := m.byKey[a.key()]; l != nil {
		_, _ = m.eng.Cancel(l.h)
	}
}

// round moves the clock to the driver's step, runs the receiver (evidence
// in, deadlines, revocations) and the engine until its goroutines caught
// up, then acts on what moved, lease by lease in request order.
func (m *kvreadyDisagg) round() error {
	m.clock.Advance(m.d.now().Sub(m.clock.Now()))
	m.recv.Progress()
	ctx, cancel := context.WithTimeout(context.Background(), kvSync)
	defer cancel()
	if _, err := m.eng.Sync(ctx); err != nil {
		return fmt.Errorf("simulate: the engine: %w", err)
	}
	if err := m.eng.Err(); err != nil {
		return fmt.Errorf("simulate: the engine halted: %w", err)
	}
	for _, key := range slices.SortedFunc(maps.Keys(m.byKey), compareKeys) {
		m.act(m.byKey[key])
	}
	return nil
}

// moved is the engine's transition hook, on the owner goroutine, in the
// order the engine moves: it records what moved and tells the checker, at
// once, of pages back in the pool or quarantined — before any later grant
// of the same slots, which the same round may make. It calls nothing of the
// engine's.
func (m *kvreadyDisagg) moved(tr readiness.Transition) {
	l := m.byH[tr.Lease]
	if l == nil {
		return
	}
	if tr.From == readiness.StateWaiting && !l.granted {
		l.granted = true
		m.lent -= len(l.pages)
	}
	if tr.Outcome != readiness.NoOutcome && l.outcome == readiness.NoOutcome {
		l.outcome = tr.Outcome
	}
	switch tr.To {
	case readiness.StateLogicallyComplete:
		l.ready = true
	case readiness.StateReleased:
		l.gone = true
		m.d.settled(l.a)
	case readiness.StateQuarantined:
		l.gone = true
		m.d.contained(l.a)
	}
}

// act does what a lease's moves ask of the owner: an outcome other than a
// delivery is reported and the lease released (its pages return once the
// engine proves its writers settled); a delivery is read once the engine
// copied it (ready), reported and released; a lease the engine is done with
// is forgotten.
func (m *kvreadyDisagg) act(l *kvLease) {
	switch {
	case l.reported:
	case l.outcome == readiness.Served && l.ready:
		m.read(l)
		m.d.outcome(l.a, outDelivered)
		l.reported = true
	case l.outcome != readiness.NoOutcome && l.outcome != readiness.Served:
		m.d.outcome(l.a, m.kind(l))
		l.reported = true
	}
	if l.reported && !l.released && !l.gone {
		l.released = true
		_ = m.eng.Release(l.h) // refused only once requested: nothing to do then
	}
	if !l.gone {
		return
	}
	if !l.reported {
		m.d.outcome(l.a, outWithdrawn)
	}
	if !l.granted {
		m.lent -= len(l.pages)
	}
	m.recv.Forget(l.plan.Key()) // a lease withdrawn before its fetch: its plan was never consumed
	_ = m.dev.Free(l.dev)
	delete(m.byKey, l.plan.Key())
	delete(m.byH, l.h)
}

// read has the checker read a ready lease's pages: the staging pages the
// engine copied out, and the device rows it copied them into.
func (m *kvreadyDisagg) read(l *kvLease) {
	m.d.read(l.a)
	row := make([]byte, SlotBytes)
	for j := range l.pages {
		if err := m.dev.Read(row, l.dev+gpu.DevicePtr(j*SlotBytes)); err != nil {
			clear(row)
		}
		m.d.chk.readCopy(row, pageTag{request: l.a.r.id, index: j, attempt: l.a.n})
	}
}

// kind names a latched outcome other than a delivery as the summary
// counts attempts: a failure by the receiver's account of its session
// (timed out, a peer lost, a writer's failure) while it still holds it.
func (m *kvreadyDisagg) kind(l *kvLease) string {
	switch l.outcome {
	case readiness.Failed:
		if info, ok := m.recv.Info(l.plan.Key()); ok {
			if _, failed := info.Outcome.(transfer.Failed); failed {
				return outcomeKind(info)
			}
		}
		return outFailed
	case readiness.Cancelled:
		if info, err := m.eng.Lease(l.h); err == nil && info.ByPeer {
			return outByPeer
		}
		return outCancelled
	case readiness.TimedOut:
		return outTimeout
	}
	return l.outcome.String() // rejected, partial, missed, violation: retried like a failure
}
