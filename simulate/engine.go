package simulate

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/internal/words"
	"github.com/kvready/kvready/metrics"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// manager is what the driver needs from a KV cache manager's staging side: the
// engine, or the naive foil. Both report back through the driver's outcome and
// ended callbacks.
type manager interface {
	lend(l *lease) error
	// step runs one round of the manager and says how many moves it made.
	step() (int, error)
	release(l *lease)
	// layer says where layer k of the fetch l stands (Layerwise).
	layer(l *lease, k int) readiness.LayerStatus
	// computed reports layer k of the layerwise publish l computed, behind
	// the compute stream's event after (Layerwise).
	computed(l *lease, k int, after gpu.Event) error
	states() []StateCount
	// nextSubmission names the lease whose submission the backend sees next.
	nextSubmission() *lease
	// capacity reports the staging capacity the run lost or got back.
	capacity() capacity
	// halted says why the manager stopped (nil while it runs): the engine
	// under the fatal containment policy.
	halted() error
	// woken is signalled when the manager has work for a round (nil: never).
	woken() <-chan struct{}
	// why says why requests are still unfinished.
	why() string
	// finish stops admission and runs until nothing more can happen.
	finish()
}

// engineManager drives readiness.Engine — the runner users embed, its
// goroutines and all — learning what happened from its transition hook, as a
// real manager would. Over the in-process store each step is one Engine.Sync
// on the virtual clock: the engine's goroutines catch up with everything the
// simulated backend made observable, so a run is deterministic for a seed.
// Over Redis the engine runs on the system clock and each step is one
// Engine.Progress, which never blocks, as in a real manager's scheduling loop.
type engineManager struct {
	eng          *readiness.Engine
	realTime     bool
	d            *driver
	byHandle     map[readiness.Handle]*lease
	handles      map[*lease]readiness.Handle
	events       []readiness.Transition
	staged       []*lease // leases resting in staged, in the order the engine submits them
	containments int
	reasons      map[string]int           // containments by reason
	containedBy  map[readiness.Handle]int // slots of each contained lease, for a recovery
	recovered    int
	recoveredBy  int // slots the recovered leases returned
	halt         error
	ungrantable  uint64 // the engine's ungrantable count last seen
	draining     bool
}

// capacity is the staging capacity a run lost to containment, or got back.
type capacity struct {
	slotsQuarantined, containments int
	// reasons counts the containments by reason.
	reasons map[string]int
	// recovered counts contained leases whose access a later Quiesce proved
	// over (recover policy); recoveredSlots the slots they returned.
	recovered, recoveredSlots int
	// maxOutstanding is the admission bound in force (0: none).
	maxOutstanding int
}

var _ readiness.Admitter = (*transport)(nil)

// syncLimit bounds one step's wait for the engine's goroutines: only a
// goroutine that never returns could hold it up.
const syncLimit = 30 * time.Second

func newEngineManager(d *driver, s gpu.Stream, h gpu.Health) (*engineManager, error) {
	em := &engineManager{d: d, realTime: d.clk.real(), byHandle: map[readiness.Handle]*lease{}, handles: map[*lease]readiness.Handle{},
		reasons: map[string]int{}, containedBy: map[readiness.Handle]int{}}
	var clk readiness.Clock = d.clk
	if em.realTime {
		clk = nil // the engine's default: the system clock
	}
	var obs readiness.Observer
	var eng *readiness.Engine
	var err error
	if d.cfg.Metrics != nil {
		obs = d.cfg.Metrics
		// The latency histograms and the oldest unfenced age are measured on
		// the engine's clock: say which, so that a simulated second is never
		// read as a second of wall time.
		if em.realTime {
			d.cfg.Metrics.SetClock(metrics.WallClock)
		} else {
			d.cfg.Metrics.SetClock(metrics.VirtualClock)
		}
	}
	var layers [][]staging.LayerSpans
	if d.cfg.Layerwise {
		if layers, err = readiness.LayersOf(d.cfg.layout()); err != nil {
			return nil, fmt.Errorf("simulate: the layerwise layout: %w", err)
		}
	}
	eng, err = readiness.New(readiness.Config{
		Layers:         layers,
		Memory:         d.mem,
		TokensPerBlock: TokensPerBlock,
		Attention:      d.cfg.Attention(),
		RequestTimeout: d.cfg.Deadline,
		DrainGrace:     d.cfg.DrainGrace,
		// Back-off: a "not yet" is asked again a tick later, then less often.
		RetryBackoff:    tick,
		MaxRetryBackoff: 20 * tick,
		KeepReleased:    64,
		MaxOutstanding:  d.cfg.MaxOutstanding, // 0: the backend's AdmissionLimit, through the transport
		Containment:     d.cfg.Containment,
		OnTransition:    em.hook,
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		Fetcher:         d.t,
		Publisher:       d.t,
		Stream:          s,
		Health:          h,
		Clock:           clk,
		OnContainment:   em.contain,
		OnRecovery:      em.recoverLease,
		OnHalt:          func(err error) { em.halt = err },
		Observer:        obs,
	})
	if err != nil {
		return nil, err
	}
	em.eng = eng
	return em, nil
}

// hook runs inside engine calls. It only records, except for keeping the line
// of admitted leases: a lease admitted to the backend is submitted in that
// order, in the same round.
func (em *engineManager) hook(tr readiness.Transition) {
	if tr.To == readiness.StateAdmitted {
		if l := em.byHandle[tr.Lease]; l != nil {
			em.staged = append(em.staged, l)
		}
	}
	em.events = append(em.events, tr)
}

func (em *engineManager) nextSubmission() *lease {
	if len(em.staged) == 0 {
		return nil
	}
	l := em.staged[0]
	em.staged[0] = nil
	em.staged = em.staged[1:]
	return l
}

func (em *engineManager) lend(l *lease) error {
	// Layer by layer a publish saves what its pass computes as each layer is.
	layerwise := em.d.cfg.Layerwise && l.kind == readiness.Publish
	h, err := em.eng.Lend(readiness.Request{Kind: l.kind, Rows: l.rows(), KnownBlocks: l.first, Layerwise: layerwise})
	if err != nil {
		return err
	}
	em.byHandle[h], em.handles[l] = l, h
	return nil
}

func (em *engineManager) step() (int, error) {
	var moves int
	if em.realTime {
		moves = em.eng.Progress()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), syncLimit)
		defer cancel()
		var err error
		if moves, err = em.eng.Sync(ctx); err != nil {
			return moves, fmt.Errorf("simulate: %w", err)
		}
	}
	em.drain()
	em.dropUngrantable()
	return moves, nil
}

// dropUngrantable gives up on waiting leases that quarantine made impossible
// to grant, as a manager must: it releases them (they hold nothing) and
// recomputes instead.
func (em *engineManager) dropUngrantable() {
	if em.eng.Stats().Ungrantable == em.ungrantable {
		return
	}
	em.ungrantable = em.eng.Stats().Ungrantable
	for h, l := range em.byHandle {
		if info, err := em.eng.Lease(h); err == nil && info.Ungrantable {
			l.final, l.reported, l.reason, l.ungrantable = refused, true, info.Reason, true
			_ = em.eng.Release(h)
			em.forget(l, h)
			em.d.ended(l)
		}
	}
	em.drain()
}

func (em *engineManager) release(l *lease) {
	if h, ok := em.handles[l]; ok {
		_ = em.eng.Release(h) // latched until the lease is complete
		em.drain()
	}
}

// drain handles the recorded transitions. Handling one may cause more (a
// release), which are handled in the same loop.
func (em *engineManager) drain() {
	if em.draining {
		return // the outer call handles what this one would
	}
	em.draining = true
	defer func() { em.draining = false }()
	for i := 0; i < len(em.events); i++ {
		tr := em.events[i]
		l := em.byHandle[tr.Lease]
		if l == nil {
			continue
		}
		switch tr.To {
		case readiness.StateGranted:
			if runs, err := em.eng.Runs(tr.Lease, nil); err == nil {
				em.d.mu.Lock()
				em.d.chk.granted(l, runs)
				em.d.mu.Unlock()
			}
			em.d.save(l) // a layerwise publish takes its layers from now on
		case readiness.StateAccessFenced:
			em.d.fenced(l) // the round that issued its copies
		case readiness.StateLogicallyComplete:
			if l.fwd != nil {
				em.d.complete(l.fwd) // before the release below ends its layers' answers
			}
			em.report(l, tr.Lease, true)
		case readiness.StateQuarantined:
			em.report(l, tr.Lease, false)
			l.final = quarantined
			_ = em.eng.Release(tr.Lease) // retire the handle; the slots stay out for ever
			em.forget(l, tr.Lease)
			em.d.ended(l)
		case readiness.StateReleased:
			em.d.mu.Lock()
			em.d.chk.withdrawnEnded(l) // as its slots return
			em.d.mu.Unlock()
			em.report(l, tr.Lease, false)
			l.final = released
			em.forget(l, tr.Lease)
			em.d.ended(l)
		}
	}
	clear(em.events)
	em.events = em.events[:0]
}

func (em *engineManager) forget(l *lease, h readiness.Handle) {
	delete(em.byHandle, h)
	delete(em.handles, l)
}

func (em *engineManager) report(l *lease, h readiness.Handle, ready bool) {
	if l.reported {
		return
	}
	info, err := em.eng.Lease(h)
	if err != nil {
		return
	}
	l.outcome, l.reason = info.Outcome, info.Reason
	if ready && l.kind == readiness.Fetch {
		if iv, err := em.eng.Readiness(h); err == nil {
			l.interval, l.ready = iv, true
		}
	}
	em.d.outcome(l)
}

func (em *engineManager) layer(l *lease, k int) readiness.LayerStatus {
	h, ok := em.handles[l]
	if !ok {
		return readiness.LayerNever // released: nothing more lands for it
	}
	_, st, err := em.eng.LayerReadiness(h, k)
	if err != nil {
		return readiness.LayerNever
	}
	return st
}

func (em *engineManager) computed(l *lease, k int, after gpu.Event) error {
	h, ok := em.handles[l]
	if !ok {
		return fmt.Errorf("simulate: layer %d of a publish already released", k)
	}
	return em.eng.Computed(h, k, after)
}

func (em *engineManager) states() []StateCount {
	out := make([]StateCount, 0, readiness.NumStates)
	for s := range readiness.NumStates {
		out = append(out, StateCount{State: readiness.State(s).String(), Leases: em.eng.Count(readiness.State(s))})
	}
	return out
}

// maxReasons bounds the distinct reasons a summary counts; the rest are
// counted together under otherReasons.
const maxReasons = 8

const otherReasons = "other reasons"

// countReason adds one to reason's count in m, keeping at most maxReasons
// distinct reasons.
func countReason(m map[string]int, reason string) {
	if _, ok := m[reason]; !ok && len(m) >= maxReasons {
		reason = otherReasons
	}
	m[reason]++
}

// contain counts a containment, by its reason.
func (em *engineManager) contain(c readiness.Containment) {
	em.containments++
	countReason(em.reasons, c.Reason)
	em.containedBy[c.Lease] = c.Slots
}

// recoverLease counts a contained lease whose access was proven over after all.
func (em *engineManager) recoverLease(h readiness.Handle) {
	em.recovered++
	em.recoveredBy += em.containedBy[h]
	delete(em.containedBy, h)
}

func (em *engineManager) capacity() capacity {
	st := em.eng.Stats()
	return capacity{slotsQuarantined: st.SlotsQuarantined, containments: em.containments, reasons: em.reasons,
		recovered: em.recovered, recoveredSlots: em.recoveredBy, maxOutstanding: st.MaxOutstanding}
}

func (em *engineManager) halted() error { return em.halt }

func (em *engineManager) woken() <-chan struct{} { return em.eng.Wake() }

// why explains unfinished requests from the engine's own account.
func (em *engineManager) why() string {
	st := em.eng.Stats()
	var parts []string
	if st.SlotsQuarantined > 0 {
		parts = append(parts, fmt.Sprintf("%d staging slots quarantined (never-proven deliveries, contained)", st.SlotsQuarantined))
	}
	if st.Ungrantable > 0 {
		parts = append(parts, words.Count(int(st.Ungrantable), "lease")+" can never be granted: quarantine left no run of slots long enough")
	}
	if n := st.Leases[readiness.StateWaiting]; n > 0 {
		parts = append(parts, words.Count(n, "lease")+" still waiting for slots")
	}
	if em.halt != nil {
		parts = append(parts, "the engine halted under the fatal containment policy: it releases nothing any more, and a manager restarts it")
	}
	for _, s := range []readiness.State{readiness.StateStaged, readiness.StateAdmitted, readiness.StateRequested, readiness.StateServed, readiness.StatePartial, readiness.StateMissed, readiness.StateFailed, readiness.StateAccessFenced, readiness.StateCopyUnproven, readiness.StateContained} {
		if n := st.Leases[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s in %v", words.Count(n, "lease"), s))
		}
	}
	if len(parts) == 0 {
		return "the run stopped before every request arrived"
	}
	return strings.Join(parts, "; ")
}

func (em *engineManager) finish() {
	em.eng.Close()
	em.drain()
	if em.halt != nil {
		// A halted engine releases nothing: there is no drain to wait for.
		// Shutdown cancels its Quiesce calls and stops its goroutines.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = em.eng.Shutdown(ctx)
		return
	}
	if em.realTime {
		// Every attempt ends by its deadline (the backend's timeout) and the
		// engine fences or contains every lease by its containment deadline:
		// wait for that, bounded.
		cfg := em.d.cfg
		limit := time.Now().Add(2*(cfg.Deadline+cfg.DrainGrace) + 5*time.Second)
		for !em.eng.Report().Drained && time.Now().Before(limit) {
			if moves, _ := em.step(); moves == 0 {
				time.Sleep(tick)
			}
		}
		return
	}
	// On the virtual clock the world goes on as in the run, one tick at a
	// time: deliveries land, the engine's Quiesce answers are taken in and
	// copies complete before the clock moves on, so a lease is contained only
	// if it is still unproven at its containment deadline (rule 10). The
	// clock once jumped a whole drain grace per step: every lease Close had
	// just cancelled passed its containment deadline before its proof was
	// taken in, and an interrupted healthy run lost hundreds of slots.
	cfg := em.d.cfg
	limit := em.d.clk.since() + 2*(cfg.Deadline+cfg.DrainGrace) + time.Second
	for !em.eng.Report().Drained {
		now := em.d.clk.since()
		em.d.t.tick(now)
		if _, err := em.step(); err != nil {
			return
		}
		if err := em.d.dev.settle(); err != nil || now > limit {
			return
		}
		em.d.clk.Advance(tick)
	}
}
