package gpu

import "fmt"

// Completions tracks the events recorded on one stream, oldest first, each with
// a caller token (a lease slot, a copy id). Because a stream completes its
// events in queue order, Poll stops at the first event still pending: a round
// costs O(events handed out + 1) however many are in flight. It allocates only
// when its ring buffer is full and grows; in steady state it allocates nothing.
//
// The zero Completions is empty and ready to use. It is not safe for concurrent
// use: it belongs to the goroutine that drives its stream.
type Completions[T any] struct {
	ring   []pending[T]
	head   int // index of the oldest entry
	n      int // number of entries
	stream uint64
	last   uint64 // sequence number of the newest entry pushed
}

type pending[T any] struct {
	ev    Event
	token T
}

// Push appends ev, which must be a recorded event of the same stream as the
// events already pushed and newer than all of them. A refused event changes
// nothing; the error says why. (Order matters: Poll's cost bound rests on it.)
func (c *Completions[T]) Push(ev Event, token T) error {
	if ev.IsZero() {
		return fmt.Errorf("gpu: Completions.Push: %w", ErrNotRecorded)
	}
	if c.stream != 0 && ev.stream != c.stream {
		return fmt.Errorf("gpu: Completions.Push: %w: %v, want an event of stream %d", ErrForeignEvent, ev, c.stream)
	}
	if ev.seq <= c.last {
		return fmt.Errorf("gpu: Completions.Push: %v is not newer than the last event pushed (#%d); events must be pushed in record order", ev, c.last)
	}
	if c.n == len(c.ring) {
		c.grow()
	}
	// The ring's indices wrap by a comparison, not %: a division costs more
	// than the rest of a push or a poll, once a round and copy event.
	i := c.head + c.n
	if i >= len(c.ring) {
		i -= len(c.ring)
	}
	c.ring[i] = pending[T]{ev: ev, token: token}
	c.n++
	c.stream, c.last = ev.stream, ev.seq
	return nil
}

func (c *Completions[T]) grow() {
	size := 2 * len(c.ring)
	if size == 0 {
		size = 16
	}
	ring := make([]pending[T], size)
	for i := range c.n {
		ring[i] = c.ring[(c.head+i)%len(c.ring)]
	}
	c.ring, c.head = ring, 0
}

// Poll queries the oldest events until one is still pending. For each that
// completed or failed it calls fn(token, status) and drops it. It returns how
// many it handed out. A query error stops the round and leaves that event
// queued (it is never handed out as complete); the error names it.
//
// fn must not call Push or Poll on c.
func (c *Completions[T]) Poll(s Stream, fn func(T, Status)) (int, error) {
	handed := 0
	for c.n > 0 {
		p := &c.ring[c.head]
		st, err := s.Query(p.ev)
		if err != nil {
			return handed, fmt.Errorf("gpu: Completions.Poll: querying %v: %w", p.ev, err)
		}
		if st == Pending {
			return handed, nil
		}
		token := p.token
		var zero pending[T]
		*p = zero // drop the token so the ring does not keep it alive
		if c.head++; c.head == len(c.ring) {
			c.head = 0
		}
		c.n--
		handed++
		fn(token, st)
	}
	return handed, nil
}

// Len returns the number of events still tracked.
func (c *Completions[T]) Len() int { return c.n }

// Oldest returns the oldest event not yet handed to Poll's callback, and false
// when there is none. A caller waits on it to know when Poll has work: events
// on one stream complete in order.
func (c *Completions[T]) Oldest() (Event, bool) {
	if c.n == 0 {
		return Event{}, false
	}
	return c.ring[c.head].ev, true
}
