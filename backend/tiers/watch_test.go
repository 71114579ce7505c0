package tiers_test

import (
	"bytes"
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/contract"
)

// held is a stack of a local tier holding unit 0 in front of a shared tier
// holding units 1 to 3, whose deliveries wait for a gate the test never opens (a cancel request
// wakes one: it then ends Cancelled, untouched); quiet, the shared tier's
// attempts have no completion callback.
func held(t *testing.T, quiet bool, opts ...tiers.Option) (*tiers.Backend, *recorder, *memory) {
	t.Helper()
	m := newMemory(4)
	local, err := mem.New(m)
	require.NoError(t, err)
	gate := make(chan struct{})
	inner, err := mem.New(m, mem.WithGate(func(mem.Call) <-chan struct{} { return gate }))
	require.NoError(t, err)
	t.Cleanup(func() { close(gate); _ = local.Close(); _ = inner.Close() })
	local.Put(extName, name(0), row(0))
	for i := 1; i < 4; i++ {
		inner.Put(extName, name(i), row(i))
	}
	shared := newRecorder(inner)
	shared.quiet = quiet
	b, err := tiers.New([]tiers.Tier{{Name: "local", Fetcher: local, Publisher: local}, {Name: "shared", Fetcher: shared, Publisher: shared}}, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b, shared, m
}

// A tier that gives no outcome within the backend's wait fails the lease,
// naming it — never a miss —, is asked to cancel, and counts in NoOutcome;
// with a completion callback (the watch list's timer) or without (a
// goroutine's Settle), and for several attempts at once (the timer serves
// them in deadline order). The access proof still waits for the tier's own.
func TestATierWithoutAnAnswerFailsWithinTheWait(t *testing.T) {
	for _, quiet := range []bool{false, true} {
		t.Run(map[bool]string{false: "notifying", true: "quiet"}[quiet], func(t *testing.T) {
			b, inner, m := held(t, quiet, tiers.WithWait(30*time.Millisecond))
			var as []contract.Attempt
			for i := 1; i < 4; i++ { // each its own slot: the leases are in flight together
				a, err := b.Fetch(extentOf(t, i), nil)
				require.NoError(t, err)
				as = append(as, a)
			}
			require.NoError(t, b.Settle(bounded(t), as))
			for _, a := range as {
				require.IsType(t, contract.Failed{}, a.Poll(), "no answer is a failure, never a miss")
				assert.Contains(t, a.Poll().(contract.Failed).Reason, `tier 1 "shared" gave its fetch no outcome`)
				ok, err := b.Quiesce(bounded(t), []contract.Attempt{a})
				require.NoError(t, err)
				assert.True(t, ok, "the cancelled delivery ended: its tier proves it")
			}
			st := b.Stats()[1]
			assert.Equal(t, uint64(3), st.NoOutcome)
			assert.Equal(t, uint64(3), st.Failed)
			assert.Zero(t, st.Misses)
			assert.Equal(t, uint64(3), inner.Suppressed(), "each delivery was asked to cancel before it started")
			for i := 1; i < 4; i++ {
				assert.Equal(t, bytes.Repeat([]byte{'.'}, rowSize), m.rows[i], "the held deliveries never wrote")
			}
		})
	}
}

// Close ends a chain still waiting for a tier's answer: Failed, naming the
// tier, Close returns (bounded), and a later submission is rejected.
func TestCloseEndsAChainStillWaiting(t *testing.T) {
	for _, quiet := range []bool{false, true} {
		t.Run(map[bool]string{false: "notifying", true: "quiet"}[quiet], func(t *testing.T) {
			b, shared, _ := held(t, quiet) // the default wait: 30 s
			a, err := b.Fetch(extentOf(t, 0, 1), nil)
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				shared.mu.Lock()
				defer shared.mu.Unlock()
				return len(shared.handed) == 1
			}, bound, time.Millisecond, "the local tier answers, and the shared one is handed unit 1")
			closed := make(chan struct{})
			go func() { _ = b.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(bound):
				t.Fatal("Close did not return while a chain waited for a tier")
			}
			require.IsType(t, contract.Failed{}, a.Poll(), "Close latched the waiting chain's outcome")
			assert.Contains(t, a.Poll().(contract.Failed).Reason, `tier 1 "shared" gave its fetch no outcome`)
			assert.Contains(t, a.Poll().(contract.Failed).Reason, "closed")
			_, err = b.Fetch(extentOf(t, 0), nil)
			assert.ErrorIs(t, err, contract.ErrSubmissionRejected)
		})
	}
}

// A tier answering after the wait ran out changes nothing: the stack's
// outcome stays the failure it latched.
func TestALateAnswerChangesNothing(t *testing.T) {
	m := newMemory(2)
	local, err := mem.New(m)
	require.NoError(t, err)
	gate := make(chan struct{})
	shared, err := mem.New(m, mem.WithGate(func(mem.Call) <-chan struct{} { return gate }))
	require.NoError(t, err)
	defer shared.Close()
	defer local.Close()
	shared.Put(extName, name(1), row(1))
	// A cancel must not wake the delivery here: the tier is one that cannot
	// stop, and answers late.
	b, err := tiers.New([]tiers.Tier{{Name: "local", Fetcher: local}, {Name: "shared", Fetcher: noCancel{shared}}}, tiers.WithWait(20*time.Millisecond))
	require.NoError(t, err)
	defer b.Close()
	a, err := b.Fetch(extentOf(t, 1), nil)
	require.NoError(t, err)
	require.NoError(t, b.Settle(bounded(t), []contract.Attempt{a}))
	first := a.Poll()
	require.IsType(t, contract.Failed{}, first)
	close(gate) // the tier now serves its unit, late
	ok, err := b.Quiesce(bounded(t), []contract.Attempt{a})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, first, a.Poll())
	assert.Equal(t, uint64(1), b.Stats()[1].NoOutcome)
	assert.Zero(t, b.Stats()[1].Hits, "a late answer is never counted")
}

// noCancel is a fetcher whose attempts cannot be asked to cancel.
type noCancel struct{ *mem.Backend }

type uncancellable struct{ inner contract.Attempt }

func (u *uncancellable) Poll() contract.Outcome { return u.inner.Poll() }
func (u *uncancellable) Notify(f func())        { u.inner.(contract.Notifier).Notify(f) }

func (n noCancel) Fetch(ext contract.CacheExtent, route contract.Route) (contract.Attempt, error) {
	a, err := n.Backend.Fetch(ext, route)
	if a != nil {
		a = &uncancellable{a}
	}
	return a, err
}

func (n noCancel) unwrap(list []contract.Attempt) []contract.Attempt {
	out := make([]contract.Attempt, len(list))
	for i, a := range list {
		out[i] = a.(*uncancellable).inner
	}
	return out
}

func (n noCancel) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	return n.Backend.Quiesce(ctx, n.unwrap(list))
}

func (n noCancel) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	return n.Backend.TryQuiesce(n.unwrap(list))
}

func (n noCancel) Settle(ctx context.Context, list []contract.Attempt) error {
	return n.Backend.Settle(ctx, n.unwrap(list))
}

// blockingFetch is a fetcher whose Fetch, once entered is closed, waits for
// release before it submits: a tier slow to take a submission.
type blockingFetch struct {
	*mem.Backend
	entered, release chan struct{}
}

func (f blockingFetch) Fetch(ext contract.CacheExtent, route contract.Route) (contract.Attempt, error) {
	close(f.entered)
	<-f.release
	return f.Backend.Fetch(ext, route)
}

// Close waits for a chain's step still running on a tier's completion
// callback — here one blocked handing the units the local tier missed to
// the next tier — and returns only once that step has latched the
// attempt's outcome: the watch list holds a part from its listing until
// its answer is judged and its step taken, not only until its callback
// claims it.
func TestCloseWaitsForAStepRunningOnATiersCallback(t *testing.T) {
	m := newMemory(2)
	gate := make(chan struct{})
	local, err := mem.New(m, mem.WithGate(func(mem.Call) <-chan struct{} { return gate }))
	require.NoError(t, err)
	inner, err := mem.New(m)
	require.NoError(t, err)
	t.Cleanup(func() { _ = local.Close(); _ = inner.Close() })
	inner.Put(extName, name(1), row(1))
	shared := blockingFetch{Backend: inner, entered: make(chan struct{}), release: make(chan struct{})}
	var releasing sync.Once
	release := func() { releasing.Do(func() { close(shared.release) }) }
	t.Cleanup(release) // before the tiers close, on failure too: the blocked step holds the local tier's goroutine
	b, err := tiers.New([]tiers.Tier{{Name: "local", Fetcher: local}, {Name: "shared", Fetcher: shared}})
	require.NoError(t, err)
	a, err := b.Fetch(extentOf(t, 1), nil)
	require.NoError(t, err)
	close(gate) // the local tier answers a miss, on its goroutine: the step moves on to the shared tier
	select {
	case <-shared.entered:
	case <-time.After(bound):
		t.Fatal("the shared tier was never handed the unit the local tier missed")
	}
	closed := make(chan struct{})
	go func() { _ = b.Close(); close(closed) }()
	for range 1000 { // Close runs beside the blocked step: it must not return
		select {
		case <-closed:
			t.Fatal("Close returned while a step still ran on a tier's callback")
		default:
			runtime.Gosched()
		}
	}
	release()
	select {
	case <-closed:
	case <-time.After(bound):
		t.Fatal("Close did not return once the step ended")
	}
	o := a.Poll()
	require.IsType(t, contract.Failed{}, o, "the step latched its outcome before Close returned")
	assert.Contains(t, o.(contract.Failed).Reason, `tier 1 "shared"`)
}
