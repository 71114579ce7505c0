package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvready/kvready/contract"
)

// thirdParty is a small backend written against the contract alone, as a
// backend author outside kvready would write one: one goroutine per
// submission copies the rows, then reports Delivered, and Quiesce answers at
// once — true when the outcome is known. Its knobs plant one bug each.
type thirdParty struct {
	mem Memory
	// lateBy > 0: lateBy after Quiesce first answered true for a fetch, a
	// timer rewrites its served rows with the stored content (the bug the kit
	// missed before it watched a window).
	lateBy time.Duration
	// cancel, if set, makes every attempt contract.Cancellable with this
	// behaviour.
	cancel *cancelBehaviour

	mu     sync.Mutex
	store  map[contract.Name][]byte
	timers []*time.Timer
	late   sync.WaitGroup
	closed chan struct{}
	once   sync.Once
}

// cancelBehaviour is how RequestCancel behaves: correctly (the zero value:
// the delivery is suppressed if it has not started, and nothing else
// happens), or with one bug.
type cancelBehaviour struct {
	blocks       bool // waits until the backend is closed
	invalid      bool // answers a disposition that is neither of the two
	secondWrites bool // the second call writes into every row of the extent
	secondDiffer bool // the second call answers CancelUnsupported
	writes       bool // every call clears every row of the extent ("cleanup")
	revokesProof bool // Quiesce answers false for ever after a call
	endsAccess   bool // Quiesce answers true after a call, delivery or not; the delivery waits for Settle
}

func newThirdParty(m Memory, lateBy time.Duration, cancel *cancelBehaviour) *thirdParty {
	return &thirdParty{mem: m, lateBy: lateBy, cancel: cancel, store: map[contract.Name][]byte{}, closed: make(chan struct{})}
}

// Put seeds the store.
func (b *thirdParty) Put(_ string, n contract.Name, row []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.store[n] = append([]byte(nil), row...)
}

// Get reads the store back.
func (b *thirdParty) Get(_ string, n contract.Name) ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	row, ok := b.store[n]
	return row, ok
}

// Close stops the late writes still pending and waits for those running, and
// lets a blocked RequestCancel return.
func (b *thirdParty) Close() error {
	b.once.Do(func() { close(b.closed) })
	b.mu.Lock()
	for _, t := range b.timers {
		if t.Stop() {
			b.late.Done()
		}
	}
	b.timers = nil
	b.mu.Unlock()
	b.late.Wait()
	return nil
}

type tpAttempt struct {
	b       *thirdParty
	ext     contract.CacheExtent
	publish bool
	done    chan struct{}
	gate    chan struct{} // the delivery starts when it closes (endsAccess only)
	gated   sync.Once

	mu        sync.Mutex
	outcome   contract.Outcome
	served    []contract.Unit
	lateOnce  sync.Once
	cancelled atomic.Bool
	calls     atomic.Int32
	revoked   atomic.Bool
}

// tpCancellable is an attempt of a thirdParty whose cancel is set.
type tpCancellable struct{ *tpAttempt }

func (a *tpAttempt) Poll() contract.Outcome {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.outcome
}

func (a tpCancellable) RequestCancel() (contract.CancelDisposition, error) {
	c := a.b.cancel
	n := a.calls.Add(1)
	a.cancelled.Store(true)
	switch {
	case c.blocks:
		<-a.b.closed
	case c.invalid:
		return 0, nil
	case c.revokesProof:
		a.revoked.Store(true)
	case c.writes || (c.secondWrites && n == 2):
		for _, u := range a.ext.All() {
			if row, ok := a.b.mem.Row(u.LocalGroup, u.Local); ok {
				clear(row)
			}
		}
	case c.secondDiffer && n == 2:
		return contract.CancelUnsupported, nil
	}
	return contract.CancelRequested, nil
}

func (b *thirdParty) submit(ext contract.CacheExtent, publish bool) contract.Attempt {
	a := &tpAttempt{b: b, ext: ext, publish: publish, done: make(chan struct{}), gate: make(chan struct{})}
	if b.cancel == nil || !b.cancel.endsAccess {
		a.open()
	}
	go a.deliver()
	if b.cancel != nil {
		return tpCancellable{a}
	}
	return a
}

func (a *tpAttempt) open() { a.gated.Do(func() { close(a.gate) }) }

func (a *tpAttempt) deliver() {
	defer close(a.done)
	select {
	case <-a.gate:
	case <-a.b.closed:
	}
	var outcome contract.Outcome
	var served []contract.Unit
	if c := a.b.cancel; c != nil && !c.endsAccess && a.cancelled.Load() {
		outcome = contract.Cancelled{} // suppressed before it started: nothing touched
	} else {
		var names []contract.Name
		for _, u := range a.ext.All() {
			row, ok := a.b.mem.Row(u.LocalGroup, u.Local)
			if !ok {
				continue
			}
			if a.publish {
				a.b.Put("", u.Name, row)
			} else if stored, ok := a.b.Get("", u.Name); ok {
				copy(row, stored)
			} else {
				continue
			}
			served = append(served, u)
			names = append(names, u.Name)
		}
		outcome = contract.Delivered{Served: contract.NewNameSet(names...)}
	}
	a.mu.Lock()
	a.outcome, a.served = outcome, served
	a.mu.Unlock()
}

// rewriteLater plants the late write, once per fetch: lateBy after this
// Quiesce answer, the served rows are written again (with the bytes they
// already hold).
func (a *tpAttempt) rewriteLater() {
	if a.b.lateBy <= 0 || a.publish {
		return
	}
	a.lateOnce.Do(func() {
		a.b.mu.Lock()
		defer a.b.mu.Unlock()
		a.b.late.Add(1)
		a.b.timers = append(a.b.timers, time.AfterFunc(a.b.lateBy, func() {
			defer a.b.late.Done()
			a.mu.Lock()
			served := a.served
			a.mu.Unlock()
			for _, u := range served {
				if row, ok := a.b.mem.Row(u.LocalGroup, u.Local); ok {
					stored, _ := a.b.Get("", u.Name)
					copy(row, stored)
				}
			}
		}))
	})
}

func attemptOf(x contract.Attempt) (*tpAttempt, error) {
	switch a := x.(type) {
	case *tpAttempt:
		return a, nil
	case tpCancellable:
		return a.tpAttempt, nil
	}
	return nil, fmt.Errorf("thirdparty: %T is not one of this backend's attempts", x)
}

// Fetch submits a fetch: a goroutine copies what the store holds.
func (b *thirdParty) Fetch(ext contract.CacheExtent, _ contract.Route) (contract.Attempt, error) {
	return b.submit(ext, false), nil
}

// Publish submits a publication: a goroutine stores the staged rows.
func (b *thirdParty) Publish(ext contract.CacheExtent) (contract.Attempt, error) {
	return b.submit(ext, true), nil
}

// Quiesce answers at once: true when every listed attempt's goroutine has ended.
func (b *thirdParty) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	var as []*tpAttempt
	for _, x := range list {
		a, err := attemptOf(x)
		if err != nil {
			return false, err
		}
		if a.revoked.Load() {
			return false, nil
		}
		ended := false
		select {
		case <-a.done:
			ended = true
		default:
		}
		if !ended && !(b.cancel != nil && b.cancel.endsAccess && a.cancelled.Load()) {
			return false, nil
		}
		as = append(as, a)
	}
	for _, a := range as {
		a.rewriteLater()
	}
	return true, nil
}

// Settle waits for every listed attempt's outcome.
func (b *thirdParty) Settle(ctx context.Context, list []contract.Attempt) error {
	for _, x := range list {
		a, err := attemptOf(x)
		if err != nil {
			return err
		}
		a.open()
		select {
		case <-a.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Probe answers from the store.
func (b *thirdParty) Probe(ctx context.Context, _ []byte, names []contract.Name) (contract.NameSet, bool, error) {
	if err := ctx.Err(); err != nil {
		return contract.NameSet{}, false, err
	}
	var hits []contract.Name
	for _, n := range names {
		if _, ok := b.Get("", n); ok {
			hits = append(hits, n)
		}
	}
	return contract.NewNameSet(hits...), true, nil
}

// OpenRoute: one source.
func (b *thirdParty) OpenRoute(map[string]string) (contract.Route, error) {
	return nil, fmt.Errorf("thirdparty has one source: %w", errors.ErrUnsupported)
}

func thirdPartyFetcher(lateBy time.Duration, cancel *cancelBehaviour) NewFetcher {
	return func(m Memory) (FetchSubject, error) {
		b := newThirdParty(m, lateBy, cancel)
		return FetchSubject{Fetcher: b, Put: b.Put, Close: b.Close}, nil
	}
}

func thirdPartyPublisher(cancel *cancelBehaviour) NewPublisher {
	return func(m Memory) (PublishSubject, error) {
		b := newThirdParty(m, 0, cancel)
		return PublishSubject{Publisher: b, Get: b.Get, Close: b.Close}, nil
	}
}
