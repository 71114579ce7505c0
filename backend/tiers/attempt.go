package tiers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kvready/kvready/backend/notify"
	"github.com/kvready/kvready/contract"
)

type op uint8

const (
	opFetch op = iota
	opPublish
)

// role is what a tier was asked to do with the units it was handed.
type role uint8

const (
	roleFetch   role = iota // write the units' rows (a fetch)
	rolePublish             // read them (a write-through publication)
	rolePromote             // read them (a promotion of a lower tier's units)
)

func (r role) String() string { return [...]string{"fetch", "publish", "promotion"}[r] }

// part is one tier's share of a tiered attempt: the units it was handed and
// the attempt it answered with. Only the driver writes it before the part is
// added; after that, out and failure are set once by the driver, and proven
// only ever goes from false to true.
type part struct {
	tier int
	role role
	ext  contract.CacheExtent // exactly the units this tier was handed
	at   contract.Attempt     // nil: the submission escaped without an attempt (never provable)

	// failure, when set at submission, is why the part is Failed without
	// asking its attempt (a contract violation).
	failure string
	// out is the tier's answer as the driver latched it (nil until then).
	out atomic.Pointer[outBox]
	// seen is the tier's own answer as the stack first read it (nil: none
	// was read — a failure at submission, or no outcome in time): what a
	// later poll must still answer (rule 3). flagged is set, once, when it
	// did not.
	seen    atomic.Pointer[outBox]
	flagged atomic.Bool
	// proven: the tier's own Quiesce (or TryQuiesce) answered that its
	// access ended.
	proven atomic.Bool
}

type outBox struct{ o contract.Outcome }

func (p *part) handed(n contract.Name) bool {
	for _, u := range p.ext.All() {
		if u.Name == n {
			return true
		}
	}
	return false
}

// attempt is one tiered delivery: the parts of every tier it was handed to,
// and the one outcome the stack answers.
type attempt struct {
	b   *Backend
	op  op
	ext contract.CacheExtent

	mu        sync.Mutex
	parts     []*part
	cancelled bool // a RequestCancel came; no part is added without being asked too

	submitted chan struct{} // closed once no part will ever be added and the driver is done with the caller's extent
	doneOnce  sync.Once

	// proven is set when Quiesce (or TryQuiesce) answers that every tier's
	// access ended; the first Poll after it runs confirm, once.
	proven    atomic.Bool
	confirmMu sync.Mutex
	confirmed atomic.Bool

	out    atomic.Pointer[outBox]
	ready  chan struct{} // closed once out is set
	notify notify.List
}

var (
	_ contract.Cancellable = (*attempt)(nil)
	_ contract.Notifier    = (*attempt)(nil)
)

func newAttempt(b *Backend, o op, ext contract.CacheExtent) *attempt {
	return &attempt{b: b, op: o, ext: ext, submitted: make(chan struct{}), ready: make(chan struct{})}
}

// Poll returns the stack's outcome, or nil while a tier is still answering.
// It answers the same for ever, except when a tier changed its own answer
// after the stack answered Delivered and before the stack's proof: the
// first Poll after the proof answers Failed naming that tier (confirm), so
// that the caller's re-poll at the proof sees a changed answer and trusts
// nothing.
func (a *attempt) Poll() contract.Outcome {
	if a.proven.Load() {
		a.confirm()
	}
	if box := a.out.Load(); box != nil {
		return box.o
	}
	return nil
}

// Notify calls f, once, when Poll has an outcome (at once if it has).
func (a *attempt) Notify(f func()) { a.notify.Add(f) }

// RequestCancel asks, best effort, every tier already handed units to stop,
// and keeps the stack from handing units to any other tier (a promotion
// included): a chain cut this way is Delivered with what was served, or
// Cancelled (a local cancel) when nothing was. It never blocks (a tier's
// RequestCancel must not either), answers contract.CancelRequested every
// time, and forwards only the first request.
func (a *attempt) RequestCancel() (contract.CancelDisposition, error) {
	a.mu.Lock()
	first := !a.cancelled
	a.cancelled = true
	parts := append([]*part(nil), a.parts...)
	a.mu.Unlock()
	if first {
		for _, p := range parts {
			a.cancelPart(p)
		}
	}
	return contract.CancelRequested, nil
}

func (a *attempt) cancelPart(p *part) {
	if p.at == nil {
		return
	}
	if err := guard(func() error { _, err := contract.RequestCancel(p.at); return err }); err != nil {
		a.b.stats[p.tier].cancelErrors.Add(1)
	}
}

func (a *attempt) cancelRequested() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cancelled
}

// add records p as an accessor of the attempt; a part added after a cancel
// request is asked to cancel too.
func (a *attempt) add(p *part) {
	a.mu.Lock()
	a.parts = append(a.parts, p)
	cancelled := a.cancelled
	a.mu.Unlock()
	if cancelled {
		a.cancelPart(p)
	}
}

func (a *attempt) snapshot() []*part {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*part(nil), a.parts...)
}

func (a *attempt) doneSubmitting() { a.doneOnce.Do(func() { close(a.submitted) }) }

// latch sets the stack's outcome, once.
func (a *attempt) latch(o contract.Outcome) {
	if a.out.Load() != nil {
		return
	}
	a.out.Store(&outBox{o})
	close(a.ready)
	a.notify.Fire()
}

// submit hands ext to tier i in role r. A rejection returns no part (nothing
// escaped) and an error naming the tier. A submission that escaped without
// an attempt, or with an attempt and an error, or that panicked, breaks the
// contract: the part is added, Failed, and (without an attempt) never
// provable.
func (a *attempt) submit(i int, r role, ext contract.CacheExtent) (*part, error) {
	t, c := a.b.tiers[i], &a.b.stats[i]
	var at contract.Attempt
	err := guard(func() error {
		var err error
		if r == roleFetch {
			at, err = t.Fetcher.Fetch(ext, nil)
		} else {
			at, err = t.Publisher.Publish(ext)
		}
		return err
	})
	p := &part{tier: i, role: r, ext: ext, at: at}
	switch {
	case at == nil && errors.Is(err, contract.ErrSubmissionRejected):
		c.rejected.Add(1)
		return nil, fmt.Errorf("%s rejected the %s: %w", a.b.name(i), r, err)
	case at == nil:
		c.violations.Add(1)
		p.failure = fmt.Sprintf("%s broke the contract: its %s returned no attempt and %v, which is no rejection (its access can never be proven)", a.b.name(i), r, err)
	case err != nil:
		c.violations.Add(1)
		p.failure = fmt.Sprintf("%s broke the contract: its %s returned an attempt and the error %v", a.b.name(i), r, err)
	}
	a.add(p)
	return p, nil
}

// driveFetch runs a fetch's chain from its first part: each tier's answer,
// the next tier for the units still unserved, the outcome, then the
// promotions. It ends once every promotion answered (or the wait passed).
func (a *attempt) driveFetch(p *part) {
	defer a.b.wg.Done()
	left := a.ext.Units()
	var served []contract.Name
	for p != nil {
		o := a.answer(p)
		d, ok := o.(contract.Delivered)
		if !ok {
			a.latch(o) // a tier's failure or cancel: never a miss of its units
			break
		}
		left = without(left, d.Served)
		for n := range d.Served.All() {
			served = append(served, n)
		}
		next := -1
		if len(left) > 0 {
			next = a.b.nextFetcher(p.tier + 1)
		}
		p = nil
		switch {
		case next < 0:
			a.latch(a.recheck(contract.Delivered{Served: contract.NewNameSet(served...)}))
		case a.cancelRequested():
			if len(served) == 0 {
				a.latch(contract.Cancelled{ByPeer: false})
			} else { // completion won for these; the rest were touched by no tier
				a.latch(a.recheck(contract.Delivered{Served: contract.NewNameSet(served...)}))
			}
		case a.b.isClosed():
			a.latch(contract.Failed{Reason: fmt.Sprintf("tiers: the backend closed before %s was asked", a.b.name(next))})
		default:
			ext, err := contract.NewCacheExtent([]byte(a.ext.Name()), left, a.ext.IsLast())
			if err != nil { // a subset of a valid extent is valid: a bug here
				panic(fmt.Sprintf("tiers: the units left of a valid extent are refused: %v", err))
			}
			q, err := a.submit(next, roleFetch, ext)
			if q == nil {
				a.latch(contract.Failed{Reason: err.Error()}) // a rejection is the tier's failure, never a miss
				break
			}
			p = q
		}
	}
	if _, ok := a.Poll().(contract.Delivered); ok {
		a.promote()
		a.collect(rolePromote) // before the proof may be asked: Stats then counts them
	}
	a.doneSubmitting()
}

// drivePublish waits for every tier's answer to a write-through publication
// and latches the stack's: Failed naming the first tier that rejected or
// failed, else Cancelled, else Delivered with the units some tier accepted.
func (a *attempt) drivePublish(parts []*part, rejected []error) {
	defer a.b.wg.Done()
	// Only once every answer is judged: judging reads the extent the caller
	// handed (the names each tier was handed), and the caller may rebuild
	// it in place once the stack's proof is given (rule 6). Before, a tier
	// that proved its access before answering let the proof through while
	// this goroutine still read the extent (a data race the tiered model
	// suite found, the engine rebuilding it for its next lease).
	defer a.doneSubmitting()
	outs := make([]contract.Outcome, len(parts))
	for i, p := range parts {
		outs[i] = a.answer(p)
	}
	if len(rejected) > 0 {
		a.latch(contract.Failed{Reason: errors.Join(rejected...).Error()})
		return
	}
	var accepted []contract.Name
	var cancelled contract.Outcome
	for _, o := range outs {
		switch x := o.(type) {
		case contract.Failed:
			a.latch(x)
			return
		case contract.Cancelled:
			if cancelled == nil || x.ByPeer {
				cancelled = x
			}
		case contract.Delivered:
			for n := range x.Served.All() {
				accepted = append(accepted, n)
			}
		}
	}
	if cancelled != nil {
		a.latch(cancelled)
		return
	}
	a.latch(a.recheck(contract.Delivered{Served: contract.NewNameSet(accepted...)}))
}

// answer waits (within the backend's wait) for p's outcome and judges it:
// the tier's Delivered when it names only units p was handed and reads the
// same on a second poll; otherwise Failed with a reason naming the tier (a
// Cancelled stays Cancelled). It counts what the tier did.
func (a *attempt) answer(p *part) contract.Outcome {
	o := a.judge(p)
	p.out.Store(&outBox{o})
	a.count(p, o)
	return o
}

func (a *attempt) judge(p *part) contract.Outcome {
	name, c := a.b.name(p.tier), &a.b.stats[p.tier]
	if p.failure != "" {
		return contract.Failed{Reason: p.failure}
	}
	o, err := a.await(p)
	if err != nil {
		c.noOutcome.Add(1)
		a.cancelPart(p)
		return contract.Failed{Reason: fmt.Sprintf("%s gave its %s no outcome: %v", name, p.role, err)}
	}
	p.seen.Store(&outBox{o})
	if o2, changed := a.changed(p); changed {
		return contract.Failed{Reason: fmt.Sprintf("%s broke the contract: its %s answered %v, then %v", name, p.role, o, o2)}
	}
	switch x := o.(type) {
	case contract.Delivered:
		for n := range x.Served.All() {
			if !p.handed(n) {
				c.violations.Add(1)
				return contract.Failed{Reason: fmt.Sprintf("%s broke the contract: its %s served %x…, a unit it was never handed", name, p.role, n[:4])}
			}
		}
		return x
	case contract.Failed:
		return contract.Failed{Reason: fmt.Sprintf("%s failed its %s: %s", name, p.role, x.Reason)}
	case contract.Cancelled:
		return x
	}
	c.violations.Add(1)
	return contract.Failed{Reason: fmt.Sprintf("%s broke the contract: its %s answered %v, which is no outcome", name, p.role, o)}
}

// await waits for p's outcome, within the backend's wait, through the
// tier's completion callback when it has one, else its Settle.
func (a *attempt) await(p *part) (contract.Outcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), a.b.wait)
	defer cancel()
	if n, ok := p.at.(contract.Notifier); ok {
		ch := make(chan struct{})
		var once sync.Once
		if err := guard(func() error { n.Notify(func() { once.Do(func() { close(ch) }) }); return nil }); err != nil {
			return nil, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("none within %v", a.b.wait)
		case <-a.b.closed:
			return nil, errors.New("the backend closed first")
		}
	} else {
		settle := a.b.tiers[p.tier].Publisher.Settle
		if p.role == roleFetch {
			settle = a.b.tiers[p.tier].Fetcher.Settle
		}
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		unwatch := closeCancels(a.b.closed, scancel)
		defer unwatch()
		if err := guard(func() error { return settle(sctx, []contract.Attempt{p.at}) }); err != nil {
			return nil, err
		}
	}
	if o := poll(p.at); o != nil {
		return o, nil
	}
	return nil, errors.New("it was said to be known, but Poll answered none")
}

// closeCancels cancels when closed is closed, until the returned func is
// called.
func closeCancels(closed <-chan struct{}, cancel func()) func() {
	done := make(chan struct{})
	go func() {
		select {
		case <-closed:
			cancel()
		case <-done:
		}
	}()
	return func() { close(done) }
}

// poll is at.Poll, a panic read as no outcome.
func poll(at contract.Attempt) (o contract.Outcome) {
	defer func() {
		if recover() != nil {
			o = nil
		}
	}()
	return at.Poll()
}

// recheck polls every fetch or publish part once more before the stack
// latches o: a tier whose answer changed since it was judged makes the stack
// Failed, naming it (rule 3: a changed answer is never trusted).
func (a *attempt) recheck(o contract.Outcome) contract.Outcome {
	for _, p := range a.snapshot() {
		if p.role == rolePromote {
			continue
		}
		if now, changed := a.changed(p); changed {
			return contract.Failed{Reason: fmt.Sprintf("%s broke the contract: its %s answered %v, then %v", a.b.name(p.tier), p.role, p.seen.Load().o, now)}
		}
	}
	return o
}

// changed polls p's tier again and reports whether its answer differs from
// the one the stack read first; the first time it does, the change is
// counted against that tier. A part whose answer was never read has none to
// change.
func (a *attempt) changed(p *part) (contract.Outcome, bool) {
	seen := p.seen.Load()
	if seen == nil || p.at == nil || p.flagged.Load() {
		return nil, false
	}
	now := poll(p.at)
	if sameOutcome(seen.o, now) {
		return now, false
	}
	if p.flagged.CompareAndSwap(false, true) {
		a.b.stats[p.tier].violations.Add(1)
	}
	return now, true
}

// confirm polls, once, at the first Poll after every tier's access to the
// attempt was proven over, each tier the stack's answer was built from (its
// fetches and publications): a tier may change its answer after the stack
// answered and before the proof, as a single backend may, and rule 3 says
// such an answer is never trusted. The change is counted against that tier;
// when the stack had answered Delivered, its answer becomes Failed naming
// the tier — a changed answer that the caller's re-poll at the proof takes
// for a violation, so nothing the tier said is copied. A Failed or a
// Cancelled stays as answered (nothing is copied from either). It runs at
// that re-poll, not inside Quiesce: a tier polled after its own proof may
// act on it (memtest's WriteAfterQuiesce writes then), and what it does
// then must read as done after the stack's proof, which it is.
func (a *attempt) confirm() {
	if a.confirmed.Load() {
		return
	}
	a.confirmMu.Lock()
	defer a.confirmMu.Unlock()
	if a.confirmed.Load() {
		return
	}
	defer a.confirmed.Store(true)
	for _, p := range a.snapshot() {
		if p.role == rolePromote {
			continue
		}
		seen := p.seen.Load()
		now, changed := a.changed(p)
		if !changed {
			continue
		}
		if box := a.out.Load(); box != nil && isDelivered(box.o) {
			a.out.Store(&outBox{contract.Failed{Reason: fmt.Sprintf("%s broke the contract: its %s answered %v, then %v (after the stack answered, before its proof)",
				a.b.name(p.tier), p.role, seen.o, now)}})
		}
	}
}

// promote publishes each lower tier's served units into every upper tier
// that publishes, once the lower tier proved its own access over (within
// the backend's wait: otherwise the promotion is skipped, and counted).
func (a *attempt) promote() {
	if !a.b.promote {
		return
	}
	for _, p := range a.snapshot() {
		box := p.out.Load()
		if p.role != roleFetch || box == nil {
			continue
		}
		d, _ := box.o.(contract.Delivered)
		var uppers []int
		for j := range p.tier {
			if a.b.tiers[j].Publisher != nil {
				uppers = append(uppers, j)
			}
		}
		if d.Served.Len() == 0 || len(uppers) == 0 {
			continue
		}
		var units []contract.Unit
		for _, u := range p.ext.All() {
			if d.Served.Has(u.Name) {
				units = append(units, u)
			}
		}
		if a.cancelRequested() || !a.proveOne(p) {
			for _, j := range uppers {
				a.b.stats[j].promoteSkipped.Add(uint64(len(units)))
			}
			continue
		}
		ext, err := contract.NewCacheExtent([]byte(a.ext.Name()), units, a.ext.IsLast())
		if err != nil {
			panic(fmt.Sprintf("tiers: the served units of a valid extent are refused: %v", err))
		}
		for _, j := range uppers {
			if a.cancelRequested() {
				a.b.stats[j].promoteSkipped.Add(uint64(len(units)))
				continue
			}
			_, _ = a.submit(j, rolePromote, ext) // a rejection is counted; nothing escaped
		}
	}
}

// proveOne asks p's tier, within the backend's wait, whether p's access
// ended.
func (a *attempt) proveOne(p *part) bool {
	if p.proven.Load() {
		return true
	}
	if p.at == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.b.wait)
	defer cancel()
	unwatch := closeCancels(a.b.closed, cancel)
	defer unwatch()
	var ok bool
	err := guard(func() error {
		var err error
		ok, err = a.b.tiers[p.tier].Fetcher.Quiesce(ctx, []contract.Attempt{p.at})
		return err
	})
	if ok && err == nil {
		p.proven.Store(true)
	}
	return ok && err == nil
}

// collect waits for the answers of the parts in role r (the promotions), so
// that Stats counts them.
func (a *attempt) collect(r role) {
	for _, p := range a.snapshot() {
		if p.role == r && p.out.Load() == nil {
			a.answer(p)
		}
	}
}

// count adds what the tier answered for p to its counters.
func (a *attempt) count(p *part, o contract.Outcome) {
	c := &a.b.stats[p.tier]
	n := uint64(p.ext.Len())
	d, delivered := o.(contract.Delivered)
	switch p.role {
	case roleFetch:
		c.handed.Add(n)
		if delivered {
			c.hits.Add(uint64(d.Served.Len()))
			c.misses.Add(n - uint64(d.Served.Len()))
		} else {
			c.failed.Add(n)
		}
	case rolePublish:
		if delivered {
			c.published.Add(uint64(d.Served.Len()))
		} else {
			c.publishFailed.Add(n)
		}
	case rolePromote:
		if delivered {
			c.promoted.Add(uint64(d.Served.Len()))
		} else {
			c.promoteFailed.Add(n)
		}
	}
}

// AccessorsOf says, for a unit, every tier it was handed to, in what role,
// and what that tier answered — so that a report of a broken rule on the
// unit's row names the tiers that could have touched it (SPEC §4 rule 15;
// the conformance kit adds it to its violations).
func (a *attempt) AccessorsOf(n contract.Name) []string {
	var out []string
	for _, p := range a.snapshot() {
		if !p.handed(n) {
			continue
		}
		what := "no outcome yet"
		if box := p.out.Load(); box != nil {
			switch x := box.o.(type) {
			case contract.Delivered:
				what = "not served"
				if x.Served.Has(n) {
					what = "served"
				}
			default:
				what = x.String()
			}
		}
		if p.role != roleFetch {
			what += " (it reads the row)"
		}
		out = append(out, fmt.Sprintf("%s %s: %s", a.b.name(p.tier), p.role, what))
	}
	return out
}

func isDelivered(o contract.Outcome) bool {
	_, ok := o.(contract.Delivered)
	return ok
}

// without is units less the served ones, in order.
func without(units []contract.Unit, served contract.NameSet) []contract.Unit {
	kept := units[:0:0]
	for _, u := range units {
		if !served.Has(u.Name) {
			kept = append(kept, u)
		}
	}
	return kept
}

// sameOutcome compares two answers of one attempt.
func sameOutcome(x, y contract.Outcome) bool {
	switch a := x.(type) {
	case contract.Delivered:
		b, ok := y.(contract.Delivered)
		return ok && a.Served.Equal(b.Served)
	case contract.Failed:
		b, ok := y.(contract.Failed)
		return ok && a == b
	case contract.Cancelled:
		b, ok := y.(contract.Cancelled)
		return ok && a == b
	}
	return x == nil && y == nil
}
