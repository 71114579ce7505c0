package readiness

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/contract"
)

// Behaviour that was right in the code but that no test would have noticed
// breaking (issue 37, item 9): each test here fails when it is broken by
// hand.

// farAway is a caller's deadline far beyond anything a test waits for: a
// wait that returns with its context still live returned on its own account,
// not at the deadline.
const farAway = time.Minute

// layerWait is what a WaitLayer run on another goroutine returned, and
// whether its context had ended by then.
type layerWait struct {
	err    error
	ctxErr error
}

// waitLayerAsync starts WaitLayer(h, layer) with a far deadline on another
// goroutine.
func waitLayerAsync(t *testing.T, r *rig, h Handle, layer int) <-chan layerWait {
	ctx, cancel := context.WithTimeout(context.Background(), farAway)
	t.Cleanup(cancel)
	done := make(chan layerWait, 1)
	go func() {
		_, err := r.eng.WaitLayer(ctx, h, layer)
		done <- layerWait{err: err, ctxErr: ctx.Err()}
	}()
	return done
}

// neverAnswered checks that a wait on a layer that will never be answered
// returned ErrNotReady on its own, its context still live. The test's own
// bound (not the caller's minute) fails it with what was still pending.
func neverAnswered(t *testing.T, r *rig, h Handle, done <-chan layerWait) {
	t.Helper()
	select {
	case w := <-done:
		require.ErrorIs(t, w.err, ErrNotReady, "a layer that is never answered ends the wait at once")
		require.NoError(t, w.ctxErr, "WaitLayer returned because its context ended, not because the layer is never answered")
	case <-time.After(10 * time.Second):
		info, err := r.eng.Lease(h)
		t.Fatalf("WaitLayer on %v (%v, %v) is still waiting: a layer that is never answered must end the wait at once, not at the caller's deadline", h, info.State, err)
	}
}

// WaitLayer on a layer that will never be answered — the lease was
// quarantined, or released before its copies were issued, so that none
// will land — returns ErrNotReady at
// once, not at the caller's deadline: both a wait already asleep when the
// lease got there and one that starts after.
func TestWaitLayerNeverAnsweredReturnsAtOnce(t *testing.T) {
	t.Run("quarantined", func(t *testing.T) {
		r := newRig(t, 4, withLayers)
		r.be.setAnswer(false, nil) // the access is never proven
		h, _, a := r.fetch(1, 2)
		r.deliver(a, 1, 0, 1)
		r.sync()
		require.Equal(t, State(StateServed), r.state(h), "served, its access unproven")
		asleep := waitLayerAsync(t, r, h, 2)
		r.clk.Advance(10 * time.Second) // t = 20: the containment deadline
		r.sync()
		require.Equal(t, State(StateQuarantined), r.state(h))
		neverAnswered(t, r, h, asleep)
		neverAnswered(t, r, h, waitLayerAsync(t, r, h, 0))
	})
	t.Run("released before its copies were issued", func(t *testing.T) {
		r := newRig(t, 4, withLayers)
		r.be.setAnswer(false, nil)
		h, rows, a := r.fetch(1, 2)
		r.deliver(a, 1, 0, 1)
		r.sync()
		require.Equal(t, State(StateServed), r.state(h), "served, its access not yet proven: nothing copied")
		asleep := waitLayerAsync(t, r, h, 2)
		require.NoError(t, r.eng.Release(h))
		r.be.setAnswer(true, nil)
		require.NoError(t, r.eng.Retry(h))
		r.sync()
		require.Equal(t, State(StateReleased), r.state(h), "proven, and released with nothing copied (rule 4)")
		require.Equal(t, pattern(0xDE, 1, 0), r.deviceRow(rows[0]))
		neverAnswered(t, r, h, asleep)
		neverAnswered(t, r, h, waitLayerAsync(t, r, h, 0))
	})
}

// earlyScript is the scripted backend whose attempts notify
// (contract.Notifier): the test calls the completion when it likes — even
// before Poll answers.
type earlyScript struct {
	*script
	notices chan func()
}

type earlyAttempt struct {
	*scriptAttempt
	notices chan func()
}

func (a earlyAttempt) Notify(f func()) { a.notices <- f }

func (s earlyScript) Fetch(ext contract.CacheExtent, r contract.Route) (contract.Attempt, error) {
	a, err := s.script.Fetch(ext, r)
	if err != nil {
		return nil, err
	}
	return earlyAttempt{a.(*scriptAttempt), s.notices}, nil
}

func (s earlyScript) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	inner := make([]contract.Attempt, len(list))
	for i, x := range list {
		inner[i] = x.(earlyAttempt).scriptAttempt
	}
	return s.script.Quiesce(ctx, inner)
}

// A completion that came before its Poll answered is the backend's fault
// (EarlyCompletions), and the attempt is watched from then on: a backend that
// answers a moment later is served, not timed out. The clock never moves, so
// the request deadline (t = 15) cannot be what ends the lease.
func TestEarlyCompletionIsWatchedAgain(t *testing.T) {
	notices := make(chan func(), 4)
	var be earlyScript
	r := newRig(t, 4, func(c *Config) {
		be = earlyScript{script: newScript(c.Memory), notices: notices}
		c.Fetcher, c.Publisher = be, nil
	})
	r.be = be.script
	h, rows, a := r.fetch(1, 2)
	require.Equal(t, State(StateRequested), r.state(h))
	var complete func()
	select {
	case complete = <-notices:
	default:
		t.Fatal("the engine never handed the notifying attempt its completion callback")
	}
	complete() // Poll still answers nothing
	r.sync()
	require.Equal(t, State(StateRequested), r.state(h), "an early completion is no outcome")
	st := r.eng.Stats()
	require.Equal(t, uint64(1), st.Faults(Fetch).EarlyCompletions, "the early completion is counted against the backend")
	r.deliver(a, 1, 0, 1) // the answer comes a moment later, with no second completion
	r.sync()
	info := r.info(h)
	require.Equal(t, Served, info.Outcome, "the attempt was watched again after its early completion: %+v", info)
	r.dev.CompleteAll()
	r.sync()
	require.Equal(t, State(StateLogicallyComplete), r.state(h))
	assert.Equal(t, pattern(0xC0, 1, 0), r.deviceRow(rows[0]))
	require.NoError(t, r.eng.Release(h))
	r.sync()
	st = r.eng.Stats()
	assert.Equal(t, uint64(1), st.Faults(Fetch).EarlyCompletions)
	assert.Zero(t, st.Faults(Fetch).RepeatedCompletions)
	assert.False(t, errors.Is(r.eng.Err(), ErrHalted))
}
