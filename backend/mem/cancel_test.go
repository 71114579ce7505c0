package mem_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
)

// end waits, bounded, until the attempt's goroutine has ended: Quiesce for a
// TornUntilQuiesce attempt (only Quiesce stops its passes), Drain otherwise
// (which consumes no answer of any mode).
func end(t *testing.T, b *mem.Backend, mode mem.Mode, a contract.Attempt) {
	t.Helper()
	if mode == mem.TornUntilQuiesce {
		ok, err := b.Quiesce(bounded(t), []contract.Attempt{a})
		require.NoError(t, err)
		require.True(t, ok)
		return
	}
	require.NoError(t, b.Drain(bounded(t), []contract.Attempt{a}))
}

// cancellable asserts that a is a mem attempt with both capabilities.
func cancellable(t *testing.T, a contract.Attempt) (contract.Cancellable, contract.Notifier) {
	t.Helper()
	c, ok := a.(contract.Cancellable)
	require.True(t, ok, "a mem attempt is contract.Cancellable")
	n, ok := a.(contract.Notifier)
	require.True(t, ok, "a mem attempt is contract.Notifier")
	return c, n
}

// submitter is a fetch or a publication of units 0..2 into or from staging
// rows 0..2, with unit 3's row left out as a canary.
type submitter struct {
	op     mem.Op
	submit func(b *mem.Backend, e contract.CacheExtent) (contract.Attempt, error)
}

var submitters = []submitter{
	{mem.OpFetch, func(b *mem.Backend, e contract.CacheExtent) (contract.Attempt, error) { return b.Fetch(e, nil) }},
	{mem.OpPublish, func(b *mem.Backend, e contract.CacheExtent) (contract.Attempt, error) { return b.Publish(e) }},
}

// setup makes a backend whose deliveries wait for gate, a staging of four rows
// (rows 0..2 hold content(i) for a publication) and a store holding units
// 0..2 for a fetch.
func setup(t *testing.T, op mem.Op, gate chan struct{}, opts ...mem.Option) (*mem.Backend, *staging) {
	t.Helper()
	st := newStaging(4)
	opts = append([]mem.Option{mem.WithGate(func(mem.Call) <-chan struct{} { return gate }), mem.WithSlowQuiesce(time.Millisecond)}, opts...)
	b := newBackend(t, st, opts...)
	for i := range 3 {
		if op == mem.OpFetch {
			b.Put(extName, name(i), content(i))
		} else {
			copy(st.rows[i], content(i))
		}
	}
	return b, st
}

// snapshot copies the staging rows.
func snapshot(st *staging) []string {
	out := make([]string, len(st.rows))
	for i, r := range st.rows {
		out[i] = string(r)
	}
	return out
}

// TestRequestCancelBeforeStart: in every mode (Reject submits nothing), a
// cancel requested while the delivery waits for its gate suppresses it: it
// answers Requested, the outcome is a local Cancelled, no staging row is
// touched and nothing is stored, even once the gate opens. Quiesce answers
// as the mode says it answers (a cancel proves nothing, and never makes an
// unprovable attempt provable).
func TestRequestCancelBeforeStart(t *testing.T) {
	for _, s := range submitters {
		for _, mode := range mem.Modes() {
			if mode == mem.Reject {
				continue
			}
			t.Run(s.op.String()+"/"+mode.String(), func(t *testing.T) {
				gate := make(chan struct{})
				b, st := setup(t, s.op, gate, mem.WithMode(mode), mem.WithQuiesceNotYet(1))
				before := snapshot(st)
				a, err := s.submit(b, extentOf(t, 0, 1, 2))
				require.NoError(t, err)
				c, _ := cancellable(t, a)
				assert.Nil(t, a.Poll(), "held at its gate")

				d, err := c.RequestCancel()
				require.NoError(t, err)
				assert.Equal(t, contract.CancelRequested, d)
				require.NoError(t, b.Settle(bounded(t), []contract.Attempt{a}))
				assert.Equal(t, contract.Cancelled{ByPeer: false}, a.Poll())
				close(gate)
				end(t, b, mode, a)
				assert.Equal(t, contract.Cancelled{ByPeer: false}, a.Poll(), "the first outcome stays")
				assert.Equal(t, before, snapshot(st), "a suppressed delivery touches no row")
				assert.Equal(t, uint64(1), b.Suppressed())
				if s.op == mem.OpPublish {
					assert.Empty(t, storedIdx(b, 4), "a suppressed publication stores nothing")
				}

				ok, err := b.Quiesce(bounded(t), []contract.Attempt{a})
				switch mode {
				case mem.QuiesceFalse, mem.QuiesceNotYet:
					assert.NoError(t, err)
					assert.False(t, ok, "the mode's answer, cancelled or not")
				case mem.QuiesceError:
					assert.Error(t, err)
					assert.False(t, ok)
				default:
					assert.NoError(t, err)
					assert.True(t, ok)
				}
				assert.Equal(t, before, snapshot(st), "nothing touched after Quiesce either")
			})
		}
	}
}

// TestRequestCancelAfterOutcome: a cancel requested once the outcome is known
// changes nothing: the outcome stays, what was delivered or published stays
// (a cancel never rolls back), Quiesce still answers true, and nothing counts
// as suppressed.
func TestRequestCancelAfterOutcome(t *testing.T) {
	for _, s := range submitters {
		for _, mode := range []mem.Mode{mem.Normal, mem.Miss, mem.Partial, mem.Fail, mem.CancelLocal, mem.CancelByPeer, mem.SlowQuiesce, mem.TornUntilQuiesce} {
			t.Run(s.op.String()+"/"+mode.String(), func(t *testing.T) {
				gate := make(chan struct{})
				close(gate)
				b, st := setup(t, s.op, gate, mem.WithMode(mode))
				a, err := s.submit(b, extentOf(t, 0, 1, 2))
				require.NoError(t, err)
				c, _ := cancellable(t, a)
				require.NoError(t, b.Settle(bounded(t), []contract.Attempt{a}))
				first := a.Poll()
				require.NotNil(t, first)
				if mode != mem.TornUntilQuiesce { // its passes end only at Quiesce
					require.NoError(t, b.Drain(bounded(t), []contract.Attempt{a}))
				}
				stored := storedIdx(b, 4)

				for range 3 {
					d, err := contract.RequestCancel(a)
					require.NoError(t, err)
					assert.Equal(t, contract.CancelRequested, d)
				}
				ok, err := b.Quiesce(bounded(t), []contract.Attempt{a})
				require.NoError(t, err)
				assert.True(t, ok)
				rows := snapshot(st)
				assert.Equal(t, first, a.Poll(), "the first outcome stays")
				assert.Equal(t, stored, storedIdx(b, 4), "a cancel never rolls back a publication")
				assert.Zero(t, b.Suppressed())

				d, err := c.RequestCancel()
				require.NoError(t, err)
				assert.Equal(t, contract.CancelRequested, d)
				ok, err = b.Quiesce(bounded(t), []contract.Attempt{a})
				require.NoError(t, err)
				assert.True(t, ok, "a cancel never invalidates a proof")
				assert.Equal(t, rows, snapshot(st), "a cancel after the proof touches nothing")
			})
		}
	}
}

// blockingMemory is staging whose first Row call — the first thing a
// delivery does once it has started — signals entered and waits for release.
type blockingMemory struct {
	*staging
	once     sync.Once
	entered  chan struct{}
	released chan struct{}
	release  func() // closes released, once
}

func newBlockingMemory(n int) *blockingMemory {
	m := &blockingMemory{staging: newStaging(n), entered: make(chan struct{}), released: make(chan struct{})}
	var once sync.Once
	m.release = func() { once.Do(func() { close(m.released) }) }
	return m
}

func (m *blockingMemory) Row(group, local int) ([]byte, bool) {
	m.once.Do(func() {
		close(m.entered)
		<-m.released
	})
	return m.staging.Row(group, local)
}

// TestCancelRacingCompletion, both orders, made deterministic: the cancel
// arrives before the delivery starts (it is suppressed: Cancelled, rows
// untouched), or after it started but before its outcome (it finishes: the
// mode's own outcome, rows written as the mode writes them).
func TestCancelRacingCompletion(t *testing.T) {
	for _, tc := range []struct {
		mode mem.Mode
		want contract.Outcome // when the delivery wins
		rows []string         // rows 0..2 when the delivery wins
	}{
		{mem.Normal, nil, []string{string(content(0)), string(content(1)), string(content(2))}},
		{mem.Fail, contract.Failed{Reason: "injected failure"}, []string{string(poison()), string(poison()), string(poison())}},
		{mem.CancelByPeer, contract.Cancelled{ByPeer: true}, []string{string(poison()), string(poison()), string(poison())}},
	} {
		t.Run(tc.mode.String()+"/cancel first", func(t *testing.T) {
			gate := make(chan struct{})
			b, st := setup(t, mem.OpFetch, gate, mem.WithMode(tc.mode))
			a, err := b.Fetch(extentOf(t, 0, 1, 2), nil)
			require.NoError(t, err)
			c, _ := cancellable(t, a)
			_, err = c.RequestCancel()
			require.NoError(t, err)
			close(gate)
			require.NoError(t, b.Drain(bounded(t), []contract.Attempt{a}))
			assert.Equal(t, contract.Cancelled{ByPeer: false}, a.Poll())
			assert.Equal(t, []string{string(untouched()), string(untouched()), string(untouched()), string(untouched())}, snapshot(st))
			assert.Equal(t, uint64(1), b.Suppressed())
		})
		t.Run(tc.mode.String()+"/delivery first", func(t *testing.T) {
			m := newBlockingMemory(4)
			b := newBackend(t, m, mem.WithMode(tc.mode))
			t.Cleanup(m.release) // runs before the backend's Close, should the test stop early
			for i := range 3 {
				b.Put(extName, name(i), content(i))
			}
			a, err := b.Fetch(extentOf(t, 0, 1, 2), nil)
			require.NoError(t, err)
			c, _ := cancellable(t, a)
			select {
			case <-m.entered:
			case <-time.After(bound):
				t.Fatal("the delivery never started")
			}
			d, err := c.RequestCancel()
			require.NoError(t, err, "a request while the delivery runs does not wait for it")
			assert.Equal(t, contract.CancelRequested, d)
			assert.Nil(t, a.Poll(), "started, not yet answered")
			m.release()
			require.NoError(t, b.Drain(bounded(t), []contract.Attempt{a}))
			want := tc.want
			if want == nil {
				want = contract.Delivered{Served: contract.NewNameSet(name(0), name(1), name(2))}
			}
			assert.Equal(t, want, a.Poll(), "what already runs finishes; its outcome stays")
			assert.Equal(t, append(tc.rows, string(untouched())), snapshot(m.staging))
			assert.Zero(t, b.Suppressed())
		})
	}
}

// TestCancelRaceUnordered lets the gate opening, the cancel and a
// notification race with no order imposed, many times (run it under -race):
// whichever wins, the outcome is all-or-nothing and stable, the rows match
// it, the notification comes exactly once, and each suppressed delivery is
// counted once.
func TestCancelRaceUnordered(t *testing.T) {
	const rounds = 200
	var cancelled, delivered int
	for range rounds {
		gate := make(chan struct{})
		b, st := setup(t, mem.OpFetch, gate)
		a, err := b.Fetch(extentOf(t, 0, 1, 2), nil)
		require.NoError(t, err)
		c, n := cancellable(t, a)
		var notified atomic.Int32
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { defer wg.Done(); <-start; close(gate) }()
		go func() {
			defer wg.Done()
			<-start
			d, err := c.RequestCancel()
			assert.NoError(t, err)
			assert.Equal(t, contract.CancelRequested, d)
		}()
		go func() { defer wg.Done(); <-start; n.Notify(func() { notified.Add(1) }) }()
		close(start)
		wg.Wait()
		ok, err := b.Quiesce(bounded(t), []contract.Attempt{a})
		require.NoError(t, err)
		require.True(t, ok)
		first := a.Poll()
		wantSuppressed := uint64(0)
		switch first {
		case contract.Cancelled{ByPeer: false}:
			cancelled++
			wantSuppressed = 1
			assert.Equal(t, []string{string(untouched()), string(untouched()), string(untouched()), string(untouched())}, snapshot(st))
		default:
			delivered++
			assert.Equal(t, []int{0, 1, 2}, servedIdx(first))
			assert.Equal(t, []string{string(content(0)), string(content(1)), string(content(2)), string(untouched())}, snapshot(st))
		}
		assert.Equal(t, first, a.Poll())
		assert.Equal(t, int32(1), notified.Load(), "notified exactly once")
		assert.Equal(t, wantSuppressed, b.Suppressed(), "suppressed iff cancelled")
		require.NoError(t, b.Close())
	}
	t.Logf("%d rounds: %d cancelled first, %d delivered first", rounds, cancelled, delivered)
	assert.Equal(t, rounds, cancelled+delivered)
}

// TestRequestCancelIsIdempotent: many concurrent requests on one held
// delivery all answer Requested, suppress it once, and leave one outcome.
func TestRequestCancelIsIdempotent(t *testing.T) {
	gate := make(chan struct{})
	b, st := setup(t, mem.OpFetch, gate)
	a, err := b.Fetch(extentOf(t, 0, 1, 2), nil)
	require.NoError(t, err)
	c, _ := cancellable(t, a)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 8 {
				d, err := c.RequestCancel()
				assert.NoError(t, err)
				assert.Equal(t, contract.CancelRequested, d)
			}
		}()
	}
	wg.Wait()
	close(gate)
	require.NoError(t, b.Drain(bounded(t), []contract.Attempt{a}))
	assert.Equal(t, contract.Cancelled{ByPeer: false}, a.Poll())
	assert.Equal(t, uint64(1), b.Suppressed(), "no duplicate work")
	assert.Equal(t, string(untouched()), string(st.rows[0]))
}

// TestRequestCancelWakesADelay: a delivery held by a long delay is woken by
// the cancel, not by the delay: Settle returns within the bound although the
// delay is longer.
func TestRequestCancelWakesADelay(t *testing.T) {
	b, st := setup(t, mem.OpFetch, nil, mem.WithDelay(func(mem.Call) time.Duration { return time.Hour }))
	a, err := b.Fetch(extentOf(t, 0), nil)
	require.NoError(t, err)
	_, err = contract.RequestCancel(a)
	require.NoError(t, err)
	require.NoError(t, b.Settle(bounded(t), []contract.Attempt{a}))
	assert.Equal(t, contract.Cancelled{ByPeer: false}, a.Poll())
	assert.Equal(t, string(untouched()), string(st.rows[0]))
}

// TestCloseAfterCancel: a delivery cancelled and abandoned by Close ends
// Cancelled (the request came first), and Close waits for it as for any.
func TestCloseAfterCancel(t *testing.T) {
	gate := make(chan struct{})
	st := newStaging(1)
	b, err := mem.New(st, mem.WithGate(func(mem.Call) <-chan struct{} { return gate }))
	require.NoError(t, err)
	a, err := b.Fetch(extentOf(t, 0), nil)
	require.NoError(t, err)
	_, err = contract.RequestCancel(a)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	assert.Equal(t, contract.Cancelled{ByPeer: false}, a.Poll())
	assert.Equal(t, string(untouched()), string(st.rows[0]))
}

// TestNotify covers when a notification comes: for every mode (Reject has no
// attempt), registered before the outcome it comes once the outcome is set;
// registered after, it comes at once, before Notify returns; each registration
// is called once; a nil callback is ignored.
func TestNotify(t *testing.T) {
	for _, s := range submitters {
		for _, mode := range mem.Modes() {
			if mode == mem.Reject {
				continue
			}
			t.Run(s.op.String()+"/"+mode.String(), func(t *testing.T) {
				gate := make(chan struct{})
				b, _ := setup(t, s.op, gate, mem.WithMode(mode))
				a, err := s.submit(b, extentOf(t, 0, 1, 2))
				require.NoError(t, err)
				_, n := cancellable(t, a)
				var before, twice atomic.Int32
				n.Notify(func() { before.Add(1) })
				n.Notify(func() { twice.Add(1) })
				n.Notify(nil)
				assert.Zero(t, before.Load(), "no outcome yet: held at the gate")
				close(gate)
				end(t, b, mode, a)
				require.NotNil(t, a.Poll())
				assert.Equal(t, int32(1), before.Load())
				assert.Equal(t, int32(1), twice.Load(), "each registration once")

				var after atomic.Int32
				n.Notify(func() { after.Add(1) })
				assert.Equal(t, int32(1), after.Load(), "an outcome already known: called before Notify returns")
				assert.Equal(t, int32(1), before.Load(), "earlier registrations are not called again")
			})
		}
	}
}

// TestNotifyOnEveryEnding: a notification comes once whichever way the
// attempt ends without a delivery: suppressed by a cancel, or abandoned by
// Close.
func TestNotifyOnEveryEnding(t *testing.T) {
	for _, tc := range []struct {
		desc string
		end  func(*mem.Backend, contract.Attempt) error
		want contract.Outcome
	}{
		{"suppressed by a cancel", func(b *mem.Backend, a contract.Attempt) error {
			if _, err := contract.RequestCancel(a); err != nil {
				return err
			}
			return b.Drain(context.Background(), []contract.Attempt{a})
		}, contract.Cancelled{ByPeer: false}},
		{"abandoned by Close", func(b *mem.Backend, _ contract.Attempt) error { return b.Close() },
			contract.Failed{Reason: "backend closed before the delivery started"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			gate := make(chan struct{}) // never opened
			b, _ := setup(t, mem.OpFetch, gate)
			a, err := b.Fetch(extentOf(t, 0), nil)
			require.NoError(t, err)
			_, n := cancellable(t, a)
			var calls atomic.Int32
			n.Notify(func() { calls.Add(1) })
			require.NoError(t, tc.end(b, a))
			assert.Equal(t, tc.want, a.Poll())
			assert.Equal(t, int32(1), calls.Load())
		})
	}
}

// TestNotifyRacingOutcome registers callbacks from many goroutines while
// deliveries complete (run it under -race): each is called exactly once,
// whether it was registered before or after the outcome.
func TestNotifyRacingOutcome(t *testing.T) {
	const attempts, perAttempt = 32, 4
	b := newBackend(t, newStaging(attempts))
	for i := range attempts {
		b.Put(extName, name(i), content(i%26))
	}
	var counts [attempts][perAttempt]atomic.Int32
	var list []contract.Attempt
	var wg sync.WaitGroup
	for i := range attempts {
		a, err := b.Fetch(extentOf(t, i), nil)
		require.NoError(t, err)
		list = append(list, a)
		_, n := cancellable(t, a)
		for j := range perAttempt {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n.Notify(func() { counts[i][j].Add(1) })
			}()
		}
	}
	wg.Wait()
	require.NoError(t, b.Drain(bounded(t), list))
	for i := range attempts {
		for j := range perAttempt {
			assert.Equal(t, int32(1), counts[i][j].Load(), "attempt %d, callback %d", i, j)
		}
	}
}

// An extent's name may be empty, with units: the backend publishes and
// fetches under it like under any other name.
func TestEmptyExtentName(t *testing.T) {
	st := newStaging(2)
	b := newBackend(t, st)
	copy(st.rows[0], content(0))
	e, err := contract.NewCacheExtent(nil, []contract.Unit{{Name: name(0), Local: 0}}, false)
	require.NoError(t, err)
	a, err := b.Publish(e)
	assert.Equal(t, []int{0}, servedIdx(deliver(t, b, a, err)))
	fetch, err := contract.NewCacheExtent(nil, []contract.Unit{{Name: name(0), Local: 1}}, false)
	require.NoError(t, err)
	a, err = b.Fetch(fetch, nil)
	assert.Equal(t, []int{0}, servedIdx(deliver(t, b, a, err)))
	assert.Equal(t, string(content(0)), string(st.rows[1]))
	_, ok := b.Get(extName, name(0))
	assert.False(t, ok, "stored under the empty name only")
}
