package redis

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/internal/redistest"
)

// oneRow is staging of one 8-byte row.
type oneRow struct{}

func (oneRow) Row(int, int) ([]byte, bool) { return make([]byte, 8), true }

// TestSlowCallsNeverOpenTheBreaker: a call that timed out well under its
// attempt's bound — a batch a worker picked up late, with little of its
// bound left, or a bound tighter than the store's latency — shows a slow
// store, not a dead one, and never counts towards opening the breaker
// (docs/backend-redis.md, "When the store is down"), however many of them
// come in a row. The calls go to a real server, stopped with SIGSTOP; a call
// given most of its bound opens the breaker, so the store would have been
// judged down had the short calls counted.
func TestSlowCallsNeverOpenTheBreaker(t *testing.T) {
	for _, tc := range []struct {
		name        string
		bound, left time.Duration // the attempt bound; what a call has of it
		calls       int
		open        bool
	}{
		{"picked up late: 300ms left of a 2s bound", 2 * time.Second, 300 * time.Millisecond, 2 * DefaultBreakerFailures, false},
		{"a bound tighter than the store: 50ms", 50 * time.Millisecond, 50 * time.Millisecond, 2 * DefaultBreakerFailures, false},
		{"the whole bound: a hung store", 300 * time.Millisecond, 300 * time.Millisecond, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			b, err := Open(ctx, srv.URL(), oneRow{}, WithAttemptTimeout(tc.bound), WithBreakerProbe(time.Hour, time.Hour))
			require.NoError(t, err)
			defer b.Close()
			require.NoError(t, srv.Freeze())
			defer func() { _ = srv.Thaw() }()
			for i := range tc.calls {
				callCtx, stop := context.WithTimeout(context.Background(), tc.left)
				j := &batch{ctx: callCtx, op: opFetch, keys: []string{"kvready:slow"}, lens: []int{8},
					bufs: make([][]byte, 1), pooled: true, sinks: make([]sink, 1), errs: make([]error, 1)}
				var wire atomic.Int64
				b.call(j, &wire)
				stop()
				require.Error(t, j.errs[0], "call %d: the stopped store answered", i)
				assert.True(t, timedOut(j.errs[0]), "call %d: want a timeout, got %v", i, j.errs[0])
			}
			h := b.Health()
			assert.Equal(t, !tc.open, h.Reachable, "reachable after %d calls: %s", tc.calls, h.Reason)
			b.brk.mu.Lock()
			run := b.brk.run
			b.brk.mu.Unlock()
			if !tc.open {
				assert.Zero(t, run, "slow calls counted towards opening")
			}
		})
	}
}
