package proptest

import (
	"context"
	"errors"
	"maps"
	"time"

	"pgregory.net/rapid"

	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// SPEC §4 rule 17 in the model: the runner-driven suite draws engine
// restarts over one staging memory. A second engine while one lives is
// refused; the engine is closed (or, halted, abandoned) and a new one is
// assembled over the same memory, backend and device. Every slot the old
// engine held or quarantined when its claim ended stays out for good: the
// new engine reports them (Stats.SlotsInherited), never lends one (granted
// fails rule 17), and the old engine's attempts — which go on answering and
// writing late into what they were handed — never reach a new lease's bytes
// (checkBytes).

// maxRestarts bounds the restarts of one sequence.
const maxRestarts = 3

// hooked returns the model's world with callbacks that count only while the
// engine assembled now is the model's: an engine restarted away still calls
// them when it is drained at the end.
func (m *model) hooked() worldConfig {
	w, epoch := m.w, m.epoch
	w.contained = func(c readiness.Containment) {
		if m.epoch == epoch {
			m.contained[c.Lease] = append(m.contained[c.Lease], c)
		}
	}
	w.halted = func(error) {
		if m.epoch == epoch {
			m.halts++
		}
	}
	return w
}

// outOfCirculation is what the model says the memory keeps out when the
// engine's claim ends: every slot a lease holds, and every slot quarantined
// (inherited ones included).
func (m *model) outOfCirculation() map[slotID]bool {
	out := maps.Clone(m.quarantined)
	for s := range m.owner {
		out[s] = true
	}
	return out
}

// restart replaces the engine by a new one over the same memory.
func (m *model) restart(t *rapid.T) {
	if m.core || m.lost || m.epoch >= maxRestarts {
		return
	}
	if !m.closed && m.halt == nil {
		if _, err := newRunnerDriver(m.hooked()); !errors.Is(err, staging.ErrMemoryClaimed) {
			m.fail(rule17, "a second engine over memory a live engine holds: err %v; want ErrMemoryClaimed", err)
		}
	}
	haltedOut := -1 // what a halted engine counts out of its pool; -1: it closed
	switch {
	case m.halt != nil && !m.closed:
		// A halted engine handed its memory over when it halted, and has
		// released nothing since: what the model holds is what it left.
		m.handed = m.outOfCirculation()
		// The allocator may have granted the head of the line its slots in
		// the round that halted, before the core took the grant in: a
		// lease still waiting, holding slots no lease's runs name. The
		// model cannot say which; it knows how many the halted engine
		// counts out of its pool, and the slots it knows must be among them.
		st := m.d.stats()
		haltedOut = st.SlotsHeld + st.SlotsQuarantined
		m.closed = true
	case !m.closed:
		m.close()
	}
	handed := m.handed
	for _, l := range m.leases {
		l.gone, l.old = true, true
	}
	m.retired = append(m.retired, m.d)
	m.epoch++
	d, err := newRunnerDriver(m.hooked())
	if err != nil {
		m.fail(rule17, "a new engine over memory whose engine closed or halted was refused: %v", err)
	}
	m.d = d
	m.inherited, m.quarantined, m.owner = handed, maps.Clone(handed), map[slotID]*mLease{}
	m.closed, m.halt, m.halts, m.haltStats = false, nil, 0, readiness.Stats{}
	clear(m.contained)                      // keyed by handle: the new engine issues the old one's handles again
	want := len(m.inherited) + m.unknownOut // the slots it could not name stay out too
	if haltedOut >= 0 {
		want = haltedOut
	}
	if st := m.d.stats(); st.SlotsInherited != want || st.SlotsQuarantined != want || len(m.inherited) > want {
		m.fail(rule17, "the new engine inherited %d slots (%d quarantined); the old one left %d held or quarantined (the model knows %d of them)", st.SlotsInherited, st.SlotsQuarantined, want, len(m.inherited))
	}
	m.unknownOut = want - len(m.inherited)
}

// drainRetired lets the engines restarted away finish, so that their
// goroutines end with the case: their backend cooperates and the clock runs
// past every deadline.
func (m *model) drainRetired() {
	m.unblock()
	for _, d := range m.retired {
		for i := 0; i < 20 && !d.drained() && d.err() == nil; i++ {
			m.unblock()
			m.clock.Advance(drainGrace)
			_ = d.round(true)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := d.(*runnerDriver).eng.Shutdown(ctx)
		cancel()
		if err != nil && !errors.Is(err, readiness.ErrHalted) {
			m.fail(rule10, "an engine restarted away did not drain: %v", err)
		}
	}
}
