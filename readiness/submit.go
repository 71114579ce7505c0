package readiness

import (
	"errors"
	"fmt"

	"github.com/kvready/kvready/contract"
)

// The runner's calls into the backends: submissions, the first poll of a new
// attempt, cancel requests — every one of them guarded, so that what a backend
// does wrong is counted against it (SPEC §4 rule 15) — and the report of what
// they answered, through the core's one door.

type submitResult struct {
	h      Handle
	kind   Kind
	a      contract.Attempt
	err    error
	panics string // the submission panicked: why
	// The new attempt's first Poll, asked under the submission's guard:
	// what it answered, or why it panicked.
	first      contract.Outcome
	pollPanics string
}

// answer polls an attempt on the owner (Poll never blocks, by contract) and
// reports what it answered.
func (e *Engine) answer(h Handle, k Kind, a contract.Attempt) (answered bool) {
	o, p := safePoll(a)
	switch {
	case p != "":
		e.sides[k-1].faults.panics.Add(1)
		e.step(&Evidence{What: PollPanicked, Lease: h, Reason: p})
		return true
	case o != nil:
		e.step(&Evidence{What: PollAnswered, Lease: h, Outcome: o})
		return true
	}
	return false
}

// submit hands one staged lease to its backend, and polls the attempt it
// returned once (Poll never blocks, by contract: one already answered — a
// backend serving from a local cache — is taken in at once), writing what
// both answered into r (zero). One guard covers both calls: a panic is the
// submission's until it returned, the Poll's after. Written in place, not
// returned: returned, the result went to the stack in narrow stores that the
// append after the call read back whole, which the processor cannot forward
// (once a lease).
func (e *Engine) submit(s *Submission, r *submitResult) {
	r.h, r.kind = s.Lease, s.Kind
	polling := false
	defer func() {
		if p := recover(); p != nil {
			e.sides[s.Kind-1].faults.panics.Add(1)
			if polling {
				r.first, r.pollPanics = nil, fmt.Sprintf("backend panicked in Poll: %v", p)
				return
			}
			r.a, r.err, r.panics = nil, nil, fmt.Sprintf("backend panicked in %v: %v", s.Kind, p)
		}
	}()
	if s.Kind == Publish {
		r.a, r.err = e.cfg.Publisher.Publish(*s.Extent)
	} else {
		r.a, r.err = e.cfg.Fetcher.Fetch(*s.Extent, nil)
	}
	if r.a != nil {
		polling = true
		r.first = r.a.Poll()
	}
}

// requestCancel asks a lease's attempt, once, to stop. It never blocks, by
// contract; a panic is recorded as the request's error.
func (e *Engine) requestCancel(h Handle) (ev Evidence) {
	ev = Evidence{What: CancelReplied, Lease: h}
	s, ok := e.attempts.get(uint32(h.Index()))
	if !ok {
		ev.Reason = "no attempt kept for the lease"
		return ev
	}
	defer func() {
		if p := recover(); p != nil {
			e.sides[s.kind-1].faults.panics.Add(1)
			ev.Disposition, ev.Reason = 0, fmt.Sprintf("backend panicked in RequestCancel: %v", p)
		}
	}()
	d, err := contract.RequestCancel(s.a)
	if err != nil {
		ev.Reason = "RequestCancel: " + err.Error()
		return ev
	}
	ev.Disposition = d
	return ev
}

// reportAnswers tells the core what the round's submissions, copies and cancel
// requests answered, and raises the containment signals. It runs after every
// Ready a round performs, most of them with nothing of the kind: what is empty
// is passed by without clearing it.
func (e *Engine) reportAnswers() {
	if len(e.results) > 0 {
		e.reportSubmissions()
	}
	if len(e.cp.refused)+len(e.cp.failed)+len(e.replies)+len(e.contain)+len(e.recovered) > 0 {
		e.reportOthers()
	}
}

// reportSubmissions reports what the round's submissions answered.
func (e *Engine) reportSubmissions() {
	for i := range e.results {
		r := &e.results[i] // not copied: submit wrote it a moment ago
		switch {
		case r.panics != "":
			e.step(&Evidence{What: SubmitEscaped, Lease: r.h, Reason: r.panics})
		case r.a != nil:
			e.accept(r)
		case errors.Is(r.err, contract.ErrSubmissionRejected):
			e.step(&Evidence{What: SubmitRejected, Lease: r.h, Reason: r.err.Error()})
		case r.err != nil:
			e.step(&Evidence{What: SubmitEscaped, Lease: r.h, Reason: r.err.Error()})
		default:
			e.step(&Evidence{What: SubmitEscaped, Lease: r.h, Reason: "the backend returned neither an attempt nor an error"})
		}
	}
	clear(e.results)
	e.results = e.results[:0]
}

// reportOthers reports what the round's copies and cancel requests answered,
// and raises the containment and recovery signals.
func (e *Engine) reportOthers() {
	for _, r := range e.cp.refused {
		e.step(&Evidence{What: CopyRefusedByDevice, Lease: r.h, Row: r.row, Reason: r.err.Error()})
	}
	clear(e.cp.refused)
	e.cp.refused = e.cp.refused[:0]
	for _, f := range e.cp.failed {
		e.step(&Evidence{What: CopyLost, Lease: f.h, Layer: f.layer, Reason: f.err.Error()})
	}
	clear(e.cp.failed)
	e.cp.failed = e.cp.failed[:0]
	for i := range e.replies {
		e.step(&e.replies[i])
	}
	clear(e.replies)
	e.replies = e.replies[:0]
	for _, c := range e.contain {
		if e.cfg.OnContainment != nil {
			e.cfg.OnContainment(c)
		}
	}
	clear(e.contain)
	e.contain = e.contain[:0]
	for _, h := range e.recovered {
		if e.cfg.OnRecovery != nil {
			e.cfg.OnRecovery(h)
		}
	}
	e.recovered = e.recovered[:0]
}

// accept keeps a new attempt and reports it, with what its first Poll
// answered (submit): one already answered is taken in at once and never
// watched. The rest notify the engine when they can (contract.Notifier), or
// are watched.
func (e *Engine) accept(r *submitResult) {
	sd := e.sides[r.kind-1]
	o, p := r.first, r.pollPanics
	answered := o != nil || p != ""
	var n contract.Notifier
	notifies := false
	if !answered { // an answered attempt is never notified nor watched
		n, notifies = r.a.(contract.Notifier)
	}
	id := uint32(r.h.Index())
	if !e.attempts.keep(id, r.kind, r.a, false) {
		// Attempts are dropped when their lease is fenced, and a record
		// carries a new lease only after that.
		e.core.Halt(fmt.Errorf("the attempt table still held an attempt at %v's id when its submission returned one: a record carried a new lease before its old attempt was forgotten", r.h))
		return
	}
	var nt *notice
	if notifies {
		nt = e.attempts.newNotice(r.h, e.mail, &sd.faults)
		e.attempts.notified(id, nt)
	}
	e.step(&Evidence{What: SubmitAccepted, Lease: r.h})
	if r.err != nil {
		e.step(&Evidence{What: PollPanicked, Lease: r.h, Reason: fmt.Sprintf("the submission returned both an attempt and an error (%v)", r.err)})
	}
	switch {
	case p != "": // counted against the backend where it was caught
		e.step(&Evidence{What: PollPanicked, Lease: r.h, Reason: p})
	case o != nil:
		e.step(&Evidence{What: PollAnswered, Lease: r.h, Outcome: o})
	case notifies && notify(n, nt):
	default:
		e.attempts.rewatch(id)
		e.watch.kick()
	}
}
