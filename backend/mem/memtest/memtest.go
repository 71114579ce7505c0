// Package memtest is backend/mem broken on purpose: the behaviours that
// violate the backend contract (writes after Quiesce answered true, writes to
// destinations not served, answers that change, names served that were never
// asked for), so that the conformance kit and the engine's tests can show
// they catch each. It is test support: kvready's tests and the test library
// (libkvready_testkit.so) import it, nothing that ships does.
//
// A Backend wraps a *mem.Backend (which still does the delivery, in whatever
// correct mode its options choose) and adds the fault on top. The faults the
// contract allows — misses, failures, cancels, rejections, quiescence that is
// unprovable, slow or not yet established, access after the outcome — stay in
// backend/mem (mem.Mode): a correct backend may exhibit them, and a manager is
// tested against them.
package memtest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/notify"
	"github.com/kvready/kvready/contract"
)

// Fault is how one submission breaks the contract. The zero Fault is None.
type Fault int

// The faults, in the order Faults returns them (None excepted).
const (
	// None keeps mem's behaviour.
	None Fault = iota
	// WriteAfterQuiesce delivers as mem does, lets Quiesce (or TryQuiesce)
	// answer that access ended, and then writes mem.Poison into every served
	// row again: at the next call into the backend (or to Poll on any of its
	// attempts) after that answer. The write is made by that call, before it
	// goes on, so the bug is deterministic and race-detector clean.
	// RequestCancel and Notify, which must not wait, do not make it.
	WriteAfterQuiesce
	// WriteUnserved delivers as mem does and then, before the outcome is
	// visible and before Quiesce can answer true, writes mem.Poison into the
	// destinations of every unit it did not serve. New pairs it with
	// mem.Partial, so that there are some.
	WriteUnserved
	// FlipOutcome alternates its answer between polls once it has one: mem's
	// outcome, then Failed, then mem's...
	FlipOutcome
	// ServeUnasked adds to a Delivered outcome a name the extent did not ask
	// for.
	ServeUnasked

	numFaults
)

var faultNames = [numFaults]string{"none", "write-after-quiesce", "write-unserved", "flip-outcome", "serve-unasked"}

// String names the fault.
func (f Fault) String() string {
	if f < 0 || f >= numFaults {
		return "fault(" + strconv.Itoa(int(f)) + ")"
	}
	return faultNames[f]
}

// Faults returns every fault but None.
func Faults() []Fault {
	fs := make([]Fault, 0, numFaults-1)
	for f := None + 1; f < numFaults; f++ {
		fs = append(fs, f)
	}
	return fs
}

// Call is a submission or probe as the fault policy sees it: mem.Call, with
// Seq counted as mem counts it (every Fetch, Publish and Probe).
type Call = mem.Call

// Backend is a mem.Backend with a fault on the submissions its policy picks.
// The embedded *mem.Backend's own Fetch, Publish, Quiesce, TryQuiesce, Settle,
// Drain and Probe are replaced by the faulty ones; Put, Get and the rest are
// mem's.
type Backend struct {
	*mem.Backend
	rows   mem.Memory
	policy func(Call) Fault
	seq    atomic.Uint64

	mu     sync.Mutex
	armed  []*attempt // WriteAfterQuiesce attempts proven quiescent, not yet written
	closed bool
}

var (
	_ contract.Fetcher       = (*Backend)(nil)
	_ contract.Publisher     = (*Backend)(nil)
	_ contract.QuiesceProber = (*Backend)(nil)
	_ contract.Cancellable   = (*attempt)(nil)
	_ contract.Notifier      = (*attempt)(nil)
)

// New returns a backend/mem backend over rows, built with opts, whose every
// submission breaks the contract as fault. For WriteUnserved it serves
// mem.Partial, whatever opts choose.
func New(rows mem.Memory, fault Fault, opts ...mem.Option) (*Backend, error) {
	if fault <= None || fault >= numFaults {
		return nil, fmt.Errorf("memtest: New: fault %v; want one of %v", fault, Faults())
	}
	if fault == WriteUnserved {
		opts = append(opts, mem.WithMode(mem.Partial))
	}
	return WithPolicy(rows, func(Call) Fault { return fault }, opts...)
}

// WithPolicy returns a backend/mem backend over rows, built with opts, whose
// submissions break the contract as policy picks, per call (None: as mem
// delivers). mem's own policy (mem.WithPolicy in opts) still picks the
// correct mode under the fault.
func WithPolicy(rows mem.Memory, policy func(Call) Fault, opts ...mem.Option) (*Backend, error) {
	if policy == nil {
		return nil, errors.New("memtest: WithPolicy: policy is nil; want a function choosing each call's fault")
	}
	inner, err := mem.New(rows, opts...)
	if err != nil {
		return nil, err
	}
	return &Backend{Backend: inner, rows: rows, policy: policy}, nil
}

// attempt is mem's attempt with the fault applied to what it answers.
type attempt struct {
	b      *Backend
	inner  contract.Attempt
	fault  Fault
	extent contract.CacheExtent
	// out is the answer Poll gives: mem's outcome with the fault applied, set
	// once, on mem's delivery goroutine (mem's Notify), before mem can let
	// Quiesce answer true.
	out    atomic.Pointer[contract.Outcome]
	ready  chan struct{} // closed once out is set
	polls  atomic.Uint64
	notify notify.List
	// Guarded by b.mu.
	armed  bool
	served [][]byte // the rows the late write of WriteAfterQuiesce poisons
}

// Fetch submits through mem and breaks the answer as the policy picks.
func (b *Backend) Fetch(extent contract.CacheExtent, route contract.Route) (contract.Attempt, error) {
	b.fireLate()
	f := b.policy(Call{Op: mem.OpFetch, Extent: extent.Name(), Seq: b.seq.Add(1), Units: extent.Len()})
	inner, err := b.Backend.Fetch(extent, route)
	if err != nil {
		return nil, err
	}
	return b.wrap(inner, f, extent), nil
}

// Publish submits through mem and breaks the answer as the policy picks.
func (b *Backend) Publish(extent contract.CacheExtent) (contract.Attempt, error) {
	b.fireLate()
	f := b.policy(Call{Op: mem.OpPublish, Extent: extent.Name(), Seq: b.seq.Add(1), Units: extent.Len()})
	inner, err := b.Backend.Publish(extent)
	if err != nil {
		return nil, err
	}
	return b.wrap(inner, f, extent), nil
}

func (b *Backend) wrap(inner contract.Attempt, f Fault, extent contract.CacheExtent) *attempt {
	a := &attempt{b: b, inner: inner, fault: f, extent: extent, ready: make(chan struct{})}
	// mem calls this on its delivery goroutine right after its outcome is
	// set, before that goroutine ends: what it writes lands before Quiesce
	// can prove access ended, as a backend's own stray write would.
	inner.(contract.Notifier).Notify(func() {
		o := a.broken(inner.Poll())
		a.out.Store(&o)
		close(a.ready)
		a.notify.Fire()
	})
	return a
}

// broken is mem's outcome o with the fault applied (WriteUnserved writes its
// Poison here).
func (a *attempt) broken(o contract.Outcome) contract.Outcome {
	d, delivered := o.(contract.Delivered)
	if !delivered {
		return o
	}
	switch a.fault {
	case WriteUnserved:
		for _, u := range a.extent.All() {
			if d.Served.Has(u.Name) {
				continue
			}
			if row, ok := a.b.rows.Row(u.LocalGroup, u.Local); ok {
				fill(row, mem.Poison)
			}
		}
	case ServeUnasked:
		names := []contract.Name{unasked(a.extent)}
		for n := range d.Served.All() {
			names = append(names, n)
		}
		return contract.Delivered{Served: contract.NewNameSet(names...)}
	}
	return o
}

// Poll answers mem's outcome with the fault applied, nil until then (and,
// for FlipOutcome, Failed on every second poll once it has one).
func (a *attempt) Poll() contract.Outcome {
	a.b.fireLate()
	o := a.out.Load()
	if o == nil {
		return nil
	}
	if a.fault == FlipOutcome && a.polls.Add(1)%2 == 0 {
		return contract.Failed{Reason: "flipped answer"}
	}
	return *o
}

// RequestCancel is mem's.
func (a *attempt) RequestCancel() (contract.CancelDisposition, error) {
	return a.inner.(contract.Cancellable).RequestCancel()
}

// Notify calls f once Poll answers an outcome.
func (a *attempt) Notify(f func()) { a.notify.Add(f) }

// NotifyCallee is Notify(c.Notified), as mem's (notify.CalleeNotifier).
func (a *attempt) NotifyCallee(c notify.Callee) { a.notify.AddCallee(c) }

// inners unwraps attempts this backend returned.
func (b *Backend) inners(method string, list []contract.Attempt) ([]*attempt, []contract.Attempt, error) {
	as := make([]*attempt, len(list))
	in := make([]contract.Attempt, len(list))
	for i, x := range list {
		a, ok := x.(*attempt)
		if !ok || a == nil || a.b != b {
			return nil, nil, fmt.Errorf("memtest: %s: attempt %d (%T) was not returned by this backend", method, i, x)
		}
		as[i], in[i] = a, a.inner
	}
	return as, in, nil
}

// Quiesce is mem's; a true answer arms the late writes of WriteAfterQuiesce.
func (b *Backend) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	b.fireLate()
	as, in, err := b.inners("Quiesce", list)
	if err != nil {
		return false, err
	}
	ok, err := b.Backend.Quiesce(ctx, in)
	if ok && err == nil {
		b.arm(as)
	}
	return ok, err
}

// TryQuiesce is mem's; AccessEnded arms the late writes of WriteAfterQuiesce.
func (b *Backend) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	b.fireLate()
	as, in, err := b.inners("TryQuiesce", list)
	if err != nil {
		return contract.AccessUnknown, err
	}
	acc, err := b.Backend.TryQuiesce(in)
	if acc == contract.AccessEnded && err == nil {
		b.arm(as)
	}
	return acc, err
}

// Settle waits until every listed attempt's Poll answers, honouring ctx:
// mem's Settle, then the fault's answer, which mem's delivery goroutine sets
// just after mem's own outcome.
func (b *Backend) Settle(ctx context.Context, list []contract.Attempt) error {
	b.fireLate()
	as, in, err := b.inners("Settle", list)
	if err != nil {
		return err
	}
	if err := b.Backend.Settle(ctx, in); err != nil {
		return err
	}
	for i, a := range as {
		select {
		case <-a.ready:
		case <-ctx.Done():
			return fmt.Errorf("memtest: Settle: waiting for attempt %d: %w", i, ctx.Err())
		}
	}
	return nil
}

// Drain is mem's.
func (b *Backend) Drain(ctx context.Context, list []contract.Attempt) error {
	_, in, err := b.inners("Drain", list)
	if err != nil {
		return err
	}
	return b.Backend.Drain(ctx, in)
}

// Probe is mem's (it counts in Call.Seq as mem's does).
func (b *Backend) Probe(ctx context.Context, name []byte, units []contract.Name) (contract.NameSet, bool, error) {
	b.fireLate()
	b.seq.Add(1)
	return b.Backend.Probe(ctx, name, units)
}

// Close ends mem's backend; late writes still pending never happen.
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed, b.armed = true, nil
	b.mu.Unlock()
	return b.Backend.Close()
}

// arm keeps each WriteAfterQuiesce attempt just proven quiescent for the late
// write, with the rows it served resolved now, while its extent is still the
// caller's to keep.
func (b *Backend) arm(as []*attempt) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range as {
		if a.fault != WriteAfterQuiesce || a.armed || b.closed {
			continue
		}
		o := a.out.Load()
		if o == nil {
			continue
		}
		d, ok := (*o).(contract.Delivered)
		if !ok {
			continue
		}
		for _, u := range a.extent.All() {
			if !d.Served.Has(u.Name) {
				continue
			}
			if row, ok := b.rows.Row(u.LocalGroup, u.Local); ok {
				a.served = append(a.served, row)
			}
		}
		if len(a.served) == 0 {
			continue
		}
		a.armed = true
		b.armed = append(b.armed, a)
	}
}

// fireLate makes the pending late writes, on the calling goroutine.
func (b *Backend) fireLate() {
	b.mu.Lock()
	armed := b.armed
	b.armed = nil
	b.mu.Unlock()
	for _, a := range armed {
		for _, row := range a.served {
			fill(row, mem.Poison)
		}
	}
}

// unasked returns a name the extent does not hold.
func unasked(ext contract.CacheExtent) contract.Name {
	var n contract.Name
	for i := range n {
		n[i] = 0xA5
	}
	for {
		clash := false
		for _, u := range ext.All() {
			if u.Name == n {
				clash = true
				break
			}
		}
		if !clash {
			return n
		}
		n[0]++
	}
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}
