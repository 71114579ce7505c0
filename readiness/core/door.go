package core

import (
	"fmt"
	"log/slog"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/staging"
)

// This file is the one door through which evidence enters the core, like
// etcd raft's Step: a piece of evidence is classified (pure: it reads the
// lease and writes only scratch), the table answers, and on a refusal the door
// returns with nothing touched. Only an accepted move or latch takes what the
// evidence carries (a reason, by_peer, the served masks, the first answer),
// settles the lease, and performs the effects the table declares (effects.go).

// verdict is what classification made of a piece of evidence: the event the
// table is asked about, and what the lease takes if the table accepts it.
type verdict struct {
	event fsm.Event
	// reason is stored as the lease's reason when an accepted move latches a
	// result, or on any acceptance when always is set.
	reason    string
	setReason bool
	always    bool
	byPeer    bool   // a Cancelled outcome's by_peer, taken with the result
	unproven  string // why access is not proven (AccessUnproven)
	// first is a first answer, latched on acceptance; masks says the scratch
	// served masks go with it.
	first  contract.Outcome
	masks  bool
	row    int // the refused row (DropRow)
	cancel bool
	disp   contract.CancelDisposition
	// cancelErr is a failed cancel request's error.
	cancelErr string
	// proofDone: a Quiesce call answered; unproved: it proved nothing.
	proofDone, unproved bool
	violation           bool
	copied              bool // the lease's copies are no longer in flight
}

// Step reports one piece of evidence. Evidence about a retired lease is
// refused with ErrStaleHandle, malformed evidence with ErrInvalidEvidence, and
// evidence the lifecycle refuses in the lease's state with the declared
// *fsm.RefusedError; none of them changes anything — no state, latch, reason,
// by_peer flag or counter. After accepted evidence the deadlines it made due
// fire, and the grants it made possible are taken.
func (c *Core) Step(ev Evidence) error {
	if c.halted != nil {
		return c.Err()
	}
	if ev.What == DeviceGone {
		if c.lost {
			return fmt.Errorf("%w: the device was already reported lost", ErrDeviceLost)
		}
		c.deviceLost(ev.Reason)
		c.pump()
		return nil
	}
	id, err := c.lookup(ev.Lease)
	if err != nil {
		return err
	}
	v, ok, err := c.classify(id, &ev)
	if err != nil || !ok {
		return err
	}
	if err := c.apply(id, v); err != nil {
		return err
	}
	c.expire()
	c.pump()
	return nil
}

// classify turns evidence into the verdict the table is asked about. It reads
// the lease and writes only the core's scratch masks; ok is false for evidence
// that observed nothing (a pending Poll, an answer the lease already has).
func (c *Core) classify(id uint32, ev *Evidence) (v verdict, ok bool, err error) {
	l := &c.leases[id]
	b := l.body
	onResult := func(e fsm.Event, reason string) verdict { return verdict{event: e, reason: reason, setReason: true} }
	always := func(e fsm.Event, reason string) verdict {
		return verdict{event: e, reason: reason, setReason: true, always: true}
	}
	switch ev.What {
	case SubmitAccepted:
		return verdict{event: fsm.Submitted}, true, nil
	case SubmitRejected:
		return onResult(fsm.Rejected, "submission rejected: "+ev.Reason), true, nil
	case SubmitEscaped:
		return onResult(fsm.SubmitEscaped, "submission escaped without an attempt: "+ev.Reason), true, nil
	case PollAnswered:
		return c.classifyAnswer(l, ev.Outcome)
	case PollPanicked:
		v = always(fsm.ContractViolation, "contract violation: "+ev.Reason)
		v.violation = true
		return v, true, nil
	case QuiesceTrue:
		return verdict{event: fsm.AccessProven, proofDone: true}, true, nil
	case QuiesceUnproven:
		return verdict{event: fsm.AccessUnproven, unproven: ev.Reason, proofDone: true, unproved: true}, true, nil
	case CopiesDone:
		return verdict{event: fsm.CopiesLanded, copied: true}, true, nil
	case CopyRefusedByDevice:
		if ev.Row < 0 || ev.Row >= len(b.rows) {
			return v, false, fmt.Errorf("%w: copy refusal of row %d of %v, a lease of %d rows", ErrInvalidEvidence, ev.Row, ev.Lease, len(b.rows))
		}
		v = always(fsm.CopyRefused, fmt.Sprintf("copy of row %d refused by the device: %s", ev.Row, ev.Reason))
		v.row = ev.Row
		return v, true, nil
	case CopyLost:
		return always(fsm.CopyFailed, "local copy failed without a completion record: "+ev.Reason), true, nil
	case CancelReplied:
		v = verdict{event: fsm.CancelAnswered, cancel: true, disp: ev.Disposition}
		switch {
		case ev.Reason != "":
			v.disp, v.cancelErr = 0, ev.Reason
		case !ev.Disposition.Valid():
			v.disp, v.cancelErr = 0, fmt.Sprintf("the backend answered disposition %d, which is neither requested nor unsupported", uint8(ev.Disposition))
		}
		return v, true, nil
	}
	return v, false, fmt.Errorf("%w: %v about %v: want one of the kinds core.Observed lists", ErrInvalidEvidence, ev.What, ev.Lease)
}

// classifyAnswer turns a Poll answer into the table's event. The first answer
// is classified against what was asked — names never asked for, or an answer
// that is no outcome, are a contract violation, never data; a later answer
// that differs from the first (a re-poll after the access proof; nil
// included) is a contract violation.
func (c *Core) classifyAnswer(l *lease, o contract.Outcome) (verdict, bool, error) {
	b := l.body
	violation := func(reason string) (verdict, bool, error) {
		return verdict{event: fsm.ContractViolation, reason: "contract violation: " + reason, setReason: true, always: true, violation: true}, true, nil
	}
	if b.first != nil {
		if o != nil && sameOutcome(b.first, o) {
			return verdict{}, false, nil
		}
		return violation(fmt.Sprintf("the outcome changed from %v to %v", b.first, describeOutcome(o)))
	}
	switch o := o.(type) {
	case nil:
		return verdict{}, false, nil // pending
	case contract.Delivered:
		var err error
		c.masks, err = staging.ServedMasksInto(c.masks, &b.view, o.Served)
		if err != nil {
			return violation(err.Error())
		}
		v := verdict{first: o, masks: true}
		switch n := o.Served.Len(); {
		case n == 0:
			v.event = fsm.OutcomeMissed
		case n == b.view.Rows():
			v.event = fsm.OutcomeServed
		default:
			v.event = fsm.OutcomePartial
		}
		return v, true, nil
	case contract.Failed:
		return verdict{event: fsm.OutcomeFailed, reason: "failed: " + o.Reason, setReason: true, first: o}, true, nil
	case contract.Cancelled:
		return verdict{event: fsm.OutcomeCancelled, reason: o.String(), setReason: true, byPeer: o.ByPeer, first: o}, true, nil
	}
	return violation(fmt.Sprintf("outcome of unknown type %T", o))
}

func describeOutcome(o contract.Outcome) string {
	if o == nil {
		return "pending"
	}
	return o.String()
}

// sameOutcome compares two answers whole: a changed served set is a changed
// answer even when both are Delivered.
func sameOutcome(a, b contract.Outcome) bool {
	switch x := a.(type) {
	case contract.Delivered:
		y, ok := b.(contract.Delivered)
		return ok && x.Served.Equal(y.Served)
	case contract.Failed:
		y, ok := b.(contract.Failed)
		return ok && x == y
	case contract.Cancelled:
		y, ok := b.(contract.Cancelled)
		return ok && x == y
	}
	return false
}

// apply asks the table about v's event in the lease's state. A refusal
// returns the declared error and touches nothing. An accepted latch takes what
// v carries and performs the latch's declared effects; an accepted move takes
// it, settles the lease and performs the effects of every state entered.
func (c *Core) apply(id uint32, v verdict) error {
	l := &c.leases[id]
	en := c.table.Lookup(l.m.State, v.event)
	if en.Kind == fsm.Refuse {
		return c.table.Refusal(l.m.State, v.event)
	}
	c.take(id, &v, en)
	step, err := c.table.Fire(&l.m, v.event)
	if err != nil {
		// Lookup and Fire read the same table: a refusal here is a broken
		// table, not evidence.
		c.halt("the table refused a pair it had just accepted: "+err.Error(), id)
		return c.Err()
	}
	if step.Kind == fsm.Latch {
		c.perform(id, step, step.Effects, &v)
		if l.inUse {
			c.rearm(id)
		}
	} else {
		c.settle(id, step, &v)
	}
	for len(c.follow) > 0 && c.halted == nil {
		f := c.follow[0]
		c.follow = append(c.follow[:0], c.follow[1:]...)
		if c.leases[f.id].inUse {
			_ = c.apply(f.id, f.v)
		}
	}
	return nil
}

// take stores what an accepted verdict carries.
func (c *Core) take(id uint32, v *verdict, en fsm.Entry) {
	l := &c.leases[id]
	b := l.body
	latches := en.Kind == fsm.Move && en.Result != fsm.NoResult
	if v.setReason && (v.always || latches) {
		b.reason = v.reason
	}
	if latches {
		b.byPeer = v.byPeer
	}
	if v.first != nil {
		b.first = v.first
	}
	if v.masks {
		b.masks, c.masks = c.masks, b.masks
	}
	if v.violation {
		c.stats.Violations++
		c.stats.Faults(l.kind).Violations++
		c.cfg.Logger.Warn("kvready: backend contract violation", slog.String("lease", c.handle(id).String()), slog.String("reason", v.reason))
	}
	if v.proofDone {
		b.proofOut, b.proofDue = false, 0
	}
	if v.unproved {
		c.stats.Unproven++
		b.unproved = min(b.unproved+1, 255)
	}
	if v.event == fsm.AccessUnproven {
		b.unproven = v.unproven
		if !l.result.Failure() {
			b.reason = "access unproven: " + v.unproven
		}
	}
	if v.copied {
		b.copiesOut = 0
	}
	if v.cancel {
		b.cancelDisp, b.cancelErr = v.disp, v.cancelErr
		if v.cancelErr != "" {
			c.stats.CancelErrors++
		}
	}
}

// settle enters the state a move reached, then follows the completion whose
// guard holds and the latched events that now move the lease, until it comes
// to rest; then performs the rest effects of the state it rests in. A state
// passed through does not start its work: a lease released before its
// submission is never submitted, one whose proof was latched is never asked
// to prove it again.
func (c *Core) settle(id uint32, step fsm.Step, v *verdict) {
	l := &c.leases[id]
	gen := l.gen
	for {
		c.entered(id, step, v)
		if l.gen != gen || !l.inUse || c.halted != nil {
			return
		}
		if next, ok := c.table.Complete(&l.m, c.facts(id)); ok {
			step = next
			continue
		}
		if next, ok := c.table.Redeliver(&l.m); ok {
			step = next
			continue
		}
		break
	}
	c.perform(id, fsm.Step{From: l.m.State, To: l.m.State}, c.table.AtRest(l.m.State), v)
	if l.gen == gen && l.inUse {
		c.rearm(id)
	}
}

// entered does the bookkeeping of one move — counts, the latched outcome, the
// trace — and performs the entered state's entry effects.
func (c *Core) entered(id uint32, step fsm.Step, v *verdict) {
	l := &c.leases[id]
	c.moves++
	c.stats.Leases[step.From]--
	c.stats.Leases[step.To]++
	if step.Result != fsm.NoResult {
		l.result = step.Result
		c.stats.Outcomes[step.Result]++
	}
	if c.cfg.OnTransition != nil {
		c.cfg.OnTransition(Transition{Lease: c.handle(id), Step: step})
	}
	if c.counting {
		c.countMove(&step)
	}
	c.perform(id, step, step.Effects, v)
}

// facts evaluates every guard for the lease, from its kind, latches, marks,
// result, masks and deadline: nothing the table does not already hold.
func (c *Core) facts(id uint32) fsm.Facts {
	l := &c.leases[id]
	b := l.body
	var f fsm.Facts
	if l.kind == Fetch {
		f = f.With(fsm.IsFetch)
	}
	if l.m.Latched.Has(fsm.ReleaseRequested) || l.m.Latched.Has(fsm.Close) {
		f = f.With(fsm.Withdrawn)
	}
	if l.m.Latched.Has(fsm.CopyRefused) {
		f = f.With(fsm.StagingIncomplete)
	}
	// A cancel before anything was exposed withdraws the lease: the owner's
	// (latched while a publish's copies land or a submission is answered) or
	// one already latched as the result.
	if !l.m.Marks.Has(fsm.Exposed) && (l.m.Latched.Has(fsm.CancelRequested) || l.result == fsm.Cancel) {
		f = f.With(fsm.CancelWithdrawn)
	}
	if !l.m.Marks.Has(fsm.Exposed) {
		f = f.With(fsm.NeverExposed)
		if b.deadline != 0 && c.now >= b.deadline {
			f = f.With(fsm.DeadlinePassed)
		}
	}
	if l.kind == Publish || !served(l.result) || l.m.Latched.Has(fsm.ReleaseRequested) || !c.anyServed(b) {
		f = f.With(fsm.NothingToCopy)
	}
	// Only an attempt's access can be proven later: never a local copy's, a
	// lost device's, or an escaped submission's.
	if c.cfg.Containment != Recover || !l.m.Marks.Has(fsm.Attempted) || l.m.Marks.Has(fsm.Fenced) || c.lost || c.closed {
		f = f.With(fsm.NotRecoverable)
	}
	return f
}

// anyServed reports whether any row of the lease is marked arrived.
func (c *Core) anyServed(b *body) bool {
	for _, m := range b.masks {
		for _, ok := range m {
			if ok {
				return true
			}
		}
	}
	return false
}

// expire fires what is due on the core's clock: request deadlines,
// containment deadlines, Quiesce calls that outlived their timeout, retries.
func (c *Core) expire() {
	for c.halted == nil {
		id, ok := c.timers.popExpired(c.now)
		if !ok {
			return
		}
		if c.leases[id].inUse {
			c.due(id)
		}
	}
}

// due fires, in order, what is due for one lease whose timer expired.
func (c *Core) due(id uint32) {
	l := &c.leases[id]
	gen := l.gen
	live := func() bool { return l.inUse && l.gen == gen && c.halted == nil }
	b := l.body
	if c.table.Pending(l.m.State) && b.deadline != 0 && c.now >= b.deadline {
		_ = c.apply(id, verdict{event: fsm.Deadline, reason: "deadline passed with no outcome: timeout", setReason: true})
	}
	if live() && c.table.Containable(l.m.State) && b.containAt != 0 && c.now >= b.containAt {
		_ = c.apply(id, verdict{event: fsm.Containment, reason: c.containmentReason(l), setReason: true, always: true})
	}
	if live() && b.proofDue != 0 && c.now >= b.proofDue {
		b.proofDue = 0
		c.stats.QuiesceTimeouts++
		c.stats.Unproven++
		c.ready.Overdue = append(c.ready.Overdue, c.handle(id))
		why := fmt.Sprintf("Quiesce did not answer within %v", c.cfg.QuiesceTimeout)
		_ = c.apply(id, verdict{event: fsm.AccessUnproven, unproven: why})
	}
	if live() && b.askAt != 0 && c.now >= b.askAt {
		b.askAt = 0
		if c.awaitingProof(l) && !b.proofOut {
			c.stats.QuiesceRetries++
			c.ask(id)
		}
	}
	if live() {
		c.rearm(id)
	}
}

// containmentReason says what stayed unproven, and why.
func (c *Core) containmentReason(l *lease) string {
	b := l.body
	what := "a local copy"
	if c.table.Exposed(l.m.State) {
		what = "backend access"
	}
	reason := fmt.Sprintf("containment deadline passed in %v with %s unproven", l.m.State, what)
	why := b.reason
	if why == "" {
		why = b.unproven
	}
	if why != "" {
		reason += " (" + why + ")"
	}
	return reason
}

// rearm arms the lease's one timer for the earliest thing its state waits on:
// its request deadline while the outcome is pending, its containment deadline
// while something may stay unproven, its outstanding Quiesce call's timeout,
// its next retry. A timer armed earlier is left alone: when it fires, due
// finds nothing and calls rearm again, so a lease that completes before its
// deadline never moves its timer at all.
func (c *Core) rearm(id uint32) {
	l := &c.leases[id]
	b := l.body
	var at int64
	earliest := func(t int64) {
		if t != 0 && (at == 0 || t < at) {
			at = t
		}
	}
	if c.table.Pending(l.m.State) {
		earliest(b.deadline)
	}
	if c.table.Containable(l.m.State) {
		earliest(b.containAt)
	}
	earliest(b.proofDue)
	if c.awaitingProof(l) {
		earliest(b.askAt)
	}
	if at == 0 {
		c.timers.disarm(id)
		return
	}
	c.timers.armBy(id, at)
}

// pump takes the allocator's grants and then the admissions the backend's
// bound allows, and applies them through the door. It runs only in rounds
// (Tick and evidence), after the clock was read: a lease is staged, and its
// deadline judged, on the clock of the round that submits it.
func (c *Core) pump() {
	c.grant()
	c.admit()
}

// admit lets staged leases through to their submission, in arrival order,
// while the backend's bound on outstanding submissions has room.
func (c *Core) admit() {
	for c.admitHead < len(c.admitLine) && c.halted == nil &&
		(c.cfg.MaxOutstanding == 0 || c.outstanding < c.cfg.MaxOutstanding) {
		h := c.admitLine[c.admitHead]
		c.admitLine[c.admitHead] = Handle{}
		c.admitHead++
		id, err := c.lookup(h)
		if err != nil {
			continue // retired while it waited
		}
		l := &c.leases[id]
		if c.table.Lookup(l.m.State, fsm.AdmissionGranted).Kind != fsm.Move {
			continue // withdrawn, timed out or closed while it waited
		}
		l.body.outstanding = true
		c.outstanding++
		_ = c.apply(id, verdict{event: fsm.AdmissionGranted})
	}
	if c.admitHead == len(c.admitLine) {
		c.admitLine, c.admitHead = c.admitLine[:0], 0
	} else if c.admitHead > len(c.admitLine)/2 {
		n := copy(c.admitLine, c.admitLine[c.admitHead:])
		clear(c.admitLine[n:])
		c.admitLine, c.admitHead = c.admitLine[:n], 0
	}
}

// grant takes the allocator's grants.
func (c *Core) grant() {
	for c.halted == nil {
		c.grants = c.alloc.TakeGrants(c.grants[:0])
		if err := c.alloc.Err(); err != nil {
			c.haltWith(&InvariantError{What: err.Error()})
			c.stats.InvariantBreaches++
			return
		}
		if len(c.grants) == 0 {
			return
		}
		for _, t := range c.grants {
			id := c.byTicket[t.Index()]
			if l := &c.leases[id]; l.inUse && l.ticket == t {
				_ = c.apply(id, verdict{event: fsm.SlotsGranted})
			}
		}
	}
}

// findHopeless marks every waiting lease that quarantine has made impossible
// to grant: left in line it would block every lease behind it for ever.
func (c *Core) findHopeless() {
	c.hopeless = c.alloc.HopelessTickets(c.hopeless[:0])
	for _, t := range c.hopeless {
		id := c.byTicket[t.Index()]
		if l := &c.leases[id]; l.inUse && l.ticket == t {
			_ = c.apply(id, verdict{event: fsm.SlotsUnavailable, setReason: true, always: true,
				reason: "can never be granted: quarantine left no contiguous run of slots long enough"})
		}
	}
}

// deviceLost takes the device's loss in: every lease with local copies in
// flight has them unproven, and no new lease is lent.
func (c *Core) deviceLost(reason string) {
	if c.lost {
		return
	}
	c.lost = true
	c.cfg.Logger.Error("kvready: device lost; its in-flight copies can never be proven finished", slog.String("reason", reason))
	for i := range c.leases {
		id := uint32(i)
		if l := &c.leases[id]; l.inUse && c.table.Copying(l.m.State) {
			_ = c.apply(id, verdict{event: fsm.CopyFailed, setReason: true, always: true,
				reason: "device lost with a copy in flight: " + reason})
		}
	}
}

// halt stops the engine on a broken invariant: it is logged, counted, and
// every later call that would change anything is refused. Nothing is freed.
func (c *Core) halt(what string, id uint32) {
	c.haltWith(&InvariantError{What: what, Lease: c.handle(id)})
	c.stats.InvariantBreaches++
}

func (c *Core) haltWith(err error) {
	if c.halted != nil {
		return
	}
	c.halted = err
	c.cfg.Logger.Error("kvready: engine halted; it releases nothing any more", slog.Any("error", err))
}

// Halt stops the engine from outside the core: its runner found a safety
// invariant of its own broken (a bound it relies on). Nothing is freed; every
// later call that would change anything is refused with ErrHalted wrapping
// err. A second halt changes nothing.
func (c *Core) Halt(err error) {
	if c.halted != nil || err == nil {
		return
	}
	c.stats.InvariantBreaches++
	c.haltWith(&InvariantError{What: err.Error()})
}
