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

// counter is a Callee that counts its calls and records its place in the
// order they came.
type counter struct {
	calls atomic.Int32
	id    int
	order *[]int
}

func (c *counter) Notified() {
	c.calls.Add(1)
	if c.order != nil {
		*c.order = append(*c.order, c.id)
	}
}

// Callees and plain callbacks share one order and are each called exactly
// once, whichever came first, before or after the Fire.
func TestCalleesAndFuncsAreCalledOnceInOrder(t *testing.T) {
	tests := []struct {
		name  string
		kinds string // c: a Callee, f: a func, in the order added
	}{
		{"one callee", "c"},
		{"callee first", "cf"},
		{"func first", "fc"},
		{"many", "cfccf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l notify.List
			var order []int
			cs := make([]*counter, len(tt.kinds))
			for i, k := range tt.kinds {
				cs[i] = &counter{id: i, order: &order}
				if k == 'c' {
					l.AddCallee(cs[i])
				} else {
					l.Add(cs[i].Notified)
				}
			}
			l.AddCallee(nil)
			l.AddCallee(notify.Func(nil))
			l.Fire()
			l.Fire()
			late := &counter{}
			l.AddCallee(late)
			for i, c := range cs {
				assert.Equal(t, int32(1), c.calls.Load(), "callback %d", i)
				assert.Equal(t, i, order[i], "the order added")
			}
			assert.Len(t, order, len(cs))
			assert.Equal(t, int32(1), late.calls.Load(), "called at once once fired")
		})
	}
}

// Registering a Callee the caller already holds allocates nothing — the
// point of AddCallee: a method value handed to Add is an allocation (SPEC
// §5's tier figure pays it per lease).
func TestAddCalleeAllocatesNothing(t *testing.T) {
	c := &counter{}
	var lists [100]notify.List
	i := 0
	allocs := testing.AllocsPerRun(len(lists)-1, func() {
		lists[i].AddCallee(c)
		lists[i].Fire()
		i++
	})
	assert.Zero(t, allocs, "allocations per AddCallee and Fire")
	assert.Equal(t, int32(len(lists)), c.calls.Load(), "every list called it once")
}
