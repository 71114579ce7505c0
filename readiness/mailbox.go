package readiness

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvready/kvready/contract"
)

// letter is one piece of evidence the engine's goroutines (or a backend's
// notification) made observable, for the owner's next round: evidence to step
// into the core; with poll set, a sighting of an attempt that answered —
// with the answer the watcher saw in ev.Outcome, or none from a completion,
// in which case the owner polls it itself; with done set, a Quiesce batch fully answered, for
// the owner to recycle.
type letter struct {
	ev   Evidence
	poll bool
	// sighted: a sighting the watcher claimed, whose ev.Lease names only
	// the lease's id (the watcher knows no generation); the owner names the
	// lease when it takes the letter in, or drops it (attemptTable.resolve).
	sighted bool
	done    *batch
	// seq is the answering batch's sequence number; 0 for an outcome the
	// watcher or a notification made observable. A round takes letters in
	// the order (seq, lease): never in the order goroutines happened to run.
	seq uint64
}

// letterOrder is the order a round takes its letters in: outcomes first, by
// lease, then the Quiesce answers batch by batch, each batch's in the order
// its worker wrote them.
func letterOrder(a, b letter) int {
	switch {
	case a.seq != b.seq:
		return cmp.Compare(a.seq, b.seq)
	case a.seq != 0:
		return 0 // one batch: keep the worker's order (the sort is stable)
	}
	return cmp.Compare(a.ev.Lease.Uint64(), b.ev.Lease.Uint64())
}

// mailbox is the one queue between the engine's background — the Quiesce
// workers, the watcher, backends' notifications — and the owner. Producers
// never block; the owner takes everything that arrived at once. It is bounded
// by construction, whatever a backend does (docs/engine.md): an attempt the
// engine holds puts at most one completion letter — repeats are dropped,
// and a forgotten attempt puts none — the watcher at most one sighting per
// attempt it was told to watch, and each lease has at most one Quiesce call
// outstanding (its answer: two letters), one batch's "done" letter at most per
// lease. So a mailbox never holds more than mailboxPerLease letters per lease;
// put reports a breach of that bound — a bug in kvready — instead of growing
// past it.
// mailboxPerLease bounds the letters one lease can have in the mailbox at
// once: one completion or one sighting of its attempt (never both: a sighting
// is asked for only after the completion was taken), the two letters of its
// one outstanding Quiesce call's answer, and that call's batch's "done"
// letter (a batch holds at least one lease) — four, with one to spare.
const mailboxPerLease = 5

type mailbox struct {
	mu      sync.Mutex
	letters []letter
	limit   int
	n       atomic.Int64 // len(letters), readable without the lock
	over    atomic.Bool  // a put was refused: the bound was broken
	wake    chan<- struct{}
	onWake  func() // Config.OnWake, or nil
	// handoffs counts the engine's goroutine hand-offs (Stats.Handoffs):
	// every letter put, every wake-up from another goroutine, every batch
	// handed to a worker, every kick of the watcher.
	handoffs atomic.Uint64
}

func newMailbox(limit int, wake chan<- struct{}, onWake func()) *mailbox {
	return &mailbox{limit: limit, wake: wake, onWake: onWake}
}

// put appends letters and wakes the owner. It never blocks.
func (m *mailbox) put(ls ...letter) {
	if len(ls) == 0 {
		return
	}
	m.mu.Lock()
	if len(m.letters)+len(ls) > m.limit {
		m.mu.Unlock()
		m.over.Store(true)
		m.wakeOwner()
		return
	}
	m.letters = append(m.letters, ls...)
	m.n.Store(int64(len(m.letters)))
	m.mu.Unlock()
	m.wakeOwner()
}

// wakeOwner wakes the owner from another goroutine: a hand-off.
func (m *mailbox) wakeOwner() {
	m.handoffs.Add(1)
	m.ring()
}

// ring signals Wake and calls OnWake.
func (m *mailbox) ring() {
	signal(m.wake)
	if m.onWake != nil {
		m.onWake()
	}
}

// take appends every letter to dst, empties the mailbox and returns dst.
func (m *mailbox) take(dst []letter) []letter {
	if m.n.Load() == 0 {
		return dst
	}
	m.mu.Lock()
	dst = append(dst, m.letters...)
	clear(m.letters) // drop references (outcomes) the owner now holds
	m.letters = m.letters[:0]
	m.n.Store(0)
	m.mu.Unlock()
	return dst
}

// signal sends on a capacity-1 channel without blocking: a wake-up that is
// already pending is enough.
func signal(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// The owner's side of the mailbox: what the background made observable,
// taken in on the owner goroutine, through the core's one door.

func (e *Engine) checkHealth() {
	if e.core.Lost() || e.cfg.Health == nil {
		return
	}
	if lost, reason := e.cfg.Health.Lost(e.cfg.Device); lost {
		e.step(&Evidence{What: DeviceGone, Reason: fmt.Sprintf("device %d: %s", e.cfg.Device, reason)})
	}
}

// step reports one piece of evidence through the core's door, counting what
// the core refused (the core itself changes nothing on a refusal). The
// evidence is read, never kept: passed by pointer, it is not copied on the
// way in (88 bytes, about ten times a lease).
func (e *Engine) step(ev *Evidence) {
	err := e.core.step(ev)
	switch {
	case err == nil:
	case errors.Is(err, ErrStaleHandle):
		e.staleEvidence++
	case errors.Is(err, ErrHalted):
	default:
		e.refusedEvidence++
	}
}

// takeMail reports what the background and the backends' notifications made
// observable, in the order it arrived.
func (e *Engine) takeMail() {
	if e.mail.over.Load() {
		e.core.Halt(errors.New("the evidence mailbox outgrew its bound: more letters than leases in flight can produce"))
		return
	}
	e.letters = e.mail.take(e.letters[:0])
	if len(e.letters) > 0 {
		var rewatched bool
		e.letters, rewatched = e.attempts.resolve(e.letters, e.core.handle)
		if rewatched {
			// The watcher skipped the id's new attempt while the dropped
			// sighting was out: a sweep from now on polls it.
			e.resweep = true
			e.watch.kick()
		}
	}
	if len(e.letters) > 1 {
		slices.SortStableFunc(e.letters, letterOrder)
	}
	for i := range e.letters {
		switch l := &e.letters[i]; {
		case l.done != nil:
			l.done.pool.recycle(l.done)
		case l.poll:
			e.sighted(l.ev.Lease, l.ev.Outcome)
		default:
			e.step(&l.ev)
		}
	}
	clear(e.letters)
}

// sighted takes in an attempt that a completion or the watcher says has
// answered. What the watcher's Poll saw is the engine's first sight of the
// answer and is stepped as it was seen: polling again here would let a
// backend that changed its answer in between have its second answer taken
// for its first (a miss reported as a failure); a later change is caught by
// the poll after the access proof. A completion carries no answer: the
// evidence is what Poll answers here, on the owner, and a completion Poll
// does not bear out is the backend's fault, the attempt watched from then on
// so that its outcome still arrives. An attempt already forgotten (fenced)
// is not asked again, nor one of a lease the handle no longer names (a
// completion that fired before its lease was fenced and retired).
func (e *Engine) sighted(h Handle, seen contract.Outcome) {
	if !e.core.carries(h) {
		return
	}
	s, ok := e.attempts.get(uint32(h.Index()))
	if !ok {
		return
	}
	if seen != nil {
		e.step(&Evidence{What: PollAnswered, Lease: h, Outcome: seen})
		return
	}
	if !e.answer(h, s.kind, s.a) {
		e.sides[s.kind-1].faults.early.Add(1)
		e.attempts.rewatch(uint32(h.Index()))
		e.watch.kick()
	}
}
