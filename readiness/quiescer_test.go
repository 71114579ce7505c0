package readiness

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// overdue cancels exactly the batches that ask about an overdue lease, queued
// or running, however many leases come due at once (a whole round's can).
func TestOverdueCancelsTheBatchesOfTheLeasesDue(t *testing.T) {
	q := &quiescer{}
	h := func(id uint64) Handle { return HandleOf(1<<32 | id) }
	mk := func(ids ...uint64) *batch {
		b := &batch{}
		for _, id := range ids {
			b.leases = append(b.leases, h(id))
		}
		return b
	}
	queued, running, untouched := mk(1, 2, 3), mk(10, 11), mk(20)
	q.queue = []*batch{queued, untouched}
	q.running = []*batch{running}

	q.overdue([]Handle{h(11), h(3), h(99)})
	assert.Error(t, queued.ctx.Err(), "the queued batch asking about lease 3")
	assert.Error(t, running.ctx.Err(), "the running batch asking about lease 11")
	assert.NoError(t, untouched.ctx.Err(), "no lease of it is due")

	q.overdue(nil)
	assert.NoError(t, untouched.ctx.Err())
}
