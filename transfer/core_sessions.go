package transfer

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// More reasons Sessions refuses an input; each refusal changes nothing.
var (
	ErrUnknownSession = errors.New("transfer: no such session")
	ErrTombstoned     = errors.New("transfer: the session was cancelled before it was created")
	ErrExists         = errors.New("transfer: the session already exists")
	ErrTooLate        = errors.New("transfer: the creation arrived after its window")
	ErrFull           = errors.New("transfer: no room for another session")
	ErrShutdown       = errors.New("transfer: shut down; no session is created")
)

// Limits bounds what Sessions remembers. Every bound is required.
type Limits struct {
	// Sessions is how many sessions are held at most: live ones, contained
	// ones (their pages never return) and retired ones not yet forgotten.
	Sessions int
	// Tombstones is how many cancels that overtook a creation are held at
	// most. When full, such a cancel is Rejected (retryable), never dropped
	// silently.
	Tombstones int
	// Window is how long after its submission a session's creation is still
	// accepted. A tombstone, and a retired session's key, are remembered for
	// Window, so neither can be forgotten while a creation it must refuse
	// could still be accepted — given that a creation's Submitted is no later
	// than any cancel of the same attempt (nobody can cancel an attempt
	// before its identity exists).
	Window time.Duration
}

func (l Limits) validate() error {
	m := mistakes{what: "limits"}
	if l.Sessions < 1 {
		m.add("sessions", fmt.Sprint(l.Sessions), "at least 1")
	}
	if l.Tombstones < 1 {
		m.add("tombstones", fmt.Sprint(l.Tombstones), "at least 1")
	}
	if l.Window <= 0 {
		m.add("window", l.Window.String(), "a positive duration")
	}
	return m.result()
}

// Sessions is a transceiver's table of sessions, pure like Cohort: no
// goroutine, no clock. It adds what one session cannot know alone:
// tombstones for cancels that overtake a creation, refusal of a creation
// replayed or arriving late, routing of evidence by key, a peer's loss told
// to every session it touches, and shutdown.
type Sessions struct {
	limits Limits
	live   map[SessionKey]*Cohort // every session held, retired ones included
	// active is live less the retired sessions: the ones whose deadlines a
	// clock move applies. forget holds the retired ones by when they may be
	// forgotten. Together they make a clock move cost O(active + what is
	// forgotten), not O(held): a receiver retires thousands of sessions a
	// second and must hold each for Window.
	active map[SessionKey]*Cohort
	forget forgetHeap
	// due is the earliest deadline of an active session as of the last
	// walk (zero: none), and stale says an input may have moved one since.
	// A clock move walks the active sessions only when one of the two says
	// a deadline may have come: a Receiver polls every session on every
	// Progress, so a walk per poll made each Progress quadratic.
	due   time.Time
	stale bool
	tombs map[SessionKey]time.Time // key → when it may be forgotten
	shut  bool
	now   time.Time
}

// NewSessions makes an empty table, or reports every mistake in limits.
func NewSessions(limits Limits) (*Sessions, error) {
	if err := limits.validate(); err != nil {
		return nil, err
	}
	return &Sessions{limits: limits, live: map[SessionKey]*Cohort{}, active: map[SessionKey]*Cohort{},
		tombs: map[SessionKey]time.Time{}}, nil
}

// advance moves the table's clock (never backwards), forgets tombstones and
// retired sessions past their window, and applies every session's
// deadlines.
func (s *Sessions) advance(now time.Time) {
	if now.Before(s.now) {
		now = s.now
	}
	s.now = now
	if len(s.tombs) > 0 {
		maps.DeleteFunc(s.tombs, func(_ SessionKey, until time.Time) bool { return !now.Before(until) })
	}
	for len(s.forget) > 0 && !now.Before(s.forget[0].until) {
		delete(s.live, s.forget.pop().key)
	}
	if !s.stale && (s.due.IsZero() || now.Before(s.due)) {
		return // no active session's deadline has come: advancing would change nothing
	}
	// A retired session's advance only moves its own clock, which its next
	// input (all refused) moves anyway.
	s.due, s.stale = time.Time{}, false
	for _, c := range s.active {
		c.advance(now)
		if d := c.NextDeadline(); !d.IsZero() && (s.due.IsZero() || d.Before(s.due)) {
			s.due = d
		}
	}
}

// touched notes that an input may have changed an active session's
// deadlines (or added or retired one): the next clock move walks them.
func (s *Sessions) touched() { s.stale = true }

// Due reports whether advancing to now may change an active session: one's
// deadline came, or an input since the last walk may have moved one. When
// it answers false, Tick and Poll at now change no active session.
func (s *Sessions) Due(now time.Time) bool {
	return s.stale || (!s.due.IsZero() && !now.Before(s.due))
}

// Tick applies every deadline at now.
func (s *Sessions) Tick(now time.Time) { s.advance(now) }

// Create makes a session from cfg (see NewCohort for what cfg must be).
// Refused after Shutdown; when cfg was submitted Window or more before now;
// when a cancel tombstoned its key; when its key exists (a replayed
// creation, a retired session's included); and when the table is full.
func (s *Sessions) Create(now time.Time, cfg CohortConfig) error {
	s.advance(now)
	defer s.touched()
	key := cfg.Session
	switch {
	case s.shut:
		return fmt.Errorf("%w: session %s", ErrShutdown, key)
	case !cfg.Submitted.IsZero() && now.Sub(cfg.Submitted) >= s.limits.Window:
		return fmt.Errorf("%w: session %s was submitted at %s, %s or more before now (%s): a cancel of it may already be forgotten",
			ErrTooLate, key, cfg.Submitted.Format(time.RFC3339Nano), s.limits.Window, now.Format(time.RFC3339Nano))
	}
	if until, ok := s.tombs[key]; ok {
		return fmt.Errorf("%w: session %s (tombstone kept until %s)", ErrTombstoned, key, until.Format(time.RFC3339Nano))
	}
	if c, ok := s.live[key]; ok {
		state := c.Physical().String()
		if c.retired {
			state = "retired"
		}
		return fmt.Errorf("%w: session %s (%s)", ErrExists, key, state)
	}
	if len(s.live) >= s.limits.Sessions {
		return fmt.Errorf("%w: %d sessions held, the limit", ErrFull, len(s.live))
	}
	c, err := NewCohort(now, cfg)
	if err != nil {
		return err
	}
	s.live[key] = c
	s.active[key] = c
	return nil
}

// find returns key's session, or an error that says what is known of key.
func (s *Sessions) find(key SessionKey) (*Cohort, error) {
	if c, ok := s.live[key]; ok {
		return c, nil
	}
	if _, ok := s.tombs[key]; ok {
		return nil, fmt.Errorf("%w: %w: session %s", ErrUnknownSession, ErrTombstoned, key)
	}
	for k := range s.live {
		if k.Request == key.Request && k.Attempt > key.Attempt {
			return nil, fmt.Errorf("%w: %w: session %s; the request's attempt %d is live", ErrUnknownSession, ErrStaleAttempt, key, k.Attempt)
		}
	}
	return nil, fmt.Errorf("%w: session %s", ErrUnknownSession, key)
}

// Step routes ev to its session (Cohort.Step). Evidence for no session —
// never created, tombstoned, forgotten, or an older attempt of a live
// request — is refused with ErrUnknownSession.
func (s *Sessions) Step(now time.Time, ev Evidence) error {
	s.advance(now)
	defer s.touched()
	if err := ev.Validate(); err != nil {
		return err
	}
	c, err := s.find(ev.Session)
	if err != nil {
		return fmt.Errorf("%w (evidence %s)", err, ev)
	}
	return c.Step(now, ev)
}

// Expose routes to the session's Cohort.Expose.
func (s *Sessions) Expose(now time.Time, key SessionKey) error {
	s.advance(now)
	defer s.touched()
	c, err := s.find(key)
	if err != nil {
		return err
	}
	return c.Expose(now)
}

// ExposeTo routes to the session's Cohort.ExposeTo.
func (s *Sessions) ExposeTo(now time.Time, key SessionKey, id AccessorID) error {
	s.advance(now)
	defer s.touched()
	c, err := s.find(key)
	if err != nil {
		return err
	}
	return c.ExposeTo(now, id)
}

// Revoked routes to the session's Cohort.Revoked.
func (s *Sessions) Revoked(now time.Time, key SessionKey, fences bool) error {
	s.advance(now)
	defer s.touched()
	c, err := s.find(key)
	if err != nil {
		return err
	}
	return c.Revoked(now, fences)
}

// Retire routes to the session's Cohort.Retire. The retired key is
// remembered for the window, so a replayed creation of it is refused.
func (s *Sessions) Retire(now time.Time, key SessionKey) error {
	s.advance(now)
	defer s.touched()
	c, err := s.find(key)
	if err != nil {
		return err
	}
	if err := c.Retire(now); err != nil {
		return err
	}
	delete(s.active, key)
	s.forget.push(forgetAt{until: c.submitted.Add(s.limits.Window), key: key})
	return nil
}

// PeerLost tells every session with an accessor of that incarnation of peer
// (Cohort.PeerLost) and answers how many accessors were marked in all.
func (s *Sessions) PeerLost(now time.Time, peer Peer, inc Incarnation, reason string) int {
	s.advance(now)
	defer s.touched()
	marked := 0
	for _, key := range s.keys() {
		n, _ := s.live[key].PeerLost(now, peer, inc, reason)
		marked += n
	}
	return marked
}

// Cancel cancels key's session (Cohort.Cancel). A cancel for a session not
// created yet leaves a tombstone for the window, so the late creation is
// refused: Accepted, NotExposed. When the tombstone table is full it is
// Rejected, retryable, and InDoubt — the late creation could still run.
func (s *Sessions) Cancel(now time.Time, key SessionKey, reason string) CancelResult {
	s.advance(now)
	defer s.touched()
	if c, ok := s.live[key]; ok {
		return c.Cancel(now, reason)
	}
	if _, ok := s.tombs[key]; ok {
		return CancelResult{Logical: AlreadyTerminal, Physical: NotExposed, Reason: reason + ": already tombstoned"}
	}
	if s.shut {
		return CancelResult{Logical: NotFound, Physical: NotExposed, Reason: reason + ": shut down, no session will be created"}
	}
	if len(s.tombs) >= s.limits.Tombstones {
		return CancelResult{Logical: Rejected, Physical: InDoubt, Retryable: true,
			Reason: fmt.Sprintf("%s: no session %s yet, and %d tombstones held, the limit: a late creation could still run", reason, key, len(s.tombs))}
	}
	until := now.Add(s.limits.Window)
	s.tombs[key] = until
	return CancelResult{Logical: Accepted, Physical: NotExposed,
		Reason: fmt.Sprintf("%s: no session %s yet: tombstoned until %s, a late creation is refused", reason, key, until.Format(time.RFC3339Nano))}
}

// Fence fences key's session (Cohort.Fence); AlreadyTerminal for a
// tombstoned key, NotFound for an unknown one.
func (s *Sessions) Fence(now time.Time, key SessionKey) Logical {
	s.advance(now)
	defer s.touched()
	if c, ok := s.live[key]; ok {
		return c.Fence(now)
	}
	if _, ok := s.tombs[key]; ok {
		return AlreadyTerminal
	}
	return NotFound
}

// Poll answers key's physical disposition at now: NotExposed for a
// tombstoned key (nothing was, or will be, created), InDoubt for one it
// knows nothing of — never a fabricated quiescence.
func (s *Sessions) Poll(now time.Time, key SessionKey) Physical {
	s.advance(now)
	if c, ok := s.live[key]; ok {
		return c.Physical()
	}
	if _, ok := s.tombs[key]; ok {
		return NotExposed
	}
	return InDoubt
}

// Info returns key's session state, if the table holds it.
func (s *Sessions) Info(key SessionKey) (CohortInfo, bool) {
	c, ok := s.live[key]
	if !ok {
		return CohortInfo{}, false
	}
	return c.Info(), true
}

// Outcome returns key's latched outcome (nil while pending), if held.
func (s *Sessions) Outcome(key SessionKey) (Outcome, bool) {
	c, ok := s.live[key]
	if !ok {
		return nil, false
	}
	return c.Outcome(), true
}

// NextDeadline is the earliest time at which Tick would change something:
// a session's deadline, or when a tombstone or retired key is forgotten.
// Zero when nothing is ahead.
func (s *Sessions) NextDeadline() time.Time {
	var next time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, c := range s.active {
		earlier(c.NextDeadline())
	}
	if len(s.forget) > 0 {
		earlier(s.forget[0].until)
	}
	for _, until := range s.tombs {
		earlier(until)
	}
	return next
}

// Shutdown stops admission (every later Create is refused), cancels every
// session not retired, and reports at now (see Report).
func (s *Sessions) Shutdown(now time.Time) ShutdownResult {
	s.advance(now)
	defer s.touched()
	s.shut = true
	for _, key := range s.keys() {
		if c := s.live[key]; !c.retired {
			c.Cancel(now, "shutdown")
		}
	}
	return s.Report(now)
}

// Report says what the table holds at now: how many sessions' pages are not
// proven reusable (in doubt, named in Reason), whether any was contained
// (Fatal), and the aggregate disposition — InDoubt when any is in doubt;
// otherwise NotExposed when nothing held was ever exposed, QuiescedFailure
// when any exposed session failed, QuiescedSuccess else.
func (s *Sessions) Report(now time.Time) ShutdownResult {
	s.advance(now)
	var doubt []string
	r := ShutdownResult{Physical: NotExposed}
	for _, key := range s.keys() {
		c := s.live[key]
		p := c.Physical()
		r.Fatal = r.Fatal || c.contained
		switch {
		case !p.Reusable():
			doubt = append(doubt, key.String()+" "+p.String())
		case p == QuiescedFailure:
			r.Physical = QuiescedFailure
		case p == QuiescedSuccess && r.Physical == NotExposed:
			r.Physical = QuiescedSuccess
		}
	}
	r.InDoubt = len(doubt)
	if r.InDoubt > 0 {
		r.Physical = InDoubt
		r.Reason = fmt.Sprintf("%d in doubt: %s", r.InDoubt, strings.Join(doubt, ", "))
	}
	return r
}

// keys returns the held keys in order, so that what a walk does is the same
// on every run.
func (s *Sessions) keys() []SessionKey {
	return slices.SortedFunc(maps.Keys(s.live), func(a, b SessionKey) int {
		return cmp.Or(cmp.Compare(a.Request, b.Request), cmp.Compare(a.Attempt, b.Attempt))
	})
}

// settling counts the sessions whose pages may still become reusable: not
// reusable yet, and not contained (a contained session never becomes so).
// A retired session was reusable when it retired, and takes no input after.
func (s *Sessions) settling() int {
	n := 0
	for _, c := range s.active {
		if !c.Physical().Reusable() && !c.contained {
			n++
		}
	}
	return n
}

// forgetAt is when a retired session's key may be forgotten.
type forgetAt struct {
	until time.Time
	key   SessionKey
}

// forgetHeap is a binary min-heap of forgetAt by until (container/heap is
// not among what a core file imports).
type forgetHeap []forgetAt

func (h forgetHeap) less(i, j int) bool { return h[i].until.Before(h[j].until) }

func (h *forgetHeap) push(f forgetAt) {
	*h = append(*h, f)
	a := *h
	for i := len(a) - 1; i > 0; {
		up := (i - 1) / 2
		if !a.less(i, up) {
			break
		}
		a[i], a[up] = a[up], a[i]
		i = up
	}
}

func (h *forgetHeap) pop() forgetAt {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a[last] = forgetAt{}
	a = a[:last]
	for i := 0; ; {
		l, r, least := 2*i+1, 2*i+2, i
		if l < len(a) && a.less(l, least) {
			least = l
		}
		if r < len(a) && a.less(r, least) {
			least = r
		}
		if least == i {
			break
		}
		a[i], a[least] = a[least], a[i]
		i = least
	}
	*h = a
	return top
}
