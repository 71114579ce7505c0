package simulate

import (
	"io"
	"log/slog"
	"time"

	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/readiness"
)

// manager is what the driver needs from a KV cache manager's staging side: the
// engine, or the naive foil. Both report back through the driver's outcome and
// ended callbacks.
type manager interface {
	lend(l *lease) error
	step()
	release(l *lease)
	states() []StateCount
	// finish stops admission and runs until nothing more can happen.
	finish()
}

// engineManager drives a readiness.Engine, learning what happened from its
// transition hook, as a real manager would.
type engineManager struct {
	eng      *readiness.Engine
	d        *driver
	byHandle map[readiness.Handle]*lease
	handles  map[*lease]readiness.Handle
	events   []readiness.Transition
	draining bool
}

func newEngineManager(d *driver, m *readiness.Memory, s gpu.Stream, h gpu.Health) (*engineManager, error) {
	em := &engineManager{d: d, byHandle: map[readiness.Handle]*lease{}, handles: map[*lease]readiness.Handle{}}
	eng, err := readiness.New(readiness.Config{
		Memory:         m,
		TokensPerBlock: TokensPerBlock,
		Fetcher:        d.t,
		Publisher:      d.t,
		Stream:         s,
		Health:         h,
		Clock:          d.clk,
		RequestTimeout: d.cfg.Deadline,
		DrainGrace:     time.Second,
		Inline:         true,
		OnTransition:   em.hook,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, err
	}
	em.eng = eng
	return em, nil
}

// hook runs inside engine calls. It only records, except for naming the lease
// whose submission follows: a lease reaches staged immediately before the
// engine submits it.
func (em *engineManager) hook(tr readiness.Transition) {
	if tr.To == fsm.Staged {
		em.d.t.current = em.byHandle[tr.Lease]
	}
	em.events = append(em.events, tr)
}

func (em *engineManager) lend(l *lease) error {
	h, err := em.eng.Lend(readiness.Request{
		Kind:        l.kind,
		Rows:        l.rows(),
		KnownBlocks: l.first,
		Deadline:    epoch.Add(l.lentAt + em.d.cfg.Deadline),
	})
	if err != nil {
		return err
	}
	em.byHandle[h], em.handles[l] = l, h
	em.drain()
	return nil
}

func (em *engineManager) step() {
	em.eng.Progress()
	em.drain()
}

func (em *engineManager) release(l *lease) {
	if h, ok := em.handles[l]; ok {
		_ = em.eng.Release(h) // latched until the fence; a stale handle means it is gone already
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
		case fsm.Granted:
			if runs, err := em.eng.Runs(tr.Lease, nil); err == nil {
				em.d.chk.granted(l, runs)
			}
		case fsm.LogicallyComplete:
			em.report(l, tr.Lease, true)
		case fsm.Quarantined:
			em.report(l, tr.Lease, false)
			l.final = quarantined
			_ = em.eng.Release(tr.Lease) // forget the handle; the slots stay out for ever
			em.forget(l, tr.Lease)
			em.d.ended(l)
		case fsm.Released:
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

func (em *engineManager) states() []StateCount {
	st := em.eng.Stats()
	out := make([]StateCount, 0, fsm.NumStates)
	for s := range fsm.NumStates {
		out = append(out, StateCount{State: fsm.State(s).String(), Leases: st.Leases[s]})
	}
	return out
}

func (em *engineManager) finish() {
	rep := em.eng.Close()
	em.drain()
	for i := 0; i < 100 && !rep.Drained; i++ {
		em.d.clk.Advance(time.Second) // let deadlines and drain periods expire
		em.d.t.landAll()
		rep = em.eng.Close()
		em.drain()
	}
}

func (em *engineManager) slotsQuarantined() int { return em.eng.Stats().SlotsQuarantined }
