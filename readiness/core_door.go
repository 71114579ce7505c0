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

// This file is the one door through which evidence enters the core, like
// etcd raft's Step: a piece of evidence — the caller's, or what the core's
// owner calls, clock and pump make of their own (ready.go lists them) — is
// classified (pure: it reads the lease and writes only scratch), the table
// answers, and on a refusal the door returns with nothing touched. An accepted
// move or latch stores what the table declares it stores and performs the
// effects it declares, both in perform (effects.go). The clock (clock.go) and
// the pump (pump.go) come back through here.

// verdict is what classification made of a piece of evidence: the event the
// table is asked about and the evidence's values, which the stores the table
// declares for the accepted move take.
type verdict struct {
	event fsm.Event
	// what made the evidence: an answer or a timeout, the owner or the clock.
	what   Observed
	reason string
	// first is the backend's answer; with a Delivered one the served masks
	// are in the core's scratch.
	first     contract.Outcome
	byPeer    bool
	row       int // the refused row
	layer     int // the layer that landed, the first that failed, or the one computed
	behind    gpu.Event
	disp      contract.CancelDisposition
	cancelErr string
}

// Step reports one piece of evidence. Evidence about a retired lease is
// refused with ErrStaleHandle, malformed evidence with ErrInvalidEvidence, and
// evidence the lifecycle refuses in the lease's state with an error wrapping
// ErrRefused and the table's declared refusal; none of them changes anything — no state, latch, reason,
// by_peer flag or counter. After accepted evidence the deadlines it made due
// fire, and the grants it made possible are taken.
func (c *Core) Step(ev Evidence) error { return c.step(&ev) }

// step is Step for a caller that holds the evidence already (the runner): ev
// is read, never kept.
func (c *Core) step(ev *Evidence) error {
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
	if ev.What == 0 || ev.What >= numObserved {
		return c.invalid(ev)
	}
	if err := c.enter(id, ev); err != nil {
		return err
	}
	c.expire()
	c.pump()
	return nil
}

func (c *Core) invalid(ev *Evidence) error {
	return fmt.Errorf("%w: %v about %v: want one of the kinds readiness.Observed lists", ErrInvalidEvidence, ev.What, ev.Lease)
}

// enter takes one piece of evidence about lease id through the door:
// classified, then applied.
func (c *Core) enter(id uint32, ev *Evidence) error {
	var v verdict
	ok, err := c.classify(id, ev, &v)
	if err != nil || !ok {
		return err
	}
	return c.apply(id, &v)
}

// classify turns evidence into the verdict the table is asked about, in v. It
// reads the lease and writes only v and the core's scratch masks; ok is false
// for evidence that observed nothing (a pending Poll, an answer the lease
// already has). The backend's evidence is classified here; the device's in
// classifyCopy; the owner's, the clock's and the pump's in classifyOwn.
func (c *Core) classify(id uint32, ev *Evidence, v *verdict) (ok bool, err error) {
	v.what = ev.What
	switch ev.What {
	case SubmitAccepted:
		v.event = fsm.Submitted
	case SubmitRejected:
		v.event, v.reason = fsm.Rejected, "submission rejected: "+ev.Reason
	case SubmitEscaped:
		v.event, v.reason = fsm.SubmitEscaped, "submission escaped without an attempt: "+ev.Reason
	case PollAnswered:
		return c.classifyAnswer(id, ev.Outcome, v)
	case PollPanicked:
		v.event, v.reason = fsm.ContractViolation, "contract violation: "+ev.Reason
	case QuiesceTrue:
		v.event = fsm.AccessProven
	case QuiesceUnproven:
		v.event, v.reason = fsm.AccessUnproven, ev.Reason
	case CancelReplied:
		v.event, v.disp = fsm.CancelAnswered, ev.Disposition
		switch {
		case ev.Reason != "":
			v.disp, v.cancelErr = 0, ev.Reason
		case !ev.Disposition.Valid():
			v.disp, v.cancelErr = 0, fmt.Sprintf("the backend answered disposition %d, which is neither requested nor unsupported", uint8(ev.Disposition))
		}
	case CopiesDone, LayerDone, CopyRefusedByDevice, CopyLost, ownerComputed, deviceLostCopy:
		return c.classifyCopy(id, ev, v)
	default:
		return c.classifyOwn(id, ev, v)
	}
	return true, nil
}

// classifyCopy classifies the device's evidence — copies landed, refused or
// lost, a layer computed, the device lost — as classify does.
func (c *Core) classifyCopy(id uint32, ev *Evidence, v *verdict) (ok bool, err error) {
	switch ev.What {
	case CopiesDone:
		if c.body(id).byLayer {
			// Its layers come in later Readys: an event recorded after one
			// Ready's copies proves nothing of a layer queued after it, and
			// the core cannot tell which layers a caller's event covers.
			return false, fmt.Errorf("%w: copies of %v landed, a layerwise publish: report each layer's event with LayerDone and its layer", ErrInvalidEvidence, ev.Lease)
		}
		v.event, v.layer = fsm.CopiesLanded, int(c.body(id).layers)-1
	case LayerDone:
		b := c.body(id)
		switch {
		case ev.Layer < 0 || b.layers > 0 && ev.Layer >= int(b.layers):
			return false, fmt.Errorf("%w: layer %d of %v landed, a lease whose copies go in %d layers", ErrInvalidEvidence, ev.Layer, ev.Lease, b.layers)
		case b.byLayer && ev.Layer >= int(b.queued):
			return false, fmt.Errorf("%w: layer %d of %v landed, a layerwise publish that queued %d layers", ErrInvalidEvidence, ev.Layer, ev.Lease, b.queued)
		case ev.Layer < int(b.landed):
			return false, nil // known: a later layer's event already proved it
		case ev.Layer == int(b.layers)-1:
			v.event = fsm.CopiesLanded
		default:
			v.event = fsm.LayerLanded
		}
		v.layer = ev.Layer
	case CopyRefusedByDevice:
		if rows := len(c.body(id).rows); ev.Row < 0 || ev.Row >= rows {
			return false, fmt.Errorf("%w: copy refusal of row %d of %v, a lease of %d rows", ErrInvalidEvidence, ev.Row, ev.Lease, rows)
		}
		v.event, v.row = fsm.CopyRefused, ev.Row
		v.reason = fmt.Sprintf("copy of row %d refused by the device: %s", ev.Row, ev.Reason)
	case CopyLost:
		if b := c.body(id); ev.Layer < 0 || b.layers > 0 && ev.Layer >= int(b.layers) {
			return false, fmt.Errorf("%w: copy of layer %d of %v lost, a lease whose copies go in %d layers", ErrInvalidEvidence, ev.Layer, ev.Lease, b.layers)
		}
		v.event, v.layer = fsm.CopyFailed, ev.Layer
		v.reason = "local copy failed without a completion record: " + ev.Reason
		if c.body(id).layers > 1 {
			v.reason = fmt.Sprintf("local copy of layer %d failed without a completion record: %s", ev.Layer, ev.Reason)
		}
	case ownerComputed:
		v.event, v.layer, v.behind = fsm.LayerComputed, ev.Layer, ev.behind
	case deviceLostCopy:
		// Every layer not yet known to have landed may never land.
		v.event, v.reason, v.layer = fsm.CopyFailed, "device lost with a copy in flight: "+ev.Reason, int(c.body(id).landed)
	}
	return true, nil
}

// classifyOwn classifies what the engine itself observes — the owner's calls,
// the clock's deadlines and the pump's grants — as classify does.
func (c *Core) classifyOwn(id uint32, ev *Evidence, v *verdict) (ok bool, err error) {
	switch ev.What {
	case ownerReleased:
		v.event = fsm.ReleaseRequested
	case ownerCancelled:
		v.event, v.reason = fsm.CancelRequested, "cancelled locally by the owner"
	case ownerRetried, backoffDue:
		v.event = fsm.Retry
	case ownerClosed:
		v.event, v.reason = fsm.Close, "engine closed: cancelled locally"
	case deadlineDue:
		v.event, v.reason = fsm.Deadline, "deadline passed with no outcome: timeout"
	case containmentDue:
		v.event, v.reason = fsm.Containment, c.containmentReason(id)
	case quiesceOverdue:
		v.event, v.reason = fsm.AccessUnproven, fmt.Sprintf("Quiesce did not answer within %v", c.cfg.QuiesceTimeout)
	case slotsGranted:
		v.event = fsm.SlotsGranted
	case slotsHopeless:
		v.event, v.reason = fsm.SlotsUnavailable, "can never be granted: quarantine left no contiguous run of slots long enough"
	case admissionGranted:
		v.event = fsm.AdmissionGranted
	case extentRefused:
		v.event, v.reason = fsm.ExtentRefused, "extent refused: "+ev.Reason
	default:
		return false, c.invalid(ev)
	}
	return true, nil
}

// classifyAnswer turns a Poll answer into the table's event. The first answer
// is classified against what was asked — names never asked for, or an answer
// that is no outcome, are a contract violation, never data; a later answer
// that differs from the first (a re-poll after the access proof; nil
// included) is a contract violation.
func (c *Core) classifyAnswer(id uint32, o contract.Outcome, v *verdict) (bool, error) {
	l := &c.leases[id]
	b := c.body(id)
	violation := func(reason string) (bool, error) {
		v.event, v.reason = fsm.ContractViolation, "contract violation: "+reason
		return true, nil
	}
	if b.first == nil && (served(l.result) || l.result == fsm.Miss) {
		// A delivered outcome latches only with its first answer stored: an
		// answer now would be classified as a first one.
		c.halt(fmt.Sprintf("a lease latched %v without the backend's first answer", l.result), id)
		return false, c.Err()
	}
	if b.first != nil {
		if o != nil && sameOutcome(b.first, o) {
			return false, nil
		}
		return violation(fmt.Sprintf("the outcome changed from %v to %v", b.first, describeOutcome(o)))
	}
	switch o := o.(type) {
	case nil:
		return false, nil // pending
	case contract.Delivered:
		var err error
		c.masks, err = staging.ServedMasksInto(c.masks, &b.view, o.Served)
		if err != nil {
			return violation(err.Error())
		}
		v.first = o
		switch n := o.Served.Len(); {
		case n == 0:
			v.event = fsm.OutcomeMissed
		case n == b.view.Rows():
			v.event = fsm.OutcomeServed
		default:
			v.event = fsm.OutcomePartial
		}
		return true, nil
	case contract.Failed:
		v.event, v.reason, v.first = fsm.OutcomeFailed, "failed: "+o.Reason, o
		return true, nil
	case contract.Cancelled:
		v.event, v.reason, v.byPeer, v.first = fsm.OutcomeCancelled, o.String(), o.ByPeer, o
		return true, nil
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

// apply fires v's event in the lease's state. A refusal returns the declared
// error and touches nothing. An accepted latch stores what it declares and
// performs its effects; an accepted move stores what it declares, settles the
// lease and performs the effects of every state entered. Evidence an effect
// reported about its own lease (follow) goes through the door next.
func (c *Core) apply(id uint32, v *verdict) error {
	l := &c.leases[id]
	var step fsm.Step
	if err := c.table.FireTo(&l.m, v.event, &step); err != nil {
		if errors.Is(err, fsm.ErrOutOfRange) {
			// The table refuses nothing out of range in a lease it keeps:
			// the record is corrupt.
			c.halt("a lease's state left the table's domain: "+err.Error(), id)
			return c.Err()
		}
		return refusedError{err}
	}
	if step.Action == fsm.Latch {
		c.perform(id, &step, step.Effects, v)
		if l.inUse {
			c.rearm(id)
		}
	} else {
		c.settle(id, &step, v)
	}
	if l.inUse && l.m.State >= fsm.NumStates {
		c.checkState(id)
	}
	for len(c.follow) > 0 && c.halted == nil {
		f := c.follow[0]
		c.follow = append(c.follow[:0], c.follow[1:]...)
		if c.leases[f.id].inUse {
			_ = c.enter(f.id, &f.ev)
		}
	}
	return nil
}

// settle enters the state a move reached, then follows the completion whose
// guard holds and the latched events that now move the lease, until it comes
// to rest; then performs the rest effects of the state it rests in. A state
// passed through does not start its work: a lease released before its
// submission is never submitted, one whose proof was latched is never asked
// to prove it again. Only the first step stores anything: a completion or a
// re-delivered event carries no evidence.
func (c *Core) settle(id uint32, step *fsm.Step, v *verdict) {
	l := &c.leases[id]
	gen := c.gens[id]
	for {
		c.entered(id, step, v)
		if c.gens[id] != gen || !l.inUse || c.halted != nil {
			return
		}
		// The facts are read only where a completion may test them: most
		// states have none.
		if len(c.table.Completions(l.m.State)) > 0 {
			if c.table.CompleteTo(&l.m, c.facts(id), step) {
				continue
			}
		}
		if c.table.RedeliverTo(&l.m, step) {
			continue
		}
		break
	}
	rest := fsm.Step{From: l.m.State, To: l.m.State}
	c.perform(id, &rest, c.table.AtRest(l.m.State), v)
	if c.gens[id] == gen && l.inUse {
		c.rearm(id)
	}
}

// entered does the bookkeeping of one move — counts, the latched outcome, the
// trace — and performs what the move stores and the entered state's entry
// effects.
func (c *Core) entered(id uint32, step *fsm.Step, v *verdict) {
	l := &c.leases[id]
	c.moves++
	c.stats.Leases[step.From]--
	c.stats.Leases[step.To]++
	c.exposed = c.exposed || l.m.Marks.Has(fsm.Exposed)
	if step.Result != fsm.NoResult {
		c.checkLatchOnce(id, step.Result)
		l.result = step.Result
		c.stats.Outcomes[step.Result]++
	}
	if c.cfg.OnTransition != nil {
		c.cfg.OnTransition(Transition{Lease: c.handle(id), From: State(step.From), To: State(step.To), Cause: causeOfStep(*step), Outcome: OutcomeKind(step.Result), step: *step})
	}
	if c.counting {
		c.countMove(step)
	}
	c.perform(id, step, step.Effects, v)
}

// facts evaluates every guard for the lease, from its kind, latches, marks,
// result, masks and deadline: nothing the table does not already hold.
func (c *Core) facts(id uint32) fsm.Facts {
	l := &c.leases[id]
	b := c.body(id)
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
			_ = c.enter(id, &Evidence{What: deviceLostCopy, Lease: c.handle(id), Reason: reason})
		}
	}
}
