package staging

import (
	"errors"
	"fmt"

	"github.com/kvready/kvready/internal/grow"
)

// Ticket is a small value handle on one slot request. The zero Ticket is never
// issued. A ticket goes stale once its request is freed, quarantined whole or
// cancelled; a stale ticket is refused, never confused with a newer request.
type Ticket struct {
	idx uint32
	gen uint32
}

// Index returns a small integer that no other live ticket shares (it is reused
// once this ticket retires), so a caller can keep per-ticket state in a slice
// instead of a map. Compare whole tickets to tell a retired one from its
// successor.
func (t Ticket) Index() int { return int(t.idx) }

// Run is one contiguous run of staging slots: Count slots of pool group Group
// from slot First.
type Run struct {
	Group int
	First int
	Count int
}

// ErrStaleTicket is wrapped by the error for a ticket that is not live: never
// issued, or already freed, quarantined or cancelled. Freeing a lease twice
// reports it.
var ErrStaleTicket = errors.New("staging: ticket is not live (freed twice, cancelled, or never issued)")

// ErrInvariant is wrapped by the error for an operation that would break the
// allocator's own bookkeeping — granting a slot that is held, taking back one
// it did not lend. It never happens unless kvready has a bug; the operation
// is refused and changes nothing, and a broken allocator grants nothing more.
var ErrInvariant = errors.New("staging: allocator invariant broken")

// ErrUngrantable is wrapped by the error for a request that no run of slots
// could ever hold: quarantine has left no contiguous run that long in one of
// its pool groups.
var ErrUngrantable = errors.New("staging: no contiguous run of slots could ever hold the request")

// MaxSlots is the most slots one pool group may hold.
const MaxSlots = 1<<31 - 1

type ticketState uint8

const (
	unused    ticketState = iota
	waiting               // in the queue
	cancelled             // still in the queue, skipped when it reaches the head
	granted
)

// span is one group's run inside a record; 8 bytes, so a one-row lease costs 13
// bytes of allocator state (its generation, its state and its span) plus its
// queue entry while it waits — 9 when its caller keeps the generation
// (NameTicketsBy).
type span struct{ first, count uint32 }

// Allocator hands out staging slots: per pool group, a request takes one
// contiguous run of slots, in every group or in none. Requests are granted
// strictly in arrival order: the head of the line waits until it fits, and those
// behind it wait too, even if they would fit (no starvation of large requests).
// Returned runs coalesce; quarantined slots never return.
//
// It is a pure state machine: it neither blocks nor calls out. Grants happen
// inside Request, Free, Cancel and Quarantine and are reported once each by
// TakeGrants. Per slot it keeps two bits. In steady state (once its queue and
// record tables have grown to the peak number of requests) no call allocates.
// It is not safe for concurrent use.
type Allocator struct {
	pools []pool
	// A record is its generation, its state and one span per group, kept in
	// parallel arrays: a struct of the generation and the state would be
	// padded to 8 bytes, and there is a record for every lease in flight.
	// gens is empty when the caller keeps the generations (callerGens).
	gens    []uint32
	states  []ticketState
	spans   []span   // len(pools) per record
	free    []uint32 // unused record indices
	queue   []Ticket // ring of requests, FIFO; an entry whose record moved on to another generation was withdrawn
	qhead   int
	qlen    int
	waiting int
	grants  []Ticket
	broken  error // set once the bookkeeping was found corrupt: nothing more is granted
	// named is set once the caller names tickets (RequestTicket): then the
	// caller, not the allocator, picks record indices, and Request refuses.
	named bool
	// gensAt is where each record's generation is read: &gens, or — once
	// the caller keeps them (NameTicketsBy, callerGens set) — the caller's
	// column, and the allocator keeps none of its own: a record is its state
	// and its spans. Either covers every record.
	gensAt     *[]uint32
	callerGens bool
	records    int // the records it has: len(states)
}

// Err reports the allocator's own bookkeeping found broken (wrapping
// ErrInvariant), after which it grants nothing; nil while it is sound.
func (a *Allocator) Err() error { return a.broken }

// NewAllocator returns an allocator over len(slots) pool groups, group g holding
// slots[g] slots. It refuses no groups and a count outside [0, MaxSlots].
func NewAllocator(slots []int) (*Allocator, error) {
	if len(slots) == 0 {
		return nil, errors.New("staging: an allocator needs at least one pool group")
	}
	a := &Allocator{pools: make([]pool, len(slots))}
	a.gensAt = &a.gens
	for g, n := range slots {
		if n < 0 || n > MaxSlots {
			return nil, fmt.Errorf("staging: pool group %d has %d slots; want 0..%d", g, n, MaxSlots)
		}
		a.pools[g] = newPool(n)
	}
	return a, nil
}

// Groups returns the number of pool groups.
func (a *Allocator) Groups() int { return len(a.pools) }

// Capacity returns the slots of group g, quarantined ones included.
func (a *Allocator) Capacity(g int) int { return a.pools[g].size }

// FreeSlots returns the slots of group g that no lease holds and that are not
// quarantined.
func (a *Allocator) FreeSlots(g int) int { return a.pools[g].free }

// Quarantined returns the slots of group g removed from circulation for ever.
func (a *Allocator) Quarantined(g int) int { return a.pools[g].quarantined }

// Waiting returns the number of requests waiting in line.
func (a *Allocator) Waiting() int { return a.waiting }

// Request queues a request for counts[g] slots of each group g and returns its
// ticket. It is granted in this call if the line is empty and every group has a
// free run; a request for no slots at all is granted at once, with no place in
// line. It refuses a wrong number of counts, a negative count, a count above the
// group's capacity, and (wrapping ErrUngrantable) a count longer than the longest
// run quarantine has left in the group: such a request could never be granted.
func (a *Allocator) Request(counts []int) (Ticket, error) {
	if a.named {
		return Ticket{}, errors.New("staging: Request on an allocator whose caller names its tickets (RequestTicket); want RequestTicket")
	}
	total, err := a.checkCounts(counts)
	if err != nil {
		return Ticket{}, err
	}
	r := a.newRecord()
	t := Ticket{idx: r, gen: a.gens[r]}
	a.enqueue(t, counts, total)
	return t, nil
}

// NameTicketsBy makes the caller name every ticket (RequestTicket) after its
// own records, whose generations it keeps in the column *gens: (*gens)[i] is
// the generation of its record i — its live ticket's while it has one there,
// the next one it will name there once that ticket is freed, quarantined
// whole or cancelled. The caller grows and writes the column, and grows it
// to cover an index before it names a ticket there (a new record's entry is
// 1); the allocator reads it, through gens, whenever it needs a record's
// generation, and keeps none of its own: a record costs it its state and
// spans alone, and a request's generation is kept once. It is called before any ticket is issued, and
// refused after. The caller moves a record's generation on once its ticket
// is freed, quarantined whole or cancelled, and before it names the index
// again: a ticket is live while the allocator holds its request and the
// column holds its generation, so a caller that named an index again at the
// same generation would make the old ticket live again.
func (a *Allocator) NameTicketsBy(gens *[]uint32) error {
	switch {
	case gens == nil:
		return errors.New("staging: NameTicketsBy(nil); want the caller's column of generations")
	case a.records > 0 || a.named:
		return fmt.Errorf("staging: NameTicketsBy on an allocator that issued %d tickets already; want it before the first", a.records)
	}
	a.named, a.callerGens, a.gensAt = true, true, gens
	return nil
}

// gen returns record r's generation: the caller's, or the allocator's own; 0,
// which no ticket carries, if the caller's column does not cover r (it
// shrank: a caller's bug, which makes r's tickets stale rather than panic).
func (a *Allocator) gen(r uint32) uint32 {
	if g := *a.gensAt; int(r) < len(g) {
		return g[r]
	}
	return 0
}

// TicketOf returns the ticket of record index at generation gen: the ticket a
// caller that names its tickets (RequestTicket) derives from its own record
// instead of keeping it. A ticket that was never issued is refused wherever it
// is used, as a stale one is.
func TicketOf(index, gen uint32) Ticket { return Ticket{idx: index, gen: gen} }

// RequestTicket is Request under a ticket the caller names, for a caller that
// keeps its own record per request, indexed by t.Index(), and derives the
// ticket from it (TicketOf) rather than keeping the ticket and a map back. The
// allocator still guards its records: t's index must be one it holds no live
// request at, or the next new one (each index from 0, no gaps), and t's
// generation must be the one the allocator expects there next — 1 for a new
// index, else the one after the latest request it retired or cancelled there
// — so that a stale ticket never becomes live again. It refuses, changing
// nothing, what Request refuses, a ticket it does not expect (wrapping
// ErrStaleTicket), and any call on an allocator whose tickets Request issued;
// once called, Request refuses.
//
// A caller that keeps the generations itself (NameTicketsBy) is held to its
// own: t's generation must be the one it reports at t's index.
func (a *Allocator) RequestTicket(t Ticket, counts []int) error {
	switch n := uint32(a.records); {
	case !a.named && a.records > 0:
		return fmt.Errorf("staging: RequestTicket on an allocator that issued %d tickets itself (Request); want one way of naming tickets per allocator", a.records)
	case t.idx > n:
		return fmt.Errorf("%w: ticket %d.%d: index %d skips indices; want at most %d, the next new one", ErrStaleTicket, t.idx, t.gen, t.idx, n)
	case t.idx == n && t.gen != 1:
		return fmt.Errorf("%w: ticket %d.%d: generation %d at a new index; want 1", ErrStaleTicket, t.idx, t.gen, t.gen)
	case a.callerGens && int(t.idx) >= len(*a.gensAt):
		return fmt.Errorf("%w: ticket %d.%d: the caller's column holds the generations of indices 0..%d; want index %d in it", ErrStaleTicket, t.idx, t.gen, len(*a.gensAt)-1, t.idx)
	case t.idx < n && (a.states[t.idx] == waiting || a.states[t.idx] == granted):
		return fmt.Errorf("%w: ticket %d.%d: index %d holds a live request (ticket %d.%d); want it freed, quarantined or cancelled first", ErrStaleTicket, t.idx, t.gen, t.idx, t.idx, a.gen(t.idx))
	case t.idx < n && t.gen != a.gen(t.idx):
		return fmt.Errorf("%w: ticket %d.%d: generation %d at index %d; want %d, the next", ErrStaleTicket, t.idx, t.gen, t.gen, t.idx, a.gen(t.idx))
	case t.idx == n && a.callerGens && a.gen(t.idx) != 1:
		return fmt.Errorf("%w: ticket %d.%d: the caller's generations hold %d at the new index %d; want 1", ErrStaleTicket, t.idx, t.gen, a.gen(t.idx), t.idx)
	}
	total, err := a.checkCounts(counts)
	if err != nil {
		return err
	}
	if t.idx == uint32(a.records) {
		a.grow()
	}
	a.named = true
	a.enqueue(t, counts, total)
	return nil
}

// checkCounts validates a request's slot counts and returns their total.
func (a *Allocator) checkCounts(counts []int) (int, error) {
	if len(counts) != len(a.pools) {
		return 0, fmt.Errorf("staging: %d slot counts for %d pool groups; want one per group", len(counts), len(a.pools))
	}
	total := 0
	for g, c := range counts {
		p := &a.pools[g]
		if c < 0 || c > p.size {
			return 0, fmt.Errorf("staging: %d slots asked of pool group %d, which holds %d", c, g, p.size)
		}
		if c > p.usable {
			return 0, fmt.Errorf("%w: %d slots asked of pool group %d, whose longest run without a quarantined slot is %d", ErrUngrantable, c, g, p.usable)
		}
		total += c
	}
	return total, nil
}

// enqueue puts ticket t's request for counts (total slots in all) in line,
// or grants it at once if it asks for none.
func (a *Allocator) enqueue(t Ticket, counts []int, total int) {
	sp := a.recSpans(t.idx)
	for g, c := range counts {
		sp[g] = span{count: uint32(c)}
	}
	if total == 0 {
		a.states[t.idx] = granted
		a.grants = append(a.grants, t)
		return
	}
	a.states[t.idx] = waiting
	a.waiting++
	a.push(t)
	a.pump()
}

// Granted reports whether t holds its slots now.
func (a *Allocator) Granted(t Ticket) bool {
	return a.live(t) && a.states[t.idx] == granted
}

// TakeGrants appends to dst the tickets granted since the last call, in grant
// order (which is arrival order), and forgets them.
func (a *Allocator) TakeGrants(dst []Ticket) []Ticket {
	if len(a.grants) == 0 {
		return dst // most calls (one after every step of the engine's core): inlined
	}
	return a.takeGrants(dst)
}

func (a *Allocator) takeGrants(dst []Ticket) []Ticket {
	for _, t := range a.grants {
		if a.Granted(t) { // a grant freed before it was taken is no longer news
			dst = append(dst, t)
		}
	}
	a.grants = a.grants[:0]
	return dst
}

// Runs appends to dst the runs t holds, one per group it asked slots of, in group
// order.
func (a *Allocator) Runs(t Ticket, dst []Run) ([]Run, error) {
	if !a.Granted(t) {
		return dst, fmt.Errorf("%w: ticket %d.%d holds no slots", ErrStaleTicket, t.idx, t.gen)
	}
	for g, s := range a.recSpans(t.idx) {
		if s.count > 0 {
			dst = append(dst, Run{Group: g, First: int(s.first), Count: int(s.count)})
		}
	}
	return dst, nil
}

// Cancel withdraws a waiting request; if it was at the head of the line, those
// behind it may be granted now. It refuses a granted ticket (Free it instead)
// and a stale one.
func (a *Allocator) Cancel(t Ticket) error {
	if !a.live(t) {
		return fmt.Errorf("%w: cannot cancel ticket %d.%d", ErrStaleTicket, t.idx, t.gen)
	}
	if a.states[t.idx] == granted {
		return fmt.Errorf("staging: ticket %d.%d is granted; free or quarantine its slots instead of cancelling", t.idx, t.gen)
	}
	a.states[t.idx] = cancelled // the ticket is stale from now on; the queue entry goes at the head
	if !a.callerGens {
		a.gens[t.idx] = nextGen(a.gens[t.idx])
	}
	a.waiting--
	a.pump()
	return nil
}

// Free returns every slot t holds, except quarantined ones, and retires t; the
// requests waiting in line may be granted now. Freeing twice is refused with
// ErrStaleTicket and changes nothing.
func (a *Allocator) Free(t Ticket) error {
	if !a.Granted(t) {
		return fmt.Errorf("%w: cannot free ticket %d.%d", ErrStaleTicket, t.idx, t.gen)
	}
	spans := a.recSpans(t.idx)
	for g, s := range spans {
		if s.count > 0 && !a.pools[g].all(int(s.first), int(s.count), true) {
			return fmt.Errorf("%w: ticket %d.%d's slots [%d, %d) of pool group %d are not all lent", ErrInvariant, t.idx, t.gen, s.first, s.first+s.count, g)
		}
	}
	for g, s := range spans {
		if s.count > 0 {
			if err := a.pools[g].give(int(s.first), int(s.count)); err != nil {
				return err // checked above: unreachable
			}
			if err := a.pools[g].audit(g); err != nil {
				a.broken = err
				return err
			}
		}
	}
	a.retire(t.idx)
	a.pump()
	return nil
}

// Quarantine removes every slot t holds from circulation for ever and retires t.
// Use it when no proof ever came that a backend stopped touching the memory.
func (a *Allocator) Quarantine(t Ticket) error {
	if !a.Granted(t) {
		return fmt.Errorf("%w: cannot quarantine ticket %d.%d", ErrStaleTicket, t.idx, t.gen)
	}
	for g, s := range a.recSpans(t.idx) {
		if s.count > 0 {
			a.pools[g].quarantine(int(s.first), int(s.count))
		}
	}
	a.retire(t.idx)
	return nil
}

// QuarantineRun removes run r, which must lie inside one of t's runs, from
// circulation for ever. t stays granted; a later Free returns the rest.
func (a *Allocator) QuarantineRun(t Ticket, r Run) error {
	if !a.Granted(t) {
		return fmt.Errorf("%w: cannot quarantine slots of ticket %d.%d", ErrStaleTicket, t.idx, t.gen)
	}
	if r.Group < 0 || r.Group >= len(a.pools) {
		return fmt.Errorf("staging: unknown pool group %d; there are %d", r.Group, len(a.pools))
	}
	s := a.recSpans(t.idx)[r.Group]
	if r.Count < 1 || r.First < int(s.first) || r.First > int(s.first)+int(s.count)-r.Count {
		return fmt.Errorf("staging: run of %d slots from %d in pool group %d is not inside the ticket's run of %d from %d",
			r.Count, r.First, r.Group, s.count, s.first)
	}
	a.pools[r.Group].quarantine(r.First, r.Count)
	return nil
}

// Hopeless reports whether waiting ticket t can never be granted, because
// quarantine has left some group no contiguous run as long as t asks (free or
// held does not matter: held slots return, quarantined ones never do). A
// hopeless ticket blocks the line until cancelled.
func (a *Allocator) Hopeless(t Ticket) bool {
	if !a.live(t) || a.states[t.idx] != waiting {
		return false
	}
	for g, s := range a.recSpans(t.idx) {
		if int(s.count) > a.pools[g].usable {
			return true
		}
	}
	return false
}

// HopelessTickets appends to dst every waiting ticket that can never be
// granted (see Hopeless), in line order, and returns it.
func (a *Allocator) HopelessTickets(dst []Ticket) []Ticket {
	for i := range a.qlen {
		// A withdrawn entry is stale, so never hopeless: each waiting
		// request is reported once, from its own entry.
		t := a.queue[(a.qhead+i)%len(a.queue)]
		if a.Hopeless(t) {
			dst = append(dst, t)
		}
	}
	return dst
}

// Usable returns the longest run of slots of group g that holds no
// quarantined slot: the largest request the group can ever grant.
func (a *Allocator) Usable(g int) int { return a.pools[g].usable }

func (a *Allocator) live(t Ticket) bool {
	return t.gen != 0 && int(t.idx) < a.records && (a.states[t.idx] == waiting || a.states[t.idx] == granted) &&
		a.gen(t.idx) == t.gen
}

func (a *Allocator) recSpans(r uint32) []span {
	n := len(a.pools)
	return a.spans[int(r)*n : int(r)*n+n : int(r)*n+n]
}

func (a *Allocator) newRecord() uint32 {
	if n := len(a.free); n > 0 {
		r := a.free[n-1]
		a.free = a.free[:n-1]
		return r
	}
	return a.grow()
}

// grow adds a record at the next new index, at generation 1, and returns it.
func (a *Allocator) grow() uint32 {
	r := a.records
	a.records++
	if !a.callerGens {
		a.gens = grow.Len(a.gens, r+1)
		a.gens[r] = 1
	}
	a.states = grow.Len(a.states, r+1)
	a.spans = grow.Len(a.spans, (r+1)*len(a.pools))
	return uint32(r)
}

// retire makes record r's ticket stale and r reusable. A caller that keeps
// the generations moves r's on itself.
func (a *Allocator) retire(r uint32) {
	a.states[r] = unused
	if !a.callerGens {
		a.gens[r] = nextGen(a.gens[r])
	}
	if !a.named {
		a.free = append(a.free, r)
	}
}

func nextGen(g uint32) uint32 {
	if g == ^uint32(0) {
		return 1 // 0 marks the zero Ticket, never issued
	}
	return g + 1
}

func (a *Allocator) push(t Ticket) {
	if a.qlen == len(a.queue) {
		grown := make([]Ticket, max(16, 2*len(a.queue)))
		for i := range a.qlen {
			grown[i] = a.queue[(a.qhead+i)%len(a.queue)]
		}
		a.queue, a.qhead = grown, 0
	}
	// The line's indices wrap by a comparison, not %: a division costs more
	// than the rest of a push or a pop, each once a lease.
	i := a.qhead + a.qlen
	if i >= len(a.queue) {
		i -= len(a.queue)
	}
	a.queue[i] = t
	a.qlen++
}

func (a *Allocator) pop() {
	if a.qhead++; a.qhead == len(a.queue) {
		a.qhead = 0
	}
	a.qlen--
}

// pump grants from the head of the line for as long as the head fits. A request
// takes its runs in every group or in none.
func (a *Allocator) pump() {
	for a.qlen > 0 && a.broken == nil {
		e := a.queue[a.qhead]
		r := e.idx
		if a.states[r] != waiting || e.gen != a.gen(r) {
			// Withdrawn: cancelled, or the record moved on to another
			// generation (Cancel moves the allocator's own on; a caller
			// that keeps them moves its own). Its record is reusable once
			// its entry leaves the line — unless a caller that names
			// tickets already reused it, and a newer entry stands behind
			// (waiting, or granted already if the caller named it again
			// at the same generation: its request is this entry's, and it
			// is granted once).
			if a.states[r] == cancelled {
				a.states[r] = unused
				if !a.named {
					a.free = append(a.free, r)
				}
			}
			a.pop()
			continue
		}
		sp := a.recSpans(r)
		for g := range sp {
			if sp[g].count == 0 {
				continue
			}
			first := a.pools[g].find(int(sp[g].count))
			if first < 0 {
				return // head-of-line: nobody behind it goes first
			}
			sp[g].first = uint32(first)
		}
		for g, s := range sp {
			if s.count > 0 {
				if err := a.pools[g].take(int(s.first), int(s.count)); err != nil {
					// find chose free slots: this is unreachable unless the
					// bookkeeping is corrupt. Grant nothing more, ever.
					a.broken = err
					return
				}
				if err := a.pools[g].audit(g); err != nil {
					a.broken = err
					return
				}
			}
		}
		a.states[r] = granted
		a.waiting--
		a.pop()
		a.grants = append(a.grants, e)
	}
}
