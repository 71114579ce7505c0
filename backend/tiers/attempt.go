package tiers

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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
// the attempt it answered with. Only the submitter writes it before the part
// is added; after that, out is set once (by whoever claimed the part's
// answer), and proven only ever goes from false to true.
type part struct {
	// The fields the tier's answer writes (on the tier's goroutine) and the
	// proof and the re-poll then read (on the caller's) come first and
	// together, in one cache line of the attempt that holds the part inline:
	// each line the answer writes is a miss when the caller next reads it.

	// self holds the attempt the tier answered with (nil: the submission
	// escaped without an attempt, never provable), as the one-element list
	// a proof of this part alone asks about: no list is made per proof.
	self [1]contract.Attempt
	// box is the tier's answer as the stack judged it, once isJudged is
	// set (once). seenBox is the tier's own answer as the stack first read
	// it, once isSeen is set (never: none was read — a failure at
	// submission, or no outcome in time): what a later poll must still
	// answer (rule 3); flagged is set, once, when a later poll did not.
	// Flags beside the boxes, not pointers to them: a pointer stored is a
	// write barrier while the collector runs, paid per lease.
	box      outBox
	seenBox  outBox
	isJudged atomic.Bool
	isSeen   atomic.Bool
	flagged  atomic.Bool
	// proven: the tier's own Quiesce (or TryQuiesce) answered that its
	// access ended.
	proven atomic.Bool
	// claimed is taken by the first of the tier's completion callback, the
	// backend's wait running out and Close: only that one judges the part.
	claimed atomic.Bool
	role    role
	listed  bool
	// tee, for a fetch part of a teed tier (tee.go), holds the buffers its
	// units' rows are landed in besides: what they are promoted from.
	tee *tee

	tier int
	a    *attempt
	ext  contract.CacheExtent // exactly the units this tier was handed
	// failure, when set at submission, is why the part is Failed without
	// asking its attempt (a contract violation).
	failure string
	// While a completion callback is awaited, the part is listed in its
	// backend's watch list (watch.go), with the list's epoch then.
	epoch      uint64
	prev, next *part
}

type outBox struct{ o contract.Outcome }

// judged is the stack's judgement of the tier's answer, nil until made.
func (p *part) judged() *outBox {
	if p.isJudged.Load() {
		return &p.box
	}
	return nil
}

// seen is the tier's answer as the stack first read it, nil if none was.
func (p *part) seen() *outBox {
	if p.isSeen.Load() {
		return &p.seenBox
	}
	return nil
}

// at is the attempt the tier answered with (nil: none).
func (p *part) at() contract.Attempt { return p.self[0] }

func (p *part) claim() bool { return p.claimed.CompareAndSwap(false, true) }

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
//
// Its chain moves by steps, each started by one part's answer — from the
// tier's completion callback on the tier's own goroutine (contract.Notifier:
// no goroutine of the stack's, no hand-off), or from a goroutine of the
// stack's for a tier without one, or from the backend's timer when the
// tier's answer does not come within the wait — and each step submits the
// next part before it ends, so steps never overlap: the chain's state
// (served) needs no lock.
//
// An attempt is reused (its backend's pool) once a lease it served is over
// for the stack: the common lease — one tier served every unit, nothing
// promoted — then costs the stack no allocation of its size (SPEC §5's tier
// figure: a local hit allocated it, and its bytes drove the collector).
// What its caller holds is a handle, made per lease, that names the
// attempt and its generation; ref says which generation the attempt serves
// now and who still holds it (refBits). A late call through an old handle
// — its caller's, or a tier calling back late — finds another generation
// and touches nothing.
type attempt struct {
	// ref is the generation the attempt serves (its bits above refBits) and
	// how many hold it (below): the chain's first step, until it has
	// ended; the caller's proof, until confirm decided the attempt may be
	// reused; and every call through the handle, while it runs. Whoever
	// drops the count to 0 starts the next generation and pools the
	// attempt; once it is 0 nobody can hold it again (acquire).
	ref atomic.Uint64
	b   *Backend // set once, when made: an attempt is reused by its own backend only
	chain
}

// chain is what one generation of an attempt holds: all of it is reset
// before the attempt is reused. Its size is paid per lease where the
// attempt is not reused (SPEC §5's tier figure): its small fields sit
// together.
type chain struct {
	// h is the handle of the generation: where the outcome is latched and
	// the proof marked.
	h *handle
	// submitted: no part will ever be added, every promotion is counted,
	// and the stack is done with the extent its caller handed (a
	// publication: every tier's answer judged).
	submitted signal
	ready     signal // the outcome is latched

	parts []*part
	// The room parts lists the first part in: a lease one tier serves
	// allocates no list of its own.
	partsBuf [1]*part
	mu       sync.Mutex // guards parts and cancelled; the signals' lock
	// pending counts the parts still to answer: a publication's, or a
	// fetch's promotions. The part whose answer makes it 0 ends the step.
	pending   atomic.Int32
	op        op
	cancelled bool // a RequestCancel came; no part is added without being asked too

	// The first part, inline: a lease one tier serves allocates no part.
	first part

	served   contract.NameSet // fetch: the union of what the parts served so far
	rejected error            // publish: the tiers that refused it, joined (nil: none)
}

// handle is what Fetch and Publish return: one lease's hold on an attempt
// of the stack's, for as long as its caller keeps it. What Poll reads —
// the outcome, the proof — is the handle's own, so that it outlives the
// attempt's reuse; every other call reaches the attempt only while it
// serves the handle's generation (acquire), and once it does not, answers
// from what the handle kept: the lease was proven and confirmed, its
// outcome latched, and it will not change.
//
// The handle is also the callback the first tier is given
// (notify.Callee): a tier that calls it after the attempt was reused
// reaches nothing.
type handle struct {
	a   *attempt
	gen uint64 // the generation of a this handle holds
	// proven is set when Quiesce (or TryQuiesce) answers that every tier's
	// access ended; the first Poll after it runs confirm, once.
	proven atomic.Bool
	// confirmed is confirmNone, then confirmRunning for the one Poll that
	// runs confirm, then confirmDone; a Poll that finds it running waits
	// for its end (a few polls of the tiers, which never block). A word,
	// not a mutex: confirm runs once a lease, and its lock was a lock a
	// lease (SPEC §5's tier figure).
	confirmed atomic.Uint32
	out       atomic.Pointer[outBox] // &box once the outcome is latched (confirm may replace it)
	box       outBox
	// notify is the caller's callbacks, the handle's own: registering one
	// never reaches the attempt.
	notify notify.List
}

var (
	_ contract.Cancellable  = (*handle)(nil)
	_ contract.Notifier     = (*handle)(nil)
	_ notify.CalleeNotifier = (*handle)(nil)
	_ notify.Callee         = (*handle)(nil)
	_ notify.Callee         = (*part)(nil)
)

// The bits of attempt.ref: the holders' count below refBits, the
// generation above. 40 bits of generation wrap after 2^40 reuses of one
// attempt, far beyond a handle's life; 24 bits count the calls that hold
// it at once.
const (
	refBits = 24
	refMask = 1<<refBits - 1
)

// newAttempt returns a handle on an attempt for one lease, reused from the
// backend's pool when one is there. The attempt starts held twice: by its
// chain's first step (stepDone drops it) and by its caller's proof
// (confirm drops it, for an attempt that may be reused).
func newAttempt(b *Backend, o op) (*handle, *attempt) {
	a, _ := b.reuse.Get().(*attempt)
	if a == nil {
		a = &attempt{b: b}
	}
	gen := a.ref.Add(2) >> refBits
	h := &handle{a: a, gen: gen}
	a.h, a.op = h, o
	// The extent the caller handed is kept once, in the first part (every
	// first submission is handed all of it): submit writes it there.
	a.parts = a.partsBuf[:0]
	return h, a
}

// acquire holds a for a call through a handle of generation gen: false
// when a serves another generation now, or none (it is being reused).
func (a *attempt) acquire(gen uint64) bool {
	for {
		s := a.ref.Load()
		if s>>refBits != gen || s&refMask == 0 {
			return false
		}
		if a.ref.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

// release drops a hold; the last one starts the attempt's next generation
// and pools it. Nobody can acquire it from the moment the count is 0, so
// the reset races with nothing.
func (a *attempt) release() {
	s := a.ref.Add(^uint64(0))
	if s&refMask != 0 {
		return
	}
	a.ref.Store((s>>refBits + 1) << refBits)
	a.chain = chain{}
	a.b.reuse.Put(a)
}

// stepDone ends a part's step, the last touch of the chain's for it: the
// first part's drops the attempt's hold for its chain.
func (a *attempt) stepDone(p *part) {
	if p == &a.first {
		a.release()
	}
}

// reusable says, at the end of confirm, whether the attempt may be reused
// once nobody holds it: the lease was one fetch part, of a tier that tees
// nothing, that served every unit it was handed and answered the same at
// every poll, and its outcome is that answer — so that an old handle's
// AccessorsOf can still say who served each unit, from its outcome alone —
// and no tier above that one publishes: nothing was to be promoted, so the
// chain's last touch was that part's step (a promotion's goroutine would
// go on touching the attempt after the proof, unheld). Any other lease's
// attempt is left to the collector.
func (a *attempt) reusable(h *handle) bool {
	box := h.out.Load()
	if box != &h.box || a.op != opFetch || len(a.parts) != 1 {
		return false
	}
	p := &a.first
	d, ok := box.o.(contract.Delivered)
	return ok && p.role == roleFetch && p.tee == nil && p.failure == "" && !p.flagged.Load() && d.Served.Len() == p.ext.Len() &&
		len(a.b.uppers[p.tier]) == 0
}

// Poll returns the stack's outcome, or nil while a tier is still answering.
// It answers the same for ever, except when a tier changed its own answer
// after the stack answered Delivered and before the stack's proof: the
// first Poll after the proof answers Failed naming that tier (confirm), so
// that the caller's re-poll at the proof sees a changed answer and trusts
// nothing.
func (h *handle) Poll() contract.Outcome {
	if h.proven.Load() {
		h.confirm()
	}
	if box := h.out.Load(); box != nil {
		return box.o
	}
	return nil
}

// Notify calls f, once, when Poll has an outcome (at once if it has).
func (h *handle) Notify(f func()) { h.notify.Add(f) }

// NotifyCallee is Notify(c.Notified) without making the method value
// (notify.CalleeNotifier): a stack over this one registers that way.
func (h *handle) NotifyCallee(c notify.Callee) { h.notify.AddCallee(c) }

// Notified is the callback the first tier is given (notify.Callee): it
// judges the first part's answer while the attempt serves this handle's
// lease, and changes nothing once it serves another.
func (h *handle) Notified() {
	if !h.a.acquire(h.gen) {
		return // a tier calling back after the lease was over and its attempt reused
	}
	h.a.first.Notified()
	h.a.release()
}

// RequestCancel asks, best effort, every tier already handed units to stop,
// and keeps the stack from handing units to any other tier (a promotion
// included): a chain cut this way is Delivered with what was served, or
// Cancelled (a local cancel) when nothing was. It never blocks (a tier's
// RequestCancel must not either), answers contract.CancelRequested every
// time, and forwards only the first request.
func (h *handle) RequestCancel() (contract.CancelDisposition, error) {
	if !h.a.acquire(h.gen) {
		return contract.CancelRequested, nil // proven over: nothing left to stop
	}
	defer h.a.release()
	return h.a.requestCancel()
}

func (a *attempt) requestCancel() (contract.CancelDisposition, error) {
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
	if p.at() == nil {
		return
	}
	if err := guard(func() error { _, err := contract.RequestCancel(p.at()); return err }); err != nil {
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

func (a *attempt) doneSubmitting() { a.submitted.fire(&a.mu) }

// latch sets the stack's outcome, once.
func (a *attempt) latch(o contract.Outcome) {
	h := a.h
	if h.out.Load() != nil {
		return
	}
	h.box.o = o
	h.out.Store(&h.box)
	a.ready.fire(&a.mu)
	h.notify.Fire()
}

// submit hands ext to tier i in role r. A rejection returns no part (nothing
// escaped) and an error naming the tier. A submission that escaped without
// an attempt, or with an attempt and an error, or that panicked, breaks the
// contract: the part is added, Failed, and (without an attempt) never
// provable.
//
// unseen says the attempt has not been returned to its caller yet (Fetch's
// and Publish's own submissions): nothing else can reach its parts, so p is
// added without the lock (a local hit's submission takes none of its own).
//
// t, when set, is a teed fetch's buffers (tee.go): the tier is asked through
// FetchTee, and the buffers go back to their tier if it rejects the fetch.
func (a *attempt) submit(i int, r role, ext contract.CacheExtent, unseen bool, t *tee) (*part, error) {
	c := &a.b.stats[i]
	at, err := call(a.b.tiers[i], r, ext, t)
	var p *part
	if len(a.parts) == 0 { // the attempt's own room; only this step submits
		p = &a.first
	} else {
		p = new(part)
	}
	p.a, p.tier, p.role, p.ext, p.self[0], p.tee = a, i, r, ext, at, t
	switch {
	case at == nil && errors.Is(err, contract.ErrSubmissionRejected):
		c.rejected.Add(1)
		if t != nil {
			t.unreserve() // rejected: the tier touched none of them
		}
		return nil, fmt.Errorf("%s rejected the %s: %w", a.b.name(i), r, err)
	case at == nil:
		c.violations.Add(1)
		p.failure = fmt.Sprintf("%s broke the contract: its %s returned no attempt and %v, which is no rejection (its access can never be proven)", a.b.name(i), r, err)
	case err != nil:
		c.violations.Add(1)
		p.failure = fmt.Sprintf("%s broke the contract: its %s returned an attempt and the error %v", a.b.name(i), r, err)
	}
	if unseen {
		a.parts = append(a.parts, p)
	} else {
		a.add(p)
	}
	return p, nil
}

// call submits ext to t in role r, a panic turned into an error (with no
// attempt: it escaped, or not, unknown).
func call(t Tier, r role, ext contract.CacheExtent, tt *tee) (at contract.Attempt, err error) {
	defer func() {
		if p := recover(); p != nil {
			at, err = nil, fmt.Errorf("panicked: %v", p)
		}
	}()
	if tt != nil {
		defer tt.seal() // a tier that asks for a buffer later gets none
		return t.Fetcher.(TeeFetcher).FetchTee(ext, nil, tt.buffer)
	}
	if r == roleFetch {
		return t.Fetcher.Fetch(ext, nil)
	}
	return t.Publisher.Publish(ext)
}

// watch arranges for p's answer to reach answered exactly once, and holds
// the backend's Close until it has: at once for a part that failed at its
// submission; through the tier's completion callback, bounded by the
// backend's wait (the watch list's timer), when its attempt has one;
// otherwise from a goroutine of the stack's that waits for it. It may run
// the chain's next steps before it returns: its caller touches nothing of
// the chain after it.
//
// A part awaiting its callback is held by the watch list alone (counted
// there until done, which Close waits for): listing it and ending it are
// one lock each, not a lock and a WaitGroup count each — on the local-hit
// path every such shared word is written from both cores, the owner's
// submission and the tier's goroutine (SPEC §5's tier figure).
func (a *attempt) watch(p *part) {
	n, notifies := p.at().(contract.Notifier)
	switch {
	case p.failure != "":
		a.b.wg.Add(1)
		p.claimed.Store(true)
		a.answered(p, a.verdict(p, nil, nil))
		a.stepDone(p)
		a.b.wg.Done()
	case !notifies:
		a.b.wg.Add(1)
		go func() {
			defer a.b.wg.Done()
			a.answered(p, a.judge(p))
			a.stepDone(p)
		}()
	case !a.b.watching.add(p):
		a.b.wg.Add(1)
		if p.claim() {
			a.answered(p, a.verdict(p, nil, errors.New("the backend closed first")))
		}
		a.stepDone(p)
		a.b.wg.Done()
	default:
		// The first part's callback is its handle's: a tier that calls it
		// after the lease's attempt was reused reaches nothing.
		var c notify.Callee = p
		if p == &a.first {
			c = a.h
		}
		if err := register(n, c); err != nil && p.claim() {
			a.answered(p, a.verdict(p, nil, fmt.Errorf("its Notify %v", err)))
			a.b.watching.done(p)
			a.stepDone(p)
		}
	}
}

// register gives n p's completion callback, a panic turned into an error:
// as p itself when n takes a notify.Callee (a local hit over backend/mem),
// for p.Notified, bound here, would be an allocation a lease — the part is
// inline in the attempt, so a callback bound once per attempt would be too.
func register(n contract.Notifier, c notify.Callee) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	if cn, ok := n.(notify.CalleeNotifier); ok {
		cn.NotifyCallee(c)
		return nil
	}
	n.Notify(c.Notified)
	return nil
}

// Notified is a part's completion callback (notify.Callee): the tier's
// answer is known.
func (p *part) Notified() {
	if !p.claim() {
		return // the wait ran out first, or the backend closed
	}
	a := p.a
	o := poll(p.at())
	var err error
	if o == nil {
		err = errors.New("it was said to be known, but Poll answered none")
	}
	a.answered(p, a.verdict(p, o, err))
	a.b.watching.done(p) // unlisted only now: one lock, not two
	a.stepDone(p)
}

// expire judges a part the watch list claimed as having given no outcome
// (the wait ran out, the backend closed): the list claims it under its
// lock, while the part is still listed, so that its callback cannot have
// ended the step and let the attempt be reused first.
func (a *attempt) expire(p *part, why string) {
	a.answered(p, a.verdict(p, nil, errors.New(why)))
	a.b.watching.done(p)
	a.stepDone(p)
}

// answered records p's judged answer, counts it, and takes the chain's next
// step: a fetch part's answer moves the fetch on, a publication's the
// publication, a promotion's the count of promotions left.
func (a *attempt) answered(p *part, o contract.Outcome) {
	p.box.o = o
	p.isJudged.Store(true)
	a.count(p, o)
	switch p.role {
	case roleFetch:
		a.fetched(p, o)
	case rolePublish:
		if a.pending.Add(-1) == 0 {
			a.published()
			// Only now, every answer judged: judging reads the extent the
			// caller handed (the names each tier was handed), and the caller
			// may rebuild it in place once the stack's proof is given (rule
			// 6). Done at submission, a tier that proved its access before
			// answering let the proof through while its answer was still
			// being judged (a data race the tiered model suite found, the
			// engine rebuilding the extent for its next lease).
			a.doneSubmitting()
		}
	case rolePromote:
		if a.pending.Add(-1) == 0 {
			a.doneSubmitting()
		}
	}
}

// fetched takes a fetch's step after its part p answered o: the next tier
// for the units still unserved, or the outcome, then the promotions.
func (a *attempt) fetched(p *part, o contract.Outcome) {
	d, ok := o.(contract.Delivered)
	if !ok {
		a.latch(o) // a tier's failure or cancel: never a miss of its units
		a.doneSubmitting()
		return
	}
	a.served = union(a.served, d.Served)
	var left []contract.Unit
	next := -1
	if d.Served.Len() < p.ext.Len() { // every name served was one p was handed (verdict)
		left = without(p.ext.Units(), d.Served)
		next = a.b.nextFetcher(p.tier + 1)
	}
	switch {
	case next < 0 && len(a.parts) == 1:
		// The one part, judged on this step: verdict has just polled it
		// twice, so a recheck would only poll it a third time.
		a.latch(contract.Delivered{Served: a.served})
	case next < 0:
		a.latch(a.recheck(contract.Delivered{Served: a.served}))
	case a.cancelRequested():
		if a.served.Len() == 0 {
			a.latch(contract.Cancelled{ByPeer: false})
		} else { // completion won for these; the rest were touched by no tier
			a.latch(a.recheck(contract.Delivered{Served: a.served}))
		}
	case a.b.isClosed():
		a.latch(contract.Failed{Reason: fmt.Sprintf("tiers: the backend closed before %s was asked", a.b.name(next))})
	default:
		ext, err := contract.NewCacheExtent([]byte(a.first.ext.Name()), left, a.first.ext.IsLast())
		if err != nil { // a subset of a valid extent is valid: a bug here
			panic(fmt.Sprintf("tiers: the units left of a valid extent are refused: %v", err))
		}
		var t *tee
		if to := a.b.teeTo[next]; to >= 0 {
			t = newTee(a.b, to, ext.Len())
		}
		q, err := a.submit(next, roleFetch, ext, false, t)
		if q == nil {
			a.latch(contract.Failed{Reason: err.Error()}) // a rejection is the tier's failure, never a miss
			break
		}
		a.watch(q)
		return
	}
	if _, ok := a.h.out.Load().o.(contract.Delivered); ok && a.promotes() {
		a.promote()
		return
	}
	a.doneSubmitting()
}

// promotes reports whether some fetch part of the attempt was answered by a
// tier with a publisher above it: only then can there be anything to
// promote. Only the chain's own step calls it, once the chain has ended, so
// it reads the parts without the lock (no step adds one any more).
func (a *attempt) promotes() bool {
	for _, p := range a.parts {
		if p.role == roleFetch && len(a.b.uppers[p.tier]) > 0 {
			return true
		}
	}
	return false
}

// published latches a write-through publication's outcome once every tier
// answered: Failed naming the first tier that rejected or failed, else
// Cancelled, else Delivered with the units some tier accepted.
func (a *attempt) published() {
	if a.rejected != nil {
		a.latch(contract.Failed{Reason: a.rejected.Error()})
		return
	}
	var accepted []contract.Name
	var cancelled contract.Outcome
	for _, p := range a.snapshot() {
		switch x := p.judged().o.(type) {
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

// judge waits (within the backend's wait) for p's outcome and judges it: the
// path of a tier whose attempts have no completion callback.
func (a *attempt) judge(p *part) contract.Outcome {
	o, err := a.await(p)
	return a.verdict(p, o, err)
}

// verdict judges p's answer o (err: none came): the tier's Delivered when it
// names only units p was handed and reads the same on a second poll;
// otherwise Failed with a reason naming the tier (a Cancelled stays
// Cancelled). It counts the tier's breaches.
func (a *attempt) verdict(p *part, o contract.Outcome, err error) contract.Outcome {
	c := &a.b.stats[p.tier]
	if p.failure != "" {
		return contract.Failed{Reason: p.failure}
	}
	if err != nil {
		c.noOutcome.Add(1)
		a.cancelPart(p)
		return contract.Failed{Reason: fmt.Sprintf("%s gave its %s no outcome: %v", a.b.name(p.tier), p.role, err)}
	}
	p.seenBox.o = o
	p.isSeen.Store(true)
	if o2, changed := a.changed(p); changed {
		return contract.Failed{Reason: fmt.Sprintf("%s broke the contract: its %s answered %v, then %v", a.b.name(p.tier), p.role, o, o2)}
	}
	switch x := o.(type) {
	case contract.Delivered:
		// Every name served is one handed exactly when as many handed
		// names are served (a set; an extent's names are distinct).
		handed := 0
		for i := range p.ext.Len() {
			if x.Served.Has(p.ext.Unit(i).Name) {
				handed++
			}
		}
		if handed == x.Served.Len() {
			return x
		}
		for n := range x.Served.All() {
			if !p.handed(n) {
				c.violations.Add(1)
				return contract.Failed{Reason: fmt.Sprintf("%s broke the contract: its %s served %x…, a unit it was never handed", a.b.name(p.tier), p.role, n[:4])}
			}
		}
		return x
	case contract.Failed:
		return contract.Failed{Reason: fmt.Sprintf("%s failed its %s: %s", a.b.name(p.tier), p.role, x.Reason)}
	case contract.Cancelled:
		return x
	}
	c.violations.Add(1)
	return contract.Failed{Reason: fmt.Sprintf("%s broke the contract: its %s answered %v, which is no outcome", a.b.name(p.tier), p.role, o)}
}

// await waits for p's outcome, within the backend's wait, through the
// tier's Settle.
func (a *attempt) await(p *part) (contract.Outcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), a.b.wait)
	defer cancel()
	settle := a.b.tiers[p.tier].Publisher.Settle
	if p.role == roleFetch {
		settle = a.b.tiers[p.tier].Fetcher.Settle
	}
	unwatch := closeCancels(a.b.closed, cancel)
	defer unwatch()
	if err := guard(func() error { return settle(ctx, p.self[:]) }); err != nil {
		if a.b.isClosed() {
			return nil, errors.New("the backend closed first")
		}
		return nil, err
	}
	if o := poll(p.at()); o != nil {
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
	a.mu.Lock() // Poll never blocks: polling under the lock copies nothing
	defer a.mu.Unlock()
	for _, p := range a.parts {
		if p.role == rolePromote {
			continue
		}
		if now, changed := a.changed(p); changed {
			return contract.Failed{Reason: fmt.Sprintf("%s broke the contract: its %s answered %v, then %v", a.b.name(p.tier), p.role, p.seen().o, now)}
		}
	}
	return o
}

// changed polls p's tier again and reports whether its answer differs from
// the one the stack read first; the first time it does, the change is
// counted against that tier. A part whose answer was never read has none to
// change.
func (a *attempt) changed(p *part) (contract.Outcome, bool) {
	seen := p.seen()
	if seen == nil || p.at() == nil || p.flagged.Load() {
		return nil, false
	}
	now := poll(p.at())
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
//
// The attempt is held for it until it ends (the caller's proof's hold, see
// newAttempt), and it drops that hold when the attempt may be reused.
func (h *handle) confirm() {
	if h.confirmed.Load() == confirmDone {
		return
	}
	if !h.confirmed.CompareAndSwap(confirmNone, confirmRunning) {
		for h.confirmed.Load() != confirmDone {
			runtime.Gosched()
		}
		return
	}
	defer h.confirmed.Store(confirmDone)
	a := h.a
	// proven is set only once submitted fired (Quiesce and TryQuiesce wait
	// for it first): the parts are final, and read without the lock.
	for _, p := range a.parts {
		if p.role == rolePromote {
			continue
		}
		seen := p.seen()
		now, changed := a.changed(p)
		if !changed {
			continue
		}
		if box := h.out.Load(); box != nil && isDelivered(box.o) {
			h.out.Store(&outBox{contract.Failed{Reason: fmt.Sprintf("%s broke the contract: its %s answered %v, then %v (after the stack answered, before its proof)",
				a.b.name(p.tier), p.role, seen.o, now)}})
		}
	}
	if a.reusable(h) {
		a.release()
	}
}

// The states of attempt.confirmed.
const (
	confirmNone uint32 = iota
	confirmRunning
	confirmDone
)

// promotion is the units one lower tier's fetch part served that go up into
// the tiers above it that publish.
type promotion struct {
	from   *part
	units  []contract.Unit
	uppers []int
	// served is what from served, for a teed part (from.tee): its
	// promotion adopts their buffers, and its units may be none (then it
	// only gives the buffers back, once from's access is proven).
	served contract.NameSet
}

// promotions lists what a delivered fetch promotes (nothing when promotion
// is off, or every unit was served by a tier with no publisher above it).
func (a *attempt) promotions() []promotion {
	var out []promotion
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.parts {
		box := p.judged()
		if p.role != roleFetch || box == nil {
			continue
		}
		d, _ := box.o.(contract.Delivered)
		if p.tee != nil { // its buffers go up, or back, whatever it served
			out = append(out, promotion{from: p, served: d.Served})
			continue
		}
		if d.Served.Len() == 0 {
			continue
		}
		uppers := a.b.uppers[p.tier]
		if len(uppers) == 0 {
			continue
		}
		var units []contract.Unit
		for _, u := range p.ext.All() {
			if d.Served.Has(u.Name) {
				units = append(units, u)
			}
		}
		out = append(out, promotion{from: p, units: units, uppers: uppers})
	}
	return out
}

// promote publishes each lower tier's served units into every upper tier
// that publishes, once the lower tier proved its own access over (a tier
// still writing its rows would otherwise promote torn bytes). A proof the
// lower tier gives at once (TryQuiesce) promotes on this step; one that
// needs waiting (within the backend's wait: otherwise the promotion is
// skipped, and counted) is waited for on a goroutine of the stack's. The
// attempt is done submitting once every promotion is submitted and counted.
func (a *attempt) promote() {
	ps := a.promotions()
	for _, pr := range ps {
		if !a.provenNow(pr.from) {
			a.b.wg.Add(1)
			go func() {
				defer a.b.wg.Done()
				a.submitPromotions(ps, true)
			}()
			return
		}
	}
	a.submitPromotions(ps, false)
}

// provenNow answers, without blocking, whether p's tier proved p's access
// over: proven before, or its TryQuiesce says so now.
func (a *attempt) provenNow(p *part) bool {
	if p.proven.Load() {
		return true
	}
	pr := a.b.provers[p.tier].probe[roleFetch]
	if pr == nil || p.at() == nil {
		return false
	}
	var acc contract.Access
	if err := guard(func() error { var err error; acc, err = pr.TryQuiesce(p.self[:]); return err }); err != nil || acc != contract.AccessEnded {
		return false
	}
	p.proven.Store(true)
	return true
}

// submitPromotions submits the promotions whose lower tier's access is
// proven (asking, when wait is set, within the backend's wait) and watches
// their answers; the attempt is done submitting when the last is counted.
func (a *attempt) submitPromotions(ps []promotion, wait bool) {
	var parts []*part
	for _, pr := range ps {
		skip := a.cancelRequested() || a.b.isClosed() || (wait && !a.proveOne(pr.from)) || (!wait && !pr.from.proven.Load())
		if t := pr.from.tee; t != nil {
			a.adoptTee(pr, t, skip)
			continue
		}
		var ext contract.CacheExtent
		if !skip {
			var err error
			if ext, err = contract.NewCacheExtent([]byte(a.first.ext.Name()), pr.units, a.first.ext.IsLast()); err != nil {
				panic(fmt.Sprintf("tiers: the served units of a valid extent are refused: %v", err))
			}
		}
		for _, j := range pr.uppers {
			if skip || a.cancelRequested() {
				a.b.stats[j].promoteSkipped.Add(uint64(len(pr.units)))
				continue
			}
			if q, _ := a.submit(j, rolePromote, ext, false, nil); q != nil { // a rejection is counted; nothing escaped
				parts = append(parts, q)
			}
		}
	}
	if len(parts) == 0 {
		a.doneSubmitting()
		return
	}
	a.pending.Store(int32(len(parts)))
	for _, q := range parts {
		a.watch(q)
	}
}

// adoptTee promotes a teed part's served units (tee.go): the upper tier
// adopts the buffers the lower tier landed them in — only once the lower
// tier's access is proven over, so that the buffers are whole and nobody
// writes them again — and takes the others back. Skipped, the buffers go
// back too when the lower tier's access is proven, and are left to the
// garbage collector when it is not (the tier may still write them).
func (a *attempt) adoptTee(pr promotion, t *tee, skip bool) {
	c := &a.b.stats[t.to]
	if skip {
		c.promoteSkipped.Add(uint64(pr.served.Len()))
		if pr.from.proven.Load() {
			t.unreserve()
		}
		return
	}
	c.promoted.Add(t.adopt(pr.from.ext, pr.served))
}

// proveOne asks p's tier, within the backend's wait, whether p's access
// ended.
func (a *attempt) proveOne(p *part) bool {
	if p.proven.Load() {
		return true
	}
	if p.at() == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.b.wait)
	defer cancel()
	unwatch := closeCancels(a.b.closed, cancel)
	defer unwatch()
	var ok bool
	err := guard(func() error {
		var err error
		ok, err = a.b.tiers[p.tier].Fetcher.Quiesce(ctx, p.self[:])
		return err
	})
	if ok && err == nil {
		p.proven.Store(true)
	}
	return ok && err == nil
}

// count adds what the tier answered for p to its counters.
func (a *attempt) count(p *part, o contract.Outcome) {
	c := &a.b.stats[p.tier]
	n := uint64(p.ext.Len())
	d, delivered := o.(contract.Delivered)
	switch p.role {
	case roleFetch:
		// Counters every core adds to: a part whose every unit was served
		// (every local hit) is one add, not two, and an add of nothing is
		// skipped, not paid for.
		hit := uint64(d.Served.Len())
		switch {
		case delivered && hit == n:
			c.allHit.Add(n)
		case delivered:
			c.handed.Add(n)
			if hit > 0 {
				c.hits.Add(hit)
			}
			c.misses.Add(n - hit)
		default:
			c.handed.Add(n)
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
func (h *handle) AccessorsOf(n contract.Name) []string {
	if !h.a.acquire(h.gen) {
		// The attempt was reused: the lease was the first fetching tier's
		// alone, and that tier served every unit it was handed (reusable).
		if d, ok := h.out.Load().o.(contract.Delivered); ok && d.Served.Has(n) {
			return []string{fmt.Sprintf("%s %s: served", h.a.b.name(h.a.b.nextFetcher(0)), roleFetch)}
		}
		return nil
	}
	defer h.a.release()
	return h.a.accessorsOf(n)
}

func (a *attempt) accessorsOf(n contract.Name) []string {
	var out []string
	for _, p := range a.snapshot() {
		if !p.handed(n) {
			continue
		}
		what := "no outcome yet"
		if box := p.judged(); box != nil {
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

// union is the names of both sets; s itself when t adds none (the first
// part's answer: no copy).
func union(s, t contract.NameSet) contract.NameSet {
	if t.Len() == 0 {
		return s
	}
	if s.Len() == 0 {
		return t
	}
	names := make([]contract.Name, 0, s.Len()+t.Len())
	for n := range s.All() {
		names = append(names, n)
	}
	for n := range t.All() {
		names = append(names, n)
	}
	return contract.NewNameSet(names...)
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
