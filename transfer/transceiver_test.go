package transfer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kvready/kvready/transfer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bound is how long any wait in these tests may take before the test gives
// up: a bound on a hang, never a measurement.
const bound = 10 * time.Second

// fakeClock is a clock a test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func transceiver(t *testing.T, clock func() time.Time) *transfer.Transceiver {
	t.Helper()
	tr, err := transfer.NewTransceiver(local, limits, clock)
	require.NoError(t, err)
	return tr
}

func TestNewTransceiverRefuses(t *testing.T) {
	_, err := transfer.NewTransceiver(transfer.Capabilities{}, limits, nil)
	require.Error(t, err)
	for _, f := range []string{"peer", "incarnation", "version"} {
		assert.Contains(t, err.Error(), f)
	}
	_, err = transfer.NewTransceiver(local, transfer.Limits{}, nil)
	require.Error(t, err)
}

// Quiesce waits for evidence delivered from another goroutine and answers
// the disposition it reached; a wait whose context ends first answers one
// that is not reusable, and an unknown session is in doubt at once.
func TestQuiesceWaits(t *testing.T) {
	clock := &fakeClock{now: at(0)}
	tr := transceiver(t, clock.Now)
	require.NoError(t, tr.Create(config(t, false, kv0, aux0)))
	require.NoError(t, tr.Expose(key1))

	done, cancel := context.WithCancel(context.Background())
	cancel()
	assert.Equal(t, transfer.Active, tr.Quiesce(done, key1), "a wait cut short proves nothing")
	assert.Equal(t, transfer.InDoubt, tr.Quiesce(done, transfer.SessionKey{Request: 99, Attempt: 1}))

	ctx, stop := context.WithTimeout(context.Background(), bound)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, e := range []transfer.Evidence{ev(transfer.Done, kv0, 64), ev(transfer.Done, kv0, 64), ev(transfer.Done, aux0, 64)} {
			_ = tr.Deliver(e) // the duplicate is refused; the waiter must not care
		}
	})
	assert.Equal(t, transfer.QuiescedSuccess, tr.Quiesce(ctx, key1))
	wg.Wait()
	require.NoError(t, ctx.Err(), "woken by the evidence, not by the bound")
	o, ok := tr.Outcome(key1)
	require.True(t, ok)
	assert.Equal(t, transfer.Delivered{TokenEnd: 64}, o)
	require.NoError(t, tr.Retire(key1))
}

// Quiesce wakes at the containment deadline on its own (a real clock): the
// session it waits for is contained, not left waiting for the bound.
func TestQuiesceWakesAtTheDeadline(t *testing.T) {
	tr := transceiver(t, nil)
	now := time.Now()
	cfg := config(t, false, kv0)
	cfg.Submitted, cfg.Deadline, cfg.Containment = now, now.Add(20*time.Millisecond), now.Add(40*time.Millisecond)
	require.NoError(t, tr.Create(cfg))
	require.NoError(t, tr.Expose(key1))
	ctx, stop := context.WithTimeout(context.Background(), bound)
	defer stop()
	assert.Equal(t, transfer.InDoubt, tr.Quiesce(ctx, key1))
	require.NoError(t, ctx.Err())
}

// Shutdown is bounded: it returns when every session settled, or when
// those left are contained (waiting cannot help), or when its context ends
// — reporting what was left in doubt each time.
func TestShutdownIsBounded(t *testing.T) {
	t.Run("everything settles", func(t *testing.T) {
		clock := &fakeClock{now: at(0)}
		tr := transceiver(t, clock.Now)
		require.NoError(t, tr.Create(config(t, false, kv0)))
		require.NoError(t, tr.Expose(key1))
		ctx, stop := context.WithTimeout(context.Background(), bound)
		defer stop()
		var wg sync.WaitGroup
		var r transfer.ShutdownResult
		wg.Go(func() { r = tr.Shutdown(ctx) })
		for o, _ := tr.Outcome(key1); o == nil; o, _ = tr.Outcome(key1) { // until the shutdown's cancel latched
			require.NoError(t, ctx.Err(), "the shutdown never cancelled the session")
			time.Sleep(time.Millisecond)
		}
		require.NoError(t, tr.Deliver(ev(transfer.Done, kv0, 64)))
		wg.Wait()
		require.NoError(t, ctx.Err())
		assert.Equal(t, transfer.ShutdownResult{Physical: transfer.QuiescedFailure}, r, "cancelled by the shutdown, then settled")
		assert.True(t, r.SafeToReleaseManagers())
		require.ErrorIs(t, tr.Create(config(t, false, kv1)), transfer.ErrShutdown)
	})
	t.Run("the context ends first", func(t *testing.T) {
		tr := transceiver(t, (&fakeClock{now: at(0)}).Now)
		require.NoError(t, tr.Create(config(t, false, kv0)))
		require.NoError(t, tr.Expose(key1))
		ctx, stop := context.WithCancel(context.Background())
		stop()
		r := tr.Shutdown(ctx)
		assert.Equal(t, transfer.InDoubt, r.Physical)
		assert.Equal(t, 1, r.InDoubt)
		assert.False(t, r.Fatal)
		assert.False(t, r.SafeToReleaseManagers())
	})
	t.Run("only contained sessions are left", func(t *testing.T) {
		clock := &fakeClock{now: at(0)}
		tr := transceiver(t, clock.Now)
		require.NoError(t, tr.Create(config(t, false, kv0)))
		require.NoError(t, tr.Expose(key1))
		clock.Set(at(200))
		ctx, stop := context.WithTimeout(context.Background(), bound)
		defer stop()
		r := tr.Shutdown(ctx)
		require.NoError(t, ctx.Err(), "nothing to wait for")
		assert.Equal(t, 1, r.InDoubt)
		assert.True(t, r.Fatal)
		assert.Equal(t, transfer.InDoubt, tr.Poll(key1))
	})
}

// Many callers at once: the transceiver serialises them (run under -race).
func TestTransceiverConcurrentCallers(t *testing.T) {
	tr := transceiver(t, nil)
	now := time.Now()
	var keys []transfer.SessionKey
	for r := range 4 {
		cfg := config(t, false, kv0, aux0)
		cfg.Session.Request = transfer.RequestID(r)
		cfg.Submitted, cfg.Deadline, cfg.Containment = now, now.Add(time.Hour), now.Add(2*time.Hour)
		require.NoError(t, tr.Create(cfg))
		require.NoError(t, tr.Expose(cfg.Session))
		keys = append(keys, cfg.Session)
	}
	ctx, stop := context.WithTimeout(context.Background(), bound)
	defer stop()
	var wg sync.WaitGroup
	for _, key := range keys {
		for _, id := range []transfer.AccessorID{kv0, aux0} {
			wg.Go(func() {
				e := ev(transfer.Done, id, 64)
				e.Session = key
				for range 3 {
					_ = tr.Deliver(e)
					tr.Poll(key)
				}
			})
		}
		wg.Go(func() { assert.Equal(t, transfer.QuiescedSuccess, tr.Quiesce(ctx, key)) })
	}
	wg.Wait()
	for _, key := range keys {
		info, ok := tr.Info(key)
		require.True(t, ok)
		assert.Equal(t, transfer.Delivered{TokenEnd: 64}, info.Outcome)
	}
}

// A Poll changes the table only when something is due — an input since the
// last walk, or a deadline come — and only then counts as a change (and
// wakes waiters): a receiver polling every session each round pays for a
// lock, not for a wake-up, and still sees every deadline.
func TestPollCountsAChangeOnlyWhenSomethingIsDue(t *testing.T) {
	clock := &fakeClock{now: at(0)}
	tr := transceiver(t, clock.Now)
	require.NoError(t, tr.Create(config(t, false, kv0)))
	require.NoError(t, tr.Expose(key1))
	require.True(t, tr.Due(), "an input since the last walk")
	before := tr.Changes()
	tr.Poll(key1)
	assert.Equal(t, before+1, tr.Changes(), "the walk after an input counts")
	require.False(t, tr.Due())
	for range 3 {
		tr.Poll(key1)
	}
	assert.Equal(t, before+1, tr.Changes(), "nothing due: polls change nothing")

	clock.Set(at(100))
	require.True(t, tr.Due(), "the deadline came")
	tr.Poll(key1)
	assert.Equal(t, before+2, tr.Changes())
	o, ok := tr.Outcome(key1)
	require.True(t, ok)
	assert.IsType(t, transfer.Failed{}, o, "the deadline was applied")

	require.NoError(t, tr.Deliver(ev(transfer.Done, kv0, 64)))
	assert.Equal(t, before+3, tr.Changes(), "every input counts")
}
