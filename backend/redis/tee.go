package redis

import (
	"fmt"

	"github.com/kvready/kvready/contract"
)

// FetchTee is Fetch, landing a copy of each row it fetches in a second
// buffer as well: a stack of tiers (backend/tiers's TeeFetcher) promotes a
// row Redis served into its local tier from that copy, made while the row's
// bytes are hot in the cache and the server is still sending the rest, and
// no promotion reads the staging rows again after the fetch.
//
// Once every unit's staging row is resolved — and only then, on the calling
// goroutine, before FetchTee returns — tee is called once per unit, in
// order, with the unit's index in the extent and its row's length; it
// returns the unit's second buffer, or nil for none. A buffer of any other
// length than the row's is not used (as nil). A submission rejected after
// that (the backend closed meanwhile) touched no buffer either.
//
// What lands in a second buffer, and when: exactly the bytes that land in
// the unit's staging row, by the same goroutines, within the same access —
// it ends when Quiesce (or TryQuiesce) answers true for the attempt, and
// nothing of the backend touches the buffers after that. Over a client
// whose calls end at their deadline the workers copy each chunk of a value
// to the buffer right after reading it into the row; over any other, the
// attempt goroutine copies the value from its scratch into the row and then
// into the buffer. A value of another length than the row's lands in
// neither. So a unit's buffer holds its value whole when the unit is in the
// attempt's Delivered; otherwise (a miss, a failure, a cancel) its content
// is undefined.
func (b *Backend) FetchTee(extent contract.CacheExtent, route contract.Route, tee func(unit, n int) []byte) (contract.Attempt, error) {
	if route != nil {
		return nil, fmt.Errorf("redis: FetchTee %q: %w: a route was given, but this single-source backend opens none", extent.Name(), contract.ErrSubmissionRejected)
	}
	if tee == nil {
		return nil, fmt.Errorf("redis: FetchTee %q: %w: tee is nil; want a function giving each unit's second buffer (or Fetch)", extent.Name(), contract.ErrSubmissionRejected)
	}
	p, err := b.plan(opFetch, extent)
	if err != nil {
		return nil, err
	}
	p.tee = make([][]byte, len(p.rows))
	for i, row := range p.rows {
		if buf := tee(i, len(row)); len(buf) == len(row) {
			p.tee[i] = buf
		}
	}
	return b.start(p)
}
