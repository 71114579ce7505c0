package readiness

import (
	"fmt"
	"log/slog"
	"math/bits"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/staging"
)

// perform does what the table declares for one step: first what the step
// stores from its evidence, store by store (store), then its effects, in the
// effects' order (effect) — an effect that needs a mark the lease lacks (only
// an attempt is cancelled, asked about or forgotten) is passed by. It is the
// one place that keeps evidence on a lease, places rows, queues copies,
// submits, asks for proofs and cancels, frees, quarantines and retires
// handles. The invariants that make memory safe are asserted here, where
// breaking them would do harm; a broken one halts the engine instead of
// acting.
func (c *Core) perform(id uint32, step *fsm.Step, fx fsm.Effects, v *verdict) {
	if c.halted != nil {
		return
	}
	// Bit by bit, lowest first: the declared order, without a test per
	// store or effect the step does not have.
	for set := uint32(step.Stores); set != 0; set &= set - 1 {
		if !c.store(id, fsm.Store(bits.TrailingZeros32(set)), v) {
			return
		}
	}
	l := &c.leases[id]
	for set := uint32(fx) & (1<<fsm.NumEffects - 1); set != 0; set &= set - 1 {
		e := fsm.Effect(bits.TrailingZeros32(set))
		if c.halted != nil {
			return
		}
		if need := e.Needs(); l.m.Marks&need != need {
			continue
		}
		c.effect(id, e, step, v)
	}
}

// store keeps one thing the step declares it stores from its evidence. It
// reports false when it halted the core instead.
func (c *Core) store(id uint32, s fsm.Store, v *verdict) bool {
	l := &c.leases[id]
	b := c.body(id)
	switch s {
	case fsm.StoreReason:
		b.reason = v.reason
	case fsm.StoreByPeer:
		b.byPeer = v.byPeer
	case fsm.StoreFirst:
		if b.first != nil {
			c.halt(fmt.Sprintf("a second first answer (%v after %v) was about to be latched", describeOutcome(v.first), b.first), id)
			return false
		}
		b.first = v.first
		if _, ok := v.first.(contract.Delivered); ok {
			b.masks, c.masks = c.masks, b.masks
		}
	case fsm.StoreProofAnswer:
		b.proofDue = 0
		if v.what == quiesceOverdue {
			// The call is still out: its late answer ends it.
			c.stats.QuiesceTimeouts++
			c.ready.Overdue = append(c.ready.Overdue, c.handle(id))
		} else {
			b.proofOut = false
		}
	case fsm.StoreUnproven:
		c.stats.Unproven++
		if v.what != quiesceOverdue {
			b.unproved = min(b.unproved+1, 255) // an answer lengthens the back-off
		}
		b.unproven = v.reason
		if !l.result.Failure() {
			b.reason = "access unproven: " + v.reason
		}
	case fsm.StoreCopiesDone:
		if !c.checkLanding(id, b.layers, true) {
			return false
		}
		b.copiesOut, b.landed = 0, b.layers
	case fsm.StoreLayerLanded:
		if !c.checkLanding(id, max(b.landed, int32(v.layer)+1), false) {
			return false
		}
		b.landed = max(b.landed, int32(v.layer)+1)
	case fsm.StoreLayerFailed:
		if b.failed == 0 {
			b.failed = int32(v.layer) + 1
		}
	case fsm.StoreCancelReply:
		b.cancelDisp, b.cancelErr = v.disp, v.cancelErr
		if v.cancelErr != "" {
			c.stats.CancelErrors++
		}
	case fsm.StoreViolation:
		c.stats.Violations++
		c.stats.Faults(l.kind).Violations++
		c.cfg.Logger.Warn("kvready: backend contract violation", slog.String("lease", c.handle(id).String()), slog.String("reason", v.reason))
	case fsm.StoreRetry:
		b.askAt = 0
		if v.what == backoffDue && !b.proofOut {
			c.stats.QuiesceRetries++
		}
	}
	return true
}

// effect does one thing entering a state (or keeping a latch) declares.
func (c *Core) effect(id uint32, e fsm.Effect, step *fsm.Step, v *verdict) {
	switch e {
	case fsm.Place:
		c.place(id)
	case fsm.CopyIn:
		c.copyIn(id)
	case fsm.Admit:
		c.admitLine = append(c.admitLine, c.handle(id))
	case fsm.TakeAdmission:
		c.takeAdmission(id)
	case fsm.Submit:
		c.submit(id)
	case fsm.ArmDeadline:
		c.armDeadline(id)
	case fsm.StartDrain:
		c.startDrain(id, step)
	case fsm.RequestCancel:
		c.requestCancel(id)
	case fsm.AskProof:
		c.askProof(id, step)
	case fsm.EndAccess:
		c.endAccess(id, step)
	case fsm.Forget:
		c.forget(id)
	case fsm.CopyOut:
		c.copyOut(id)
	case fsm.DropRow:
		if m := c.body(id).mask(v.row); m != nil {
			*m = false
		}
		c.layerInterval(id)
	case fsm.Answer:
		c.answer(id)
	case fsm.Withdraw:
		c.withdraw(id)
	case fsm.Contain:
		c.contain(id, step)
	case fsm.Recover:
		c.recover(id)
	case fsm.Quarantine:
		c.quarantine(id)
	case fsm.Park:
		c.park(id)
	case fsm.Free:
		c.free(id)
	case fsm.Retire:
		c.retire(id)
	case fsm.CopyLayer:
		c.copyLayer(id, v)
	case fsm.EndLayers:
		c.endLayers(id)
	}
}

// place records where each row's staging slot is.
func (c *Core) place(id uint32) {
	b := c.body(id)
	var err error
	if c.runs, err = c.alloc.Runs(c.ticket(id), c.runs[:0]); err != nil {
		c.halt("the allocator has no runs for a granted lease: "+err.Error(), id)
		return
	}
	row := 0
	for _, r := range c.runs {
		if row+r.Count > len(b.rows) {
			break // more slots than rows: halted below
		}
		part := c.parts.Part(r.Group)
		for k := range r.Count {
			b.addrs[row] = part.SlotAddress(r.First + k)
			b.slots[row] = int32(r.First + k)
			row++
		}
	}
	if row != len(b.rows) {
		c.halt(fmt.Sprintf("the allocator's runs for a granted lease place %d of its %d rows", row, len(b.rows)), id)
	}
}

// submit builds the extent the backend will hold and asks for its submission.
// From here the slots count as exposed: the backend may touch them the moment
// it is called, whatever it then answers. A refused build hands nothing over;
// it is reported back through the door as extent_refused.
func (c *Core) submit(id uint32) {
	l := &c.leases[id]
	b := c.body(id)
	switch {
	case !b.outstanding:
		c.halt("a submission handed out without an admission slot", id)
		return
	case withdrawn(l.m):
		c.halt("a lease its owner withdrew (released, cancelled or closed) was about to be submitted", id)
		return
	}
	if err := c.builder.Build(&b.extent, &b.view, c.parts, c.cfg.ExtentName, b.isLast); err != nil {
		c.follow = append(c.follow, followUp{id: id, ev: Evidence{What: extentRefused, Lease: c.handle(id), Reason: err.Error()}})
		return
	}
	// Written in its slot, not copied in whole from narrow stores a moment
	// old (which the processor cannot forward): once a lease.
	c.ready.Submissions = append(c.ready.Submissions, Submission{})
	sub := &c.ready.Submissions[len(c.ready.Submissions)-1]
	sub.Lease, sub.Kind, sub.Extent = c.handle(id), l.kind, &b.extent
}

// armDeadline fixes, at submission, the request deadline (unless the request
// named one) and the containment deadline: the request deadline plus the
// grace. A drain that starts earlier only moves it earlier.
func (c *Core) armDeadline(id uint32) {
	b := c.body(id)
	if b.exposedAt != 0 || b.containAt != 0 {
		c.halt("a submission's deadlines were about to be fixed a second time: the containment deadline is fixed once, at submission", id)
		return
	}
	b.exposedAt = c.now
	if b.deadline == 0 {
		b.deadline = c.now + int64(c.cfg.RequestTimeout)
	}
	b.containAt = b.deadline + int64(c.cfg.DrainGrace)
}

// startDrain starts the drain now — at the request deadline itself when the
// deadline is what started it, not when the engine noticed — if that moves
// the containment deadline earlier: later triggers never extend the grace.
func (c *Core) startDrain(id uint32, step *fsm.Step) {
	l := &c.leases[id]
	b := c.body(id)
	if l.m.Marks.Has(fsm.Attempted) && b.containAt == 0 {
		c.halt("a drain started on a submission whose containment deadline was never fixed", id)
		return
	}
	at := c.now
	if step.Event == fsm.Deadline && !step.Completion && b.deadline != 0 {
		at = b.deadline
	}
	if due := at + int64(c.cfg.DrainGrace); b.containAt == 0 || due < b.containAt {
		b.containAt = due
	}
}

// takeAdmission holds one of the backend's admission slots for the lease,
// which the pump let through only while the bound had room.
func (c *Core) takeAdmission(id uint32) {
	l := &c.leases[id]
	b := c.body(id)
	switch {
	case l.m.State != fsm.Admitted:
		c.halt(fmt.Sprintf("an admission slot taken by a lease in %v: only admitted takes one", l.m.State), id)
		return
	case withdrawn(l.m):
		c.halt("a lease its owner withdrew (released, cancelled or closed) was about to be admitted", id)
		return
	case b.outstanding:
		c.halt("a lease admitted twice", id)
		return
	case c.cfg.MaxOutstanding > 0 && c.outstanding >= c.cfg.MaxOutstanding:
		c.halt(fmt.Sprintf("a lease admitted past the backend's bound of %d outstanding submissions", c.cfg.MaxOutstanding), id)
		return
	}
	b.outstanding = true
	c.outstanding++
}

// requestCancel asks for the one cancel request of a lease whose backend
// returned an attempt.
func (c *Core) requestCancel(id uint32) {
	c.stats.CancelRequests++
	c.ready.Cancels = append(c.ready.Cancels, c.handle(id))
}

// askProof asks for the access proof of a lease the backend may still touch:
// at once the first time or on a retry, after back-off when the last answer
// proved nothing, never while a call is outstanding (its answer asks again).
// It is the only way a Quiesce call is asked for.
func (c *Core) askProof(id uint32, step *fsm.Step) {
	l := &c.leases[id]
	b := c.body(id)
	if b.proofOut {
		return // asked already
	}
	if step.Action == fsm.Latch && step.Event == fsm.Retry || b.unproved == 0 && !l.m.Marks.Has(fsm.WasContained) {
		c.ask(id)
		return
	}
	backoff := min(c.cfg.RetryBackoff<<min(max(b.unproved, 1)-1, 20), c.cfg.MaxRetryBackoff)
	if l.m.Marks.Has(fsm.WasContained) {
		backoff = max(backoff, c.cfg.RecoverEvery) // the slow cadence of the Recover policy
	}
	if at := c.now + int64(backoff); b.askAt == 0 || at < b.askAt {
		b.askAt = at
	}
}

// ask hands out one Quiesce call for the lease now.
func (c *Core) ask(id uint32) {
	l := &c.leases[id]
	b := c.body(id)
	switch {
	case !c.table.Exposed(l.m.State):
		c.halt(fmt.Sprintf("Quiesce asked about a lease in %v, where no access proof is awaited", l.m.State), id)
		return
	case !l.m.Marks.Has(fsm.Attempted):
		c.halt("Quiesce asked about a lease whose backend returned no attempt", id)
		return
	case b.proofOut:
		c.halt("a second Quiesce call asked for while one is outstanding", id)
		return
	}
	b.proofOut, b.askAt = true, 0
	b.proofDue = c.now + int64(c.cfg.QuiesceTimeout)
	c.ready.Proofs = append(c.ready.Proofs, Proof{Lease: c.handle(id), Kind: l.kind})
}

// endAccess ends what the backend's access held: the admission slot goes
// back, and no proof is awaited any more.
func (c *Core) endAccess(id uint32, step *fsm.Step) {
	if !c.checkFenceEntered(id, step) {
		return
	}
	b := c.body(id)
	b.askAt, b.proofDue = 0, 0
	c.unadmit(id)
	if b.exposedAt != 0 {
		c.stats.FenceLatency.add(c.now - b.exposedAt)
	}
}

// forget drops a fenced lease's attempt: the backend's access is proven over,
// so nothing about it is needed any more.
func (c *Core) forget(id uint32) {
	if !c.leases[id].m.Marks.Has(fsm.Fenced) {
		c.halt("an attempt was about to be forgotten before its access was proven over", id)
		return
	}
	c.ready.Forget = append(c.ready.Forget, c.handle(id))
}

// answer computes readiness once every local copy has landed.
func (c *Core) answer(id uint32) {
	if !c.checkAnswerable(id) {
		return
	}
	l := &c.leases[id]
	b := c.body(id)
	if b.lentAt != 0 {
		// Readiness latency is the time to an answer the manager can use: a
		// failure's own figure keeps a store that fails fast from reading as
		// a fast store.
		if OutcomeKind(l.result).Failure() {
			c.stats.FailureLatency.add(c.now - b.lentAt)
		} else {
			c.stats.ReadyLatency.add(c.now - b.lentAt)
		}
	}
	if l.kind != Fetch {
		return
	}
	if served(l.result) && b.layers > 0 {
		// The copies were issued (copyOut), and every change to the masks
		// since recomputed layerIv (DropRow): the same inputs, the same
		// interval, without computing it a second time.
		b.interval = b.layerIv
		return
	}
	if !served(l.result) {
		b.masks, _ = staging.ServedMasksInto(b.masks, &b.view, contract.NameSet{})
	}
	iv, err := staging.WindowedReadinessOfView(c.cfg.TokensPerBlock, b.known, c.cfg.Attention, &b.view, b.masks)
	if err != nil {
		c.halt("readiness of a validated view is not computable: "+err.Error(), id)
		return
	}
	b.interval = iv
}

// withdraw takes an ungrantable lease out of the allocator's line.
func (c *Core) withdraw(id uint32) {
	l := &c.leases[id]
	if l.m.State != fsm.Waiting {
		c.halt(fmt.Sprintf("a lease in %v was about to be taken out of the allocator's line: only a waiting one is in it", l.m.State), id)
		return
	}
	if err := c.alloc.Cancel(c.ticket(id)); err != nil {
		c.halt("the allocator refused to withdraw a waiting request: "+err.Error(), id)
		return
	}
	c.stats.Ungrantable++
	c.cfg.Logger.Warn("kvready: lease can never be granted; it is out of the line until released",
		slog.String("lease", c.handle(id).String()), slog.String("reason", c.body(id).reason), slog.Int("rows", len(c.body(id).rows)))
}

// unadmit gives the lease's admission slot back, if it holds one: its
// submission is no longer outstanding (fenced, or given up on).
func (c *Core) unadmit(id uint32) {
	if b := c.body(id); b.outstanding {
		if c.outstanding <= 0 {
			c.halt(fmt.Sprintf("an admission slot given back while the core counts %d outstanding", c.outstanding), id)
			return
		}
		b.outstanding = false
		c.outstanding--
	}
}

// contain raises the containment signal, once: the lease's containment
// deadline passed with access or a local copy unproven. Its admission slot
// goes back — the engine no longer waits on the submission — but nothing of
// its memory is freed.
func (c *Core) contain(id uint32, step *fsm.Step) {
	b := c.body(id)
	if b.containAt == 0 || c.now < b.containAt {
		c.halt(fmt.Sprintf("a lease contained %v before its containment deadline", time.Duration(b.containAt-c.now)), id)
		return
	}
	c.unadmit(id)
	c.stats.Containments++
	sig := Containment{Lease: c.handle(id), Slots: len(b.rows), Reason: b.reason, Deadline: timeOf(b.containAt)}
	c.ready.Containments = append(c.ready.Containments, sig)
	c.cfg.Logger.Error("kvready: containment: access or a local copy never proven by the containment deadline; the slots are held out of use",
		slog.String("lease", sig.Lease.String()), slog.String("from", step.From.String()), slog.String("policy", c.cfg.Containment.String()),
		slog.String("reason", sig.Reason), slog.Int("slots", sig.Slots))
}

// recover counts and signals a contained lease whose access a later Quiesce
// proved over (Recover policy); it goes on through the fence as any lease.
func (c *Core) recover(id uint32) {
	if c.cfg.Containment != Recover {
		c.halt(fmt.Sprintf("a contained lease was about to be recovered under the %v policy", c.cfg.Containment), id)
		return
	}
	// Its containment deadline has passed: the copies the fence now issues
	// get a grace of their own to land before they are contained.
	c.body(id).containAt = c.now + int64(c.cfg.DrainGrace)
	c.stats.Recovered++
	h := c.handle(id)
	c.ready.Recovered = append(c.ready.Recovered, h)
	c.cfg.Logger.Warn("kvready: a contained lease was proven over after all; its slots return once its copies land", slog.String("lease", h.String()))
}

// quarantine takes a contained lease's slots out of circulation for ever.
// Under the Fatal policy the engine then halts.
func (c *Core) quarantine(id uint32) {
	b := c.body(id)
	if !c.checkQuarantine(id) {
		return
	}
	c.timers.disarm(id)
	b.askAt, b.proofDue = 0, 0
	if err := c.alloc.Quarantine(c.ticket(id)); err != nil {
		c.halt("the allocator refused to quarantine a lease's slots: "+err.Error(), id)
		return
	}
	c.stats.QuarantinedLeases++
	c.findHopeless()
	if c.cfg.Containment == Fatal {
		c.haltWith(&FatalError{Containment: Containment{Lease: c.handle(id), Slots: len(b.rows), Reason: b.reason, Deadline: timeOf(b.containAt)}})
	}
}

// park takes the owner's release of a quarantined lease: the owner gives up
// its claim. The record, its body and everything the backend was handed stay
// for ever, and the handle goes stale so that no later call reaches them; what
// it can read (quarantined, release requested) goes to the kept ring, as a
// released lease's does, so that waiting for the release returns.
func (c *Core) park(id uint32) {
	l := &c.leases[id]
	if l.m.State != fsm.Quarantined || !l.inUse {
		c.halt(fmt.Sprintf("a lease in %v was about to be parked: only a quarantined lease's record stays out for ever", l.m.State), id)
		return
	}
	c.keep(id)
	c.gens[id] = nextGen(c.gens[id])
}

// free returns the lease's slots: only once the backend's access is proven
// over (or never began) and every local copy landed.
func (c *Core) free(id uint32) {
	l := &c.leases[id]
	b := c.body(id)
	switch {
	case !l.inUse:
		c.halt("slots about to be freed from a record that carries no lease: a lease's slots return once", id)
		return
	case l.m.State != fsm.Released:
		c.halt(fmt.Sprintf("slots about to be freed in %v: only a released lease's return", l.m.State), id)
		return
	case l.m.Marks.Has(fsm.Exposed) && !l.m.Marks.Has(fsm.Fenced):
		c.halt("slots about to be freed while the backend's access was never proven over", id)
		return
	case b.copiesOut != 0:
		c.halt(fmt.Sprintf("slots about to be freed with %d local copies not landed", b.copiesOut), id)
		return
	}
	c.timers.disarm(id)
	var err error
	switch {
	case c.alloc.Granted(c.ticket(id)):
		err = c.alloc.Free(c.ticket(id))
	case l.m.Latched.Has(fsm.SlotsUnavailable):
		// Its request left the line when it became ungrantable.
	default:
		err = c.alloc.Cancel(c.ticket(id))
	}
	if err != nil {
		c.halt("the allocator refused to take the lease's slots back: "+err.Error(), id)
		return
	}
	c.stats.Released++
}

// retire ends a released lease's hold on its record: what its handle can
// still read goes to the kept ring, its body is cleared for the record's next
// lease, and its generation moves on so that the handle never reaches that
// lease.
func (c *Core) retire(id uint32) {
	l := &c.leases[id]
	b := c.body(id)
	if !c.checkRetire(id) {
		return
	}
	c.keep(id)
	c.stats.Leases[fsm.Released]--
	c.clearBody(b)
	*l = lease{retired: uint8(c.gens[id])}
	c.gens[id] = nextGen(c.gens[id])
	c.spare = append(c.spare, id)
}

// keep puts what the lease's handle can still read into the kept ring of the
// latest KeepReleased leases the owner is done with.
func (c *Core) keep(id uint32) {
	if c.cfg.KeepReleased <= 0 {
		return
	}
	l := &c.leases[id]
	b := c.body(id)
	var k *keptLease
	if len(c.kept) < c.cfg.KeepReleased {
		c.kept = append(c.kept, keptLease{})
		k = &c.kept[len(c.kept)-1]
	} else {
		k = &c.kept[c.keptNext]
		if c.keptNext++; c.keptNext == len(c.kept) { // not %: a division a lease
			c.keptNext = 0
		}
	}
	// Field by field, every field: a composite literal is built on the stack
	// and copied whole, a wide load of narrow stores that the processor
	// cannot forward, once a lease.
	k.h, k.m, k.kind, k.result, k.rows = c.handle(id), l.m, l.kind, l.result, int32(len(b.rows))
	k.byPeer, k.reason, k.cancelDisp, k.cancelErr, k.interval = b.byPeer, b.reason, b.cancelDisp, b.cancelErr, b.interval
	k.uncopied = l.kind == Fetch && served(l.result) && b.layers == 0 && c.anyServed(b)
}

// nextGen is the generation after g; 0 is never issued, so the zero Handle is
// always stale.
func nextGen(g uint32) uint32 {
	if g++; g == 0 {
		g = 1
	}
	return g
}

// timeOf turns core nanoseconds into a time; 0 is the zero time.
func timeOf(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
