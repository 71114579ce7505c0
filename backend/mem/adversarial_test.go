package mem_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
)

// cancelled is a context that is already done.
func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// QuiesceNotYet answers false n times, then true; a refused call (a context
// already done) does not count.
func TestQuiesceNotYet(t *testing.T) {
	tests := []struct {
		name   string
		opts   []mem.Option
		falses int
		held   bool // the delivery is still held in flight while Quiesce answers false
	}{
		{"default is two", nil, 2, false},
		{"zero behaves like normal", []mem.Option{mem.WithQuiesceNotYet(0)}, 0, false},
		{"one", []mem.Option{mem.WithQuiesceNotYet(1)}, 1, false},
		{"five", []mem.Option{mem.WithQuiesceNotYet(5)}, 5, false},
		{"false at once while still in flight", []mem.Option{mem.WithQuiesceNotYet(3)}, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newStaging(2)
			gate := make(chan struct{})
			if !tt.held {
				close(gate)
			}
			opts := append([]mem.Option{mem.WithMode(mem.QuiesceNotYet),
				mem.WithGate(func(mem.Call) <-chan struct{} { return gate })}, tt.opts...)
			b := newBackend(t, st, opts...)
			b.Put(extName, name(0), content(0))
			a, err := b.Fetch(extentOf(t, 0, 1), nil)
			require.NoError(t, err)
			list := []contract.Attempt{a}
			if !tt.held {
				require.NoError(t, b.Settle(bounded(t), list))
			}
			for i := range tt.falses {
				ok, err := b.Quiesce(cancelled(), list)
				assert.False(t, ok, "a context already done is never true")
				assert.ErrorIs(t, err, context.Canceled)

				ok, err = b.Quiesce(bounded(t), list)
				require.NoError(t, err, "call %d", i+1)
				assert.False(t, ok, "call %d: not yet", i+1)
			}
			if tt.held {
				assert.Nil(t, a.Poll(), "the false answers came while the delivery was in flight")
				close(gate)
			}
			ok, err := b.Quiesce(cancelled(), list)
			assert.False(t, ok)
			assert.ErrorIs(t, err, context.Canceled)
			ok, err = b.Quiesce(bounded(t), list)
			require.NoError(t, err)
			assert.True(t, ok, "after %d false answers", tt.falses)
			assert.Equal(t, []int{0}, servedIdx(a.Poll()))
			assert.Equal(t, string(content(0)), string(st.rows[0]))
			assert.Equal(t, string(untouched()), string(st.rows[1]))

			ok, err = b.Quiesce(bounded(t), list)
			assert.True(t, ok, "once true, true again")
			assert.NoError(t, err)
		})
	}
}

// Every call that lists a QuiesceNotYet attempt counts against it, also when
// other attempts are listed beside it; one "not yet" makes the answer false.
func TestQuiesceNotYetCountsEveryListingCall(t *testing.T) {
	b := newBackend(t, newStaging(2), mem.WithQuiesceNotYet(1), mem.WithPolicy(func(c mem.Call) mem.Mode {
		if c.Seq == 1 {
			return mem.QuiesceNotYet
		}
		return mem.Normal
	}))
	notYet, err := b.Fetch(extentOf(t, 0), nil)
	require.NoError(t, err)
	normal, err := b.Fetch(extentOf(t, 1), nil)
	require.NoError(t, err)

	ok, err := b.Quiesce(bounded(t), []contract.Attempt{normal, notYet})
	require.NoError(t, err)
	assert.False(t, ok, "one listed attempt not yet proven: false")
	ok, err = b.Quiesce(bounded(t), []contract.Attempt{normal})
	require.NoError(t, err)
	assert.True(t, ok, "an unlisted QuiesceNotYet attempt changes nothing")
	ok, err = b.Quiesce(bounded(t), []contract.Attempt{notYet, normal})
	require.NoError(t, err)
	assert.True(t, ok, "its one false answer was spent by the first call")
}

// waitPasses waits, bounded, until the backend has made more than n passes.
func waitPasses(t *testing.T, b *mem.Backend, n uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(bound)
	for b.TornPasses() <= n {
		require.True(t, time.Now().Before(deadline), "no pass beyond %d", n)
		time.Sleep(50 * time.Microsecond)
	}
	return b.TornPasses()
}

// TornUntilQuiesce reports Delivered, goes on touching the served rows until
// Quiesce is called, and leaves exactly the stored content once it answers
// true. Memory is read only after that answer.
func TestTornUntilQuiesce(t *testing.T) {
	tests := []struct {
		name     string
		op       mem.Op
		stored   []int // of units 0..3
		served   []int
		interval time.Duration
	}{
		{"fetch", mem.OpFetch, []int{0, 1, 2}, []int{0, 1, 2}, 0},
		{"fetch paced", mem.OpFetch, []int{0, 2}, []int{0, 2}, 100 * time.Microsecond},
		{"publish", mem.OpPublish, nil, []int{0, 1, 2, 3}, 0},
		{"fetch miss touches nothing after the outcome", mem.OpFetch, nil, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newStaging(4)
			if tt.op == mem.OpPublish {
				for i := range st.rows {
					copy(st.rows[i], content(i))
				}
			}
			b := newBackend(t, st, mem.WithMode(mem.TornUntilQuiesce), mem.WithTornInterval(tt.interval))
			for _, i := range tt.stored {
				b.Put(extName, name(i), content(i))
			}
			ext := extentOf(t, 0, 1, 2, 3)
			var a contract.Attempt
			var err error
			if tt.op == mem.OpFetch {
				a, err = b.Fetch(ext, nil)
			} else {
				a, err = b.Publish(ext)
			}
			require.NoError(t, err)
			list := []contract.Attempt{a}
			require.NoError(t, b.Settle(bounded(t), list))
			assert.Equal(t, tt.served, servedIdx(a.Poll()))

			if len(tt.served) > 0 {
				// It keeps touching the rows after the outcome...
				seen := waitPasses(t, b, 3)
				// ...and a Quiesce refused for its context does not stop it.
				ok, err := b.Quiesce(cancelled(), list)
				assert.False(t, ok, "a context already done is never true")
				assert.ErrorIs(t, err, context.Canceled)
				waitPasses(t, b, seen+2)
			}

			ok, err := b.Quiesce(bounded(t), list)
			require.NoError(t, err)
			require.True(t, ok)
			passes := b.TornPasses()
			if len(tt.served) == 0 {
				assert.Zero(t, passes, "nothing served, nothing touched")
			}
			check := func(when string) {
				for i := range st.rows {
					want := untouched()
					if tt.op == mem.OpPublish || contains(tt.served, i) {
						want = content(i)
					}
					assert.Equal(t, string(want), string(st.rows[i]), "row %d %s", i, when)
				}
			}
			check("after Quiesce answered true")
			if tt.op == mem.OpPublish {
				for _, i := range tt.served {
					row, ok := b.Get(extName, name(i))
					assert.True(t, ok)
					assert.Equal(t, string(content(i)), string(row))
				}
			}

			// From the proof on, nothing touches the rows again.
			a.Poll()
			require.NoError(t, b.Settle(bounded(t), list))
			_, _, _ = b.Probe(bounded(t), []byte(extName), []contract.Name{name(0)})
			ok, err = b.Quiesce(bounded(t), list)
			assert.True(t, ok)
			assert.NoError(t, err)
			assert.Equal(t, passes, b.TornPasses(), "no pass after Quiesce answered true")
			check("after later calls")
		})
	}
}

// A Quiesce that gives up waiting (its context ends) is never true, even
// though it has told the passes to stop; a later call proves it.
func TestTornUntilQuiesceHeldDelivery(t *testing.T) {
	st := newStaging(1)
	gate := make(chan struct{})
	b := newBackend(t, st, mem.WithMode(mem.TornUntilQuiesce), mem.WithGate(func(mem.Call) <-chan struct{} { return gate }))
	b.Put(extName, name(0), content(0))
	a, err := b.Fetch(extentOf(t, 0), nil)
	require.NoError(t, err)
	list := []contract.Attempt{a}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	ok, err := b.Quiesce(ctx, list)
	assert.False(t, ok, "the delivery is still held")
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	close(gate)
	ok, err = b.Quiesce(bounded(t), list)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, string(content(0)), string(st.rows[0]), "the true content is in place")
}

// Close stops the passes of an attempt never quiesced, leaving the true
// content; goleak (TestMain) checks that its goroutine ended.
func TestCloseStopsTornPasses(t *testing.T) {
	st := newStaging(1)
	b, err := mem.New(st, mem.WithMode(mem.TornUntilQuiesce), mem.WithTornInterval(0))
	require.NoError(t, err)
	b.Put(extName, name(0), content(0))
	a, err := b.Fetch(extentOf(t, 0), nil)
	require.NoError(t, err)
	require.NoError(t, b.Settle(bounded(t), []contract.Attempt{a}))
	waitPasses(t, b, 2)
	require.NoError(t, b.Close())
	assert.Equal(t, string(content(0)), string(st.rows[0]))
	passes := b.TornPasses()
	_, _ = b.Quiesce(bounded(t), []contract.Attempt{a})
	assert.Equal(t, passes, b.TornPasses())
}

// Quiesce with a context already done is never true, in any correct mode, at
// any point of the attempt's life.
func TestQuiesceCancelledNeverTrueInAnyCorrectMode(t *testing.T) {
	for _, m := range mem.Modes() {
		if m == mem.Reject {
			continue
		}
		t.Run(m.String(), func(t *testing.T) {
			b := newBackend(t, newStaging(2), mem.WithMode(m), mem.WithQuiesceNotYet(0), mem.WithSlowQuiesce(time.Millisecond))
			b.Put(extName, name(0), content(0))
			a, err := b.Fetch(extentOf(t, 0, 1), nil)
			require.NoError(t, err)
			list := []contract.Attempt{a}
			for _, when := range []string{"in flight", "settled", "proven"} {
				switch when {
				case "settled":
					require.NoError(t, b.Settle(bounded(t), list))
				case "proven":
					_, _ = b.Quiesce(bounded(t), list)
				}
				ok, err := b.Quiesce(cancelled(), list)
				assert.False(t, ok, when)
				assert.Error(t, err, when)
			}
		})
	}
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Drain waits for a delivery's writes without answering Quiesce: a not-yet
// attempt still has all its false answers afterwards.
func TestDrainConsumesNoAnswer(t *testing.T) {
	st := newStaging(2)
	gate := make(chan struct{})
	b, err := mem.New(st, mem.WithMode(mem.QuiesceNotYet), mem.WithQuiesceNotYet(1),
		mem.WithGate(func(mem.Call) <-chan struct{} { return gate }))
	require.NoError(t, err)
	defer b.Close()
	row := content(0)
	b.Put(extName, name(0), row)
	a, err := b.Fetch(extentOf(t, 0), nil)
	require.NoError(t, err)
	held, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	require.Error(t, b.Drain(held, []contract.Attempt{a}), "held at its gate: not drained")
	cancel()
	close(gate)
	require.NoError(t, b.Drain(bounded(t), []contract.Attempt{a}))
	got, _ := st.Row(0, 0)
	require.Equal(t, row, got, "the delivery's write landed")
	ok, err := b.Quiesce(bounded(t), []contract.Attempt{a})
	require.NoError(t, err)
	require.False(t, ok, "the one not-yet answer is still there")
	ok, err = b.Quiesce(bounded(t), []contract.Attempt{a})
	require.NoError(t, err)
	require.True(t, ok)
}
