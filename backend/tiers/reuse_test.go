package tiers_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/notify"
	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/contract"
)

// A lease the first tier served whole gives its attempt back for reuse once
// it is proven and confirmed (SPEC §5's tier figure). Everything an old
// lease's handle still reaches — its tier calling back late, its caller
// polling, proving, cancelling, asking who served a unit — answers for the
// old lease and changes nothing of the new one that reuses the attempt,
// whose tier has not answered yet: it is not judged, not proven, not
// cancelled, and ends served by its own tier's answer.
func TestReusedAttemptIgnoresTheOldLease(t *testing.T) {
	m := newMemory(2)
	const gated = "kv:tiers:gated" // its leases' tier answers once gate is closed
	var (
		mu   sync.Mutex
		gate chan struct{}
	)
	inner, err := mem.New(m, mem.WithGate(func(c mem.Call) <-chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if c.Extent == gated {
			return gate
		}
		return nil
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = inner.Close() })
	inner.Put(extName, name(0), row(0))
	inner.Put(gated, name(1), row(1))
	gatedExtent, err := contract.NewCacheExtent([]byte(gated), []contract.Unit{{Name: name(1), Local: 1}}, false)
	require.NoError(t, err)
	local := &callee{Backend: inner}
	b, err := tiers.New([]tiers.Tier{{Name: "local", Fetcher: local}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })

	lease := func() (contract.Attempt, notify.Callee) {
		a := provenLease(t, b, 0)
		local.mu.Lock()
		defer local.mu.Unlock()
		return a, local.kept[len(local.kept)-1]
	}

	// The pool may hand the attempt to another processor, or drop it (it
	// does at random under -race): lease until one reuses its predecessor's.
	old, oldCallee := lease()
	for try := 0; ; try++ {
		require.Less(t, try, 500, "no lease reused its predecessor's attempt")
		mu.Lock()
		gate = make(chan struct{})
		mu.Unlock()
		next, err := b.Fetch(gatedExtent, nil)
		require.NoError(t, err)
		if !tiers.SameAttempt(old, next) {
			mu.Lock()
			close(gate)
			mu.Unlock()
			require.NoError(t, b.Settle(bounded(t), []contract.Attempt{next}))
			ok, err := b.Quiesce(bounded(t), []contract.Attempt{next})
			require.NoError(t, err)
			require.True(t, ok)
			next.Poll()
			old, oldCallee = lease()
			continue
		}
		before := b.Stats()[0]

		oldCallee.Notified() // the old lease's tier, calling back late
		assert.Nil(t, next.Poll(), "the new lease's tier has not answered: nothing judged it")
		acc, err := b.TryQuiesce([]contract.Attempt{old})
		require.NoError(t, err)
		assert.Equal(t, contract.AccessEnded, acc, "the old lease stays proven")
		ok, err := b.Quiesce(bounded(t), []contract.Attempt{old})
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, []int{0}, served(old.Poll()), "the old lease answers its own outcome")
		assert.Equal(t, []string{`tier 0 "local" fetch: served`}, old.(interface {
			AccessorsOf(contract.Name) []string
		}).AccessorsOf(name(0)))
		assert.Empty(t, old.(interface {
			AccessorsOf(contract.Name) []string
		}).AccessorsOf(name(1)), "the new lease's unit was never the old one's")
		d, err := contract.RequestCancel(old)
		require.NoError(t, err)
		assert.Equal(t, contract.CancelRequested, d)
		called := false
		old.(contract.Notifier).Notify(func() { called = true })
		assert.True(t, called, "the old lease's outcome is known: called at once")

		acc, err = b.TryQuiesce([]contract.Attempt{next})
		require.NoError(t, err)
		assert.NotEqual(t, contract.AccessEnded, acc, "the new lease is not proven by the old one's calls")
		assert.Equal(t, before, b.Stats()[0], "nothing counted against the tier")

		mu.Lock()
		close(gate)
		mu.Unlock()
		require.NoError(t, b.Settle(bounded(t), []contract.Attempt{next}))
		ok, err = b.Quiesce(bounded(t), []contract.Attempt{next})
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, []int{1}, served(next.Poll()), "served by its own tier's answer, not cancelled")
		assert.Equal(t, row(1), m.rows[1])
		return
	}
}

// Only the attempt of a lease one tier served whole is reused: an old
// handle on a lease two tiers answered still names both, however many
// leases came after it (rule 15: a report on a unit's row names every tier
// that could have touched it).
func TestReusedAttemptsAreOnlyThoseOfALeaseOneTierServed(t *testing.T) {
	m := newMemory(2)
	local := closedMem(t, m)
	shared := closedMem(t, m)
	local.Put(extName, name(1), row(1))
	shared.Put(extName, name(0), row(0))
	b, err := tiers.New([]tiers.Tier{{Name: "local", Fetcher: local}, {Name: "shared", Fetcher: shared}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })

	lease := func(i int) contract.Attempt { return provenLease(t, b, i) }
	old := lease(0) // a local miss, then the shared tier's hit
	for range 20 {
		next := lease(1) // local hits: their attempts are reused
		assert.False(t, tiers.SameAttempt(old, next), "the two-tier lease's attempt was reused")
	}
	assert.Equal(t, []string{`tier 0 "local" fetch: not served`, `tier 1 "shared" fetch: served`},
		old.(interface{ AccessorsOf(contract.Name) []string }).AccessorsOf(name(0)))
}

// Nor is the attempt of a lease whose tier has a publisher above it, even
// when no promotion part was added (the upper tier rejected it): the step
// that promotes may run on a goroutine of the stack's and touch the attempt
// until it ends the chain, which nothing holds the attempt for.
func TestReusedAttemptsAreNeverThoseOfALeaseThatPromotes(t *testing.T) {
	m := newMemory(2)
	front := closedMem(t, m, mem.WithMode(mem.Reject))
	store := closedMem(t, m)
	store.Put(extName, name(0), row(0))
	b, err := tiers.New([]tiers.Tier{{Name: "front", Publisher: front}, {Name: "store", Fetcher: store}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })

	var leases []contract.Attempt
	for range 20 {
		a := provenLease(t, b, 0)
		for _, old := range leases {
			assert.False(t, tiers.SameAttempt(old, a), "a promoting lease's attempt was reused")
		}
		leases = append(leases, a)
	}
	assert.Equal(t, uint64(20), b.Stats()[0].Rejected, "every promotion was asked of the front tier, and refused")
}

// provenLease fetches unit i of the test extent through b, settles and
// proves it, and requires it served: a lease over for the stack.
func provenLease(t *testing.T, b *tiers.Backend, i int) contract.Attempt {
	t.Helper()
	a, err := b.Fetch(extentOf(t, i), nil)
	require.NoError(t, err)
	require.NoError(t, b.Settle(bounded(t), []contract.Attempt{a}))
	ok, err := b.Quiesce(bounded(t), []contract.Attempt{a})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []int{i}, served(a.Poll()), "served, proven and confirmed")
	return a
}

// closedMem is a backend/mem over m, closed when the test ends.
func closedMem(t *testing.T, m mem.Memory, opts ...mem.Option) *mem.Backend {
	t.Helper()
	b, err := mem.New(m, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}
