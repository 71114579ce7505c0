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
	landedAt  time.Duration
	seq       uint64 // the backend's call number: its gate's key
}

// transport stands between the managers and backend/mem. It makes the
// backend's deliveries happen on the virtual clock, tells the checker what each
// submission exposed and what the backend answered, and otherwise passes every
// call through unchanged.
//
// Submissions come from the owner goroutine; Poll and Quiesce also come from
// the engine's own goroutines, so everything the transport and the checker
// share is guarded by the driver's lock (d.mu), and the gate table by its own.
type transport struct {
	be      *mem.Backend
	d       *driver
	next    func() *lease // the lease whose submission comes next
	made    *delivery     // the delivery the policy created during a submission
	pending []*delivery
	orphans int // submissions with no lease to name: a simulator bug

	gmu   sync.Mutex
	bySeq map[uint64]*delivery
}

var (
	_ contract.Fetcher   = (*transport)(nil)
	_ contract.Publisher = (*transport)(nil)
)

func newTransport(d *driver) (*transport, error) {
	t := &transport{d: d, bySeq: map[uint64]*delivery{}}
	opts := []mem.Option{mem.WithPolicy(t.policy), mem.WithGate(t.gateOf)}
	if d.cfg.StoreCapacity > 0 {
		opts = append(opts, mem.WithCapacity(d.cfg.StoreCapacity))
	}
	be, err := mem.New(d.mem, opts...)
	if err != nil {
		return nil, err
	}
	t.be = be
	return t, nil
}

// policy is asked by the backend, synchronously inside Fetch or Publish on the
// owner goroutine, how this submission behaves: as the lease's drawn
// behaviour says.
func (t *transport) policy(call mem.Call) mem.Mode {
	if call.Op == mem.OpProbe {
		return mem.Normal
	}
	l := t.next()
	if l == nil {
		t.orphans++
		return mem.Reject
	}
	d := &delivery{l: l, mode: l.mode, releaseAt: t.d.clk.since() + l.latency, gate: make(chan struct{}), seq: call.Seq}
	t.gmu.Lock()
	t.bySeq[call.Seq] = d
	t.gmu.Unlock()
	t.made = d
	if l.mode == mem.QuiesceNotYet {
		// The transport answers "not yet" on the virtual clock (see Quiesce):
		// counting calls would depend on how the engine batched them.
		return mem.Normal
	}
	return l.mode
}

// notYet is how long after landing a QuiesceNotYet delivery still answers
// "not yet".
const notYet = 3 * tick

// gateOf is asked by a delivery's goroutine what to wait for before it touches
// memory.
func (t *transport) gateOf(call mem.Call) <-chan struct{} {
	t.gmu.Lock()
	defer t.gmu.Unlock()
	d := t.bySeq[call.Seq]
	delete(t.bySeq, call.Seq)
	if d == nil {
		return nil
	}
	return d.gate
}

func (t *transport) submit(ext contract.CacheExtent, call func() (contract.Attempt, error)) (contract.Attempt, error) {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	t.made = nil
	a, err := call()
	d := t.made
	t.made = nil
	if d == nil {
		return a, err // an orphan submission, already counted
	}
	l := d.l
	l.submitted = true
	l.submittedAt = t.d.clk.since()
	var slots []slotKey
	for _, u := range ext.All() {
		slots = append(slots, slotKey{u.LocalGroup, u.Local})
	}
	t.d.chk.exposed(l, slots)
	if err != nil {
		if a == nil && errors.Is(err, contract.ErrSubmissionRejected) {
			l.rejected = true
		}
		// No delivery goroutine will ask for its gate.
		t.gmu.Lock()
		delete(t.bySeq, d.seq)
		t.gmu.Unlock()
		return a, err
	}
	d.inner, d.slots = a, slots
	l.delivery = d
	t.pending = append(t.pending, d)
	return &attempt{t: t, d: d}, nil
}

// Fetch implements contract.Fetcher.
func (t *transport) Fetch(ext contract.CacheExtent, route contract.Route) (contract.Attempt, error) {
	return t.submit(ext, func() (contract.Attempt, error) { return t.be.Fetch(ext, route) })
}

// Publish implements contract.Publisher.
func (t *transport) Publish(ext contract.CacheExtent) (contract.Attempt, error) {
	return t.submit(ext, func() (contract.Attempt, error) { return t.be.Publish(ext) })
}

func unwrap(method string, list []contract.Attempt) ([]*delivery, []contract.Attempt, error) {
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
// held at its gate is still transferring: the answer is "not yet" (false), and
// the engine asks again later. Deliveries land only on the virtual clock, so a
// run does not depend on which Quiesce worker asks first. Only a true answer
// from the backend is recorded as proof.
func (t *transport) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	ds, inner, err := unwrap("Quiesce", list)
	if err != nil {
		return false, err
	}
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	now := t.d.clk.since()
	for _, d := range ds {
		if !d.landed || (d.mode == mem.QuiesceNotYet && now < d.landedAt+notYet) {
			return false, nil
		}
	}
	ok, err := t.be.Quiesce(ctx, inner)
	if ok && err == nil {
		now := t.d.clk.since()
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
	_, inner, err := unwrap("Settle", list)
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
// after. The caller holds d.mu.
func (t *transport) land(d *delivery) {
	before := t.d.chk.snapshot(d.slots)
	close(d.gate)
	// Wait for the delivery's goroutine, without asking Quiesce (that answer
	// is the engine's to ask for): every write it makes lands now.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = t.be.Drain(ctx, []contract.Attempt{d.inner})
	cancel()
	d.landed, d.landedAt = true, t.d.clk.since()
	t.d.chk.landed(d, before)
}

// tick lands every delivery due by now, in submission order.
func (t *transport) tick(now time.Duration) {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
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
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
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
type attempt struct {
	t *transport
	d *delivery
}

// Poll implements contract.Attempt.
func (a *attempt) Poll() contract.Outcome {
	o := a.d.inner.Poll()
	if o != nil {
		a.t.d.mu.Lock()
		if a.d.l.backend == nil {
			a.d.l.backend = o
		}
		a.t.d.mu.Unlock()
	}
	return o
}
