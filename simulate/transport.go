package simulate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
)

// delivery is one submission the backend accepted: held at its gate until the
// virtual clock reaches releaseAt.
type delivery struct {
	l         *lease
	mode      mem.Mode
	releaseAt time.Duration
	gate      chan struct{}
	inner     contract.Attempt
	slots     []slotKey // the staging slots its units name
	landed    bool
}

// transport stands between the managers and backend/mem. It makes the
// backend's deliveries happen on the virtual clock, tells the checker what each
// submission exposed and what the backend answered, and otherwise passes every
// call through unchanged. It is used from the owner goroutine only, except for
// the gate lookup, which backend goroutines make.
type transport struct {
	be      *mem.Backend
	clk     *clock
	chk     *checker
	current *lease    // the lease whose submission comes next; set by the manager
	made    *delivery // the delivery the policy created during a submission
	pending []*delivery
	orphans int // submissions with no lease named: a simulator bug

	mu    sync.Mutex
	bySeq map[uint64]*delivery
}

var (
	_ contract.Fetcher   = (*transport)(nil)
	_ contract.Publisher = (*transport)(nil)
)

func newTransport(m mem.Memory, clk *clock, chk *checker) (*transport, error) {
	t := &transport{clk: clk, chk: chk, bySeq: map[uint64]*delivery{}}
	be, err := mem.New(m, mem.WithPolicy(t.policy), mem.WithGate(t.gateOf))
	if err != nil {
		return nil, err
	}
	t.be = be
	return t, nil
}

// policy is asked by the backend, synchronously inside Fetch or Publish on the
// owner goroutine, how this submission behaves.
func (t *transport) policy(call mem.Call) mem.Mode {
	l := t.current
	if l == nil {
		t.orphans++
		return mem.Reject
	}
	if call.Op == mem.OpProbe {
		return mem.Normal
	}
	d := &delivery{l: l, mode: l.mode, releaseAt: t.clk.since() + l.latency, gate: make(chan struct{})}
	t.mu.Lock()
	t.bySeq[call.Seq] = d
	t.mu.Unlock()
	t.made = d
	return l.mode
}

// gateOf is asked by a delivery's goroutine what to wait for before it touches
// memory.
func (t *transport) gateOf(call mem.Call) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.bySeq[call.Seq]
	delete(t.bySeq, call.Seq)
	if d == nil {
		return nil
	}
	return d.gate
}

func (t *transport) submit(ext contract.CacheExtent, call func() (contract.Attempt, error)) (contract.Attempt, error) {
	l := t.current
	t.made = nil
	a, err := call()
	d := t.made
	t.current, t.made = nil, nil
	if l != nil {
		l.submitted = true
		l.submittedAt = t.clk.since()
	}
	if err != nil {
		if l != nil && a == nil && errors.Is(err, contract.ErrSubmissionRejected) {
			l.rejected = true
		}
		return a, err
	}
	if d == nil || l == nil {
		return a, err // an orphan submission, already counted
	}
	d.inner = a
	for _, u := range ext.All() {
		d.slots = append(d.slots, slotKey{u.LocalGroup, u.Local})
	}
	l.delivery = d
	t.chk.exposed(l, d.slots)
	t.pending = append(t.pending, d)
	return &attempt{d: d}, nil
}

// Fetch implements contract.Fetcher.
func (t *transport) Fetch(ext contract.CacheExtent, route contract.Route) (contract.Attempt, error) {
	return t.submit(ext, func() (contract.Attempt, error) { return t.be.Fetch(ext, route) })
}

// Publish implements contract.Publisher.
func (t *transport) Publish(ext contract.CacheExtent) (contract.Attempt, error) {
	return t.submit(ext, func() (contract.Attempt, error) { return t.be.Publish(ext) })
}

func (t *transport) unwrap(method string, list []contract.Attempt) ([]*delivery, []contract.Attempt, error) {
	ds := make([]*delivery, len(list))
	inner := make([]contract.Attempt, len(list))
	for i, x := range list {
		a, ok := x.(*attempt)
		if !ok || a == nil {
			return nil, nil, fmt.Errorf("simulate: %s: attempt %d (%T) was not returned by this transport", method, i, x)
		}
		ds[i], inner[i] = a.d, a.d.inner
	}
	return ds, inner, nil
}

// Quiesce implements contract.Fetcher and contract.Publisher. A delivery still
// held at its gate is flushed first — the transport ends the transfer now, and
// its writes land before the answer — because the engine asks only once it
// needs the proof, and a simulated transfer has nothing to wait for but the
// clock. Only a true answer from the backend is recorded as proof.
func (t *transport) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	ds, inner, err := t.unwrap("Quiesce", list)
	if err != nil {
		return false, err
	}
	for _, d := range ds {
		if !d.landed {
			t.land(d)
		}
	}
	ok, err := t.be.Quiesce(ctx, inner)
	if ok && err == nil {
		now := t.clk.since()
		for _, d := range ds {
			if !d.l.proven {
				d.l.proven, d.l.provenAt = true, now
			}
		}
	}
	return ok, err
}

// Settle implements contract.Fetcher and contract.Publisher.
func (t *transport) Settle(ctx context.Context, list []contract.Attempt) error {
	_, inner, err := t.unwrap("Settle", list)
	if err != nil {
		return err
	}
	return t.be.Settle(ctx, inner)
}

// Probe implements contract.Fetcher.
func (t *transport) Probe(ctx context.Context, name []byte, units []contract.Name) (contract.NameSet, bool, error) {
	return t.be.Probe(ctx, name, units)
}

// OpenRoute implements contract.Fetcher.
func (t *transport) OpenRoute(hint map[string]string) (contract.Route, error) {
	return t.be.OpenRoute(hint)
}

// land opens a delivery's gate and waits until its goroutine has finished, so
// that everything it writes — served rows, or the poison a failed delivery
// writes after reporting — lands now. The checker compares the slots before and
// after.
func (t *transport) land(d *delivery) {
	before := t.chk.snapshot(d.slots)
	close(d.gate)
	// The backend's Quiesce waits for the delivery's goroutine to end (the
	// modes the simulation uses answer only after that). Its answer is not
	// proof for anyone: the manager did not ask.
	_, _ = t.be.Quiesce(context.Background(), []contract.Attempt{d.inner})
	d.landed = true
	t.chk.landed(d, before)
}

// tick lands every delivery due by now, in submission order.
func (t *transport) tick(now time.Duration) {
	kept := t.pending[:0]
	for _, d := range t.pending {
		if !d.landed && d.releaseAt <= now {
			t.land(d)
		}
		if !d.landed {
			kept = append(kept, d)
		}
	}
	clear(t.pending[len(kept):])
	t.pending = kept
}

// landAll lands every delivery still held, so that no goroutine outlives the run.
func (t *transport) landAll() {
	for _, d := range t.pending {
		if !d.landed {
			t.land(d)
		}
	}
	t.pending = nil
}

func (t *transport) close() error { return t.be.Close() }

// attempt wraps the backend's attempt so that the checker learns the first
// outcome the manager polled.
type attempt struct{ d *delivery }

// Poll implements contract.Attempt.
func (a *attempt) Poll() contract.Outcome {
	o := a.d.inner.Poll()
	if o != nil && a.d.l.backend == nil {
		a.d.l.backend = o
	}
	return o
}
