package readiness

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/kvready/kvready/contract"
)

// side is one backend as the runner drives it: how its access proofs are
// asked, and what it did wrong. Proofs are asked on the owner goroutine when
// the backend can answer without blocking (contract.QuiesceProber); only what
// it cannot answer now goes to its own Quiesce workers, never shared with the
// other backend, so that a backend whose Quiesce blocks holds up no proof but
// its own.
type side struct {
	kind    Kind
	quiesce quiesceFunc
	prober  contract.QuiesceProber // nil: every proof goes to the workers
	workers *quiescer
	round   *batch // this round's proofs, not yet asked
	faults  faultCounts
}

// faultCounts are a backend's faults, counted from any goroutine.
type faultCounts struct {
	panics, repeated, early atomic.Uint64
}

// add adds what was counted here to the core's counts (its Violations).
func (f *faultCounts) add(to *BackendFaults) {
	to.Panics += f.panics.Load()
	to.RepeatedCompletions += f.repeated.Load()
	to.EarlyCompletions += f.early.Load()
}

func newSide(k Kind, quiesce quiesceFunc, backend any, workers int, wall time.Duration, mail *mailbox) *side {
	s := &side{kind: k, quiesce: quiesce}
	s.prober, _ = backend.(contract.QuiesceProber)
	s.workers = newQuiescer(workers, wall, mail, &s.faults)
	return s
}

// try asks the backend's non-blocking probe. A panic or an error proves
// nothing, as Quiesce's would; so does an answer that is none of the three.
func (s *side) try(attempts []contract.Attempt) (a contract.Access, reason string) {
	defer func() {
		if r := recover(); r != nil {
			s.faults.panics.Add(1)
			a, reason = contract.AccessUnproven, fmt.Sprintf("backend panicked in TryQuiesce: %v", r)
		}
	}()
	a, err := s.prober.TryQuiesce(attempts)
	switch {
	case err != nil:
		return contract.AccessUnproven, "TryQuiesce error: " + err.Error()
	case a == contract.AccessUnproven:
		return a, "TryQuiesce answered unproven: the end of access cannot be established yet"
	case a != contract.AccessEnded && a != contract.AccessUnknown:
		return contract.AccessUnproven, fmt.Sprintf("TryQuiesce answered %v, which is no answer", a)
	}
	return a, ""
}

// notice is the completion callback the runner hands a contract.Notifier
// attempt. The engine takes an attempt's first completion and drops the rest,
// counting them against the backend: a storm of callbacks costs one letter.
// Once the attempt is forgotten (its access proven over) a first late
// completion is no fault — the outcome may well have come after the proof —
// and is dropped too, so that only attempts the engine still holds can put a
// letter in the mailbox: its bound holds by construction.
type notice struct {
	h      Handle
	mail   *mailbox
	faults *faultCounts
	state  atomic.Uint32
}

const (
	noticeArmed   = iota // waiting for the completion
	noticeFired          // completed; the letter was sent
	noticeRetired        // forgotten before it fired
	noticeLate           // forgotten, and fired since
)

// fire is the callback. It never blocks.
func (n *notice) fire() {
	for {
		switch st := n.state.Load(); st {
		case noticeArmed:
			if n.state.CompareAndSwap(st, noticeFired) {
				n.mail.put(letter{ev: Evidence{Lease: n.h}, poll: true})
				return
			}
		case noticeRetired:
			if n.state.CompareAndSwap(st, noticeLate) {
				return
			}
		default:
			n.faults.repeated.Add(1)
			return
		}
	}
}

// retire makes later completions drop. Owner only.
func (n *notice) retire() {
	for {
		switch st := n.state.Load(); st {
		case noticeArmed:
			if n.state.CompareAndSwap(st, noticeRetired) {
				return
			}
		case noticeFired:
			if n.state.CompareAndSwap(st, noticeLate) {
				return
			}
		default:
			return
		}
	}
}

// notify hands the attempt its completion callback. A panic in Notify
// leaves the attempt without one: the caller watches it instead.
func notify(n contract.Notifier, nt *notice) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			nt.faults.panics.Add(1)
			ok = false
		}
	}()
	n.Notify(nt.fire)
	return true
}
