package mem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const rowSize = 8
const extName = "trtllm:shared-kv:staging:1"

// staging is a fixed set of rows: group 0, slots 0..n-1.
type staging struct {
	rows [][]byte // fixed after construction: Row needs no lock
}

func newStaging(n int) *staging {
	s := &staging{}
	for range n {
		s.rows = append(s.rows, bytes.Repeat([]byte{'.'}, rowSize))
	}
	return s
}

func (s *staging) Row(group, local int) ([]byte, bool) {
	if group != 0 || local >= len(s.rows) {
		return nil, false
	}
	return s.rows[local], true
}

func name(i int) contract.Name {
	var n contract.Name
	n[0], n[53] = byte(i), 0x42
	return n
}

func content(i int) []byte { return bytes.Repeat([]byte{byte('A' + i)}, rowSize) }

func extent(t testing.TB, n int) contract.CacheExtent {
	units := make([]contract.Unit, n)
	for i := range units {
		units[i] = contract.Unit{Name: name(i), LocalGroup: 0, Local: i}
	}
	e, err := contract.NewCacheExtent([]byte(extName), units, false)
	require.NoError(t, err)
	return e
}

func newBackend(t *testing.T, st mem.Memory, opts ...mem.Option) *mem.Backend {
	t.Helper()
	b, err := mem.New(st, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func poison() []byte    { return bytes.Repeat([]byte{mem.Poison}, rowSize) }
func untouched() []byte { return bytes.Repeat([]byte{'.'}, rowSize) }

// TestFetchModes: the store holds units 0, 1 and 2 of a four-unit extent.
func TestFetchModes(t *testing.T) {
	served := func(idx ...int) contract.Outcome {
		var ns []contract.Name
		for _, i := range idx {
			ns = append(ns, name(i))
		}
		return contract.Delivered{Served: contract.NewNameSet(ns...)}
	}
	all := []int{0, 1, 2}
	tests := []struct {
		mode      mem.Mode
		outcome   contract.Outcome
		rows      [4][]byte // after Quiesce (or Settle)
		quiesce   bool
		quiesceOK bool // Quiesce answers without error
	}{
		{mem.Normal, served(all...), [4][]byte{content(0), content(1), content(2), untouched()}, true, true},
		{mem.Miss, contract.Delivered{}, [4][]byte{untouched(), untouched(), untouched(), untouched()}, true, true},
		{mem.Partial, served(0, 1), [4][]byte{content(0), content(1), untouched(), untouched()}, true, true},
		{mem.Fail, contract.Failed{Reason: "injected failure"}, [4][]byte{poison(), poison(), poison(), poison()}, true, true},
		{mem.CancelLocal, contract.Cancelled{}, [4][]byte{poison(), poison(), poison(), poison()}, true, true},
		{mem.CancelByPeer, contract.Cancelled{ByPeer: true}, [4][]byte{poison(), poison(), poison(), poison()}, true, true},
		{mem.QuiesceFalse, served(all...), [4][]byte{content(0), content(1), content(2), untouched()}, false, true},
		{mem.QuiesceError, served(all...), [4][]byte{content(0), content(1), content(2), untouched()}, false, false},
		{mem.SlowQuiesce, served(all...), [4][]byte{content(0), content(1), content(2), untouched()}, true, true},
		// The first Quiesce is "not yet"; TestQuiesceNotYet follows it to true.
		{mem.QuiesceNotYet, served(all...), [4][]byte{content(0), content(1), content(2), untouched()}, false, true},
		{mem.TornUntilQuiesce, served(all...), [4][]byte{content(0), content(1), content(2), untouched()}, true, true},
	}
	covered := map[mem.Mode]bool{mem.Reject: true} // Reject has its own test
	for _, tt := range tests {
		covered[tt.mode] = true
		t.Run(tt.mode.String(), func(t *testing.T) {
			st := newStaging(4)
			b := newBackend(t, st, mem.WithMode(tt.mode), mem.WithSlowQuiesce(time.Millisecond))
			for i := range 3 {
				b.Put(extName, name(i), content(i))
			}
			a, err := b.Fetch(extent(t, 4), nil)
			require.NoError(t, err)
			ctx := context.Background()
			require.NoError(t, b.Settle(ctx, []contract.Attempt{a}))
			first := a.Poll()
			require.NotNil(t, first)
			if tt.outcome != nil {
				assert.Equal(t, tt.outcome, first)
			}
			assert.Equal(t, first, a.Poll(), "the outcome is stable")

			ok, err := b.Quiesce(ctx, []contract.Attempt{a})
			assert.Equal(t, tt.quiesce, ok)
			assert.Equal(t, tt.quiesceOK, err == nil, "quiesce error: %v", err)
			for i, want := range tt.rows {
				assert.Equal(t, string(want), string(st.rows[i]), "row %d", i)
			}
			if !ok {
				return
			}
			// The caller now owns the rows: a canary must survive any later call.
			for i := range st.rows {
				copy(st.rows[i], "CANARY!!")
			}
			require.NoError(t, b.Settle(ctx, nil))
			for i := range st.rows {
				assert.Equal(t, "CANARY!!", string(st.rows[i]), "row %d after a later call", i)
			}
		})
	}
	for _, m := range mem.Modes() {
		assert.True(t, covered[m], "mode %v has no row", m)
	}
}

func TestReject(t *testing.T) {
	st := newStaging(2)
	b := newBackend(t, st, mem.WithMode(mem.Reject))
	b.Put(extName, name(0), content(0))
	a, err := b.Fetch(extent(t, 2), nil)
	assert.Nil(t, a)
	assert.ErrorIs(t, err, contract.ErrSubmissionRejected)
	a, err = b.Publish(extent(t, 2))
	assert.Nil(t, a)
	assert.ErrorIs(t, err, contract.ErrSubmissionRejected)
	assert.Equal(t, string(untouched()), string(st.rows[0]))
	_, stored := b.Get(extName, name(1))
	assert.False(t, stored)
}

func TestFetchRefusals(t *testing.T) {
	st := newStaging(1)
	tests := []struct {
		name   string
		setup  func(b *mem.Backend)
		units  int
		reason string
	}{
		{"row outside staging", func(b *mem.Backend) {}, 2, "no staging row"},
		{"stored row of another size", func(b *mem.Backend) { b.Put(extName, name(0), []byte("short")) }, 1, "stored row has 5 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t, st)
			tt.setup(b)
			a, err := b.Fetch(extent(t, tt.units), nil)
			require.NoError(t, err)
			require.NoError(t, b.Settle(context.Background(), []contract.Attempt{a}))
			f, ok := a.Poll().(contract.Failed)
			require.True(t, ok)
			assert.Contains(t, f.Reason, tt.reason)
			assert.Equal(t, string(untouched()), string(st.rows[0]), "nothing written")
		})
	}
	b := newBackend(t, st)
	_, err := b.Fetch(extent(t, 1), route{})
	assert.ErrorIs(t, err, contract.ErrSubmissionRejected)
	_, err = mem.New(nil)
	assert.Error(t, err)
	_, err = mem.New(st, mem.WithPolicy(nil))
	assert.Error(t, err)
	b2 := newBackend(t, st, mem.WithMode(mem.Mode(99)))
	_, err = b2.Fetch(extent(t, 1), nil)
	assert.ErrorIs(t, err, contract.ErrSubmissionRejected)
}

type route struct{}

func (route) Close() error { return nil }

func TestQuiesceWaitsOnlyOnListed(t *testing.T) {
	st := newStaging(2)
	held := make(chan struct{})
	b := newBackend(t, st, mem.WithGate(func(c mem.Call) <-chan struct{} {
		if c.Seq == 1 {
			return held
		}
		return nil
	}))
	slow, err := b.Fetch(extent(t, 1), nil)
	require.NoError(t, err)
	fast, err := b.Fetch(extent(t, 1), nil)
	require.NoError(t, err)

	ok, err := b.Quiesce(context.Background(), []contract.Attempt{fast})
	require.NoError(t, err)
	assert.True(t, ok, "the unlisted held attempt is not waited on")
	assert.Nil(t, slow.Poll(), "still in flight")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	ok, err = b.Quiesce(ctx, []contract.Attempt{slow})
	assert.False(t, ok)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	err = b.Settle(ctx, []contract.Attempt{slow})
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	close(held)
	ok, err = b.Quiesce(context.Background(), []contract.Attempt{slow})
	require.NoError(t, err)
	assert.True(t, ok)
}

func TestQuiesceCancelledContextNeverTrue(t *testing.T) {
	b := newBackend(t, newStaging(1))
	a, err := b.Fetch(extent(t, 1), nil)
	require.NoError(t, err)
	require.NoError(t, b.Settle(context.Background(), []contract.Attempt{a}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok, err := b.Quiesce(ctx, []contract.Attempt{a})
	assert.False(t, ok)
	assert.ErrorIs(t, err, context.Canceled)

	slow := newBackend(t, newStaging(1), mem.WithMode(mem.SlowQuiesce), mem.WithSlowQuiesce(time.Hour))
	a, err = slow.Fetch(extent(t, 1), nil)
	require.NoError(t, err)
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	ok, err = slow.Quiesce(ctx, []contract.Attempt{a})
	assert.False(t, ok)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestForeignAttempts(t *testing.T) {
	b1 := newBackend(t, newStaging(1))
	b2 := newBackend(t, newStaging(1))
	a, err := b1.Fetch(extent(t, 1), nil)
	require.NoError(t, err)
	_, err = b2.Quiesce(context.Background(), []contract.Attempt{a})
	assert.ErrorContains(t, err, "not returned by this backend")
	assert.ErrorContains(t, b2.Settle(context.Background(), []contract.Attempt{nil}), "attempt 0")
}

func TestDelay(t *testing.T) {
	st := newStaging(1)
	var calls []mem.Call
	var mu sync.Mutex
	b := newBackend(t, st, mem.WithDelay(func(c mem.Call) time.Duration {
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
		return time.Millisecond
	}))
	b.Put(extName, name(0), content(0))
	a, err := b.Fetch(extent(t, 1), nil)
	require.NoError(t, err)
	ok, err := b.Quiesce(context.Background(), []contract.Attempt{a})
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, string(content(0)), string(st.rows[0]))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []mem.Call{{Op: mem.OpFetch, Extent: extName, Seq: 1, Units: 1}}, calls)
}

func TestCloseAbandonsHeldDeliveries(t *testing.T) {
	st := newStaging(1)
	b, err := mem.New(st, mem.WithGate(func(mem.Call) <-chan struct{} { return make(chan struct{}) }))
	require.NoError(t, err)
	b.Put(extName, name(0), content(0))
	a, err := b.Fetch(extent(t, 1), nil)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "idempotent")
	_, failed := a.Poll().(contract.Failed)
	assert.True(t, failed)
	assert.Equal(t, string(untouched()), string(st.rows[0]))
	_, err = b.Fetch(extent(t, 1), nil)
	assert.ErrorIs(t, err, contract.ErrSubmissionRejected)
}

func TestPublish(t *testing.T) {
	tests := []struct {
		mode   mem.Mode
		stored []int
	}{
		{mem.Normal, []int{0, 1, 2}},
		{mem.Miss, nil},
		{mem.Partial, []int{0, 1}},
		{mem.Fail, nil},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			st := newStaging(3)
			for i := range st.rows {
				copy(st.rows[i], content(i))
			}
			b := newBackend(t, st, mem.WithMode(tt.mode))
			a, err := b.Publish(extent(t, 3))
			require.NoError(t, err)
			ok, err := b.Quiesce(context.Background(), []contract.Attempt{a})
			require.NoError(t, err)
			require.True(t, ok)
			for i := range 3 {
				row, has := b.Get(extName, name(i))
				want := false
				for _, s := range tt.stored {
					want = want || s == i
				}
				assert.Equal(t, want, has, "unit %d", i)
				if has {
					assert.Equal(t, string(content(i)), string(row))
				}
				assert.Equal(t, string(content(i)), string(st.rows[i]), "a publication never writes its source")
			}
			if d, ok := a.Poll().(contract.Delivered); ok {
				assert.Equal(t, len(tt.stored), d.Served.Len())
			}
		})
	}
}

func TestProbe(t *testing.T) {
	b := newBackend(t, newStaging(1), mem.WithPolicy(func(c mem.Call) mem.Mode {
		if c.Op == mem.OpProbe && c.Extent == "broken" {
			return mem.Fail
		}
		return mem.Normal
	}))
	b.Put(extName, name(1), content(1))
	ctx := context.Background()
	hits, answered, err := b.Probe(ctx, []byte(extName), []contract.Name{name(0), name(1)})
	require.NoError(t, err)
	assert.True(t, answered)
	assert.Equal(t, 1, hits.Len())
	assert.True(t, hits.Has(name(1)))

	_, answered, err = b.Probe(ctx, []byte("broken"), []contract.Name{name(1)})
	assert.ErrorContains(t, err, "injected failure")
	assert.False(t, answered)
	// An extent name is any bytes, the empty one included: what was stored
	// under it is found under it, and only there.
	b.Put("", name(2), content(2))
	hits, answered, err = b.Probe(ctx, nil, []contract.Name{name(1), name(2)})
	require.NoError(t, err)
	assert.True(t, answered)
	assert.Equal(t, []contract.Name{name(2)}, slices.Collect(hits.All()))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err = b.Probe(cancelled, []byte(extName), nil)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestOpenRoute(t *testing.T) {
	b := newBackend(t, newStaging(1))
	r, err := b.OpenRoute(map[string]string{"peer": "x"})
	assert.Nil(t, r)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.NotErrorIs(t, err, contract.ErrSubmissionRejected)
}

func TestRegisterPool(t *testing.T) {
	b := newBackend(t, newStaging(1))
	r1, err := b.RegisterPool(0x1000, 0x100)
	require.NoError(t, err)
	for _, bad := range []struct {
		addr uintptr
		size int
	}{{0x10ff, 1}, {0x0f00, 0x101}, {0x1000, 0x100}, {0, 10}, {0x5000, 0}, {^uintptr(0) - 1, 10}} {
		_, err := b.RegisterPool(bad.addr, bad.size)
		assert.Error(t, err, "%#x+%d", bad.addr, bad.size)
		assert.Equal(t, 1, b.Registered(), "a refused registration registers nothing")
	}
	_, err = b.RegisterPool(0x1100, 0x10)
	require.NoError(t, err, "adjacent is not overlapping")

	require.NoError(t, r1.Close())
	require.NoError(t, r1.Close(), "idempotent")
	r2, err := b.RegisterPool(0x1000, 0x100)
	require.NoError(t, err, "the address is free again")
	require.NoError(t, r1.Close(), "the old handle")
	assert.Equal(t, 2, b.Registered(), "an old handle never revokes a newer registration")
	require.NoError(t, r2.Close())
	assert.Equal(t, 1, b.Registered())
}

func TestModeNames(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range mem.Modes() {
		assert.True(t, m.Valid())
		assert.False(t, seen[m.String()], "duplicate name %s", m)
		seen[m.String()] = true
	}
	assert.Len(t, mem.Modes(), 12, "every mode is one a correct backend may exhibit; broken ones are memtest's")
	for i, m := range mem.Modes() {
		assert.Equal(t, mem.Mode(i), m, "Modes lists the modes in order")
		assert.NotEmpty(t, m.String())
	}
	assert.Equal(t, "quiesce-not-yet", mem.QuiesceNotYet.String())
	assert.Equal(t, "torn-until-quiesce", mem.TornUntilQuiesce.String())
	assert.Equal(t, "mode(-1)", mem.Mode(-1).String())
	assert.False(t, mem.Mode(-1).Valid())
	assert.Equal(t, "probe", mem.OpProbe.String())
	assert.Equal(t, "op(7)", mem.Op(7).String())
}

func TestConcurrentUse(t *testing.T) {
	st := newStaging(64)
	b := newBackend(t, st)
	for i := range 64 {
		b.Put(extName, name(i), content(i%20))
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			units := make([]contract.Unit, 8)
			for i := range units {
				units[i] = contract.Unit{Name: name(g*8 + i), Local: g*8 + i}
			}
			e, _ := contract.NewCacheExtent([]byte(extName), units, false)
			a, err := b.Fetch(e, nil)
			if !assert.NoError(t, err) {
				return
			}
			ok, err := b.Quiesce(context.Background(), []contract.Attempt{a})
			assert.True(t, ok)
			assert.NoError(t, err)
			for i := range units {
				assert.Equal(t, string(content((g*8+i)%20)), string(st.rows[g*8+i]))
			}
		})
	}
	wg.Wait()
}

func Example() {
	rows := newStaging(2)
	b, _ := mem.New(rows)
	defer b.Close()
	b.Put(extName, name(0), []byte("kv-row-0"))

	units := []contract.Unit{{Name: name(0), Local: 0}, {Name: name(1), Local: 1}}
	ext, _ := contract.NewCacheExtent([]byte(extName), units, false)
	a, _ := b.Fetch(ext, nil)
	quiet, _ := b.Quiesce(context.Background(), []contract.Attempt{a})
	fmt.Println(a.Poll(), quiet)
	fmt.Printf("%s %s\n", rows.rows[0], rows.rows[1])
	// Output:
	// delivered(1 served) true
	// kv-row-0 ........
}
