package tiers_test

import (
	"bytes"
	"context"

	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/mem/memtest"
	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/contract"
)

// bound is how long a test waits for what should come at once; it matters
// only if something hangs. No test asserts a duration.
const bound = 10 * time.Second

const extName = "kv:tiers:1"

func bounded(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

// name(i) names unit i; it lives in slot i and its stored row is row(i).
func name(i int) contract.Name {
	var n contract.Name
	n[0], n[1] = 0x7E, byte(i+1)
	return n
}

const rowSize = 8

func row(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, rowSize) }

// memory is staging rows, safe for the backends' goroutines to resolve.
type memory struct{ rows [][]byte }

func newMemory(n int) *memory {
	m := &memory{}
	for range n {
		m.rows = append(m.rows, bytes.Repeat([]byte{'.'}, rowSize))
	}
	return m
}

func (m *memory) Row(group, slot int) ([]byte, bool) {
	if group != 0 || slot < 0 || slot >= len(m.rows) {
		return nil, false
	}
	return m.rows[slot], true
}

func extentOf(t require.TestingT, idx ...int) contract.CacheExtent {
	units := make([]contract.Unit, len(idx))
	for j, i := range idx {
		units[j] = contract.Unit{Name: name(i), Local: i}
	}
	e, err := contract.NewCacheExtent([]byte(extName), units, false)
	require.NoError(t, err)
	return e
}

// spec is one tier of a test's stack: the units it holds, the mode of its
// deliveries, and a fault breaking the contract (memtest) or none.
type spec struct {
	name  string
	holds []int
	mode  mem.Mode
	fault memtest.Fault
}

type storeAPI interface {
	contract.Fetcher
	contract.Publisher
	Put(string, contract.Name, []byte)
	Get(string, contract.Name) ([]byte, bool)
	Close() error
}

func build(t *testing.T, m *memory, specs []spec, opts ...tiers.Option) (*tiers.Backend, []storeAPI) {
	t.Helper()
	var ts []tiers.Tier
	var stores []storeAPI
	for _, s := range specs {
		var st storeAPI
		if s.fault != memtest.None {
			b, err := memtest.New(m, s.fault, mem.WithMode(s.mode))
			require.NoError(t, err)
			st = b
		} else {
			b, err := mem.New(m, mem.WithMode(s.mode))
			require.NoError(t, err)
			st = b
		}
		t.Cleanup(func() { _ = st.Close() })
		for _, i := range s.holds {
			st.Put(extName, name(i), row(i))
		}
		ts = append(ts, tiers.Tier{Name: s.name, Fetcher: st, Publisher: st})
		stores = append(stores, st)
	}
	b, err := tiers.New(ts, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b, stores
}

func served(o contract.Outcome) []int {
	d, ok := o.(contract.Delivered)
	if !ok {
		return nil
	}
	var idx []int
	for i := range 16 {
		if d.Served.Has(name(i)) {
			idx = append(idx, i)
		}
	}
	return idx
}

// TestFetchAcrossTiers: the outcome a stack answers for each way its tiers
// answer (docs/tiers.md, "What the manager sees"), its access proof, and
// what each tier counted.
func TestFetchAcrossTiers(t *testing.T) {
	tests := []struct {
		name       string
		specs      []spec
		fetch      []int
		rejected   bool
		kind       string // "delivered", "failed", "cancelled"
		served     []int
		reason     []string // substrings of a Failed reason
		byPeer     bool
		handed     []uint64 // per tier
		promotedIn []int    // units the first tier holds after the proof
	}{
		{name: "the local tier serves everything; the shared one is never asked",
			specs: []spec{{name: "local", holds: []int{0, 1}}, {name: "shared", holds: []int{0, 1}}},
			fetch: []int{0, 1}, kind: "delivered", served: []int{0, 1}, handed: []uint64{2, 0}},
		{name: "a lower hit is served and promoted",
			specs: []spec{{name: "local", holds: []int{0}}, {name: "shared", holds: []int{1}}},
			fetch: []int{0, 1, 2}, kind: "delivered", served: []int{0, 1}, handed: []uint64{3, 2}, promotedIn: []int{0, 1}},
		{name: "a miss is a miss only when every tier missed",
			specs: []spec{{name: "local"}, {name: "shared"}, {name: "disk"}},
			fetch: []int{0, 1}, kind: "delivered", served: nil, handed: []uint64{2, 2, 2}},
		{name: "a tier that fails after another served fails the stack, naming it",
			specs: []spec{{name: "local", holds: []int{0}}, {name: "shared", holds: []int{1}, mode: mem.Fail}},
			fetch: []int{0, 1}, kind: "failed", reason: []string{`tier 1 "shared" failed its fetch`, "injected failure"}, handed: []uint64{2, 1}},
		{name: "the first tier fails: the next is never asked",
			specs: []spec{{name: "local", holds: []int{0}, mode: mem.Fail}, {name: "shared", holds: []int{0, 1}}},
			fetch: []int{0, 1}, kind: "failed", reason: []string{`tier 0 "local" failed`}, handed: []uint64{2, 0}},
		{name: "a lower tier that rejects is a failure, never a miss",
			specs: []spec{{name: "local", holds: []int{0}}, {name: "shared", mode: mem.Reject}},
			fetch: []int{0, 1}, kind: "failed", reason: []string{`tier 1 "shared" rejected the fetch`}, handed: []uint64{2, 0}},
		{name: "the first tier rejects: the stack rejects, nothing escaped",
			specs: []spec{{name: "local", mode: mem.Reject}, {name: "shared", holds: []int{0}}},
			fetch: []int{0}, rejected: true, handed: []uint64{0, 0}},
		{name: "a cancel by the peer stays a cancel",
			specs: []spec{{name: "local", holds: []int{0}}, {name: "shared", mode: mem.CancelByPeer}},
			fetch: []int{0, 1}, kind: "cancelled", byPeer: true, handed: []uint64{2, 1}},
		{name: "a tier that changes its answer is never trusted (rule 3)",
			specs: []spec{{name: "local", holds: []int{0}}, {name: "shared", holds: []int{1}, fault: memtest.FlipOutcome}},
			fetch: []int{0, 1}, kind: "failed", reason: []string{`tier 1 "shared" broke the contract`, "then failed(flipped answer)"}, handed: []uint64{2, 1}},
		{name: "a tier that serves a unit it was never handed is never trusted",
			specs: []spec{{name: "local"}, {name: "shared", holds: []int{1}, fault: memtest.ServeUnasked}},
			fetch: []int{0, 1}, kind: "failed", reason: []string{`tier 1 "shared" broke the contract`, "never handed"}, handed: []uint64{2, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMemory(4)
			b, stores := build(t, m, tt.specs)
			a, err := b.Fetch(extentOf(t, tt.fetch...), nil)
			if tt.rejected {
				require.ErrorIs(t, err, contract.ErrSubmissionRejected)
				assert.Nil(t, a)
				return
			}
			require.NoError(t, err)
			require.NoError(t, b.Settle(bounded(t), []contract.Attempt{a}))
			o := a.Poll()
			switch tt.kind {
			case "delivered":
				require.IsType(t, contract.Delivered{}, o)
				assert.Equal(t, tt.served, served(o))
			case "failed":
				require.IsType(t, contract.Failed{}, o, "a tier's failure is never a miss of its rows, nor Delivered over them")
				for _, s := range tt.reason {
					assert.Contains(t, o.(contract.Failed).Reason, s)
				}
			case "cancelled":
				assert.Equal(t, contract.Cancelled{ByPeer: tt.byPeer}, o)
			}
			ok, err := b.Quiesce(bounded(t), []contract.Attempt{a})
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, o, a.Poll(), "the outcome latches once")
			if tt.kind == "delivered" {
				for _, i := range tt.served {
					assert.Equal(t, row(i), m.rows[i], "served unit %d holds its stored row once proven", i)
				}
			}
			st := b.Stats()
			for i, want := range tt.handed {
				assert.Equal(t, want, st[i].Handed, "units handed to %s", st[i].Name)
			}
			for _, i := range tt.promotedIn {
				got, ok := stores[0].Get(extName, name(i))
				assert.True(t, ok, "unit %d is in the first tier after the proof", i)
				assert.Equal(t, row(i), got)
			}
		})
	}
}

// TestPublishWritesThrough: a publication reaches every tier; a tier that
// fails it fails the stack, naming the tier; all tiers rejecting is a
// rejection.
func TestPublishWritesThrough(t *testing.T) {
	tests := []struct {
		name     string
		specs    []spec
		rejected bool
		failed   string
	}{
		{name: "every tier stores it", specs: []spec{{name: "local"}, {name: "shared"}}},
		{name: "a failing tier fails the stack", specs: []spec{{name: "local"}, {name: "shared", mode: mem.Fail}}, failed: `tier 1 "shared" failed its publish`},
		{name: "a rejecting tier fails the stack", specs: []spec{{name: "local", mode: mem.Reject}, {name: "shared"}}, failed: `tier 0 "local" rejected the publish`},
		{name: "every tier rejecting is a rejection", specs: []spec{{name: "local", mode: mem.Reject}, {name: "shared", mode: mem.Reject}}, rejected: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMemory(2)
			copy(m.rows[0], row(0))
			copy(m.rows[1], row(1))
			b, stores := build(t, m, tt.specs)
			a, err := b.Publish(extentOf(t, 0, 1))
			if tt.rejected {
				require.ErrorIs(t, err, contract.ErrSubmissionRejected)
				return
			}
			require.NoError(t, err)
			require.NoError(t, b.Settle(bounded(t), []contract.Attempt{a}))
			ok, err := b.Quiesce(bounded(t), []contract.Attempt{a})
			require.NoError(t, err)
			require.True(t, ok)
			if tt.failed != "" {
				require.IsType(t, contract.Failed{}, a.Poll())
				assert.Contains(t, a.Poll().(contract.Failed).Reason, tt.failed)
				return
			}
			assert.Equal(t, []int{0, 1}, served(a.Poll()))
			for _, s := range stores {
				got, ok := s.Get(extName, name(1))
				assert.True(t, ok)
				assert.Equal(t, row(1), got)
			}
		})
	}
}

// TestNewRefusesEveryMistakeAtOnce.
func TestNewRefusesEveryMistakeAtOnce(t *testing.T) {
	m := newMemory(1)
	st, err := mem.New(m)
	require.NoError(t, err)
	defer st.Close()
	_, err = tiers.New([]tiers.Tier{{Fetcher: st}, {Name: "a", Fetcher: st}, {Name: "a", Publisher: st}, {Name: "b"}}, tiers.WithWait(0))
	require.Error(t, err)
	for _, want := range []string{"tier 0 has no name", `tiers 1 and 2 are both named "a"`, `tier 3 "b" has neither`, "WithWait(0s)"} {
		assert.ErrorContains(t, err, want)
	}
	_, err = tiers.New(nil)
	assert.ErrorContains(t, err, "no tiers")
}

// gated is a tier whose Quiesce cannot answer until the test opens its gate:
// over backend/mem in TornUntilQuiesce mode, it keeps rewriting the rows it
// served (Poison, then the content, again and again) until then.
type gated struct {
	*mem.Backend
	gate chan struct{}
	once sync.Once
	mu   sync.Mutex
	asks int // Quiesce and TryQuiesce calls
}

func (g *gated) open() { g.once.Do(func() { close(g.gate) }) }

func (g *gated) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	g.mu.Lock()
	g.asks++
	g.mu.Unlock()
	select {
	case <-g.gate:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return g.Backend.Quiesce(ctx, list)
}

func (g *gated) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	select {
	case <-g.gate:
		return g.Backend.TryQuiesce(list)
	default:
		return contract.AccessUnknown, nil
	}
}

// TestLateWriterBehindAFastOne (rule 19): the shared tier keeps writing the
// row it served until its own Quiesce answers true, while the local tier
// proves at once. The stack never answers true before the late writer's
// proof, and the local tier's quick proof is not taken for it.
func TestLateWriterBehindAFastOne(t *testing.T) {
	m := newMemory(2)
	local, err := mem.New(m)
	require.NoError(t, err)
	defer local.Close()
	inner, err := mem.New(m, mem.WithMode(mem.TornUntilQuiesce), mem.WithTornInterval(0))
	require.NoError(t, err)
	defer inner.Close()
	late := &gated{Backend: inner, gate: make(chan struct{})}
	defer late.open()
	local.Put(extName, name(0), row(0))
	late.Put(extName, name(1), row(1))
	b, err := tiers.New([]tiers.Tier{{Name: "local", Fetcher: local, Publisher: local}, {Name: "shared", Fetcher: late, Publisher: late}},
		tiers.WithWait(20*time.Millisecond)) // the promotion gives up waiting for the late writer's proof
	require.NoError(t, err)
	defer b.Close()

	a, err := b.Fetch(extentOf(t, 0, 1), nil)
	require.NoError(t, err)
	require.NoError(t, b.Settle(bounded(t), []contract.Attempt{a}))
	assert.Equal(t, []int{0, 1}, served(a.Poll()), "both served: the outcome is logical, not a proof")

	for range 3 { // every answer while the late writer writes: never a proof
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		ok, _ := b.Quiesce(ctx, []contract.Attempt{a})
		cancel()
		assert.False(t, ok, "proven while the shared tier still writes its row")
		acc, err := b.TryQuiesce([]contract.Attempt{a})
		require.NoError(t, err)
		assert.NotEqual(t, contract.AccessEnded, acc)
	}
	before := inner.TornPasses()
	require.Eventually(t, func() bool { return inner.TornPasses() > before }, bound, time.Millisecond, "the late writer is still writing")

	require.Eventually(t, func() bool { return b.Stats()[0].PromoteSkipped == 1 }, bound, time.Millisecond,
		"the promotion gives up on the late writer's proof: its row is never promoted from torn bytes")
	late.open()
	ok, err := b.Quiesce(bounded(t), []contract.Attempt{a})
	require.NoError(t, err)
	require.True(t, ok)
	after := inner.TornPasses()
	assert.Equal(t, row(1), m.rows[1], "after the proof the row holds the content, and stays so")
	assert.Equal(t, after, inner.TornPasses(), "nothing writes after the proof")
	_, promoted := local.Get(extName, name(1))
	assert.False(t, promoted)
}

// TestAProofIsAskedOnlyOfWhatATierWasHanded: a lease the local tier served
// entirely never waits for the shared tier, even when the shared tier can
// never prove anything (its Quiesce is never called for attempts it was not
// handed).
func TestAProofIsAskedOnlyOfWhatATierWasHanded(t *testing.T) {
	m := newMemory(2)
	local, err := mem.New(m)
	require.NoError(t, err)
	defer local.Close()
	inner, err := mem.New(m)
	require.NoError(t, err)
	defer inner.Close()
	stuck := &gated{Backend: inner, gate: make(chan struct{})}
	defer stuck.open()
	local.Put(extName, name(0), row(0))
	b, err := tiers.New([]tiers.Tier{{Name: "local", Fetcher: local}, {Name: "shared", Fetcher: stuck}})
	require.NoError(t, err)
	defer b.Close()
	a, err := b.Fetch(extentOf(t, 0), nil)
	require.NoError(t, err)
	ok, err := b.Quiesce(bounded(t), []contract.Attempt{a})
	require.NoError(t, err)
	assert.True(t, ok)
	stuck.mu.Lock()
	defer stuck.mu.Unlock()
	assert.Zero(t, stuck.asks, "the shared tier was asked about an attempt it was never handed")
}

// TestCancelStopsTheChain: a cancel request is forwarded to the tier in
// flight and no other tier is handed units after it.
func TestCancelStopsTheChain(t *testing.T) {
	m := newMemory(2)
	gate := make(chan struct{})
	local, err := mem.New(m, mem.WithGate(func(mem.Call) <-chan struct{} { return gate }))
	require.NoError(t, err)
	defer local.Close()
	shared, err := mem.New(m)
	require.NoError(t, err)
	defer shared.Close()
	shared.Put(extName, name(1), row(1))
	b, err := tiers.New([]tiers.Tier{{Name: "local", Fetcher: local}, {Name: "shared", Fetcher: shared}})
	require.NoError(t, err)
	defer b.Close()
	a, err := b.Fetch(extentOf(t, 0, 1), nil)
	require.NoError(t, err)
	d, err := contract.RequestCancel(a)
	require.NoError(t, err)
	assert.Equal(t, contract.CancelRequested, d)
	close(gate)
	ok, err := b.Quiesce(bounded(t), []contract.Attempt{a})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, contract.Cancelled{ByPeer: false}, a.Poll())
	assert.Zero(t, b.Stats()[1].Handed, "a tier was handed units after the cancel")
	assert.Equal(t, bytes.Repeat([]byte{'.'}, rowSize), m.rows[1])
}

// TestAllTiersAccountedFor is a smoke test that a panicking tier costs its
// own attempt only.
func TestAPanickingTierCostsItsAttempt(t *testing.T) {
	m := newMemory(1)
	b, err := tiers.New([]tiers.Tier{{Name: "bad", Fetcher: panicky{}}})
	require.NoError(t, err)
	defer b.Close()
	a, err := b.Fetch(extentOf(t, 0), nil)
	require.NoError(t, err, "a panic may have escaped: an attempt, never a rejection")
	require.NoError(t, b.Settle(bounded(t), []contract.Attempt{a}))
	require.IsType(t, contract.Failed{}, a.Poll())
	assert.Contains(t, a.Poll().(contract.Failed).Reason, `tier 0 "bad" broke the contract`)
	ok, err := b.Quiesce(bounded(t), []contract.Attempt{a})
	assert.False(t, ok, "an escaped submission without an attempt is never proven")
	assert.ErrorContains(t, err, `tier 0 "bad"`)
	assert.Equal(t, uint64(1), b.Stats()[0].Violations)
	_ = m
}

type panicky struct{ contract.Fetcher }

func (panicky) Fetch(contract.CacheExtent, contract.Route) (contract.Attempt, error) {
	panic("boom")
}
