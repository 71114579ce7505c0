package notify_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/notify"
)

func TestEveryCallbackIsCalledExactlyOnce(t *testing.T) {
	var l notify.List
	var before, after atomic.Int32
	l.Add(func() { before.Add(1) })
	l.Add(nil)
	l.Add(func() { before.Add(1) })
	assert.Zero(t, before.Load(), "nothing before the outcome")
	l.Fire()
	assert.Equal(t, int32(2), before.Load())
	l.Add(func() { after.Add(1) })
	assert.Equal(t, int32(1), after.Load(), "called at once once fired")
	l.Fire()
	assert.Equal(t, int32(2), before.Load(), "a second Fire calls nothing again")
	assert.Equal(t, int32(1), after.Load())
}

// Adds racing the Fire are each called exactly once, whichever side wins.
func TestCallbacksAreCalledInTheOrderAdded(t *testing.T) {
	for _, n := range []int{1, 2, 5} {
		var l notify.List
		var got []int
		for i := range n {
			l.Add(func() { got = append(got, i) })
		}
		l.Fire()
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		assert.Equal(t, want, got, "%d callbacks", n)
	}
}

func TestAddRacingFire(t *testing.T) {
	for range 100 {
		var l notify.List
		var calls atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.Add(func() { calls.Add(1) })
			}()
		}
		l.Fire()
		wg.Wait()
		assert.Equal(t, int32(8), calls.Load())
	}
}

// Settle returns once every ready channel is closed, and says what it was
// waiting for when ctx ends first (attempt 1 never gets ready here; attempt
// 0 may be taken either way, since a select picks among what is ready).
func TestSettle(t *testing.T) {
	ready := []chan struct{}{make(chan struct{}), make(chan struct{})}
	close(ready[0])
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := notify.Settle(ctx, "x: Settle", 2, func(i int) <-chan struct{} { return ready[i] })
	require.ErrorIs(t, err, context.Canceled)
	assert.Regexp(t, `^x: Settle: waiting for attempt [01]: context canceled$`, err.Error())
	close(ready[1])
	assert.NoError(t, notify.Settle(context.Background(), "x: Settle", 2, func(i int) <-chan struct{} { return ready[i] }))
}
