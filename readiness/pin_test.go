package readiness

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
