// Package tiers is a backend of tiers: an ordered list of fetchers and
// publishers — a fast local tier in front of a shared store, as LMCache,
// SGLang HiCache and Dynamo KVBM put one — behind the one backend contract.
// A *Backend is a contract.Fetcher and a contract.Publisher; an engine and
// every embedding use it like any backend.
//
// How it keeps the contract across tiers (docs/tiers.md draws it):
//
//   - Fetch asks the first tier for every unit; the units a tier did not
//     serve go to the next, within the same attempt. Served names are the
//     union. A miss is a miss only when every tier answered and none served a
//     unit. A tier that fails, is cancelled, rejects, gives no outcome within
//     the backend's wait, or breaks the contract (a changed answer, a name it
//     was never handed) ends the chain, and the attempt is Failed (Cancelled,
//     for a cancel) with a reason naming the tier — never Delivered: a failed
//     tier may have written any unit it was handed, and Delivered would
//     promise those destinations untouched (rule 2). Rows another tier served
//     are not reported either: the manager recomputes the lease.
//   - Publish writes through: every tier that publishes is handed the extent
//     at once. The publication is Delivered with the units some tier
//     accepted, or Failed naming the first tier (in order) that failed or
//     rejected, when not every tier rejected (then it is rejected).
//   - A unit served by a lower tier is promoted into every upper tier that
//     publishes — a Publish of those units, read from the staging rows while
//     the lease still holds them — once the lower tier's own access is proven
//     over (a tier still writing its rows would otherwise promote torn
//     bytes). A promotion is an accessor of the slots like any other —
//     except through a tee (tee.go): a lower tier that is a TeeFetcher,
//     below one Adopter, lands a copy of each row in a buffer reserved
//     from the upper tier as it writes the row, and the upper tier adopts
//     the buffers of the units it served once its access is proven over;
//     that promotion reads no slot, and its copy is off the lease's path.
//   - The access proof is every accessor's: Quiesce (and TryQuiesce) of a
//     tiered attempt asks each tier only about the attempts that tier was
//     handed, for the units it was handed, and answers true only when each of
//     them proved its own, every promotion included. A tier that is slow,
//     late-writing, failing or down holds only the leases it was handed units
//     of; a lease the local tier served entirely never waits for the shared
//     one.
//
// How it waits: each step of a chain starts from one tier's answer — on the
// tier's own goroutine, through its attempt's completion callback
// (contract.Notifier), bounded by the backend's wait through one timer the
// whole backend shares — so a lease the local tier serves costs the stack no
// goroutine and no hand-off of its own. A tier whose attempts have no
// callback is waited for on a goroutine of the stack's (its Settle), and so
// is a lower tier's proof before a promotion when its TryQuiesce cannot
// answer at once.
//
// What a lease costs it: a lease the first tier served whole (a local hit)
// allocates only the handle its caller holds; the stack's attempt behind it
// goes back to the backend's pool once the lease is proven and confirmed.
// The handle names the attempt's generation, and a call through an old
// handle — a late Poll, Quiesce, cancel or AccessorsOf, or the tier calling
// back late — reaches the attempt only while it serves that generation, and
// otherwise answers from what the handle kept, changing nothing of the
// lease the attempt serves now.
//
// The backend owns no memory and no tier: New takes the tiers their caller
// built, and Close ends only the backend's own waits and goroutines.
package tiers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kvready/kvready/backend/notify"
	"github.com/kvready/kvready/contract"
)

// Tier is one level of the stack, named for errors, outcomes and Stats.
type Tier struct {
	// Name names the tier in every reason, error and statistic. Required,
	// and unique within a backend.
	Name string
	// Fetcher, if set, is asked for the units the tiers above it did not
	// serve. A tier without one is never fetched from.
	Fetcher contract.Fetcher
	// Publisher, if set, is written through by every publication and is
	// promoted into when a lower tier serves a unit. A tier without one is
	// read-only.
	Publisher contract.Publisher
}

// DefaultWait is how long the backend waits, by default, for a tier's
// outcome and for a lower tier's proof before promoting its units.
const DefaultWait = 30 * time.Second

// Option configures a Backend.
type Option func(*Backend)

// WithWait bounds the backend's own waits (DefaultWait): a tier's outcome
// not known within d fails the attempt naming the tier (and the tier is
// asked to cancel) — checked every d/4 for a tier with completion
// callbacks, so by 1.25·d at the latest; a lower tier's access not proven
// within d skips the promotion of its units (counted in Stats). It never
// bounds a proof: Quiesce asks every tier for as long as its context
// allows.
func WithWait(d time.Duration) Option { return func(b *Backend) { b.wait = d } }

// WithoutPromotion turns promotion off: units served by a lower tier are not
// published into the upper ones.
func WithoutPromotion() Option { return func(b *Backend) { b.promote = false } }

// Backend is a stack of tiers behind the one contract. Create it with New and
// end it with Close.
type Backend struct {
	tiers   []Tier
	wait    time.Duration
	promote bool
	stats   []tierCounters
	provers []provers // each tier's, as a proof asks it
	// uppers[i] is the tiers above tier i that publish: where a unit tier i
	// served is promoted. Empty for every tier when promotion is off, so a
	// lease served by tiers with nothing above them skips promotion without
	// looking at its parts.
	uppers [][]int
	// teeTo[i] is the tier that tier i's served units are promoted into
	// through a tee (tee.go), or -1.
	teeTo []int

	// reuse holds attempts whose lease is over for the stack (attempt.ref):
	// a lease one tier served whole allocates only its handle.
	reuse sync.Pool

	closed   chan struct{}
	closing  sync.Once
	wg       sync.WaitGroup // every answer awaited off the watch list, every goroutine of the stack's
	watching watchList      // every answer awaited through a tier's callback
}

var (
	_ contract.Fetcher       = (*Backend)(nil)
	_ contract.Publisher     = (*Backend)(nil)
	_ contract.QuiesceProber = (*Backend)(nil)
)

// New returns a backend over tiers, first tier first (the local one in front
// of the shared one). It refuses, naming every mistake at once, an empty
// stack, a tier without a name or with another tier's name, a tier with
// neither a fetcher nor a publisher, and a bad option.
func New(tiers []Tier, opts ...Option) (*Backend, error) {
	b := &Backend{tiers: append([]Tier(nil), tiers...), wait: DefaultWait, promote: true, closed: make(chan struct{})}
	for _, o := range opts {
		o(b)
	}
	var errs []error
	if len(tiers) == 0 {
		errs = append(errs, errors.New("tiers: New: no tiers; want at least one"))
	}
	seen := map[string]int{}
	for i, t := range tiers {
		switch j, dup := seen[t.Name]; {
		case t.Name == "":
			errs = append(errs, fmt.Errorf("tiers: New: tier %d has no name; want a name for errors and Stats", i))
		case dup:
			errs = append(errs, fmt.Errorf("tiers: New: tiers %d and %d are both named %q; want unique names", j, i, t.Name))
		}
		seen[t.Name] = i
		if t.Fetcher == nil && t.Publisher == nil {
			errs = append(errs, fmt.Errorf("tiers: New: tier %d %q has neither a Fetcher nor a Publisher", i, t.Name))
		}
	}
	if b.wait <= 0 {
		errs = append(errs, fmt.Errorf("tiers: New: WithWait(%v); want a positive duration", b.wait))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	b.stats = make([]tierCounters, len(tiers))
	b.provers = make([]provers, len(tiers))
	for i, t := range tiers {
		b.provers[i] = newProvers(t)
	}
	b.uppers = make([][]int, len(tiers))
	for i := range tiers {
		for j := range i {
			if b.promote && tiers[j].Publisher != nil {
				b.uppers[i] = append(b.uppers[i], j)
			}
		}
	}
	b.teeTo = teeTargets(b.tiers, b.uppers)
	b.watching.tick = max(b.wait/ticksPerWait, 1)
	b.watching.timer = time.AfterFunc(time.Hour, b.expireDue)
	b.watching.timer.Stop()
	return b, nil
}

// Close stops the backend's own waits and goroutines: a chain still waiting
// for a tier's outcome ends Failed ("the backend closed first", naming the
// tier, which is asked to cancel), nothing more is submitted to any tier,
// and Close returns once every chain has ended. It closes no tier (their
// caller owns them) and proves nothing: Quiesce still asks the tiers. It is
// idempotent.
func (b *Backend) Close() error {
	b.closing.Do(func() {
		close(b.closed)
		for _, p := range b.watching.close() {
			p.a.expire(p, "the backend closed first")
		}
	})
	b.wg.Wait()
	b.watching.wait()
	return nil
}

// name is how reasons and errors name tier i.
func (b *Backend) name(i int) string { return fmt.Sprintf("tier %d %q", i, b.tiers[i].Name) }

// Fetch submits a fetch of the extent's units: to the first tier that
// fetches at once, and to each next one, once the tier before it answered
// (on that tier's goroutine, or the stack's), for the units still unserved. A route is refused (the stack opens none). It is
// rejected only when the first fetching tier rejects it, or when no tier
// fetches: nothing escaped.
func (b *Backend) Fetch(extent contract.CacheExtent, route contract.Route) (contract.Attempt, error) {
	if route != nil {
		return nil, fmt.Errorf("tiers: Fetch: %w: a route was given, but a stack of tiers opens none", contract.ErrSubmissionRejected)
	}
	first := b.nextFetcher(0)
	if first < 0 {
		return nil, fmt.Errorf("tiers: Fetch: %w: no tier fetches", contract.ErrSubmissionRejected)
	}
	if b.isClosed() {
		return nil, fmt.Errorf("tiers: Fetch: %w: the backend is closed", contract.ErrSubmissionRejected)
	}
	h, a := newAttempt(b, opFetch)
	var t *tee
	if to := b.teeTo[first]; to >= 0 { // a read-only tier in front: the first fetcher promotes too
		t = newTee(b, to, extent.Len())
	}
	p, err := a.submit(first, roleFetch, extent, true, t)
	if p == nil {
		return nil, err // rejected by the first tier: nothing escaped anywhere (the attempt is left to the collector)
	}
	a.watch(p)
	return h, nil
}

// Publish writes the extent through to every tier that publishes, at once.
// It is rejected only when every one of them rejects it.
func (b *Backend) Publish(extent contract.CacheExtent) (contract.Attempt, error) {
	if b.isClosed() {
		return nil, fmt.Errorf("tiers: Publish: %w: the backend is closed", contract.ErrSubmissionRejected)
	}
	h, a := newAttempt(b, opPublish)
	var parts []*part
	var rejected []error
	for i, t := range b.tiers {
		if t.Publisher == nil {
			continue
		}
		p, err := a.submit(i, rolePublish, extent, true, nil)
		if p == nil {
			rejected = append(rejected, err)
			continue
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		if len(rejected) == 0 {
			return nil, fmt.Errorf("tiers: Publish: %w: no tier publishes", contract.ErrSubmissionRejected)
		}
		return nil, fmt.Errorf("tiers: Publish: %w", errors.Join(rejected...))
	}
	a.rejected = errors.Join(rejected...) // no part will be added: the last answer judged ends the submitting
	a.pending.Store(int32(len(parts)))
	for _, p := range parts {
		a.watch(p)
	}
	return h, nil
}

// nextFetcher is the index of the first tier from i on that fetches, or -1.
func (b *Backend) nextFetcher(i int) int {
	for ; i < len(b.tiers); i++ {
		if b.tiers[i].Fetcher != nil {
			return i
		}
	}
	return -1
}

func (b *Backend) isClosed() bool {
	select {
	case <-b.closed:
		return true
	default:
		return false
	}
}

// held is a listed handle and its attempt, held for the call (nil: the
// attempt serves another lease now — the handle's was proven, confirmed
// and over, so there is nothing left to ask about it).
type held struct {
	h *handle
	a *attempt
}

// attempts checks that every listed attempt came from this backend, and
// appends each, held (acquire), to as (a caller's buffer); the caller lets
// go of them (letGo) when its call ends.
func (b *Backend) attempts(method string, list []contract.Attempt, as []held) ([]held, error) {
	for i, x := range list {
		h, ok := x.(*handle)
		if !ok || h == nil || h.a.b != b {
			letGo(as)
			return nil, fmt.Errorf("tiers: %s: attempt %d (%T) was not returned by this backend", method, i, x)
		}
		var a *attempt
		if h.a.acquire(h.gen) {
			a = h.a
		}
		as = append(as, held{h, a})
	}
	return as, nil
}

// letGo releases the attempts attempts held.
func letGo(as []held) {
	for _, x := range as {
		if x.a != nil {
			x.a.release()
		}
	}
}

// Settle waits until every listed attempt has an outcome, honouring ctx. It
// proves nothing about memory access.
func (b *Backend) Settle(ctx context.Context, list []contract.Attempt) error {
	as, err := b.attempts("Settle", list, nil)
	if err != nil {
		return err
	}
	defer letGo(as)
	return notify.Settle(ctx, "tiers: Settle", len(as), func(i int) <-chan struct{} {
		if a := as[i].a; a != nil {
			return a.ready.wait(&a.mu)
		}
		return closedChan // over: its outcome was latched long before
	})
}

// Probe asks the tiers in order, each for the units the ones above it did
// not report: hits are the union. A tier's error is the probe's error,
// naming the tier; a tier that cannot answer cheaply makes the probe
// unanswered (without hits), since the units it holds are unknown.
func (b *Backend) Probe(ctx context.Context, name []byte, units []contract.Name) (contract.NameSet, bool, error) {
	var hits []contract.Name
	left := append([]contract.Name(nil), units...)
	for i, t := range b.tiers {
		if t.Fetcher == nil || len(left) == 0 {
			continue
		}
		var (
			h        contract.NameSet
			answered bool
		)
		err := guard(func() error {
			var err error
			h, answered, err = t.Fetcher.Probe(ctx, name, left)
			return err
		})
		if err != nil {
			return contract.NameSet{}, false, fmt.Errorf("tiers: Probe: %s: %w", b.name(i), err)
		}
		if !answered {
			return contract.NameSet{}, false, nil
		}
		kept := left[:0]
		for _, n := range left {
			if h.Has(n) {
				hits = append(hits, n)
			} else {
				kept = append(kept, n)
			}
		}
		left = kept
	}
	return contract.NewNameSet(hits...), true, nil
}

// OpenRoute refuses: the stack routes by tier, not by a caller's hint.
func (b *Backend) OpenRoute(map[string]string) (contract.Route, error) {
	return nil, fmt.Errorf("tiers: OpenRoute: %w: a stack of tiers opens no routes", errors.ErrUnsupported)
}

// admitter is readiness.Admitter, named here at its consumer.
type admitter interface{ AdmissionLimit() int }

// AdmissionLimit is the smallest positive AdmissionLimit of the tiers'
// fetchers and publishers that report one (0: none does), so that an engine
// keeps the leases a bounded tier could not serve at once waiting before
// submission.
func (b *Backend) AdmissionLimit() int {
	limit := 0
	for _, t := range b.tiers {
		for _, x := range []any{t.Fetcher, t.Publisher} {
			a, ok := x.(admitter)
			if !ok {
				continue
			}
			var n int
			_ = guard(func() error { n = a.AdmissionLimit(); return nil })
			if n > 0 && (limit == 0 || n < limit) {
				limit = n
			}
		}
	}
	return limit
}

// guard calls f, turning a panic into an error: what a tier does wrong is
// the tier's (SPEC §4 rule 15), never the process's.
func guard(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panicked: %v", p)
		}
	}()
	return f()
}
