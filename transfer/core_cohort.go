package transfer

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The reasons a Cohort or Sessions refuses an input. Each refusal changes
// nothing; the returned error wraps one of these and says what was given and
// what was expected.
var (
	ErrWrongSession     = errors.New("transfer: evidence names another session")
	ErrStaleAttempt     = errors.New("transfer: evidence from an older attempt")
	ErrUnknownAccessor  = errors.New("transfer: evidence from an accessor the session does not expect")
	ErrStaleIncarnation = errors.New("transfer: evidence from another incarnation of the peer")
	ErrDuplicate        = errors.New("transfer: evidence already given")
	ErrLate             = errors.New("transfer: progress reported after the accessor's final report")
	ErrContained        = errors.New("transfer: the session is contained; nothing revives it")
	ErrRetired          = errors.New("transfer: the session is retired; its pages may be another's now")
	ErrFenced           = errors.New("transfer: the session is fenced; nothing more is exposed")
	ErrOutcomePending   = errors.New("transfer: the outcome is pending")
	ErrNotLeased        = errors.New("transfer: the session's pages are not under a generation lease")
	ErrNotExposed       = errors.New("transfer: the session never exposed its pages")
	ErrNotReusable      = errors.New("transfer: the session's pages are not proven reusable")
)

// AccessorSpec is one accessor a session expects, with the agreement made
// with the incarnation of its peer that will do the accessing.
type AccessorSpec struct {
	ID        AccessorID
	Agreement Agreement
}

// CohortConfig is everything fixed when a session is submitted.
type CohortConfig struct {
	Session SessionKey
	// Tokens is the span the session moves: a Report or Done whose token_end
	// falls outside it is a contract violation.
	Tokens TokenRange
	// Accessors is the exact cohort: every writer (or reader) expected, each
	// settling once. KV and auxiliary writers and several ranks are
	// separate accessors.
	Accessors []AccessorSpec
	// Leased: the pages are published under an allocation-generation lease
	// (a registration of their own), which the owner revokes before reuse.
	// A leased session is reusable only once revoked; a revocation the
	// transport says fences in-flight access settles every accessor at once.
	Leased bool
	// Submitted is when the attempt was submitted; Deadline (no outcome by
	// then: Failed "timeout") and Containment (pages still unproven then:
	// InDoubt for ever) are fixed from it, never moved.
	Submitted   time.Time
	Deadline    time.Time
	Containment time.Time
}

// Requires is what every accessor's agreement must grant for cfg: identity
// (attempt and incarnation) and exact writer tracking always; several
// writers for a cohort of more than one; the generation lease when Leased;
// and, without a lease to revoke, the peer's own submission fence — then the
// only defence against an operation posted after the session ended.
func (cfg CohortConfig) Requires() CapabilitySet {
	req := Caps(AttemptIdentity, EndpointIncarnation, ExactWriterTracking)
	if len(cfg.Accessors) > 1 {
		req |= Caps(MultiWriter)
	}
	if cfg.Leased {
		req |= Caps(AllocationGenerationLeases)
	} else {
		req |= Caps(SubmissionFence)
	}
	return req
}

type outcomeKind uint8

const (
	pending outcomeKind = iota
	delivered
	failed
	cancelled
)

type accessorState struct {
	spec      AccessorSpec
	exposed   bool         // the pages were handed to it (Expose, ExposeTo)
	reported  int64        // highest Report token_end, -1 before any
	final     EvidenceKind // 0, Done or Failure
	doneEnd   int64
	cancelled bool // it sent PeerCancel
	quiesced  bool // the transport proved its access over
	lost      bool // its incarnation's endpoint failed: no report will come
}

// settled: the accessor will never touch the pages again. One never handed
// the pages never touched them. A DONE proves it only from a peer that
// promised (PER_OPERATION_QUIESCENCE) to send it after its own flush
// completed; a failure, a cancel or a lost endpoint never do.
func (a *accessorState) settled() bool {
	return !a.exposed || a.quiesced || (a.final == Done && a.spec.Agreement.Granted().Has(PerOperationQuiescence))
}

// Cohort is one session's pure state machine: the logical outcome, the
// physical disposition of its pages and the exact set of accessors expected
// to settle. It starts no goroutine and reads no clock — every entry takes
// the time — and it is not safe for concurrent use (Sessions and
// Transceiver wrap it).
//
// Every entry first applies the deadlines fixed at submission at the time
// given (a time earlier than one already seen counts as that one), then
// judges its input; an input refused changes nothing.
type Cohort struct {
	key                                    SessionKey
	tokens                                 TokenRange
	leased                                 bool
	submitted, deadline, containment, now  time.Time
	acc                                    []accessorState
	one                                    [1]accessorState // acc of a one-writer session, in the cohort: no allocation of its own
	kind                                   outcomeKind
	reason                                 string
	byPeer                                 bool
	tokenEnd                               int64
	exposed, fenced, revoked, revokeFences bool
	contained, retired                     bool
}

// NewCohort validates cfg at now and makes its session, reporting every
// mistake at once as an *InputError: a zero attempt, a bad token range, no
// accessors, an accessor named twice, one with no peer or role, one whose
// agreement is not from Negotiate, is with another peer or lacks what
// cfg.Requires, a missing or misordered time, or a deadline already passed
// (a creation that arrives too late to run).
func NewCohort(now time.Time, cfg CohortConfig) (*Cohort, error) {
	m := mistakes{what: "cohort config"}
	if cfg.Session.Attempt == 0 {
		m.add("session.attempt", "0", "an attempt id >= 1")
	}
	checkRange(&m, "tokens", cfg.Tokens)
	checkAccessors(&m, cfg)
	checkTimes(&m, now, cfg)
	if err := m.result(); err != nil {
		return nil, err
	}
	c := &Cohort{
		key: cfg.Session, tokens: cfg.Tokens, leased: cfg.Leased, now: now,
		submitted: cfg.Submitted, deadline: cfg.Deadline, containment: cfg.Containment,
	}
	if len(cfg.Accessors) == 1 {
		c.acc = c.one[:]
	} else {
		c.acc = make([]accessorState, len(cfg.Accessors))
	}
	for i, s := range cfg.Accessors {
		c.acc[i] = accessorState{spec: s, reported: -1}
	}
	return c, nil
}

func checkAccessors(m *mistakes, cfg CohortConfig) {
	if len(cfg.Accessors) == 0 {
		m.add("accessors", "none", "at least one accessor: a session tracks its writers exactly")
	}
	req := cfg.Requires()
	for i, s := range cfg.Accessors {
		// The field's name is built only for a mistake: a cohort is made
		// once a page, and a valid one allocates nothing here.
		field := func() string { return fmt.Sprintf("accessors[%d]", i) }
		if !validPeer(s.ID.Peer) {
			checkPeer(m, field()+".peer", s.ID.Peer)
		}
		if !s.ID.Role.Valid() {
			m.add(field()+".role", s.ID.Role.String(), "kv or aux")
		}
		if j := slices.IndexFunc(cfg.Accessors[:i], func(o AccessorSpec) bool { return o.ID == s.ID }); j >= 0 {
			m.add(field(), s.ID.String(), fmt.Sprintf("an accessor not already named (accessors[%d])", j))
		}
		switch {
		case !s.Agreement.Valid():
			m.add(field()+".agreement", "none", "an agreement made by Negotiate with "+string(s.ID.Peer))
		case s.Agreement.Peer() != s.ID.Peer:
			m.add(field()+".agreement", "with "+string(s.Agreement.Peer()), "an agreement with "+string(s.ID.Peer))
		case s.Agreement.Granted().Missing(req) != 0:
			m.add(field()+".agreement", "lacking "+s.Agreement.Granted().Missing(req).String(), "granting "+req.String())
		}
	}
}

func checkTimes(m *mistakes, now time.Time, cfg CohortConfig) {
	for _, t := range []struct {
		field string
		at    time.Time
	}{{"submitted", cfg.Submitted}, {"deadline", cfg.Deadline}, {"containment", cfg.Containment}} {
		if t.at.IsZero() {
			m.add(t.field, "zero", "a time fixed at submission")
		}
	}
	if cfg.Submitted.IsZero() || cfg.Deadline.IsZero() || cfg.Containment.IsZero() {
		return
	}
	if cfg.Deadline.Before(cfg.Submitted) {
		m.add("deadline", cfg.Deadline.String(), "no earlier than submitted "+cfg.Submitted.String())
	}
	if cfg.Containment.Before(cfg.Deadline) {
		m.add("containment", cfg.Containment.String(), "no earlier than the deadline "+cfg.Deadline.String())
	}
	if !now.Before(cfg.Deadline) {
		m.add("deadline", cfg.Deadline.String(), "later than now ("+now.String()+"): the creation arrived too late")
	}
}

// Key is the session's identity.
func (c *Cohort) Key() SessionKey { return c.key }

// advance applies the deadlines at now: no outcome by the deadline latches
// Failed("timeout"); pages exposed and still unproven at the containment
// deadline are contained for ever.
func (c *Cohort) advance(now time.Time) {
	if now.Before(c.now) {
		now = c.now
	}
	c.now = now
	if c.retired {
		return
	}
	if c.kind == pending && !now.Before(c.deadline) {
		c.latch(failed, "timeout: no outcome by the deadline fixed at submission", false)
	}
	if !c.contained && c.exposed && !now.Before(c.containment) && !c.Physical().Reusable() {
		c.contained = true
		c.fenced = true
	}
}

// latch records the first outcome; later ones change nothing. Any outcome
// fences: nothing more is exposed once the transfer has concluded.
func (c *Cohort) latch(k outcomeKind, reason string, byPeer bool) {
	c.fenced = true
	if c.kind != pending {
		return
	}
	c.kind, c.reason, c.byPeer = k, reason, byPeer
}

// Tick applies the deadlines at now and nothing else.
func (c *Cohort) Tick(now time.Time) { c.advance(now) }

// NextDeadline is the next time at which Tick would change something, or
// the zero time when no deadline is ahead.
func (c *Cohort) NextDeadline() time.Time {
	switch {
	case c.retired || c.contained:
		return time.Time{}
	case c.kind == pending:
		return c.deadline
	case c.exposed && !c.Physical().Reusable():
		return c.containment
	}
	return time.Time{}
}

// Step is the one door evidence enters by. It judges ev at now — malformed,
// another session, an older attempt, an accessor not expected, another
// incarnation, the session retired or contained, or a claim already made:
// refused, and nothing changes, as is evidence before anything was
// exposed — then applies it: a Report records progress
// (and proves nothing); a Done is the accessor's final report, and once
// every accessor is done the session is Delivered up to the least token_end;
// a Failure latches Failed at once, a PeerCancel Cancelled(by peer), while
// siblings keep their pages lent; a Quiesced settles the accessor. A
// token_end outside the session's span is a contract violation: the session
// fails and the accessor's word is no longer taken.
func (c *Cohort) Step(now time.Time, ev Evidence) error {
	c.advance(now)
	if err := ev.Validate(); err != nil {
		return err
	}
	a, err := c.judge(ev)
	if err != nil {
		return err
	}
	return c.apply(a, ev)
}

func (c *Cohort) judge(ev Evidence) (*accessorState, error) {
	switch {
	case c.retired:
		return nil, fmt.Errorf("%w: %s arrived for session %s after its pages were returned", ErrRetired, ev, c.key)
	case ev.Session.Request != c.key.Request, ev.Session.Attempt > c.key.Attempt:
		return nil, fmt.Errorf("%w: %s; this session is %s", ErrWrongSession, ev, c.key)
	case ev.Session.Attempt < c.key.Attempt:
		return nil, fmt.Errorf("%w: %s; the current attempt is %s", ErrStaleAttempt, ev, c.key)
	}
	i := slices.IndexFunc(c.acc, func(a accessorState) bool { return a.spec.ID == ev.Accessor })
	if i < 0 {
		return nil, fmt.Errorf("%w: %s; session %s expects %s", ErrUnknownAccessor, ev, c.key, c.names(nil))
	}
	a := &c.acc[i]
	if want := a.spec.Agreement.Incarnation(); ev.Incarnation != want {
		return nil, fmt.Errorf("%w: %s; session %s was agreed with incarnation %d", ErrStaleIncarnation, ev, c.key, want)
	}
	switch {
	case c.contained:
		return nil, fmt.Errorf("%w: %s arrived after session %s was contained", ErrContained, ev, c.key)
	case !c.exposed:
		// Nothing was handed out, so no accessor can speak of it: a report
		// now is a stray or a replay, and must not conclude the session.
		return nil, fmt.Errorf("%w: %s arrived before session %s published anything", ErrNotExposed, ev, c.key)
	case !a.exposed:
		// This accessor was never handed the pages (its offer was never
		// made): its word about them is a stray or a replay too.
		return nil, fmt.Errorf("%w: %s arrived, but session %s never published its pages to %s", ErrNotExposed, ev, c.key, a.spec.ID)
	}
	return a, nil
}

func (c *Cohort) apply(a *accessorState, ev Evidence) error {
	dup := func(what string) error { return fmt.Errorf("%w: %s: %s", ErrDuplicate, ev, what) }
	switch ev.Kind {
	case Report:
		switch {
		case a.final != 0:
			return fmt.Errorf("%w: %s after its %s", ErrLate, ev, a.final)
		case ev.TokenEnd <= a.reported:
			return dup(fmt.Sprintf("token_end %d was already reported", a.reported))
		case !c.within(ev.TokenEnd):
			c.violation(a, ev)
			return nil
		}
		a.reported = ev.TokenEnd
	case Done, Failure:
		if a.final != 0 {
			return dup("the accessor already sent its final report (" + a.final.String() + ")")
		}
		if ev.Kind == Done && !c.within(ev.TokenEnd) {
			c.violation(a, ev)
			return nil
		}
		a.final, a.doneEnd = ev.Kind, ev.TokenEnd
		if ev.Kind == Failure {
			c.latch(failed, fmt.Sprintf("%s failed: %s", ev.Accessor, ev.Reason), false)
		}
		c.maybeDelivered()
	case PeerCancel:
		if a.cancelled {
			return dup("the peer already cancelled")
		}
		a.cancelled = true
		c.latch(cancelled, "", true)
	case Quiesced:
		if a.quiesced {
			return dup("the accessor is already settled")
		}
		a.quiesced = true
	}
	return nil
}

func (c *Cohort) within(end int64) bool { return c.tokens.Start <= end && end <= c.tokens.End }

// violation: the accessor claimed a token_end outside what was asked. Its
// word is not taken again (its final report is this failure), and it is not
// settled by it.
func (c *Cohort) violation(a *accessorState, ev Evidence) {
	a.final = Failure
	c.latch(failed, fmt.Sprintf("contract violation: %s is outside the session's span %s", ev, c.tokens), false)
}

func (c *Cohort) maybeDelivered() {
	end := c.tokens.End
	for i := range c.acc {
		if c.acc[i].final != Done {
			return
		}
		end = min(end, c.acc[i].doneEnd)
	}
	c.latch(delivered, "", false)
	if c.kind == delivered {
		c.tokenEnd = end
	}
}

// names lists the accessors that match keep (all of them for nil).
func (c *Cohort) names(keep func(*accessorState) bool) string {
	var s []string
	for i := range c.acc {
		if keep == nil || keep(&c.acc[i]) {
			s = append(s, c.acc[i].spec.ID.String())
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
