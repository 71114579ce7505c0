package peer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
)

// ReceiverConfig assembles a Receiver. Every field without a stated default
// is required.
type ReceiverConfig struct {
	// Transport is this process's communication engine: the Receiver sets
	// its handlers (so a transport serves one Receiver or Sender), registers
	// the pages and (with the default Offer) sends the offers.
	Transport transfer.Transport
	// Capabilities is what this side advertises; its peer and incarnation
	// must be the Transport's own.
	Capabilities transfer.Capabilities
	// Slot is the staging slot a unit names — the engine's staging pool
	// (staging.Memory.Row(u.LocalGroup, u.Local)): the bytes the writers
	// write. It is called under the Receiver's lock, from Fetch.
	Slot func(contract.Unit) []byte
	// Leased registers each session's pages under their own registration,
	// revoked once the outcome is latched and before the pages may return
	// (ALLOCATION_GENERATION_LEASES). Without it each staging slot is
	// registered once, for the Receiver's life, and a session relies on
	// the writers' own SUBMISSION_FENCE.
	Leased bool
	// Timeout is how long after its submission a session may go without an
	// outcome (then Failed "timeout"); Grace how long after that its pages
	// may stay unproven before they are contained (IN_DOUBT: Quiesce answers
	// false for ever). Both are fixed at submission. Keep Timeout + Grace at
	// or under the engine's RequestTimeout + DrainGrace: the engine contains
	// the lease at its own deadline either way, and a receiver that gives up
	// first only says so sooner.
	Timeout, Grace time.Duration
	// Clock reads the time for the sessions' deadlines (default time.Now).
	Clock func() time.Time
	// Limits bounds the sessions (and, with the same Sessions bound, the
	// plans expected and not yet fetched).
	Limits transfer.Limits
	// Offer hands one writer its addresses once its session exists and its
	// pages are recorded exposed. Nil sends the offer (AppendOffer) as an
	// active message over an endpoint to the writer's peer — which must be
	// the incarnation the session was agreed with.
	Offer func(Offer) error
	// Cancel hands one writer offered a session's addresses the
	// receiver's request that it stop (IN_FLIGHT_CANCELLATION), on the
	// owner's cancel and on the session's deadline; Progress calls it, in
	// session order, whoever noticed either. Nil sends it
	// (AppendCancel) as an active message over an endpoint to the life the
	// session was agreed with. Best effort: an error is counted, nothing
	// more — the pages wait for the writer's settlement either way.
	Cancel func(Cancel) error
	// Poll, when positive, starts a driver goroutine that calls Progress
	// every Poll until Close. Zero leaves Progress to the owner.
	Poll time.Duration
}

// ReceiverStats counts what a Receiver saw.
type ReceiverStats struct {
	Evidence     uint64 // evidence the sessions took
	Refused      uint64 // evidence the sessions refused: stale, duplicate, late, unknown, another life's
	Malformed    uint64 // messages that were no evidence
	Impersonated uint64 // evidence naming another peer or life than the endpoint it came on
	PeersLost    uint64 // endpoint errors
	Rejected     uint64 // fetches refused before anything escaped
	Revocations  uint64 // leased sessions whose registrations were revoked
	Fenced       uint64 // of those, revocations that fenced every page
	Cancels      uint64 // cancel requests handed to writers (sent: not necessarily heard)
	Unsent       uint64 // cancel requests that could not be sent (the writer's life gone, the endpoint failed)

	// InFlight is the sessions fetched whose pages are not yet proven
	// reusable, those in doubt aside; InDoubt the sessions in doubt (their
	// pages contained: Quiesce answers false for ever). Both are counts now,
	// not totals.
	InFlight, InDoubt uint64
	// Delivered, Failed and Cancelled count the outcomes latched, by kind.
	Delivered, Failed, Cancelled uint64
	// Settle counts the sessions proven over (their pages reusable, the
	// session retired) by how long after their submission, on the
	// receiver's Clock: bucket i holds [2^(i-1), 2^i) ns (LatencyBuckets);
	// SettleSum is the total of those durations.
	Settle    [LatencyBuckets]uint64
	SettleSum time.Duration
}

type receiverCounters struct {
	evidence, refused, malformed, impersonated, peersLost, rejected, revocations, fenced atomic.Uint64
	live, inDoubt                                                                        atomic.Uint64 // sessions in r.live; of those, in doubt (never leave r.live)
	outcomes                                                                             outcomes
	settle                                                                               latency
	cancels, unsent                                                                      atomic.Uint64
}

// agreed is what a Receiver or Sender knows of one peer: the agreement made
// with its latest advertised life, and whether that life's endpoint failed.
type agreed struct {
	agreement transfer.Agreement
	lost      bool
}

// Receiver is the decode side of a peer transfer as a backend of the
// engine: a contract.Fetcher whose attempts are sessions of a
// transfer.Transceiver. The staging slots the engine lends are the pages
// the peers write (bounce buffers registered with the transport); the
// engine's fence waits on the whole cohort of writers through Quiesce. See
// the package documentation.
type Receiver struct {
	cfg  ReceiverConfig
	tx   *transfer.Transceiver
	self transfer.Peer
	inc  transfer.Incarnation
	n    receiverCounters

	mu       sync.Mutex
	peers    map[transfer.Peer]agreed
	plans    map[transfer.SessionKey]*expected
	byName   map[contract.Name]transfer.SessionKey // every page of every plan expected
	live     map[transfer.SessionKey]*session
	slotRegs map[[2]int]transfer.Memory // not Leased: one registration per slot, for the Receiver's life
	changed  wakeCh                     // closed when an outcome is observed
	outbox   []Cancel                   // cancels Progress sends next
	closed   bool
	observed uint64                // the transceiver's Changes when Progress last observed every live session
	order    []transfer.SessionKey // Progress's walk of live, in key order: kept until live changes, so a pass neither sorts nor allocates
	retry    bool                  // a revocation failed in that pass: observe again, changed or not

	epMu sync.Mutex
	eps  map[transfer.Peer]transfer.Endpoint // the default Offer's endpoints

	drv *driver
}

// expected is a plan not yet fetched.
type expected struct {
	plan  Plan
	pages []Page
	page  [1]Page // pages' backing for a one-page plan (keepPages)
	index pageIndex
}

// session is a fetched plan: the engine's attempt.
type session struct {
	key     transfer.SessionKey
	plan    Plan
	pages   []Page
	mems    []transfer.Memory  // Leased: this session's registration of each page
	mem     [1]transfer.Memory // mems' backing for a one-page session: no allocation of its own
	addr    [1]OfferPage       // the offers' pages for a one-page session (register)
	revoked bool
	outcome contract.Outcome // the first outcome observed, answered for ever
	failure string           // an offer failed: the local cancel that followed reads as this failure
	waiters []func()
	waiter  [1]func() // waiters' first: the engine notifies once an attempt, no allocation of its own
	cancel  *cancelAnswer
	ended   bool // proven over and retired: its pages are the engine's again

	deadline  time.Time       // the session's, fixed at submission
	targets   []cancelTarget  // every writer, in offer order
	target    [1]cancelTarget // targets' backing for one writer
	reached   int             // writers whose offer was attempted: targets[:reached] may hold the addresses
	cancelled bool            // the writers reached were asked to stop (once)
	inDoubt   bool            // the transceiver answered IN_DOUBT: counted in receiverCounters.inDoubt
	// submitted is the receiver's Clock at the submission, the start of the
	// submit-to-settled latency.
	submitted time.Time
	attempt   fetchAttempt // the engine's handle, in the session: no allocation of its own
}

type cancelAnswer struct {
	d   contract.CancelDisposition
	err error
}

var (
	_ contract.Fetcher       = (*Receiver)(nil)
	_ contract.QuiesceProber = (*Receiver)(nil)
	_ contract.Cancellable   = (*fetchAttempt)(nil)
	_ contract.Notifier      = (*fetchAttempt)(nil)
)

// NewReceiver assembles a Receiver and sets the transport's handlers. It
// refuses, naming every mistake at once, a missing transport or slot
// function, an advertisement that is not the transport's own peer and
// incarnation, a non-positive Timeout, a negative Grace or Poll, and limits
// that bound nothing.
func NewReceiver(cfg ReceiverConfig) (*Receiver, error) {
	m := mistakes{what: "receiver config"}
	self, inc := checkSide(&m, cfg.Transport, cfg.Capabilities, cfg.Slot != nil)
	checkDurations(&m, cfg.Timeout, cfg.Grace, cfg.Poll)
	if err := m.result(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	tx, err := transfer.NewTransceiver(cfg.Capabilities, cfg.Limits, cfg.Clock)
	if err != nil {
		return nil, err
	}
	r := &Receiver{
		cfg: cfg, tx: tx, self: self, inc: inc,
		peers: map[transfer.Peer]agreed{}, plans: map[transfer.SessionKey]*expected{},
		byName: map[contract.Name]transfer.SessionKey{}, live: map[transfer.SessionKey]*session{},
		slotRegs: map[[2]int]transfer.Memory{},
		eps:      map[transfer.Peer]transfer.Endpoint{},
	}
	cfg.Transport.SetHandlers(transfer.Handlers{Message: r.message, EndpointError: r.endpointError})
	if cfg.Poll > 0 {
		r.drv = startDriver(cfg.Poll, func() { r.Progress() })
	}
	return r, nil
}

// checkSide checks what a Receiver and a Sender both need: a transport,
// an advertisement that is the transport's own peer and incarnation, and a
// slot function. It answers the transport's peer and incarnation.
func checkSide(m *mistakes, tr transfer.Transport, caps transfer.Capabilities, haveSlot bool) (transfer.Peer, transfer.Incarnation) {
	var self transfer.Peer
	var inc transfer.Incarnation
	if tr == nil {
		m.add("transport", "nil", "the process's transfer.Transport")
	} else {
		self, inc = tr.Self()
		if caps.Peer != self || caps.Incarnation != inc {
			m.add("capabilities", fmt.Sprintf("%s#%d", caps.Peer, caps.Incarnation),
				fmt.Sprintf("the transport's own peer and incarnation, %s#%d", self, inc))
		}
	}
	if !haveSlot {
		m.add("slot", "nil", "the staging slot a unit names")
	}
	return self, inc
}

// quiesceNow is a prober's answer as the contract's Quiesce: true when the
// listed attempts' access ended now. It never waits — evidence arrives only
// through Progress, never inside the call — and a ctx already done is an
// error, never true.
func quiesceNow(ctx context.Context, attempts []contract.Attempt, try func([]contract.Attempt) (contract.Access, error)) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	a, err := try(attempts)
	return a == contract.AccessEnded, err
}

func checkDurations(m *mistakes, timeout, grace, poll time.Duration) {
	if timeout <= 0 {
		m.add("timeout", timeout.String(), "a positive duration")
	}
	if grace < 0 {
		m.add("grace", grace.String(), "a duration >= 0")
	}
	if poll < 0 {
		m.add("poll", poll.String(), "0 (no driver) or a positive interval")
	}
}

// required is what a session of n writers needs of every writer's
// agreement (transfer.CohortConfig.Requires).
func required(n int, leased bool) transfer.CapabilitySet {
	// Requires reads only whether there is more than one accessor: two
	// stand for many, on the stack, not n on the heap once a fetch.
	var two [2]transfer.AccessorSpec
	cfg := transfer.CohortConfig{Leased: leased, Accessors: two[:min(n, 2)]}
	return cfg.Requires()
}

// Connect negotiates with one life of a peer, from its advertisement,
// before anything is published to it: the agreement it answers is what
// every later session naming a writer of that peer runs under, until the
// next Connect for the peer. A peer lacking what every session needs
// (attempt identity, endpoint incarnation, exact writer tracking, and the
// generation lease when Leased or its own submission fence when not) is
// refused with a *transfer.NegotiationError; MULTI_WRITER is checked at
// each fetch that has several writers.
func (r *Receiver) Connect(remote transfer.Capabilities) (transfer.Agreement, error) {
	a, err := transfer.Negotiate(r.cfg.Capabilities, remote, required(1, r.cfg.Leased))
	if err != nil {
		return transfer.Agreement{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.peers[remote.Peer] = agreed{agreement: a}
	return a, nil
}

// Expect records a plan before its pages are lent, and answers its pages
// (Plan.Pages): the owner lends one row per page, named Page.Name, at
// Page.Block, into the device page Page.ID stands for. A Fetch whose extent
// names exactly one plan's pages runs that plan. Refused, changing nothing:
// a plan that does not validate, one whose attempt is already expected or
// fetched, and one more than Limits.Sessions plans waiting.
func (r *Receiver) Expect(p Plan) ([]Page, error) {
	pages, err := p.Pages()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key := p.Key()
	switch {
	case r.closed:
		return nil, errors.New("peer: the receiver is closed; no plan is taken")
	case r.plans[key] != nil:
		return nil, fmt.Errorf("peer: attempt %s is already expected", key)
	case r.live[key] != nil:
		return nil, fmt.Errorf("peer: attempt %s was already fetched; a retry is a new attempt", key)
	case len(r.plans) >= r.cfg.Limits.Sessions:
		return nil, fmt.Errorf("peer: %d plans wait for their fetch, the limit (Limits.Sessions); fetch or Forget one", len(r.plans))
	}
	e := &expected{plan: p}
	out := keepPages(&e.pages, e.page[:0], pages)
	e.index = newPageIndex(e.pages)
	for _, pg := range pages {
		r.byName[pg.Name] = key
	}
	r.plans[key] = e
	return out, nil
}

// Forget drops a plan that will not be fetched (its lease was withdrawn
// before submission). It answers whether the plan was waiting.
func (r *Receiver) Forget(key transfer.SessionKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.plans[key]
	if e == nil {
		return false
	}
	r.dropPlan(key, e)
	return true
}

func (r *Receiver) dropPlan(key transfer.SessionKey, e *expected) {
	for _, pg := range e.pages {
		delete(r.byName, pg.Name)
	}
	delete(r.plans, key)
}

// Fetch runs the plan whose pages the extent names: it checks every
// writer's agreement, registers the pages, creates the session with its
// deadlines fixed now, and hands each writer its offer, recording the pages
// exposed to that writer just before (transfer.Cohort.ExposeTo). The plan is consumed, whatever the answer. Refused with
// contract.ErrSubmissionRejected — nothing registered stays, nothing was
// published — for an extent whose units are not exactly one plan's pages,
// a writer whose peer was never connected, was lost since, or lacks what the
// session needs, a unit with no staging slot, and a session the transceiver
// refuses (a tombstoned or replayed attempt, a full table). An offer that
// fails after exposure fails the attempt instead (its outcome Failed), and
// the writers after it are never offered: the pages wait for the writers
// offered, the failed one included (its offer may have left), and no other.
func (r *Receiver) Fetch(ext contract.CacheExtent, _ contract.Route) (contract.Attempt, error) {
	r.mu.Lock()
	s, offers, err := r.admit(ext)
	r.mu.Unlock()
	if err != nil {
		r.n.rejected.Add(1)
		return nil, fmt.Errorf("%w: peer: %w", contract.ErrSubmissionRejected, err)
	}
	for i, o := range offers {
		// Each writer is recorded exposed just before its offer leaves, so a
		// writer the offers never reached (one before it failed, or the
		// session was cancelled meanwhile) is not waited for: the pages wait
		// only for the writers that may hold their address. It is counted
		// reached before that, so a cancel from a driver's deadline meanwhile
		// asks it to stop too (a cancel that overtakes its offer leaves a
		// tombstone at the writer).
		r.mu.Lock()
		s.reached = i + 1
		r.mu.Unlock()
		if err := r.tx.ExposeTo(s.key, o.Writer); err != nil {
			break // fenced by a cancel or a deadline since admit: offer no more
		}
		if err := r.offer(o); err != nil {
			r.mu.Lock()
			s.failure = fmt.Sprintf("offer to %s failed: %v", o.Writer, err)
			r.tx.Cancel(s.key, s.failure)
			r.cancelWriters(s, s.failure)
			wake := r.observe(s)
			r.mu.Unlock()
			callAll(wake)
			break
		}
	}
	return &s.attempt, nil
}

// admit does everything Fetch does before the offers; r.mu is held.
func (r *Receiver) admit(ext contract.CacheExtent) (*session, []Offer, error) {
	if r.closed {
		return nil, nil, errors.New("the receiver is closed")
	}
	e, err := r.planOf(ext)
	if err != nil {
		return nil, nil, err
	}
	key := e.plan.Key()
	r.dropPlan(key, e)
	cfg, err := r.cohort(e.plan)
	if err != nil {
		return nil, nil, err
	}
	s := &session{key: key, plan: e.plan, pages: e.pages, submitted: cfg.Submitted, deadline: cfg.Deadline}
	s.attempt = fetchAttempt{r: r, s: s}
	s.waiters = s.waiter[:0]
	s.targets = cancelTargets(s.target[:0], cfg)
	if r.cfg.Leased && len(e.pages) == 1 {
		s.mems = s.mem[:0]
	}
	var few [scanMax]contract.Unit // register keeps no slice: a few units stay on the stack
	units := few[:0]
	if len(e.pages) > len(few) {
		units = make([]contract.Unit, 0, len(e.pages))
	}
	units = units[:len(e.pages)]
	for _, u := range ext.All() {
		units[e.index.of(u.Name)] = u
	}
	addrs, err := r.register(s, units)
	if err != nil {
		return nil, nil, err
	}
	if err := r.tx.Create(cfg); err != nil {
		r.revoke(s)
		return nil, nil, err
	}
	r.live[key] = s
	r.order = r.order[:0] // live changed: the next pass sorts again
	r.n.live.Add(1)
	offers := make([]Offer, len(cfg.Accessors))
	for i, a := range cfg.Accessors {
		offers[i] = Offer{Session: key, Writer: a.ID, Incarnation: a.Agreement.Incarnation(),
			Receiver: r.self, ReceiverInc: r.inc, Tokens: e.plan.Chunk.Tokens(), Pages: addrs}
	}
	return s, offers, nil
}

// planOf finds the one plan whose pages ext names, all of them and nothing
// else.
func (r *Receiver) planOf(ext contract.CacheExtent) (*expected, error) {
	if ext.Len() == 0 {
		return nil, errors.New("an extent with no units names no plan")
	}
	var key transfer.SessionKey
	for i, u := range ext.All() {
		k, ok := r.byName[u.Name]
		switch {
		case !ok:
			return nil, fmt.Errorf("unit %d (%s…) is no page of a plan expected: Expect the plan before lending its pages (a plan is fetched once)", i, u.Name.String()[:16])
		case i > 0 && k != key:
			return nil, fmt.Errorf("the extent mixes the pages of attempts %s and %s; one fetch runs one plan", key, k)
		}
		key = k
	}
	e := r.plans[key]
	if ext.Len() != len(e.pages) {
		return nil, fmt.Errorf("attempt %s has %d pages; the extent names %d of them: lend every page of a plan in one lease", key, len(e.pages), ext.Len())
	}
	return e, nil
}

// cohort builds the session's config from the plan and the agreements.
func (r *Receiver) cohort(p Plan) (transfer.CohortConfig, error) {
	now := r.cfg.Clock()
	deadline := now.Add(r.cfg.Timeout)
	cfg := transfer.CohortConfig{Session: p.Key(), Tokens: p.Chunk.Tokens(), Leased: r.cfg.Leased,
		Submitted: now, Deadline: deadline, Containment: deadline.Add(r.cfg.Grace)}
	need := required(len(p.Writers), r.cfg.Leased)
	for _, w := range p.Writers {
		a, ok := r.peers[w.Peer]
		switch {
		case !ok:
			return cfg, fmt.Errorf("writer %s: no agreement with peer %q: Connect it before its sessions", w, w.Peer)
		case a.lost:
			return cfg, fmt.Errorf("writer %s: peer %s#%d was lost: Connect its new life", w, w.Peer, a.agreement.Incarnation())
		}
		if miss := a.agreement.Granted().Missing(need); miss != 0 {
			return cfg, fmt.Errorf("writer %s: the agreement with %s#%d lacks %s, which this session needs", w, w.Peer, a.agreement.Incarnation(), miss)
		}
		cfg.Accessors = append(cfg.Accessors, transfer.AccessorSpec{ID: w, Agreement: a.agreement})
	}
	return cfg, nil
}

// register registers the session's pages — each on its own when Leased,
// else through the slot's lifelong registration — and answers their
// addresses. On error nothing the session registered stays registered.
func (r *Receiver) register(s *session, units []contract.Unit) ([]OfferPage, error) {
	addrs := s.addr[:]
	if len(units) != 1 {
		addrs = make([]OfferPage, len(units))
	}
	for i, u := range units {
		slot := r.cfg.Slot(u)
		if len(slot) == 0 {
			r.revoke(s)
			return nil, fmt.Errorf("unit %d (local group %d, slot %d) has no staging slot", i, u.LocalGroup, u.Local)
		}
		mem, err := r.memory(u, slot)
		if err != nil {
			r.revoke(s)
			return nil, fmt.Errorf("registering page %d: %w", i, err)
		}
		if r.cfg.Leased {
			s.mems = append(s.mems, mem)
		}
		pg := s.pages[i]
		addrs[i] = OfferPage{Group: pg.Group, Index: pg.Index, Key: mem.PackedKey(), Len: len(slot)}
	}
	return addrs, nil
}

func (r *Receiver) memory(u contract.Unit, slot []byte) (transfer.Memory, error) {
	if r.cfg.Leased {
		return r.cfg.Transport.Register(slot)
	}
	at := [2]int{u.LocalGroup, u.Local}
	if m := r.slotRegs[at]; m != nil && m.Len() == len(slot) {
		return m, nil
	}
	m, err := r.cfg.Transport.Register(slot)
	if err != nil {
		return nil, err
	}
	r.slotRegs[at] = m
	return m, nil
}

// revoke revokes a leased session's registrations and reports whether every
// one was revoked, and whether every revocation fenced.
func (r *Receiver) revoke(s *session) (ok, fences bool) {
	ok, fences = true, true
	for _, m := range s.mems {
		how, err := m.Revoke()
		if err != nil {
			ok = false
			continue
		}
		fences = fences && how.Fences()
	}
	return ok, fences
}

// offer hands one writer its offer, through the configured seam or over an
// endpoint.
func (r *Receiver) offer(o Offer) error {
	if r.cfg.Offer != nil {
		return r.cfg.Offer(o)
	}
	msg, err := AppendOffer(nil, o)
	if err != nil {
		return err
	}
	ep, err := r.endpoint(o.Writer.Peer, o.Incarnation)
	if err != nil {
		return err
	}
	req, err := ep.Send(msg)
	if err != nil {
		return err
	}
	if done, err := req.Test(); done && err != nil {
		return err
	}
	return nil
}

// endpoint returns an endpoint to exactly that life of peer: a message sent
// to another life would hand a session's addresses to a process the session
// was not agreed with.
func (r *Receiver) endpoint(peer transfer.Peer, inc transfer.Incarnation) (transfer.Endpoint, error) {
	r.epMu.Lock()
	defer r.epMu.Unlock()
	if ep := r.eps[peer]; ep != nil && ep.Err() == nil {
		if _, at := ep.Peer(); at == inc {
			return ep, nil
		}
	}
	ep, err := r.cfg.Transport.Connect(peer)
	if err != nil {
		return nil, err
	}
	if _, at := ep.Peer(); at != inc {
		_, _ = ep.Close()
		return nil, fmt.Errorf("peer %q is at incarnation %d; the session was agreed with %d", peer, at, inc)
	}
	r.eps[peer] = ep
	return ep, nil
}

// message is the transport's active-message handler: evidence enters the
// sessions only if it speaks for the endpoint it came on.
func (r *Receiver) message(from transfer.Peer, inc transfer.Incarnation, msg []byte) {
	ev, err := transfer.DecodeEvidence(msg)
	switch {
	case err != nil:
		r.n.malformed.Add(1)
	case ev.Accessor.Peer != from || ev.Incarnation != inc:
		r.n.impersonated.Add(1)
	case r.tx.Deliver(ev) != nil:
		r.n.refused.Add(1)
	default:
		r.n.evidence.Add(1)
	}
}

// endpointError is the transport's endpoint error handler: the sessions of
// that life fail (its writers owe no more reports; what it posted may still
// land, so nothing is settled), and no new session is agreed with it.
func (r *Receiver) endpointError(peer transfer.Peer, inc transfer.Incarnation, err error) {
	r.n.peersLost.Add(1)
	r.tx.PeerLost(peer, inc, err.Error())
	r.mu.Lock()
	if a, ok := r.peers[peer]; ok && a.agreement.Incarnation() == inc {
		a.lost = true
		r.peers[peer] = a
	}
	r.mu.Unlock()
}

// Progress runs the transport's handlers (evidence in, lost peers), applies
// the sessions' deadlines, observes every outcome latched since (waking the
// attempts' Notify callbacks, outside the lock), revokes the registrations
// of every leased session whose outcome is latched, and sends the cancels
// waiting (the owner's, the deadlines', by session). It never blocks; it
// answers how many transport events it handled. The driver goroutine
// (ReceiverConfig.Poll) calls it; without one, the owner must.
func (r *Receiver) Progress() int {
	n := r.cfg.Transport.Progress()
	r.mu.Lock()
	var wake []func()
	// Observing every live session is work per round, not per page: it is
	// done only when the table may have changed since the last pass (an
	// input, a deadline due) or a revocation is to be tried again.
	if changes := r.tx.Changes(); changes != r.observed || r.retry || r.tx.Due() {
		r.observed, r.retry = changes, false
		if len(r.order) != len(r.live) { // emptied by every change to live: sorted again only then
			r.order = slices.AppendSeq(r.order[:0], maps.Keys(r.live))
			slices.SortFunc(r.order, compareKeys)
		}
		for _, key := range r.order {
			wake = append(wake, r.observe(r.live[key])...)
		}
	}
	r.mu.Unlock()
	callAll(wake)
	r.sendCancels()
	return n
}

// Probe answers nothing: a receiver learns what a peer holds only by a
// transfer.
func (r *Receiver) Probe(context.Context, []byte, []contract.Name) (contract.NameSet, bool, error) {
	return contract.NameSet{}, false, nil
}

// OpenRoute is unsupported: a fetch's source is its plan's writers.
func (r *Receiver) OpenRoute(map[string]string) (contract.Route, error) {
	return nil, fmt.Errorf("peer: a fetch's writers come from its plan: %w", errors.ErrUnsupported)
}

// Outcome is the transfer outcome of an attempt, while the transceiver holds
// its session (Limits.Window after its submission, retired or not): with the
// plan, Plan.Usable says where the request may resume.
func (r *Receiver) Outcome(key transfer.SessionKey) (transfer.Outcome, bool) {
	return r.tx.Outcome(key)
}

// Info is the session's state, while the transceiver holds it.
func (r *Receiver) Info(key transfer.SessionKey) (transfer.CohortInfo, bool) {
	return r.tx.Info(key)
}

// Stats returns the counts so far. It takes no lock: it is safe from any
// goroutine (a scrape) while the sessions run.
func (r *Receiver) Stats() ReceiverStats {
	// In doubt first: a session in doubt never leaves r.live, so the live
	// count read after it is never below it.
	inDoubt := r.n.inDoubt.Load()
	live := r.n.live.Load()
	st := ReceiverStats{
		Evidence: r.n.evidence.Load(), Refused: r.n.refused.Load(), Malformed: r.n.malformed.Load(),
		Impersonated: r.n.impersonated.Load(), PeersLost: r.n.peersLost.Load(), Rejected: r.n.rejected.Load(),
		Revocations: r.n.revocations.Load(), Fenced: r.n.fenced.Load(), Cancels: r.n.cancels.Load(), Unsent: r.n.unsent.Load(),
		InFlight: live - inDoubt, InDoubt: inDoubt,
		Delivered: r.n.outcomes.delivered.Load(), Failed: r.n.outcomes.failed.Load(), Cancelled: r.n.outcomes.cancelled.Load(),
	}
	st.Settle, st.SettleSum = r.n.settle.load()
	return st
}

// Close stops the driver and refuses every later Expect and Fetch. It
// releases nothing: the sessions' pages stay lent until Quiesce proves them
// over, and the attempts still answer.
func (r *Receiver) Close() error {
	r.mu.Lock()
	r.closed = true
	drv := r.drv
	r.drv = nil
	r.mu.Unlock()
	drv.stop()
	return nil
}
