package tiers_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// fickle is a tier over backend/mem whose attempts answer what mem answered
// until the test changes the answer, at a moment it picks: a tier breaking
// rule 3 (Poll must answer the same for ever) before or after the stack
// answered, before the stack's proof.
type fickle struct {
	*mem.Backend
	// gate, if set, holds the tier's proof until the test opens it: Quiesce
	// waits for it (or its context), TryQuiesce cannot say.
	gate  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	tries []*fickleAttempt
}

func (f *fickle) open() {
	if f.gate != nil {
		f.once.Do(func() { close(f.gate) })
	}
}

type fickleAttempt struct {
	inner contract.Attempt
	now   atomic.Pointer[contract.Outcome] // the changed answer; nil: mem's
}

func (f *fickleAttempt) Poll() contract.Outcome {
	if o := f.now.Load(); o != nil {
		return *o
	}
	return f.inner.Poll()
}

func (f *fickleAttempt) Notify(fn func()) { f.inner.(contract.Notifier).Notify(fn) }

// change makes the attempt answer o from now on.
func (f *fickleAttempt) change(o contract.Outcome) { f.now.Store(&o) }

func (f *fickle) keep(a contract.Attempt, err error) (contract.Attempt, error) {
	if a == nil {
		return nil, err
	}
	fa := &fickleAttempt{inner: a}
	f.mu.Lock()
	f.tries = append(f.tries, fa)
	f.mu.Unlock()
	return fa, err
}

func (f *fickle) Fetch(ext contract.CacheExtent, r contract.Route) (contract.Attempt, error) {
	return f.keep(f.Backend.Fetch(ext, r))
}

func (f *fickle) Publish(ext contract.CacheExtent) (contract.Attempt, error) {
	return f.keep(f.Backend.Publish(ext))
}

// try is the i-th attempt the tier returned, once it has returned it.
func (f *fickle) try(t *testing.T, i int) *fickleAttempt {
	t.Helper()
	var got *fickleAttempt
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		if i < len(f.tries) {
			got = f.tries[i]
		}
		return got != nil && got.inner.Poll() != nil
	}, bound, time.Millisecond, "the tier's attempt %d and its answer", i)
	return got
}

func unwrap(list []contract.Attempt) []contract.Attempt {
	out := make([]contract.Attempt, len(list))
	for i, a := range list {
		out[i] = a
		if fa, ok := a.(*fickleAttempt); ok {
			out[i] = fa.inner
		}
	}
	return out
}

func (f *fickle) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return f.Backend.Quiesce(ctx, unwrap(list))
}

func (f *fickle) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	if f.gate != nil {
		select {
		case <-f.gate:
		default:
			return contract.AccessUnknown, nil
		}
	}
	return f.Backend.TryQuiesce(unwrap(list))
}

func (f *fickle) Settle(ctx context.Context, list []contract.Attempt) error {
	return f.Backend.Settle(ctx, unwrap(list))
}

// TestATierThatChangesItsAnswer (rules 3 and 15): a tier whose answer
// changes — within its kind (more or fewer units served, another failure
// reason, another cancel) or to another kind — before the stack answered, or
// after it answered and before its proof, is never trusted: the stack's
// answer is Failed naming the tier (at once, or from its proof on: a changed
// answer the engine's own re-poll at the proof takes for a violation), a
// Failed or Cancelled stays what it was, and the change is counted against
// that tier alone.
func TestATierThatChangesItsAnswer(t *testing.T) {
	served01 := contract.Delivered{Served: contract.NewNameSet(name(0), name(1))}
	tests := []struct {
		name   string
		fickle int         // the tier whose answer changes
		before bool        // the change comes before the stack answered (else after, before its proof)
		modes  [2]mem.Mode // each tier's mode
		to     func() contract.Outcome
		first  string           // the stack's answer before its proof: "delivered", "failed", "cancelled"
		proven contract.Outcome // the stack's answer from its proof on (nil: a Failed naming the fickle tier)
		reason []string         // substrings of the stack's Failed reason once proven
	}{
		{name: "more units served, before the stack answered (Delivered{0} then Delivered{0,1})",
			fickle: 0, before: true, to: func() contract.Outcome { return served01 },
			first: "failed", reason: []string{`tier 0 "local" broke the contract`, "delivered(1 served), then delivered(2 served)"}},
		{name: "fewer units served, after the stack answered (Delivered{1} then Delivered{})",
			fickle: 1, to: func() contract.Outcome { return contract.Delivered{} },
			first: "delivered", reason: []string{`tier 1 "shared" broke the contract`, "delivered(1 served), then delivered(miss)"}},
		{name: "more units served, after the stack answered (Delivered{1} then Delivered{0,1})",
			fickle: 1, to: func() contract.Outcome { return served01 },
			first: "delivered", reason: []string{`tier 1 "shared" broke the contract`, "then delivered(2 served)"}},
		{name: "to another kind, after the stack answered (Delivered{0} then Failed)",
			fickle: 0, to: func() contract.Outcome { return contract.Failed{Reason: "changed its mind"} },
			first: "delivered", reason: []string{`tier 0 "local" broke the contract`, "then failed(changed its mind)"}},
		{name: "another failure reason, after the stack answered: Failed stays, naming the first",
			fickle: 1, modes: [2]mem.Mode{mem.Normal, mem.Fail}, to: func() contract.Outcome { return contract.Failed{Reason: "another reason"} },
			first: "failed", proven: contract.Failed{Reason: `tier 1 "shared" failed its fetch: injected failure`}},
		{name: "a cancel by the peer becomes a local one, after the stack answered: Cancelled stays",
			fickle: 1, modes: [2]mem.Mode{mem.Normal, mem.CancelByPeer}, to: func() contract.Outcome { return contract.Cancelled{ByPeer: false} },
			first: "cancelled", proven: contract.Cancelled{ByPeer: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMemory(2)
			asked := make(chan struct{}, 4)
			gate := make(chan struct{})
			var ts []tiers.Tier
			var fk *fickle
			for i, nm := range []string{"local", "shared"} {
				opts := []mem.Option{mem.WithMode(tt.modes[i])}
				if i == 1 && tt.before { // the stack cannot answer before the change
					opts = append(opts, mem.WithGate(func(mem.Call) <-chan struct{} { asked <- struct{}{}; return gate }))
				}
				b, err := mem.New(m, opts...)
				require.NoError(t, err)
				t.Cleanup(func() { _ = b.Close() })
				b.Put(extName, name(i), row(i)) // local holds unit 0, shared unit 1
				var st interface {
					contract.Fetcher
					contract.Publisher
				} = b
				if i == tt.fickle {
					fk = &fickle{Backend: b}
					st = fk
				}
				ts = append(ts, tiers.Tier{Name: nm, Fetcher: st, Publisher: st})
			}
			stack, err := tiers.New(ts, tiers.WithoutPromotion())
			require.NoError(t, err)
			t.Cleanup(func() { _ = stack.Close() })

			a, err := stack.Fetch(extentOf(t, 0, 1), nil)
			require.NoError(t, err)
			if tt.before {
				<-asked // the stack judged tier 0's answer and handed unit 1 on
				fk.try(t, 0).change(tt.to())
				close(gate)
			}
			require.NoError(t, stack.Settle(bounded(t), []contract.Attempt{a}))
			first := a.Poll()
			switch tt.first {
			case "delivered":
				assert.Equal(t, []int{0, 1}, served(first))
			case "failed":
				require.IsType(t, contract.Failed{}, first)
			case "cancelled":
				require.IsType(t, contract.Cancelled{}, first)
			}
			if !tt.before {
				fk.try(t, 0).change(tt.to())
			}
			ok, err := stack.Quiesce(bounded(t), []contract.Attempt{a})
			require.NoError(t, err)
			require.True(t, ok, "every tier proved its access over: a changed answer is no reason to hold the slots")
			got := a.Poll()
			if tt.proven != nil {
				assert.Equal(t, tt.proven, got, "a failure or a cancel stays what the stack answered")
			} else {
				require.IsType(t, contract.Failed{}, got, "a changed answer is never trusted")
				for _, s := range tt.reason {
					assert.Contains(t, got.(contract.Failed).Reason, s)
				}
			}
			st := stack.Stats()
			assert.Equal(t, uint64(1), st[tt.fickle].Violations, "the change is counted against %s", st[tt.fickle].Name)
			assert.Zero(t, st[1-tt.fickle].Violations, "and against no other tier")
			ok, err = stack.Quiesce(bounded(t), []contract.Attempt{a})
			require.NoError(t, err)
			assert.True(t, ok)
			assert.Equal(t, got, a.Poll(), "asked again, the stack answers what it answered at its proof")
			assert.Equal(t, uint64(1), stack.Stats()[tt.fickle].Violations, "counted once")
		})
	}
}

// TestAChangedTierAnswerIsAViolationThroughTheRunner: through the shipped
// runner, a tier that served a unit and then says it did not — after the
// stack answered, before its proof — makes the lease a contract violation
// naming the tier: the engine's re-poll at the proof sees the stack's answer
// change, nothing is copied to the device, and every slot returns.
func TestAChangedTierAnswerIsAViolationThroughTheRunner(t *testing.T) {
	var fk *fickle
	var local *mem.Backend
	r := newRig(t, func(m *staging.Memory) *tiers.Backend {
		var err error
		local, err = mem.New(m)
		require.NoError(t, err)
		shared, err := mem.New(m)
		require.NoError(t, err)
		t.Cleanup(func() { _ = local.Close(); _ = shared.Close() })
		fk = &fickle{Backend: shared, gate: make(chan struct{})}
		b, err := tiers.New([]tiers.Tier{{Name: "local", Fetcher: local, Publisher: local}, {Name: "shared", Fetcher: fk, Publisher: fk}},
			tiers.WithoutPromotion())
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	})
	defer fk.open()
	local.Put(staging.ExtentName, name(0), block(0))
	fk.Put(staging.ExtentName, name(1), block(1))
	h, err := r.eng.Lend(readiness.Request{Kind: readiness.Fetch, Rows: []staging.Row{
		{Name: name(0), Group: 0, Block: 0, Device: r.blocks[0]},
		{Name: name(1), Group: 0, Block: 1, Device: r.blocks[1]},
	}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r.eng.Progress()
		info, err := r.eng.Lease(h)
		return err == nil && info.Outcome != readiness.NoOutcome
	}, bound, time.Millisecond, "the stack answers while the shared tier's proof waits")
	info, err := r.eng.Lease(h)
	require.NoError(t, err)
	require.Equal(t, readiness.Served, info.Outcome)
	require.False(t, info.Fenced, "the shared tier has not proven its access")

	fk.try(t, 0).change(contract.Delivered{}) // "I served nothing", after serving unit 1
	fk.open()
	info, err = r.eng.Wait(bounded(t), h, readiness.UntilSettled)
	require.NoError(t, err)
	assert.Equal(t, readiness.Violation, info.Outcome, "a changed answer is never trusted (rule 3)")
	assert.Contains(t, info.Reason, `tier 1 "shared" broke the contract`)
	for i := range 2 {
		assert.Equal(t, make([]byte, slotBytes), r.device(t, i), "nothing copied from a violation: block %d", i)
	}
	require.NoError(t, r.eng.Release(h))
	_, err = r.eng.Wait(bounded(t), h, readiness.UntilReleased)
	require.NoError(t, err)
	r.allFree(t)
	assert.Equal(t, uint64(1), r.eng.Stats().FetcherFaults.Total(), "the engine counts the stack's changed answer against its fetcher")
}

// earlyProof is a tier over backend/mem whose Quiesce answers true at once,
// before its attempts answer: a tier that knows it touches the memory no
// more (it read the rows) and says so before its outcome, as the contract
// allows.
type earlyProof struct{ *mem.Backend }

func (earlyProof) Quiesce(context.Context, []contract.Attempt) (bool, error) { return true, nil }

func (earlyProof) TryQuiesce([]contract.Attempt) (contract.Access, error) {
	return contract.AccessEnded, nil
}

// TestAPublicationIsProvenOnlyOnceTheStackIsDoneWithItsExtent (rule 6): the
// stack judges each tier's answer against the extent its caller handed, so
// its proof waits for every tier's answer even when every tier proved its
// access before answering — the caller may rebuild that extent in place as
// soon as the proof is given. (The tiered model suite found the stack
// answering true first: the engine rebuilt the extent for its next lease
// while the stack's goroutine read it.)
func TestAPublicationIsProvenOnlyOnceTheStackIsDoneWithItsExtent(t *testing.T) {
	m := newMemory(2)
	copy(m.rows[0], row(0))
	copy(m.rows[1], row(1))
	gate := make(chan struct{})
	slow, err := mem.New(m, mem.WithGate(func(mem.Call) <-chan struct{} { return gate }))
	require.NoError(t, err)
	defer slow.Close()
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}()
	local, err := mem.New(m)
	require.NoError(t, err)
	defer local.Close()
	tier := earlyProof{slow}
	stack, err := tiers.New([]tiers.Tier{{Name: "local", Fetcher: local, Publisher: local}, {Name: "shared", Fetcher: tier, Publisher: tier}})
	require.NoError(t, err)
	defer stack.Close()

	a, err := stack.Publish(extentOf(t, 0, 1))
	require.NoError(t, err)
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		ok, _ := stack.Quiesce(ctx, []contract.Attempt{a})
		cancel()
		assert.False(t, ok, "proven while the stack still judges the shared tier's answer against the caller's extent")
		acc, err := stack.TryQuiesce([]contract.Attempt{a})
		require.NoError(t, err)
		assert.NotEqual(t, contract.AccessEnded, acc)
	}
	close(gate)
	ok, err := stack.Quiesce(bounded(t), []contract.Attempt{a})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, []int{0, 1}, served(a.Poll()), "every tier stored both units")
}
