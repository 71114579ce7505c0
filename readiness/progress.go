package readiness

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/staging"
)

// Progress runs one round: it takes in every piece of evidence that has become
// observable — slot grants, outcomes, copy completions, Quiesce answers, expired
// deadlines and drains, device loss — drives the affected leases through the
// table, and hands the round's new work to the background goroutines. It never
// blocks. It returns the number of state changes made.
//
// A round in which nothing happened costs the same however many leases are in
// flight: each source of evidence is checked in O(what it delivered + 1).
func (e *Engine) Progress() int {
	e.roundMoves = 0
	e.now = e.cfg.Clock.Now().UnixNano()
	e.checkHealth()
	e.takeGrants()
	e.takeOutcomes()
	e.pollCopies()
	e.takeAnswers()
	e.expire()
	e.flush()
	e.stopIfDrained()
	return e.roundMoves
}

func (e *Engine) checkHealth() {
	if e.lost || e.cfg.Health == nil || mutant("ignore-device-loss") {
		return
	}
	lost, reason := e.cfg.Health.Lost(e.cfg.Device)
	if !lost {
		return
	}
	e.lost = true
	e.cfg.Logger.Error("kvready: device lost; its in-flight copies can never be proven finished",
		slog.Int("device", e.cfg.Device), slog.String("reason", reason))
	for id := range e.leases {
		l := &e.leases[id]
		if l.flags&inUse != 0 && l.copies > 0 {
			l.body.reason = fmt.Sprintf("device %d lost with a copy in flight: %s", e.cfg.Device, reason)
			_ = e.fire(uint32(id), fsm.DeviceLost)
		}
	}
}

// takeGrants moves every newly granted lease on: a fetch is submitted at once; a
// publish first copies its rows from the device into staging.
func (e *Engine) takeGrants() {
	e.grants = e.alloc.TakeGrants(e.grants[:0])
	for _, t := range e.grants {
		id, ok := e.byTicket[t]
		if !ok {
			continue
		}
		delete(e.byTicket, t)
		if err := e.fire(id, fsm.SlotsGranted); err != nil {
			continue
		}
		e.place(id)
		if e.leases[id].kind == Publish {
			e.copyIn(id)
		} else {
			_ = e.fire(id, fsm.CopiesLanded) // a fetch has nothing to copy before submission
		}
		e.submitIfStaged(id)
	}
}

// place writes the granted slots' addresses into the lease's view.
func (e *Engine) place(id uint32) {
	l := &e.leases[id]
	b := l.body
	var err error
	e.runs, err = e.alloc.Runs(l.ticket, e.runs[:0])
	e.mustNot(err, "runs", id)
	row := 0
	for _, r := range e.runs {
		part := e.parts.Part(r.Group)
		for k := range r.Count {
			b.addrs[row] = part.SlotAddress(r.First + k)
			row++
		}
	}
}

// slot returns the staging bytes of row i of a placed lease.
func (e *Engine) slot(b *body, i int) []byte {
	g := b.rows[i].Group
	part := e.parts.Part(g)
	s := (b.addrs[i] - part.Address) / part.SlotBytes
	return e.slabs[g][s*part.SlotBytes : (s+1)*part.SlotBytes]
}

func (e *Engine) submitIfStaged(id uint32) {
	if l := &e.leases[id]; l.flags&inUse != 0 && l.m.State == fsm.Staged {
		e.submit(id)
	}
}

// submit exposes a staged lease to its backend.
func (e *Engine) submit(id uint32) {
	l := &e.leases[id]
	b := l.body
	if err := e.builder.Build(&b.extent, &b.view, e.parts, e.cfg.ExtentName, b.isLast); err != nil {
		// Nothing was exposed, so the slots are safe; the request failed.
		b.reason = "extent refused: " + err.Error()
		l.outcome = Failed
		e.stats.Outcomes.Failed++
		_ = e.fire(id, fsm.Withdrawn)
		return
	}
	attempt, err, panicked := e.callSubmit(l.kind, b.extent)
	switch {
	case panicked == "" && attempt == nil && errors.Is(err, contract.ErrSubmissionRejected):
		// Nothing escaped: access is proven by the rejection itself.
		b.reason = "submission rejected: " + err.Error()
		l.outcome = Failed
		e.stats.Outcomes.Rejected++
		_ = e.fire(id, fsm.Rejected)
		_ = e.fire(id, fsm.AccessProven)
		_ = e.fire(id, fsm.CopiesLanded)
	case attempt == nil:
		// Something may have escaped and there is no attempt to quiesce: the
		// memory can never be proven free.
		if panicked != "" {
			b.reason = panicked
		} else {
			b.reason = fmt.Sprintf("contract violation: %v (%v)", errNoAttempt, err)
		}
		b.exposeAt = e.now
		l.outcome = Failed
		e.stats.Outcomes.Violations++
		_ = e.fire(id, fsm.Submitted)
		_ = e.fire(id, fsm.ContractViolation)
		_ = e.fire(id, fsm.AccessUnproven)
	default:
		b.exposeAt = e.now
		l.attempt = attempt
		_ = e.fire(id, fsm.Submitted)
		if b.deadline <= e.now {
			// The deadline passed before submission and its timer was dropped
			// then (only a requested lease times out): arm it again, so this
			// round's expire fails the lease with a timeout.
			e.deadlines.push(timer{at: b.deadline, id: id, gen: l.gen})
		}
		e.toWatch = append(e.toWatch, watchItem{ref: ref{id: id, gen: l.gen}, attempt: attempt})
	}
}

func (e *Engine) callSubmit(k Kind, extent contract.CacheExtent) (a contract.Attempt, err error, panicked string) {
	defer func() {
		if r := recover(); r != nil {
			a, err, panicked = nil, nil, fmt.Sprintf("backend panicked in %v: %v", k, r)
		}
	}()
	if k == Publish {
		a, err = e.cfg.Publisher.Publish(extent)
	} else {
		a, err = e.cfg.Fetcher.Fetch(extent, nil)
	}
	return a, err, ""
}

// takeOutcomes latches the outcomes the watcher observed.
func (e *Engine) takeOutcomes() {
	if e.cfg.Inline {
		e.pollInline()
	}
	e.outcomes = e.watch.out.take(e.outcomes[:0])
	for i := range e.outcomes {
		e.latchOutcome(e.outcomes[i])
	}
	clear(e.outcomes)
}

func (e *Engine) latchOutcome(m outcomeMsg) {
	if !e.live(m.ref) {
		e.stats.StaleEvidence++
		return
	}
	id := m.id
	l := &e.leases[id]
	if l.m.State != fsm.Requested {
		return // a deadline already latched a failure; the late outcome changes nothing
	}
	b := l.body
	b.latched = m.outcome
	ev := e.classify(l, m)
	switch ev {
	case fsm.OutcomeServed:
		l.outcome = Served
		e.stats.Outcomes.Served++
	case fsm.OutcomePartial:
		l.outcome = Partial
		e.stats.Outcomes.Partial++
	case fsm.OutcomeMissed:
		l.outcome = Missed
		e.stats.Outcomes.Missed++
	case fsm.OutcomeFailed:
		l.outcome = Failed
		e.stats.Outcomes.Failed++
	case fsm.OutcomeCancelled:
		l.outcome = Failed
		e.stats.Outcomes.Cancelled++
	case fsm.ContractViolation:
		l.outcome = Failed
		e.stats.Outcomes.Violations++
		e.cfg.Logger.Warn("kvready: backend contract violation", slog.String("lease", Handle{id: id, gen: l.gen}.String()), slog.String("reason", b.reason))
	}
	_ = e.fire(id, ev)
	if mutant("fence-on-outcome") {
		_ = e.fire(id, fsm.AccessProven)
	}
	e.afterOutcome(id)
}

// classify turns an observed outcome into the table's event, checking it
// against what was asked: a served name not asked for is a violation, never
// data.
func (e *Engine) classify(l *lease, m outcomeMsg) fsm.Event {
	b := l.body
	if m.panic != "" {
		b.reason = m.panic
		return fsm.ContractViolation
	}
	switch o := m.outcome.(type) {
	case contract.Delivered:
		masks, err := staging.ServedMasksInto(b.masks, &b.view, o.Served)
		if err != nil && mutant("accept-unasked") {
			masks, err = staging.ServedMasksInto(b.masks, &b.view, contract.NameSet{})
			if err == nil {
				for i := range masks {
					for k := range masks[i] {
						masks[i][k] = true
					}
				}
				b.masks = masks
				return fsm.OutcomeServed
			}
		}
		if err != nil {
			b.reason = "contract violation: " + err.Error()
			return fsm.ContractViolation
		}
		b.masks = masks
		switch n := o.Served.Len(); {
		case n == 0 && mutant("miss-as-failure"):
			return fsm.OutcomeFailed
		case n == 0:
			return fsm.OutcomeMissed
		case n == b.view.Rows():
			return fsm.OutcomeServed
		default:
			return fsm.OutcomePartial
		}
	case contract.Failed:
		b.reason = "failed: " + o.Reason
		return fsm.OutcomeFailed
	case contract.Cancelled:
		b.reason = o.String()
		return fsm.OutcomeCancelled
	default:
		b.reason = fmt.Sprintf("contract violation: outcome of unknown type %T", m.outcome)
		return fsm.ContractViolation
	}
}

// afterOutcome queues a fetch's copies of its served rows to the device (or,
// with nothing to copy, reports them landed) and asks for the access proof.
func (e *Engine) afterOutcome(id uint32) {
	l := &e.leases[id]
	if l.flags&inUse == 0 {
		return
	}
	switch l.m.State {
	case fsm.Served, fsm.Partial:
		if l.kind == Fetch {
			e.copyOut(id)
		} else {
			_ = e.fire(id, fsm.CopiesLanded)
		}
	case fsm.Missed, fsm.Failed:
		_ = e.fire(id, fsm.CopiesLanded)
	}
	e.needQuiesce(id)
}

// copyIn queues a publish's device-to-staging copies.
func (e *Engine) copyIn(id uint32) {
	l := &e.leases[id]
	b := l.body
	for i := range b.rows {
		if err := e.cfg.Stream.CopyDtoH(e.slot(b, i), b.rows[i].Device); err != nil {
			e.copyFailed(id, err)
			return
		}
	}
	e.record(id)
}

// copyOut queues a fetch's staging-to-device copies of its served rows.
func (e *Engine) copyOut(id uint32) {
	l := &e.leases[id]
	b := l.body
	row := 0
	queued := 0
	for _, m := range b.masks {
		for _, served := range m {
			if served {
				if err := e.cfg.Stream.CopyHtoD(b.rows[row].Device, e.slot(b, row)); err != nil {
					e.copyFailed(id, err)
					return
				}
				queued++
			}
			row++
		}
	}
	if queued == 0 || mutant("skip-copy-wait") {
		_ = e.fire(id, fsm.CopiesLanded)
		return
	}
	e.record(id)
}

// record puts an event after the lease's copies; its completion is the
// evidence that every one of them landed (a stream completes in order).
func (e *Engine) record(id uint32) {
	l := &e.leases[id]
	ev, err := e.cfg.Stream.Record()
	if err == nil {
		err = e.copies.Push(ev, ref{id: id, gen: l.gen})
	}
	if err != nil {
		e.copyFailed(id, err)
		return
	}
	l.copies++
}

func (e *Engine) copyFailed(id uint32, err error) {
	l := &e.leases[id]
	l.body.reason = "local copy failed without a completion record: " + err.Error()
	if errors.Is(err, gpu.ErrDeviceLost) {
		_ = e.fire(id, fsm.DeviceLost)
	} else {
		_ = e.fire(id, fsm.CopyFailed)
	}
}

func (e *Engine) pollCopies() {
	if e.copies.Len() == 0 {
		return
	}
	if _, err := e.copies.Poll(e.cfg.Stream, e.onCopy); err != nil {
		e.cfg.Logger.Error("kvready: querying a copy event failed; the copies behind it stay unproven", slog.Any("error", err))
	}
}

// copyDone is called for every copy event that completed or failed.
func (e *Engine) copyDone(r ref, st gpu.Status) {
	if !e.live(r) {
		e.stats.StaleEvidence++
		return
	}
	l := &e.leases[r.id]
	l.copies--
	if l.m.State == fsm.Quarantined {
		return
	}
	if st != gpu.Complete {
		l.body.reason = "local copy failed on the device"
		_ = e.fire(r.id, fsm.CopyFailed)
		return
	}
	if l.copies == 0 {
		_ = e.fire(r.id, fsm.CopiesLanded)
		e.submitIfStaged(r.id)
	}
}

// needQuiesce adds an exposed lease to this round's Quiesce batch.
func (e *Engine) needQuiesce(id uint32) {
	l := &e.leases[id]
	if l.attempt == nil || l.flags&quiescing != 0 || l.flags&inUse == 0 {
		return
	}
	switch l.m.State {
	case fsm.AccessFenced, fsm.Quarantined, fsm.Released:
		return
	}
	l.flags |= quiescing
	// Pick the method value only for the lease's own kind: the other backend
	// may be nil (a publish-only or fetch-only engine).
	var b **batch
	var fn quiesceFunc
	if l.kind == Publish {
		b, fn = &e.qPublish, e.cfg.Publisher.Quiesce
	} else {
		b, fn = &e.qFetch, e.cfg.Fetcher.Quiesce
	}
	if *b == nil {
		*b = e.quiet.newBatch(fn)
	}
	(*b).refs = append((*b).refs, ref{id: id, gen: l.gen})
	(*b).attempts = append((*b).attempts, l.attempt)
	e.quiescing++
}

// takeAnswers applies the Quiesce answers the workers produced.
func (e *Engine) takeAnswers() {
	e.answers = e.quiet.answers.take(e.answers[:0])
	for _, b := range e.answers {
		for i, r := range b.refs {
			e.quiescing--
			if !e.live(r) {
				e.stats.StaleEvidence++
				continue
			}
			l := &e.leases[r.id]
			l.flags &^= quiescing
			if b.proven[i] || mutant("trust-quiesce-false") {
				e.checkStable(r.id)
				_ = e.fire(r.id, fsm.AccessProven)
			} else {
				l.body.reason = b.reasons[i]
				_ = e.fire(r.id, fsm.AccessUnproven)
			}
		}
		e.quiet.recycle(b)
	}
	clear(e.answers)
}

// checkStable polls once more, after access is proven, to catch a backend that
// changed its answer: a contract violation, reported, never trusted.
func (e *Engine) checkStable(id uint32) {
	l := &e.leases[id]
	first := l.body.latched
	if first == nil || mutant("no-stability-check") {
		return
	}
	now, panicked := safePoll(l.attempt)
	if panicked == "" && sameOutcome(first, now) {
		return
	}
	e.stats.Outcomes.Violations++
	reason := fmt.Sprintf("contract violation: outcome changed from %v to %v", first, now)
	if panicked != "" {
		reason = "contract violation: " + panicked
	}
	e.cfg.Logger.Warn("kvready: backend contract violation", slog.String("lease", Handle{id: id, gen: l.gen}.String()), slog.String("reason", reason))
	if err := e.fire(id, fsm.ContractViolation); err == nil {
		l.outcome = Failed
		l.body.reason = reason
	}
}

func sameOutcome(a, b contract.Outcome) bool {
	switch x := a.(type) {
	case contract.Delivered:
		y, ok := b.(contract.Delivered)
		if !ok || x.Served.Len() != y.Served.Len() {
			return false
		}
		for n := range x.Served.All() {
			if !y.Served.Has(n) {
				return false
			}
		}
		return true
	case contract.Failed:
		y, ok := b.(contract.Failed)
		return ok && x == y
	case contract.Cancelled:
		y, ok := b.(contract.Cancelled)
		return ok && x == y
	}
	return false
}

// expire fires due deadlines and drain periods.
func (e *Engine) expire() {
	for {
		t, ok := e.deadlines.popExpired(e.now)
		if !ok {
			break
		}
		r := ref{id: t.id, gen: t.gen}
		if !e.live(r) || e.leases[t.id].m.State != fsm.Requested {
			continue
		}
		l := &e.leases[t.id]
		l.body.reason = "deadline passed with no outcome: timeout"
		l.outcome = Failed
		e.stats.Outcomes.Timeouts++
		_ = e.fire(t.id, fsm.Deadline)
		if mutant("deadline-fences") {
			_ = e.fire(t.id, fsm.AccessProven)
		}
		e.afterOutcome(t.id)
		e.armDrain(t.id)
	}
	for {
		t, ok := e.drains.popExpired(e.now)
		if !ok {
			break
		}
		r := ref{id: t.id, gen: t.gen}
		if !e.live(r) {
			continue
		}
		l := &e.leases[t.id]
		switch l.m.State {
		case fsm.AccessFenced, fsm.Quarantined, fsm.Released:
			continue
		}
		from := l.m.State
		l.body.reason = fmt.Sprintf("drain grace period (%v) expired in %v with access unproven", e.cfg.DrainGrace, from)
		if err := e.fire(t.id, fsm.DrainExpired); err != nil {
			continue
		}
		e.stats.Containments++
		c := Containment{Lease: Handle{id: t.id, gen: l.gen}, Slots: len(l.body.rows), Reason: l.body.reason}
		e.cfg.Logger.Error("kvready: containment: backend access never proven; memory held out of circulation for ever",
			slog.String("lease", c.Lease.String()), slog.String("reason", c.Reason))
		if e.cfg.OnContainment != nil {
			e.cfg.OnContainment(c)
		}
	}
}

func (e *Engine) armDrain(id uint32) {
	l := &e.leases[id]
	if l.flags&draining != 0 {
		return
	}
	l.flags |= draining
	e.drains.push(timer{at: e.now + int64(e.cfg.DrainGrace), id: id, gen: l.gen})
}

// flush hands this round's submissions to the watcher and its Quiesce batches
// to the workers.
func (e *Engine) flush() {
	if e.cfg.Inline {
		e.inline = append(e.inline, e.toWatch...)
		clear(e.toWatch)
		e.toWatch = e.toWatch[:0]
		for _, b := range []**batch{&e.qFetch, &e.qPublish} {
			if *b != nil {
				e.quiet.answer(*b)
				e.quiet.answers.put(*b)
				*b = nil
			}
		}
		return
	}
	if len(e.toWatch) > 0 {
		e.watch.in.put(e.toWatch...)
		clear(e.toWatch)
		e.toWatch = e.toWatch[:0]
	}
	for _, b := range []**batch{&e.qFetch, &e.qPublish} {
		if *b != nil {
			e.quiet.work.put(*b)
			*b = nil
		}
	}
}

// pollInline polls every pending attempt on the owner goroutine (Config.Inline).
func (e *Engine) pollInline() {
	for i := 0; i < len(e.inline); {
		it := e.inline[i]
		if !e.live(it.ref) || e.leases[it.id].m.State != fsm.Requested {
			// Nothing left to learn from it: the lease moved on or was retired.
			copy(e.inline[i:], e.inline[i+1:])
			e.inline[len(e.inline)-1] = watchItem{}
			e.inline = e.inline[:len(e.inline)-1]
			continue
		}
		o, p := safePoll(it.attempt)
		if o == nil && p == "" {
			i++
			continue
		}
		e.outcomes = append(e.outcomes, outcomeMsg{ref: it.ref, outcome: o, panic: p})
		copy(e.inline[i:], e.inline[i+1:]) // keep submission order: rounds stay deterministic
		e.inline[len(e.inline)-1] = watchItem{}
		e.inline = e.inline[:len(e.inline)-1]
	}
	for i := range e.outcomes {
		e.latchOutcome(e.outcomes[i])
	}
	clear(e.outcomes)
	e.outcomes = e.outcomes[:0]
}
