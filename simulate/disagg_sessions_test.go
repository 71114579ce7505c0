package simulate

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/kvready/kvready/transfer"
)

// sessionsDisagg is a test manager over transfer.Sessions, the shipped
// session core, with the owner's policy of transfer/sim's property
// (TestPagesNeverReusableWhileAWriterMayWrite): negotiate with each writer's
// current incarnation, lease each attempt's pages under a registration of
// their own, revoke it once the outcome is latched, and return the pages
// only when the core reports them reusable. It lets the checker's tests run
// a manager that keeps the rule beside one that breaks it; with
// retireOnOutcome it returns the pages as soon as an outcome is latched,
// exactly the rule broken and nothing else.
type sessionsDisagg struct {
	d               *disaggDriver
	core            *transfer.Sessions
	used            []bool
	live            map[transfer.SessionKey]*sessionLease
	retireOnOutcome bool
}

type sessionLease struct {
	a    *dattempt
	mem  transfer.Memory
	seen bool // its outcome was reported to the driver
}

func newSessionsDisagg(d *disaggDriver, retireOnOutcome bool) (*sessionsDisagg, error) {
	// Retired keys are remembered for the window: a few deadlines is
	// longer than any creation takes here (it is immediate).
	window := 4 * time.Duration(d.cfg.deadlineSteps()+d.cfg.graceSteps()) * DisaggStep
	core, err := transfer.NewSessions(transfer.Limits{Sessions: 1 << 16, Tombstones: 1024, Window: window})
	if err != nil {
		return nil, err
	}
	m := &sessionsDisagg{d: d, core: core, used: make([]bool, d.cfg.Pages), live: map[transfer.SessionKey]*sessionLease{}, retireOnOutcome: retireOnOutcome}
	d.decode.SetHandlers(transfer.Handlers{Message: m.message, EndpointError: m.endpointError})
	return m, nil
}

func (m *sessionsDisagg) close() {}

func (m *sessionsDisagg) name() string {
	if m.retireOnOutcome {
		return "sessions-retire-on-outcome"
	}
	return "sessions"
}

func (m *sessionsDisagg) submit(a *dattempt) (bool, error) {
	first := firstFit(m.used, a.r.pages)
	if first < 0 {
		return false, nil
	}
	now := m.d.now()
	cfg := transfer.CohortConfig{
		Session: a.key(), Tokens: a.tokens(), Leased: true, Submitted: now,
		Deadline:    now.Add(time.Duration(m.d.cfg.deadlineSteps()) * DisaggStep),
		Containment: now.Add(time.Duration(m.d.cfg.deadlineSteps()+m.d.cfg.graceSteps()) * DisaggStep),
	}
	for _, w := range a.writers {
		remote, err := m.d.advert(w.id.Peer)
		if err != nil {
			return false, err
		}
		ag, err := transfer.Negotiate(m.d.self(), remote, cfg.Requires())
		if err != nil {
			return false, err
		}
		cfg.Accessors = append(cfg.Accessors, transfer.AccessorSpec{ID: w.id, Agreement: ag})
	}
	if err := m.core.Create(now, cfg); err != nil {
		return false, err
	}
	pages := make([]int, a.r.pages)
	for j := range pages {
		pages[j] = first + j
		m.used[first+j] = true
	}
	m.d.lend(a, pages)
	mem, err := m.d.decode.Register(m.d.pool[first*SlotBytes : (first+a.r.pages)*SlotBytes])
	if err != nil {
		return false, err
	}
	if err := m.core.Expose(now, cfg.Session); err != nil {
		return false, err
	}
	m.live[cfg.Session] = &sessionLease{a: a, mem: mem}
	for _, w := range a.writers {
		if err := m.d.spawn(a, w.id, func(p int) ([]byte, int) { return mem.PackedKey(), p * SlotBytes }); err != nil {
			return false, err
		}
	}
	return true, nil
}

// message checks that the evidence speaks for the endpoint it came on, then
// steps the table; a refusal is ordinary (a duplicate, a replay).
func (m *sessionsDisagg) message(from transfer.Peer, inc transfer.Incarnation, msg []byte) {
	ev, err := transfer.DecodeEvidence(msg)
	if err != nil || ev.Accessor.Peer != from || ev.Incarnation != inc {
		return
	}
	_ = m.core.Step(m.d.now(), ev)
}

func (m *sessionsDisagg) endpointError(peer transfer.Peer, inc transfer.Incarnation, err error) {
	if m.d.firstLoss(peer, inc) {
		m.core.PeerLost(m.d.now(), peer, inc, err.Error())
	}
}

func (m *sessionsDisagg) cancel(a *dattempt) { m.core.Cancel(m.d.now(), a.key(), "user") }

func (m *sessionsDisagg) round() error {
	m.d.decode.Progress()
	now := m.d.now()
	m.core.Tick(now)
	keys := slices.SortedFunc(maps.Keys(m.live), compareKeys)
	for _, key := range keys {
		if err := m.settle(now, key, m.live[key]); err != nil {
			return err
		}
	}
	return nil
}

// settle reports a latched outcome once, revokes the lease once the outcome
// is latched, and returns the pages once the core says they are reusable
// (or at once, retireOnOutcome).
func (m *sessionsDisagg) settle(now time.Time, key transfer.SessionKey, l *sessionLease) error {
	info, _ := m.core.Info(key)
	if info.Outcome != nil && !l.seen {
		l.seen = true
		if _, ok := info.Outcome.(transfer.Delivered); ok {
			m.d.read(l.a)
		}
		m.d.outcome(l.a, outcomeKind(info))
	}
	if m.retireOnOutcome && info.Outcome != nil {
		m.release(key, l)
		return nil
	}
	if info.Outcome != nil && !info.Revoked && info.Physical != transfer.InDoubt {
		how, err := l.mem.Revoke()
		if err != nil {
			return err
		}
		if err := m.core.Revoked(now, key, how.Fences()); err != nil {
			return fmt.Errorf("revoked %s: %w", key, err)
		}
	}
	switch p := m.core.Poll(now, key); {
	case p.Reusable():
		if err := m.core.Retire(now, key); err != nil {
			return err
		}
		m.release(key, l)
	case p == transfer.InDoubt:
		delete(m.live, key)
		m.d.contained(l.a)
	}
	return nil
}

func (m *sessionsDisagg) release(key transfer.SessionKey, l *sessionLease) {
	delete(m.live, key)
	for _, p := range l.a.pages {
		m.used[p] = false
	}
	m.d.settled(l.a)
}
