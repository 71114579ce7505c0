package transfer

import (
	"context"
	"sync"
	"time"
)

// Transceiver is the goroutine-safe driver of a [Sessions] table — its
// runner, as etcd raft's Node is RawNode's: it serialises callers, reads the
// clock, and lets a caller wait (bounded by a context) for pages to settle.
// It implements [Lifecycle]. Evidence enters through Deliver, from whatever
// reads the transport (for UCX, the active-message handler); nothing here
// starts a goroutine.
type Transceiver struct {
	mu    sync.Mutex
	core  *Sessions
	caps  Capabilities
	clock func() time.Time
	// changed is closed after the next call that may change the table;
	// nil until a waiter asks for it (waitCh), so that a change nobody
	// waits for costs no channel: a receiver changes the table several
	// times a page, and almost never with a waiter.
	changed chan struct{}
	changes uint64 // counts those calls
}

var _ Lifecycle = (*Transceiver)(nil)

// NewTransceiver makes a transceiver that advertises caps, holds sessions
// within limits and reads time from clock (time.Now when nil). It refuses,
// naming every mistake, an advertisement with no peer name, incarnation or
// version, and limits that bound nothing.
func NewTransceiver(caps Capabilities, limits Limits, clock func() time.Time) (*Transceiver, error) {
	if err := caps.validate(); err != nil {
		return nil, err
	}
	core, err := NewSessions(limits)
	if err != nil {
		return nil, err
	}
	if clock == nil {
		clock = time.Now
	}
	return &Transceiver{core: core, caps: caps, clock: clock}, nil
}

// change runs f on the table under the lock at the clock's time, then wakes
// every waiter to look again.
func (t *Transceiver) change(f func(s *Sessions, now time.Time)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(t.core, t.clock())
	t.changes++
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}

// waitCh is the channel the next change closes. The caller holds t.mu.
func (t *Transceiver) waitCh() chan struct{} {
	if t.changed == nil {
		t.changed = make(chan struct{})
	}
	return t.changed
}

// Changes counts the calls that may have changed the table — every input,
// and every Poll that applied a deadline. A caller that read the same
// count before, with Due false since, reads the same active sessions.
func (t *Transceiver) Changes() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changes
}

// Due reports whether a Poll now may change an active session
// (Sessions.Due): a deadline came, or an input may have moved one.
func (t *Transceiver) Due() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.core.Due(t.clock())
}

// Capabilities is what this side advertises.
func (t *Transceiver) Capabilities() Capabilities { return t.caps }

// Negotiate agrees capabilities with remote, for sessions that need
// required (see the package function Negotiate).
func (t *Transceiver) Negotiate(remote Capabilities, required CapabilitySet) (Agreement, error) {
	return Negotiate(t.caps, remote, required)
}

// Create makes a session (Sessions.Create).
func (t *Transceiver) Create(cfg CohortConfig) (err error) {
	t.change(func(s *Sessions, now time.Time) { err = s.Create(now, cfg) })
	return err
}

// Deliver is the one door evidence enters by (Sessions.Step).
func (t *Transceiver) Deliver(ev Evidence) (err error) {
	t.change(func(s *Sessions, now time.Time) { err = s.Step(now, ev) })
	return err
}

// Expose records pages handed to an accessor (Sessions.Expose).
func (t *Transceiver) Expose(key SessionKey) (err error) {
	t.change(func(s *Sessions, now time.Time) { err = s.Expose(now, key) })
	return err
}

// ExposeTo records pages handed to one accessor (Sessions.ExposeTo).
func (t *Transceiver) ExposeTo(key SessionKey, id AccessorID) (err error) {
	t.change(func(s *Sessions, now time.Time) { err = s.ExposeTo(now, key, id) })
	return err
}

// Revoked records the session's lease revoked (Sessions.Revoked).
func (t *Transceiver) Revoked(key SessionKey, fences bool) (err error) {
	t.change(func(s *Sessions, now time.Time) { err = s.Revoked(now, key, fences) })
	return err
}

// PeerLost tells every session of a peer's lost incarnation
// (Sessions.PeerLost).
func (t *Transceiver) PeerLost(peer Peer, inc Incarnation, reason string) (marked int) {
	t.change(func(s *Sessions, now time.Time) { marked = s.PeerLost(now, peer, inc, reason) })
	return marked
}

// Retire hands a session's pages back (Sessions.Retire).
func (t *Transceiver) Retire(key SessionKey) (err error) {
	t.change(func(s *Sessions, now time.Time) { err = s.Retire(now, key) })
	return err
}

// Cancel implements Lifecycle (Sessions.Cancel).
func (t *Transceiver) Cancel(key SessionKey, reason string) (r CancelResult) {
	t.change(func(s *Sessions, now time.Time) { r = s.Cancel(now, key, reason) })
	return r
}

// Fence implements Lifecycle (Sessions.Fence).
func (t *Transceiver) Fence(key SessionKey) (l Logical) {
	t.change(func(s *Sessions, now time.Time) { l = s.Fence(now, key) })
	return l
}

// Poll implements Lifecycle (Sessions.Poll); it never blocks. A Poll with
// no deadline due changes no active session, so it wakes no waiter and
// counts as no change: a receiver polling every session each round pays
// for a lock, not for a wake-up.
func (t *Transceiver) Poll(key SessionKey) (p Physical) {
	t.mu.Lock()
	if now := t.clock(); !t.core.Due(now) {
		p = t.core.Poll(now, key)
		t.mu.Unlock()
		return p
	}
	t.mu.Unlock()
	t.change(func(s *Sessions, now time.Time) { p = s.Poll(now, key) })
	return p
}

// Outcome returns key's latched outcome, if the table holds the session.
func (t *Transceiver) Outcome(key SessionKey) (o Outcome, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.core.Outcome(key)
}

// Info returns key's session state, if the table holds the session.
func (t *Transceiver) Info(key SessionKey) (info CohortInfo, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.core.Info(key)
}

// Quiesce implements Lifecycle: it waits, until ctx is done, for key's pages
// to be reusable or in doubt, waking on every change and at the next
// deadline, and answers the disposition it last saw.
func (t *Transceiver) Quiesce(ctx context.Context, key SessionKey) Physical {
	for {
		t.mu.Lock()
		now := t.clock()
		p := t.core.Poll(now, key)
		next := t.core.NextDeadline()
		changed := t.waitCh()
		t.mu.Unlock()
		if p.Reusable() || p == InDoubt {
			return p
		}
		if !t.wait(ctx, changed, now, next) {
			return p
		}
	}
}

// Shutdown implements Lifecycle: it stops admission and cancels every
// session, then waits until every session's pages are reusable, or every
// one left is contained (waiting cannot help those), or ctx is done; it
// reports what was left in doubt at that moment.
func (t *Transceiver) Shutdown(ctx context.Context) ShutdownResult {
	var r ShutdownResult
	t.change(func(s *Sessions, now time.Time) { r = s.Shutdown(now) })
	for {
		t.mu.Lock()
		now := t.clock()
		r = t.core.Report(now)
		settling := t.core.settling()
		next := t.core.NextDeadline()
		changed := t.waitCh()
		t.mu.Unlock()
		if settling == 0 || !t.wait(ctx, changed, now, next) {
			return r
		}
	}
}

// wait blocks until the table changed, the next deadline passed or ctx is
// done; it reports false for the last.
func (t *Transceiver) wait(ctx context.Context, changed <-chan struct{}, now, next time.Time) bool {
	var tick <-chan time.Time
	if !next.IsZero() {
		timer := time.NewTimer(max(next.Sub(now), 0))
		defer timer.Stop()
		tick = timer.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-changed:
	case <-tick:
	}
	return true
}
