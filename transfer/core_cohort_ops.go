package transfer

import (
	"fmt"
	"slices"
	"time"
)

// Expose records that the session's pages were handed to every accessor:
// on the receiver, its address published to each writer; on the sender, an
// operation posted that reads them. Until the first Expose or ExposeTo the
// pages are NOT_EXPOSED. Call it before handing anything out, never after.
// Refused (ErrFenced) once the session is fenced — by Fence, Cancel, any
// outcome or a revocation — so nothing is handed out after the session ended
// (vLLM #55470), and refused once retired or contained.
func (c *Cohort) Expose(now time.Time) error {
	if err := c.exposable(now); err != nil {
		return err
	}
	c.exposed = true
	for i := range c.acc {
		c.acc[i].exposed = true
	}
	return nil
}

// ExposeTo records that the pages were handed to one accessor, as Expose
// does for all of them. An accessor never handed them owes no evidence that
// it stopped: if its offer could not be made (its peer died first, the
// session was cancelled between offers), the pages wait only for those that
// were handed them. Delivery still needs every accessor's DONE. Refused as
// Expose is, and for an accessor not in the session (ErrUnknownAccessor).
// Handing the pages to an accessor twice is one exposure.
func (c *Cohort) ExposeTo(now time.Time, id AccessorID) error {
	if err := c.exposable(now); err != nil {
		return err
	}
	i := slices.IndexFunc(c.acc, func(a accessorState) bool { return a.spec.ID == id })
	if i < 0 {
		return fmt.Errorf("%w: %s; session %s expects %s", ErrUnknownAccessor, id, c.key, c.names(nil))
	}
	c.exposed = true
	c.acc[i].exposed = true
	return nil
}

func (c *Cohort) exposable(now time.Time) error {
	c.advance(now)
	switch {
	case c.retired:
		return fmt.Errorf("%w: session %s cannot expose pages it returned", ErrRetired, c.key)
	case c.contained:
		return fmt.Errorf("%w: session %s", ErrContained, c.key)
	case c.fenced:
		return fmt.Errorf("%w: session %s (%s) refuses a new submission", ErrFenced, c.key, c.outcomeText())
	}
	return nil
}

// Fence refuses every later Expose. Accepted the first time; AlreadyTerminal
// when the session was already fenced, concluded, contained or retired.
func (c *Cohort) Fence(now time.Time) Logical {
	c.advance(now)
	if c.fenced || c.retired {
		return AlreadyTerminal
	}
	c.fenced = true
	return Accepted
}

// Cancel latches a local Cancelled when no outcome is latched yet (an
// outcome already latched stays), fences the session, and answers the
// logical and physical results apart: a cancel accepted while an accessor is
// unsettled is not safe to reuse, and is retryable until the pages are
// proven reusable or contained. A session never exposed is withdrawn: its
// pages are NOT_EXPOSED, safe at once. reason is carried into the answer.
func (c *Cohort) Cancel(now time.Time, reason string) CancelResult {
	c.advance(now)
	logical := Accepted
	if c.retired || c.kind != pending {
		logical = AlreadyTerminal
	}
	if !c.retired {
		c.latch(cancelled, "", false)
	}
	p := c.Physical()
	return CancelResult{
		Logical:   logical,
		Physical:  p,
		Retryable: !p.Reusable() && p != InDoubt,
		Reason:    fmt.Sprintf("%s: %s", reason, c.explain()),
	}
}

// Revoked records that the owner revoked the session's generation lease
// (its registration): no new operation can reach the pages. fences says the
// transport proved that revocation also stops operations already posted (a
// memory registration torn down on RDMA); then every accessor is settled at
// once. Without it, each accessor must still settle on its own evidence.
// Refused for a session not leased or never exposed, before its outcome is
// latched (cancel first), and when already revoked, contained or retired.
func (c *Cohort) Revoked(now time.Time, fences bool) error {
	c.advance(now)
	switch {
	case c.retired:
		return fmt.Errorf("%w: session %s", ErrRetired, c.key)
	case !c.leased:
		return fmt.Errorf("%w: session %s was created with Leased false; its registration is not its own to revoke", ErrNotLeased, c.key)
	case !c.exposed:
		return fmt.Errorf("%w: session %s published nothing to revoke", ErrNotExposed, c.key)
	case c.kind == pending:
		return fmt.Errorf("%w: session %s: cancel it before revoking its lease, so its outcome says why it ended", ErrOutcomePending, c.key)
	case c.contained:
		return fmt.Errorf("%w: session %s", ErrContained, c.key)
	case c.revoked:
		return fmt.Errorf("%w: session %s's lease is already revoked", ErrDuplicate, c.key)
	}
	c.revoked, c.revokeFences = true, fences
	return nil
}

// PeerLost records that the endpoint to one incarnation of a peer failed
// (the process died, or its connection broke): every accessor of that
// incarnation owes no more reports, and the session fails at once. It
// settles nothing: operations a dead process posted may still land. It
// answers how many accessors it marked. Refused when the session has no
// accessor of peer, when they were agreed with another incarnation (a death
// reported late must not touch a new life's accessors), when all of them are
// already marked, and when the session is contained or retired.
func (c *Cohort) PeerLost(now time.Time, peer Peer, inc Incarnation, reason string) (int, error) {
	c.advance(now)
	switch {
	case c.retired:
		return 0, fmt.Errorf("%w: session %s", ErrRetired, c.key)
	case c.contained:
		return 0, fmt.Errorf("%w: session %s", ErrContained, c.key)
	}
	ofPeer, ofInc, marked := 0, 0, 0
	for i := range c.acc {
		a := &c.acc[i]
		if a.spec.ID.Peer != peer {
			continue
		}
		ofPeer++
		if a.spec.Agreement.Incarnation() != inc {
			continue
		}
		ofInc++
		if !a.lost {
			a.lost = true
			marked++
		}
	}
	switch {
	case ofPeer == 0:
		return 0, fmt.Errorf("%w: session %s has no accessor of peer %q", ErrUnknownAccessor, c.key, peer)
	case ofInc == 0:
		return 0, fmt.Errorf("%w: peer %q#%d lost; session %s's accessors of it are another incarnation", ErrStaleIncarnation, peer, inc, c.key)
	case marked == 0:
		return 0, fmt.Errorf("%w: peer %q#%d was already reported lost to session %s", ErrDuplicate, peer, inc, c.key)
	}
	c.latch(failed, fmt.Sprintf("peer %s#%d lost: %s", peer, inc, reason), false)
	return marked, nil
}

// Retire hands the pages back to their owner. Refused (ErrNotReusable,
// naming the accessors still unsettled) unless the disposition is reusable;
// after it, every input is refused with ErrRetired.
func (c *Cohort) Retire(now time.Time) error {
	c.advance(now)
	if c.retired {
		return fmt.Errorf("%w: session %s was already retired", ErrRetired, c.key)
	}
	if p := c.Physical(); !p.Reusable() {
		return fmt.Errorf("%w: session %s is %s: %s", ErrNotReusable, c.key, p, c.explain())
	}
	c.retired = true
	return nil
}

// Outcome is the latched outcome, or nil while none is. ReportsPending is
// read now: true while an accessor whose endpoint still works owes its
// final report.
func (c *Cohort) Outcome() Outcome {
	switch c.kind {
	case delivered:
		return Delivered{TokenEnd: c.tokenEnd}
	case failed:
		return Failed{Reason: c.reason, ReportsPending: c.reportsPending()}
	case cancelled:
		return Cancelled{ByPeer: c.byPeer, ReportsPending: c.reportsPending()}
	}
	return nil
}

func (c *Cohort) reportsPending() bool {
	for i := range c.acc {
		if c.acc[i].final == 0 && !c.acc[i].lost {
			return true
		}
	}
	return false
}

// Physical is the pages' disposition: InDoubt once contained; NotExposed
// before anything was handed out; Active while the outcome is pending;
// Quiescing until proven; then QuiescedSuccess after a delivery and
// QuiescedFailure after anything else. Proven means, for a leased session,
// the lease revoked and either the revocation fenced or every accessor
// settled; for one not leased, every accessor settled.
func (c *Cohort) Physical() Physical {
	switch {
	case c.contained:
		return InDoubt
	case !c.exposed:
		return NotExposed
	case c.kind == pending:
		return Active
	case !c.proven():
		return Quiescing
	case c.kind == delivered:
		return QuiescedSuccess
	}
	return QuiescedFailure
}

func (c *Cohort) proven() bool {
	if c.leased && !c.revoked {
		return false
	}
	if c.revoked && c.revokeFences {
		return true
	}
	for i := range c.acc {
		if !c.acc[i].settled() {
			return false
		}
	}
	return true
}

// explain says, in a line, why the pages are where they are.
func (c *Cohort) explain() string {
	p := c.Physical()
	switch {
	case p == InDoubt:
		return fmt.Sprintf("contained at %s with %s unsettled", c.containment.Format(time.RFC3339Nano), c.unsettled())
	case p == NotExposed:
		return "nothing was exposed"
	case p.Reusable():
		return "every accessor is settled"
	case c.leased && !c.revoked:
		return fmt.Sprintf("lease not revoked; unsettled: %s", c.unsettled())
	}
	return "unsettled: " + c.unsettled()
}

func (c *Cohort) unsettled() string {
	return c.names(func(a *accessorState) bool { return !a.settled() })
}

func (c *Cohort) outcomeText() string {
	if o := c.Outcome(); o != nil {
		return o.String()
	}
	return "fenced"
}

// AccessorInfo is what a session knows of one accessor.
type AccessorInfo struct {
	ID          AccessorID
	Incarnation Incarnation
	Reported    int64        // highest progress report, -1 before any
	Final       EvidenceKind // 0 until its final report: Done or Failure
	TokenEnd    int64        // its Done's token_end
	Cancelled   bool
	Quiesced    bool
	Lost        bool
	Exposed     bool // the pages were handed to it
	Settled     bool
}

// CohortInfo is a session's whole observable state: comparing two says
// whether anything changed.
type CohortInfo struct {
	Session                             SessionKey
	Outcome                             Outcome
	Physical                            Physical
	Exposed, Fenced, Revoked, Contained bool
	RevokeFences, Retired               bool
	Accessors                           []AccessorInfo
}

// Info returns the session's state.
func (c *Cohort) Info() CohortInfo {
	info := CohortInfo{
		Session: c.key, Outcome: c.Outcome(), Physical: c.Physical(),
		Exposed: c.exposed, Fenced: c.fenced, Revoked: c.revoked, Contained: c.contained,
		RevokeFences: c.revokeFences, Retired: c.retired,
		Accessors: make([]AccessorInfo, len(c.acc)),
	}
	for i := range c.acc {
		a := &c.acc[i]
		info.Accessors[i] = AccessorInfo{
			ID: a.spec.ID, Incarnation: a.spec.Agreement.Incarnation(), Reported: a.reported,
			Final: a.final, TokenEnd: a.doneEnd, Cancelled: a.cancelled, Quiesced: a.quiesced,
			Lost: a.lost, Exposed: a.exposed, Settled: a.settled(),
		}
	}
	return info
}
