package readiness

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/staging"
)

// This file is the one place where a lease's state changes have effects, like
// etcd raft's becomeFollower/becomeLeader: fire applies an event to the table;
// settle follows the move through the completions and latches the table
// declares; enter does what entering each state entails; rest asks for the
// work of the state the lease comes to rest in; latched does what keeping each
// latched event means. Nothing else issues copies, submits, frees slots or
// signals containment.

// fire applies ev to the lease and settles it. A refusal changes nothing and
// is returned.
func (c *Core) fire(id uint32, ev fsm.Event) error {
	l := &c.leases[id]
	if l.flags&inUse == 0 {
		c.breach("evidence fired at a retired record", id)
		return fmt.Errorf("%w: record %d carries no lease", ErrStaleHandle, id)
	}
	step, err := c.table.Fire(&l.m, ev)
	if err != nil {
		c.stats.Refused++
		return err
	}
	if step.Kind == fsm.Latch {
		c.latched(id, step)
		return nil
	}
	c.settle(id, step)
	return nil
}

// settle enters the state a move reached, then follows the completion whose
// guard holds and the latched events that now move the lease, until it comes
// to rest; then asks for the work of the state it rests in. A state passed
// through does not ask for its work: a lease released before its submission
// is never submitted, one whose proof was latched is never asked to prove it
// again.
func (c *Core) settle(id uint32, step fsm.Step) {
	l := &c.leases[id]
	gen := l.gen
	for {
		c.enter(id, step)
		if l.gen != gen || l.flags&inUse == 0 {
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
	c.rest(id)
}

// facts evaluates every guard for the lease.
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
	if l.flags&incomplete != 0 {
		f = f.With(fsm.StagingIncomplete)
	}
	if b.deadline != 0 && c.now >= b.deadline && l.flags&exposed == 0 {
		f = f.With(fsm.DeadlinePassed)
	}
	if l.flags&exposed == 0 {
		f = f.With(fsm.NeverExposed)
	}
	released := l.m.Latched.Has(fsm.ReleaseRequested) && !mutant("copy-after-release")
	if l.kind == Publish || (l.result != fsm.Delivered && l.result != fsm.Partly) || released {
		f = f.With(fsm.NothingToCopy)
	}
	return f
}

// enter does what entering step.To entails, whether or not the lease rests
// there: bookkeeping, the latched outcome, the clocks, and the allocator's part
// in the three states that end or settle a hold on memory.
func (c *Core) enter(id uint32, step fsm.Step) {
	l := &c.leases[id]
	b := l.body
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
	switch step.To {
	case fsm.Granted:
		c.place(id)
	case fsm.Requested:
		b.exposedAt = c.now
		if b.deadline == 0 {
			b.deadline = c.now + int64(c.cfg.RequestTimeout)
		}
		// The containment deadline is fixed now: the request deadline plus
		// the grace. A drain that starts earlier only moves it earlier.
		b.containAt = 0
		c.drain(id, b.deadline)
		c.rearm(id)
	case fsm.Failed:
		if l.flags&exposed != 0 {
			at := c.now
			if step.Event == fsm.Deadline && !step.Completion {
				at = b.deadline // the drain starts at the deadline, not when it is noticed
			}
			c.drain(id, at)
		}
		c.rearm(id)
	case fsm.Served, fsm.Partial, fsm.Missed:
		c.rearm(id)
	case fsm.AccessFenced:
		if b.exposedAt != 0 {
			c.stats.FenceLatency.add(c.now - b.exposedAt)
		}
		if l.flags&submitted != 0 {
			c.ready.Forget = append(c.ready.Forget, c.handle(id))
		}
		c.rearm(id)
	case fsm.CopyUnproven:
		c.drain(id, c.now)
		c.rearm(id)
	case fsm.LogicallyComplete:
		c.timers.disarm(id)
		c.answer(id)
	case fsm.Quarantined:
		c.quarantine(id, step)
	case fsm.Released:
		c.release(id, step)
	}
}

// rest asks for the work of the state the lease came to rest in.
func (c *Core) rest(id uint32) {
	l := &c.leases[id]
	switch s := l.m.State; {
	case s == fsm.Granted && l.kind == Publish:
		c.copyIn(id)
	case s == fsm.Staged:
		c.submit(id)
	case s == fsm.AccessFenced:
		c.copyOut(id)
		if mutant("skip-copy-wait") {
			l.flags &^= copying
			_ = c.fire(id, fsm.CopiesLanded)
		}
	case c.table.Outcome(s):
		if mutant("copy-before-fence") && l.kind == Fetch && (l.result == fsm.Delivered || l.result == fsm.Partly) {
			c.copyOut(id)
		}
		c.askProof(id)
	}
}

// latched does what keeping an event means where the table latches it.
func (c *Core) latched(id uint32, step fsm.Step) {
	l := &c.leases[id]
	switch step.Event {
	case fsm.AccessUnproven:
		// The drain starts now (a later trigger never extends it); the
		// caller asks again later.
		c.drain(id, c.now)
		c.rearm(id)
	case fsm.SlotsUnavailable:
		c.mustNot(c.alloc.Cancel(l.ticket), "cancel", id)
		c.stats.Ungrantable++
		c.cfg.Logger.Warn("kvready: lease can never be granted; it is out of the line until released",
			slog.String("lease", c.handle(id).String()), slog.String("reason", l.body.reason), slog.Int("rows", len(l.body.rows)))
	case fsm.ReleaseRequested:
		if l.m.State == fsm.Quarantined {
			// The owner is done: its handle goes stale; the record and what
			// the backend was handed stay parked for ever.
			l.gen++
			if l.gen == 0 {
				l.gen = 1
			}
			if mutant("extent-rebuilt-in-place") {
				c.putBody(l.body) // the rev-1 bug: the next lease rebuilds the extent a backend still holds
				l.body = &body{}
			}
		}
	}
}

// place records where each row's staging slot is.
func (c *Core) place(id uint32) {
	l := &c.leases[id]
	b := l.body
	var err error
	c.runs, err = c.alloc.Runs(l.ticket, c.runs[:0])
	c.mustNot(err, "runs", id)
	row := 0
	for _, r := range c.runs {
		part := c.parts.Part(r.Group)
		for k := range r.Count {
			b.addrs[row] = part.SlotAddress(r.First + k)
			b.slots[row] = int32(r.First + k)
			row++
		}
	}
}

// copyIn asks for a publish's device→staging copies.
func (c *Core) copyIn(id uint32) {
	l := &c.leases[id]
	b := l.body
	h := c.handle(id)
	for i := range b.rows {
		c.ready.Copies = append(c.ready.Copies, Copy{Lease: h, Row: i, Device: b.rows[i].Device, Staging: c.slot(b, i)})
	}
	c.ready.CopyLeases = append(c.ready.CopyLeases, h)
	l.flags |= copying
}

// copyOut asks for a fetch's staging→device copies of its served whole rows:
// only ever after the fence, never for a lease the owner has released.
func (c *Core) copyOut(id uint32) {
	l := &c.leases[id]
	b := l.body
	h := c.handle(id)
	n := 0
	for i := range b.rows {
		if m := b.mask(i); m != nil && *m {
			c.ready.Copies = append(c.ready.Copies, Copy{Lease: h, Row: i, ToDevice: true, Device: b.rows[i].Device, Staging: c.slot(b, i)})
			n++
		}
	}
	if n == 0 {
		// The nothing_to_copy guard rules this out; a lease left here would
		// wait for copies that were never asked for.
		c.breach("a fenced lease with nothing to copy came to rest in access_fenced", id)
		return
	}
	c.ready.CopyLeases = append(c.ready.CopyLeases, h)
	l.flags |= copying
}

// submit builds the extent the backend will hold and asks for its submission.
// From here the slots count as exposed: the backend may touch them the
// moment it is called, whatever it then answers.
func (c *Core) submit(id uint32) {
	l := &c.leases[id]
	b := l.body
	if err := c.builder.Build(&b.extent, &b.view, c.parts, c.cfg.ExtentName, b.isLast); err != nil {
		// Lend validated the view and the core placed it: the extent cannot
		// be refused. Nothing was exposed, so the lease fails as rejected.
		c.breach("staging refused the extent of a placed view: "+err.Error(), id)
		b.reason = "extent refused: " + err.Error()
		_ = c.fire(id, fsm.Rejected)
		return
	}
	l.flags |= exposed
	c.ready.Submissions = append(c.ready.Submissions, Submission{Lease: c.handle(id), Kind: l.kind, Extent: &b.extent})
}

// askProof asks for the access proof of a lease the backend may still touch.
func (c *Core) askProof(id uint32) {
	l := &c.leases[id]
	if l.flags&submitted == 0 || l.flags&quiescing != 0 || mutant("never-ask-proof") {
		return // no attempt to ask about (an escaped submission waits for containment), or asked already
	}
	l.flags |= quiescing
	c.ready.Quiesce = append(c.ready.Quiesce, c.handle(id))
}

// answer computes readiness once every local copy has landed.
func (c *Core) answer(id uint32) {
	l := &c.leases[id]
	b := l.body
	l.flags |= answered
	if b.lentAt != 0 {
		c.stats.ReadyLatency.add(c.now - b.lentAt)
	}
	if l.kind != Fetch {
		return
	}
	if l.result != fsm.Delivered && l.result != fsm.Partly {
		b.masks, _ = staging.ServedMasksInto(b.masks, &b.view, contract.NameSet{})
	}
	iv, err := staging.WindowedReadinessOfView(c.cfg.TokensPerBlock, b.known, c.cfg.Attention, &b.view, b.masks)
	if err != nil {
		c.breach("readiness not computable: "+err.Error(), id)
		iv, _ = staging.WindowedReadinessOfView(c.cfg.TokensPerBlock, b.known, c.cfg.Attention, &b.view, nil)
	}
	b.interval = iv
}

// quarantine takes the lease's slots out of circulation for ever and raises
// the containment signal.
func (c *Core) quarantine(id uint32, step fsm.Step) {
	l := &c.leases[id]
	b := l.body
	c.timers.disarm(id)
	if mutant("free-quarantined") {
		c.mustNot(c.alloc.Free(l.ticket), "free", id)
	} else {
		c.mustNot(c.alloc.Quarantine(l.ticket), "quarantine", id)
	}
	l.flags |= parked
	l.flags &^= copying | quiescing
	c.stats.QuarantinedLeases++
	c.stats.Containments++
	sig := Containment{Lease: c.handle(id), Slots: len(b.rows), Reason: b.reason, Deadline: timeOf(b.containAt)}
	c.ready.Containments = append(c.ready.Containments, sig)
	c.cfg.Logger.Error("kvready: containment: access never proven; the slots are quarantined for ever",
		slog.String("lease", sig.Lease.String()), slog.String("from", step.From.String()),
		slog.String("reason", sig.Reason), slog.Int("slots", sig.Slots))
	c.findHopeless()
}

// release returns the lease's slots and keeps its record readable until
// KeepReleased later releases push it out.
func (c *Core) release(id uint32, step fsm.Step) {
	l := &c.leases[id]
	c.timers.disarm(id)
	switch {
	case step.From != fsm.Waiting:
		c.mustNot(c.alloc.Free(l.ticket), "free", id)
	case l.m.Latched.Has(fsm.SlotsUnavailable):
		// Its request left the line when it became ungrantable.
	case c.alloc.Granted(l.ticket):
		// Granted inside this round, before the grant was taken.
		c.mustNot(c.alloc.Free(l.ticket), "free", id)
	default:
		c.mustNot(c.alloc.Cancel(l.ticket), "cancel", id)
	}
	l.flags &^= copying | quiescing
	c.stats.Released++
	c.stats.Leases[fsm.Released]--
	c.retire(id)
}

// timeOf turns core nanoseconds into a time; 0 is the zero time.
func timeOf(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
