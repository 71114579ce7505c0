package tiers_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/notify"
	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/contract"
)

// callee is a tier over backend/mem whose attempts take the stack's
// completion callback as a notify.Callee, and misuse it as the test says:
// call it at once, before the tier has an answer; call it twice; keep it and
// call it again after the stack's proof; or panic instead of registering it.
type callee struct {
	*mem.Backend
	mode string
	mu   sync.Mutex
	kept []notify.Callee
	// plain counts the registrations that came through Notify instead.
	plain int
}

type calleeAttempt struct {
	inner contract.Attempt
	t     *callee
}

func (c *calleeAttempt) Poll() contract.Outcome { return c.inner.Poll() }

func (c *calleeAttempt) Notify(f func()) {
	c.t.mu.Lock()
	c.t.plain++
	c.t.mu.Unlock()
	c.inner.(contract.Notifier).Notify(f)
}

func (c *calleeAttempt) NotifyCallee(n notify.Callee) {
	c.t.mu.Lock()
	c.t.kept = append(c.t.kept, n)
	c.t.mu.Unlock()
	switch c.t.mode {
	case "early":
		n.Notified()
	case "twice":
		c.inner.(notify.CalleeNotifier).NotifyCallee(notify.Func(func() { n.Notified(); n.Notified() }))
	case "panic":
		panic("NotifyCallee exploded")
	default:
		c.inner.(notify.CalleeNotifier).NotifyCallee(n)
	}
}

func (c *callee) Fetch(ext contract.CacheExtent, r contract.Route) (contract.Attempt, error) {
	a, err := c.Backend.Fetch(ext, r)
	if a == nil {
		return nil, err
	}
	return &calleeAttempt{inner: a, t: c}, err
}

func (c *callee) unwrap(list []contract.Attempt) []contract.Attempt {
	out := make([]contract.Attempt, len(list))
	for i, a := range list {
		out[i] = a.(*calleeAttempt).inner
	}
	return out
}

func (c *callee) Settle(ctx context.Context, list []contract.Attempt) error {
	return c.Backend.Settle(ctx, c.unwrap(list))
}

func (c *callee) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	return c.Backend.Quiesce(ctx, c.unwrap(list))
}

func (c *callee) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	return c.Backend.TryQuiesce(c.unwrap(list))
}

// A tier whose attempts take a notify.Callee is handed the stack's callback
// that way (a local hit then makes no closure: SPEC §5's tier figure), and
// its misuse of it changes nothing the stack promises: a callback called
// before the answer fails the lease naming the tier, one called twice or
// late is judged once, one never registered (a panic) fails the lease.
func TestATierTakingACalleeIsJudgedOnce(t *testing.T) {
	tests := []struct {
		mode   string
		failed string // the stack's Failed reason contains it; "": Delivered
	}{
		{mode: "plain"},
		{mode: "twice"},
		{mode: "early", failed: `tier 0 "local" gave its fetch no outcome: it was said to be known, but Poll answered none`},
		{mode: "panic", failed: `tier 0 "local" gave its fetch no outcome: its Notify panicked: NotifyCallee exploded`},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			m := newMemory(1)
			gate := make(chan struct{})
			inner, err := mem.New(m, mem.WithGate(func(mem.Call) <-chan struct{} { return gate }))
			require.NoError(t, err)
			t.Cleanup(func() { _ = inner.Close() })
			inner.Put(extName, name(0), row(0))
			local := &callee{Backend: inner, mode: tt.mode}
			b, err := tiers.New([]tiers.Tier{{Name: "local", Fetcher: local}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = b.Close() })

			a, err := b.Fetch(extentOf(t, 0), nil)
			require.NoError(t, err)
			close(gate) // the tier answers only now: an early callback finds no answer
			require.NoError(t, b.Settle(bounded(t), []contract.Attempt{a}))
			ok, err := b.Quiesce(bounded(t), []contract.Attempt{a})
			require.NoError(t, err)
			require.True(t, ok)
			first := a.Poll()
			local.mu.Lock()
			kept := append([]notify.Callee(nil), local.kept...)
			plain := local.plain
			local.mu.Unlock()
			for _, c := range kept {
				c.Notified() // late, after the proof: the part was judged already
			}

			assert.Len(t, kept, 1, "the stack registered once, as a Callee")
			assert.Zero(t, plain, "and not through Notify")
			assert.Equal(t, first, a.Poll(), "a late callback changes nothing")
			st := b.Stats()[0]
			if tt.failed == "" {
				assert.Equal(t, []int{0}, served(first))
				assert.Equal(t, row(0), m.rows[0])
				assert.Equal(t, uint64(1), st.Hits, "judged and counted once")
				return
			}
			require.IsType(t, contract.Failed{}, first)
			assert.Contains(t, first.(contract.Failed).Reason, tt.failed)
			assert.Equal(t, uint64(1), st.Failed, "judged and counted once")
			assert.Zero(t, st.Hits)
		})
	}
}
