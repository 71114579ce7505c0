package peer

import (
	"cmp"
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

// SenderConfig assembles a Sender. Every field without a stated default is
// required.
type SenderConfig struct {
	// Transport is this process's communication engine: the Sender sets its
	// handlers (so a transport serves one Receiver or Sender), and posts its
	// puts and reports on it.
	Transport transfer.Transport
	// Capabilities is what this side advertises; its peer and incarnation
	// must be the Transport's own. A Sender sends DONE only after its flush
	// completed, so it may advertise PER_OPERATION_QUIESCENCE.
	Capabilities transfer.Capabilities
	// Slot is the staging slot a unit names: the bounce buffer the
	// publish's device→staging copies filled, which the puts read.
	Slot func(contract.Unit) []byte
	// Timeout is how long after its submission a publication may go without
	// an outcome: then it fails, and nothing more is posted.
	Timeout time.Duration
	// Clock reads the time (default time.Now).
	Clock func() time.Time
	// Limits bounds the plans waiting for their publish, and the offers
	// held for a publish not yet submitted, at Limits.Sessions each; an
	// offer held longer than Limits.Window is dropped. Limits.Tombstones
	// bounds the receivers' cancels that came before their offer, each
	// remembered for Limits.Window so that the late offer is refused.
	Limits transfer.Limits
	// Poll, when positive, starts a driver goroutine that calls Progress
	// every Poll until Close. Zero leaves Progress to the owner.
	Poll time.Duration
}

// SendPlan ties a publish to its request: the receiver the pages go to, the
// accessor this sender writes as (its peer is this process), and this
// rank's source pages.
type SendPlan struct {
	Request     transfer.RequestID
	Attempt     transfer.AttemptID
	To          transfer.Peer
	As          transfer.AccessorID
	Chunk       transfer.Chunk
	BlockTokens int
	// Share, when not nil, is this accessor's part of the chunk: the pages
	// it puts, by their group and index in the chunk — the places the
	// receiver's offer names — its sibling writers putting the others. Nil
	// is every page. Its DONE still names the chunk's end: it finished its
	// part of the whole span.
	Share []PageRef
}

// PageRef names one page of a chunk by its layer group and its index among
// the group's ids (Page.Group, Page.Index).
type PageRef struct {
	Group, Index int
}

// Key is the plan's session identity.
func (p SendPlan) Key() transfer.SessionKey {
	return transfer.SessionKey{Request: p.Request, Attempt: p.Attempt}
}

// Pages validates the plan (as Plan.Pages, with As its one writer, a
// receiver named, and a share, when given, of distinct pages of the chunk,
// at least one) and lists its pages — its share's, in the chunk's order —
// named by SourceName.
func (p SendPlan) Pages() ([]Page, error) {
	as := [1]transfer.AccessorID{p.As} // on the stack: Pages keeps no slice of its plan
	pages, err := Plan{Request: p.Request, Attempt: p.Attempt, Writers: as[:], Chunk: p.Chunk, BlockTokens: p.BlockTokens}.Pages()
	m := mistakes{what: "send plan"}
	var in *transfer.InputError
	if errors.As(err, &in) {
		m.list = in.Mistakes
	} else if err != nil {
		return nil, err
	}
	if p.To == "" || len(p.To) > transfer.MaxPeerLen {
		checkPeer(&m, "to", p.To)
	}
	keep := p.share(&m, pages, err == nil)
	if err := m.result(); err != nil {
		return nil, err
	}
	out := pages[:0]
	for _, pg := range pages {
		if keep == nil || keep[PageRef{pg.Group, pg.Index}] {
			pg.Name = SourceName(p.Request, p.Attempt, p.As, pg.Group, pg.Index)
			out = append(out, pg)
		}
	}
	return out, nil
}

// share checks the plan's share against the chunk's pages (when they could
// be listed) and answers it as a set; nil for every page.
func (p SendPlan) share(m *mistakes, pages []Page, listed bool) map[PageRef]bool {
	if p.Share == nil {
		return nil
	}
	if len(p.Share) == 0 {
		m.add("share", "no pages", "nil (every page) or at least one page of the chunk")
	}
	exists := make(map[PageRef]bool, len(pages))
	for _, pg := range pages {
		exists[PageRef{pg.Group, pg.Index}] = true
	}
	keep := make(map[PageRef]bool, len(p.Share))
	for i, r := range p.Share {
		field := fmt.Sprintf("share[%d]", i)
		switch {
		case keep[r]:
			m.add(field, fmt.Sprintf("group %d index %d", r.Group, r.Index), "a page not already named")
		case listed && !exists[r]:
			m.add(field, fmt.Sprintf("group %d index %d", r.Group, r.Index), "a page of the chunk")
		}
		keep[r] = true
	}
	return keep
}

// SenderStats counts what a Sender saw.
type SenderStats struct {
	Offers    uint64 // offers taken by a publication
	Held      uint64 // offers that arrived before their publish and were held
	Dropped   uint64 // offers refused: malformed, for another life or accessor, impersonated, duplicate, late, or no room
	Puts      uint64 // puts posted
	PeersLost uint64 // endpoint errors
	Rejected  uint64 // publishes refused before anything escaped
	// Cancels are the receivers' cancels taken: a publication stopped, or
	// a tombstone left for one whose offer had not come (Tombstones of
	// them). Ignored: malformed, impersonated, for another life of this
	// process or of the receiver, for an older attempt, for a publication
	// already concluded, a duplicate, or no room for the tombstone.
	Cancels, Tombstones, Ignored uint64
	// Finals are the DONEs sent after a receiver's cancel, once nothing
	// more of the publication could land (or nothing had been posted).
	Finals uint64

	// InFlight is the publications whose slots are not yet proven read no
	// more: a count now, not a total. A sender has no IN_DOUBT of its own:
	// a put that never completes keeps its publication in flight, and the
	// engine contains the lease at its deadline.
	InFlight uint64
	// Delivered, Failed and Cancelled count the outcomes latched, by kind.
	Delivered, Failed, Cancelled uint64
	// Settle counts the publications proven over (every put posted
	// completed, the slots the engine's again) by how long after their
	// submission, on the sender's Clock, as ReceiverStats.Settle does.
	Settle    [LatencyBuckets]uint64
	SettleSum time.Duration
}

type senderCounters struct {
	offers, held, dropped, puts, peersLost, rejected atomic.Uint64
	live                                             atomic.Uint64 // publications in s.live
	outcomes                                         outcomes
	settle                                           latency
	cancels, tombstones, ignored, finals             atomic.Uint64
}

// Sender is the prefill side of a peer transfer as a backend of the
// engine: a contract.Publisher whose lease holds the source pages. Publish
// waits for the receiver's offer, posts one put per page from its staging
// slot, flushes the endpoint and only then sends DONE; Quiesce answers true
// only once every put it posted has completed, and nothing is posted after.
type Sender struct {
	cfg  SenderConfig
	self transfer.Peer
	inc  transfer.Incarnation
	n    senderCounters

	mu      sync.Mutex
	peers   map[transfer.Peer]agreed
	plans   map[sendKey]*sendPlanned
	byName  map[contract.Name]sendKey
	live    map[sendKey]*publication
	held    map[sendKey]heldOffer // offers that came before their publish
	tombs   map[sendKey]tombstone // receivers' cancels that came before their offer
	finals  []*publication        // cancelled with puts posted: DONE once the flush completes
	eps     map[transfer.Peer]transfer.Endpoint
	changed wakeCh
	closed  bool
	order   []*publication // Progress's walk of live, in key order: kept until live changes, so a round neither sorts, allocates nor looks a key up

	drv *driver
}

// sendKey is one accessor's part of one attempt.
type sendKey struct {
	session transfer.SessionKey
	as      transfer.AccessorID
}

// compareSendKeys orders by session, then accessor: publications move in
// one order, whatever the map's, so a simulation over them replays.
func compareSendKeys(a, b sendKey) int {
	return cmp.Or(compareKeys(a.session, b.session), cmp.Compare(a.as.Peer, b.as.Peer),
		cmp.Compare(a.as.Rank, b.as.Rank), cmp.Compare(a.as.Role, b.as.Role))
}

type sendPlanned struct {
	plan  SendPlan
	pages []Page
	page  [1]Page // pages' backing for a one-page plan (keepPages)
	index pageIndex
}

type heldOffer struct {
	offer Offer
	until time.Time
}

// publication is one Publish: the engine's attempt.
type publication struct {
	key   sendKey
	plan  SendPlan
	pages []Page
	slots [][]byte
	slot  [1][]byte // slots of a one-page publication, in it: no allocation of their own
	// submitted is the sender's Clock at Publish, the start of the
	// submit-to-settled latency.
	submitted time.Time
	deadline  time.Time
	inc       transfer.Incarnation // the receiver's life agreed with
	offer     *Offer
	ep        transfer.Endpoint
	puts      []transfer.Request
	put       [1]transfer.Request // puts' backing for a one-page publication
	flush     transfer.Request
	posted    bool
	carried   bool // its DONE rode on its one put (transfer.ReportCarrier): heard only if the put landed
	outcome   contract.Outcome
	waiters   []func()
	waiter    [1]func() // waiters' first: the engine notifies once an attempt, no allocation of its own
	cancel    *cancelAnswer
	proven    bool           // Quiesce answered true: the slots are the engine's again, and nothing is posted
	attempt   publishAttempt // the engine's handle, in the publication: no allocation of its own
}

var (
	_ contract.Publisher     = (*Sender)(nil)
	_ contract.QuiesceProber = (*Sender)(nil)
	_ contract.Cancellable   = (*publishAttempt)(nil)
	_ contract.Notifier      = (*publishAttempt)(nil)
)

// NewSender assembles a Sender and sets the transport's handlers. It
// refuses, naming every mistake at once, what NewReceiver refuses of the
// same fields.
func NewSender(cfg SenderConfig) (*Sender, error) {
	m := mistakes{what: "sender config"}
	self, inc := checkSide(&m, cfg.Transport, cfg.Capabilities, cfg.Slot != nil)
	checkDurations(&m, cfg.Timeout, 0, cfg.Poll)
	if cfg.Limits.Sessions < 1 || cfg.Limits.Tombstones < 1 || cfg.Limits.Window <= 0 {
		m.add("limits", fmt.Sprintf("sessions %d, tombstones %d, window %s", cfg.Limits.Sessions, cfg.Limits.Tombstones, cfg.Limits.Window),
			"at least one session and one tombstone, and a positive window")
	}
	if err := m.result(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	s := &Sender{cfg: cfg, self: self, inc: inc, peers: map[transfer.Peer]agreed{}, plans: map[sendKey]*sendPlanned{},
		byName: map[contract.Name]sendKey{}, live: map[sendKey]*publication{}, held: map[sendKey]heldOffer{}, tombs: map[sendKey]tombstone{},
		eps: map[transfer.Peer]transfer.Endpoint{}}
	cfg.Transport.SetHandlers(transfer.Handlers{Message: s.message, EndpointError: s.endpointError})
	if cfg.Poll > 0 {
		s.drv = startDriver(cfg.Poll, func() { s.Progress() })
	}
	return s, nil
}

// Connect negotiates with one life of a receiver before any publication to
// it: it must speak attempt identity and endpoint incarnation, so that every
// DONE this sender sends names what it settles.
func (s *Sender) Connect(remote transfer.Capabilities) (transfer.Agreement, error) {
	a, err := transfer.Negotiate(s.cfg.Capabilities, remote, transfer.Caps(transfer.AttemptIdentity, transfer.EndpointIncarnation))
	if err != nil {
		return transfer.Agreement{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.peers[remote.Peer] = agreed{agreement: a}
	return a, nil
}

// Expect records a plan before its source pages are lent, and answers its
// pages (SendPlan.Pages): the owner lends one publish row per page, named
// Page.Name, from the device page it holds. Refused, changing nothing: a
// plan that does not validate, one written as another process, one already
// expected or published, and one more than Limits.Sessions waiting.
func (s *Sender) Expect(p SendPlan) ([]Page, error) {
	pages, err := p.Pages()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := sendKey{p.Key(), p.As}
	switch {
	case p.As.Peer != s.self:
		return nil, fmt.Errorf("peer: the plan writes as %s; this sender is %s", p.As, s.self)
	case s.closed:
		return nil, errors.New("peer: the sender is closed; no plan is taken")
	case s.plans[key] != nil || s.live[key] != nil:
		return nil, fmt.Errorf("peer: %s of attempt %s is already expected or published", p.As, p.Key())
	case len(s.plans) >= s.cfg.Limits.Sessions:
		return nil, fmt.Errorf("peer: %d plans wait for their publish, the limit (Limits.Sessions)", len(s.plans))
	}
	e := &sendPlanned{plan: p}
	out := keepPages(&e.pages, e.page[:0], pages)
	e.index = newPageIndex(e.pages)
	for _, pg := range pages {
		s.byName[pg.Name] = key
	}
	s.plans[key] = e
	return out, nil
}

// Forget drops a plan that will not be published, answering whether it was
// waiting.
func (s *Sender) Forget(key transfer.SessionKey, as transfer.AccessorID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := sendKey{key, as}
	e := s.plans[k]
	if e == nil {
		return false
	}
	s.dropPlan(k, e)
	return true
}

func (s *Sender) dropPlan(k sendKey, e *sendPlanned) {
	for _, pg := range e.pages {
		delete(s.byName, pg.Name)
	}
	delete(s.plans, k)
}

// Publish starts the publication of the plan whose pages the extent names:
// it posts nothing until the receiver's offer arrives (it may have already).
// The plan is consumed, whatever the answer. Refused with
// contract.ErrSubmissionRejected, nothing posted, for an extent whose units
// are not exactly one plan's pages, a receiver never connected or lost
// since, and a unit with no staging slot.
func (s *Sender) Publish(ext contract.CacheExtent) (contract.Attempt, error) {
	s.mu.Lock()
	p, err := s.admit(ext)
	s.mu.Unlock()
	if err != nil {
		s.n.rejected.Add(1)
		return nil, fmt.Errorf("%w: peer: %w", contract.ErrSubmissionRejected, err)
	}
	return &p.attempt, nil
}

func (s *Sender) admit(ext contract.CacheExtent) (*publication, error) {
	if s.closed {
		return nil, errors.New("the sender is closed")
	}
	e, err := s.planOf(ext)
	if err != nil {
		return nil, err
	}
	key := sendKey{e.plan.Key(), e.plan.As}
	s.dropPlan(key, e)
	a, ok := s.peers[e.plan.To]
	switch {
	case !ok:
		return nil, fmt.Errorf("no agreement with receiver %q: Connect it first", e.plan.To)
	case a.lost:
		return nil, fmt.Errorf("receiver %s#%d was lost: Connect its new life", e.plan.To, a.agreement.Incarnation())
	}
	now := s.cfg.Clock()
	p := &publication{key: key, plan: e.plan, pages: e.pages,
		submitted: now, deadline: now.Add(s.cfg.Timeout), inc: a.agreement.Incarnation()}
	p.slots = p.slot[:]
	if len(e.pages) != 1 {
		p.slots = make([][]byte, len(e.pages))
	}
	p.attempt = publishAttempt{s: s, p: p}
	p.waiters = p.waiter[:0]
	if len(e.pages) == 1 {
		p.puts = p.put[:0]
	}
	for _, u := range ext.All() {
		slot := s.cfg.Slot(u)
		if len(slot) == 0 {
			return nil, fmt.Errorf("unit (local group %d, slot %d) has no staging slot", u.LocalGroup, u.Local)
		}
		p.slots[e.index.of(u.Name)] = slot
	}
	if t, ok := s.tombs[key]; ok && t.receiver == p.plan.To && t.inc == p.inc {
		// Its receiver cancelled it before this publish: it posts nothing,
		// and its late offer is refused by the tombstone.
		s.live[key] = p
		s.order = s.order[:0] // live changed: the next round sorts again
		s.n.live.Add(1)
		s.conclude(p, contract.Cancelled{ByPeer: true})
		return p, nil
	}
	if h, ok := s.held[key]; ok {
		delete(s.held, key)
		s.take(p, h.offer)
	}
	s.live[key] = p
	s.order = s.order[:0]
	s.n.live.Add(1)
	return p, nil
}

func (s *Sender) planOf(ext contract.CacheExtent) (*sendPlanned, error) {
	if ext.Len() == 0 {
		return nil, errors.New("an extent with no units names no plan")
	}
	var key sendKey
	for i, u := range ext.All() {
		k, ok := s.byName[u.Name]
		switch {
		case !ok:
			return nil, fmt.Errorf("unit %d (%s…) is no page of a plan expected: Expect the plan before lending its pages", i, u.Name.String()[:16])
		case i > 0 && k != key:
			return nil, fmt.Errorf("the extent mixes the pages of %s and %s; one publish runs one plan", key.session, k.session)
		}
		key = k
	}
	e := s.plans[key]
	if ext.Len() != len(e.pages) {
		return nil, fmt.Errorf("attempt %s has %d pages; the extent names %d of them", key.session, len(e.pages), ext.Len())
	}
	return e, nil
}

// take gives a publication its offer, if the offer matches the plan: the
// receiver it was agreed with, and every page of the plan addressed.
func (s *Sender) take(p *publication, o Offer) bool {
	if p.offer != nil || p.outcome != nil || o.Receiver != p.plan.To || o.ReceiverInc != p.inc {
		s.n.dropped.Add(1)
		return false
	}
	s.n.offers.Add(1)
	p.offer = &o
	return true
}

// message is the transport's active-message handler: an offer is taken
// only if it came on an endpoint of the receiver it names and is for this
// life of this process.
func (s *Sender) message(from transfer.Peer, inc transfer.Incarnation, msg []byte) {
	if isCancel(msg) {
		s.cancelled(from, inc, msg)
		return
	}
	o, err := DecodeOffer(msg)
	if err != nil || o.Receiver != from || o.ReceiverInc != inc || o.Writer.Peer != s.self || o.Incarnation != s.inc {
		s.n.dropped.Add(1)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := sendKey{o.Session, o.Writer}
	if t, ok := s.tombs[key]; ok && t.receiver == o.Receiver && t.inc == o.ReceiverInc {
		s.n.dropped.Add(1)
		s.refuseLate(key, o)
		return
	}
	if p := s.live[key]; p != nil {
		s.take(p, o)
		return
	}
	if _, dup := s.held[key]; dup || len(s.held) >= s.cfg.Limits.Sessions {
		s.n.dropped.Add(1)
		return
	}
	s.n.held.Add(1)
	s.held[key] = heldOffer{offer: o, until: s.cfg.Clock().Add(s.cfg.Limits.Window)}
}

// endpointError fails every publication to that life of the receiver: the
// puts it posted may still complete, with an error or not, and Quiesce waits
// for each.
func (s *Sender) endpointError(peer transfer.Peer, inc transfer.Incarnation, err error) {
	s.n.peersLost.Add(1)
	s.mu.Lock()
	if a, ok := s.peers[peer]; ok && a.agreement.Incarnation() == inc {
		a.lost = true
		s.peers[peer] = a
	}
	var wake []func()
	for _, k := range slices.SortedFunc(maps.Keys(s.live), compareSendKeys) {
		if p := s.live[k]; p.plan.To == peer && p.inc == inc {
			wake = append(wake, s.conclude(p, contract.Failed{Reason: fmt.Sprintf("receiver %s#%d lost: %v", peer, inc, err)})...)
		}
	}
	s.mu.Unlock()
	callAll(wake)
}

// Progress runs the transport's handlers (offers in, lost receivers), then
// moves every publication on: a deadline passed fails it; an offer taken
// gets its puts and the flush posted; a flush completed gets the DONE sent
// and the outcome Delivered. It never blocks, and answers how many
// transport events it handled.
func (s *Sender) Progress() int {
	n := s.cfg.Transport.Progress()
	s.mu.Lock()
	now := s.cfg.Clock()
	for k, h := range s.held {
		if !now.Before(h.until) {
			delete(s.held, k)
			s.n.dropped.Add(1)
		}
	}
	for k, t := range s.tombs {
		if !now.Before(t.until) {
			delete(s.tombs, k)
		}
	}
	var wake []func()
	if len(s.order) != len(s.live) { // emptied by every change to live: sorted again only then
		clear(s.order[:cap(s.order)]) // no retired publication kept reachable from here
		s.order = slices.AppendSeq(s.order[:0], maps.Values(s.live))
		slices.SortFunc(s.order, func(a, b *publication) int { return compareSendKeys(a.key, b.key) })
	}
	// Every publication in order is live: order is emptied whenever live
	// changes, and advance may conclude one, never add or remove one.
	for _, p := range s.order {
		wake = append(wake, s.advance(p, now)...)
	}
	s.finish()
	s.mu.Unlock()
	callAll(wake)
	return n
}

// advance moves one publication on at now; s.mu is held.
func (s *Sender) advance(p *publication, now time.Time) []func() {
	if p.outcome != nil {
		return nil
	}
	if !now.Before(p.deadline) {
		return s.conclude(p, contract.Failed{Reason: "timeout: no outcome by the deadline fixed at submission"})
	}
	if p.offer != nil && !p.posted {
		if err := s.post(p); err != nil {
			return s.conclude(p, contract.Failed{Reason: err.Error()})
		}
	}
	if !p.posted {
		return nil
	}
	for i, r := range p.puts {
		if done, err := r.Test(); done && err != nil {
			return s.conclude(p, contract.Failed{Reason: fmt.Sprintf("put of page %d: %v", i, err)})
		}
	}
	done, err := p.flush.Test()
	switch {
	case done && err != nil:
		return s.conclude(p, contract.Failed{Reason: "flush: " + err.Error()})
	case !done:
		return nil
	}
	if p.carried { // its DONE rode on the put: heard if, and only if, the put landed
		if _, err := p.puts[0].Test(); err != nil {
			return s.conclude(p, contract.Failed{Reason: fmt.Sprintf("put of page 0: %v", err)})
		}
		return s.conclude(p, contract.Delivered{Served: Served(p.pages, p.plan.Chunk.Tokens().End)})
	}
	// Every put completed remotely: only now may DONE say so.
	if err := s.report(p, transfer.Done, ""); err != nil {
		return s.conclude(p, contract.Failed{Reason: "sending DONE: " + err.Error()})
	}
	return s.conclude(p, contract.Delivered{Served: Served(p.pages, p.plan.Chunk.Tokens().End)})
}

// post posts one put per page into the address the offer gives it, then a
// flush of the endpoint. A publication of one page over an endpoint whose
// puts carry reports (transfer.ReportCarrier) sends its DONE on that put
// instead: the receiver hears it only once the put landed, its one put, so
// the DONE still follows every put it reports on — one message and one
// round trip fewer (the flush is still posted: the cancel path waits on
// it, and a checked transport's flush sends nothing). It never
// posts for a publication whose Quiesce already answered true: those slots
// may be another lease's now.
func (s *Sender) post(p *publication) error {
	if p.proven || p.outcome != nil {
		return fmt.Errorf("peer: a put for %s after its fence: refused", p.key.session) // the submission fence, vLLM #55470
	}
	ep, err := s.endpoint(p.plan.To, p.inc)
	if err != nil {
		return err
	}
	p.ep = ep
	p.posted = true // from the first put on, the slots are exposed
	where := make(map[[2]int]OfferPage, len(p.offer.Pages))
	for _, op := range p.offer.Pages {
		where[[2]int{op.Group, op.Index}] = op
	}
	for i, pg := range p.pages {
		op, ok := where[[2]int{pg.Group, pg.Index}]
		if !ok {
			return fmt.Errorf("the receiver's offer has no address for group %d page %d", pg.Group, pg.Index)
		}
		src := p.slots[i]
		if len(src) > op.Len {
			return fmt.Errorf("page %d is %d bytes; the receiver's page is %d", i, len(src), op.Len)
		}
		key, err := ep.UnpackKey(op.Key)
		if err != nil {
			return fmt.Errorf("page %d: %w", i, err)
		}
		req, carried, err := s.put(p, ep, src, key, op.Offset)
		if err != nil {
			return fmt.Errorf("put of page %d: %w", i, err)
		}
		s.n.puts.Add(1)
		p.puts = append(p.puts, req)
		p.carried = carried
	}
	p.flush, err = ep.Flush()
	if err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

// put posts one page's put; the publication's DONE rides on it when it is
// the publication's only put and the endpoint carries reports.
func (s *Sender) put(p *publication, ep transfer.Endpoint, src []byte, key transfer.RemoteKey, off int) (transfer.Request, bool, error) {
	if rc, ok := ep.(transfer.ReportCarrier); ok && len(p.pages) == 1 {
		msg, err := s.evidence(p, transfer.Done, "")
		if err == nil && len(msg) <= rc.MaxCarried() {
			req, err := rc.PutReport(src, key, off, msg)
			return req, err == nil, err
		}
	}
	req, err := ep.Put(src, key, off)
	return req, false, err
}

// report sends one piece of evidence about the publication to its receiver.
func (s *Sender) report(p *publication, kind transfer.EvidenceKind, reason string) error {
	if p.ep == nil {
		return errors.New("no endpoint to the receiver")
	}
	msg, err := s.evidence(p, kind, reason)
	if err != nil {
		return err
	}
	_, err = p.ep.Send(msg)
	return err
}

// evidence encodes one piece of evidence about the publication.
func (s *Sender) evidence(p *publication, kind transfer.EvidenceKind, reason string) ([]byte, error) {
	ev := transfer.Evidence{Kind: kind, Session: p.key.session, Accessor: p.plan.As, Incarnation: s.inc, Reason: reason}
	if kind == transfer.Done {
		ev.TokenEnd = p.plan.Chunk.Tokens().End
	}
	if len(ev.Reason) > transfer.MaxReasonLen {
		ev.Reason = ev.Reason[:transfer.MaxReasonLen]
	}
	return transfer.AppendEvidence(nil, ev)
}

// conclude latches the publication's outcome (the first one stays) and
// tells the receiver of a failure or of the engine's cancel, if it was ever
// offered anything (a cancel the receiver asked for is answered by the
// final report instead: see stop); it answers the Notify callbacks to call
// once s.mu is released.
func (s *Sender) conclude(p *publication, o contract.Outcome) []func() {
	if p.outcome != nil {
		return nil
	}
	p.outcome = o
	s.n.outcomes.add(o)
	switch o := o.(type) {
	case contract.Failed:
		_ = s.report(p, transfer.Failure, o.Reason) // best effort: the receiver's own deadline stands
	case contract.Cancelled:
		if !o.ByPeer {
			_ = s.report(p, transfer.PeerCancel, "")
		}
	}
	s.changed.fire()
	wake := p.waiters
	p.waiters = nil
	return wake
}

func (s *Sender) endpoint(peer transfer.Peer, inc transfer.Incarnation) (transfer.Endpoint, error) {
	if ep := s.eps[peer]; ep != nil && ep.Err() == nil {
		if _, at := ep.Peer(); at == inc {
			return ep, nil
		}
	}
	ep, err := s.cfg.Transport.Connect(peer)
	if err != nil {
		return nil, err
	}
	if _, at := ep.Peer(); at != inc {
		_, _ = ep.Close()
		return nil, fmt.Errorf("receiver %q is at incarnation %d; the publication was agreed with %d", peer, at, inc)
	}
	s.eps[peer] = ep
	return ep, nil
}

// prove answers whether the publication's slots are read no more: its
// outcome latched (nothing more is posted) and every put it posted
// completed, with success or an error. The first time it is, the
// publication is retired.
func (s *Sender) prove(p *publication) contract.Access {
	if p.proven {
		return contract.AccessEnded
	}
	if p.outcome == nil {
		return contract.AccessUnproven
	}
	for _, r := range p.puts {
		if done, _ := r.Test(); !done {
			return contract.AccessUnproven
		}
	}
	p.proven = true
	delete(s.live, p.key)
	s.order = s.order[:0]
	s.n.live.Add(^uint64(0))
	s.n.settle.add(s.cfg.Clock().Sub(p.submitted))
	return contract.AccessEnded
}

// publications appends the attempts' publications to dst (callers pass a
// few on their stack: no allocation for the engine's usual one or two).
func (s *Sender) publications(dst []*publication, attempts []contract.Attempt) ([]*publication, error) {
	for i, a := range attempts {
		pa, ok := a.(*publishAttempt)
		if !ok || pa.s != s {
			return nil, fmt.Errorf("peer: attempt %d (%T) is not this sender's", i, a)
		}
		dst = append(dst, pa.p)
	}
	return dst, nil
}

// TryQuiesce answers, without waiting, whether every listed publication's
// slots are read no more (see prove). It never answers AccessUnknown.
func (s *Sender) TryQuiesce(attempts []contract.Attempt) (contract.Access, error) {
	var few [scanMax]*publication
	ps, err := s.publications(few[:0], attempts)
	if err != nil {
		return contract.AccessUnproven, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	all := contract.AccessEnded
	for _, p := range ps {
		if s.prove(p) != contract.AccessEnded {
			all = contract.AccessUnproven
		}
	}
	return all, nil
}

// Quiesce is TryQuiesce's answer as the contract's; it never waits.
func (s *Sender) Quiesce(ctx context.Context, attempts []contract.Attempt) (bool, error) {
	return quiesceNow(ctx, attempts, s.TryQuiesce)
}

// Settle waits until every listed publication has an outcome, or ctx ends;
// it wakes when an outcome is latched (Progress, a cancel).
func (s *Sender) Settle(ctx context.Context, attempts []contract.Attempt) error {
	var few [scanMax]*publication
	ps, err := s.publications(few[:0], attempts)
	if err != nil {
		return err
	}
	for {
		s.mu.Lock()
		done := true
		for _, p := range ps {
			done = done && p.outcome != nil
		}
		ch := s.changed.wait()
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Stats returns the counts so far. It takes no lock: it is safe from any
// goroutine (a scrape) while the publications run.
func (s *Sender) Stats() SenderStats {
	st := SenderStats{Offers: s.n.offers.Load(), Held: s.n.held.Load(), Dropped: s.n.dropped.Load(),
		Puts: s.n.puts.Load(), PeersLost: s.n.peersLost.Load(), Rejected: s.n.rejected.Load(),
		InFlight:  s.n.live.Load(),
		Delivered: s.n.outcomes.delivered.Load(), Failed: s.n.outcomes.failed.Load(), Cancelled: s.n.outcomes.cancelled.Load(),
		Cancels: s.n.cancels.Load(), Tombstones: s.n.tombstones.Load(), Ignored: s.n.ignored.Load(), Finals: s.n.finals.Load()}
	st.Settle, st.SettleSum = s.n.settle.load()
	return st
}

// Close stops the driver and refuses every later Expect and Publish. It
// releases nothing: a publication's slots stay lent until Quiesce proves
// its puts over.
func (s *Sender) Close() error {
	s.mu.Lock()
	s.closed = true
	drv := s.drv
	s.drv = nil
	s.mu.Unlock()
	drv.stop()
	return nil
}

// publishAttempt is the engine's handle on a publication.
type publishAttempt struct {
	s *Sender
	p *publication
}

// Poll answers the publication's outcome once latched, the same for ever.
func (a *publishAttempt) Poll() contract.Outcome {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	return a.p.outcome
}

// Notify calls f once the outcome is known: at once if it is.
func (a *publishAttempt) Notify(f func()) {
	a.s.mu.Lock()
	if a.p.outcome == nil {
		a.p.waiters = append(a.p.waiters, f)
		a.s.mu.Unlock()
		return
	}
	a.s.mu.Unlock()
	f()
}

// RequestCancel stops a publication that has not concluded: a local
// Cancelled at once, nothing more posted, and the receiver told (a
// PEER_CANCEL) if it offered anything. Puts already posted still complete,
// and Quiesce still waits for them. A second call answers the same.
func (a *publishAttempt) RequestCancel() (contract.CancelDisposition, error) {
	a.s.mu.Lock()
	if a.p.cancel == nil {
		a.p.cancel = &cancelAnswer{d: contract.CancelRequested}
	}
	wake := a.s.conclude(a.p, contract.Cancelled{})
	c := *a.p.cancel
	a.s.mu.Unlock()
	callAll(wake)
	return c.d, c.err
}
