package memtest_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/mem/memtest"
	"github.com/kvready/kvready/contract"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const rowSize = 8
const extName = "trtllm:shared-kv:staging:1"

// staging is a fixed set of rows: group 0, slots 0..n-1.
type staging struct{ rows [][]byte }

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
func poison() []byte       { return bytes.Repeat([]byte{mem.Poison}, rowSize) }
func untouched() []byte    { return bytes.Repeat([]byte{'.'}, rowSize) }

func extent(t testing.TB, n int) contract.CacheExtent {
	units := make([]contract.Unit, n)
	for i := range units {
		units[i] = contract.Unit{Name: name(i), LocalGroup: 0, Local: i}
	}
	e, err := contract.NewCacheExtent([]byte(extName), units, false)
	require.NoError(t, err)
	return e
}

func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func served(idx ...int) contract.Outcome {
	var ns []contract.Name
	for _, i := range idx {
		ns = append(ns, name(i))
	}
	return contract.Delivered{Served: contract.NewNameSet(ns...)}
}

// TestFaults: the store holds units 0, 1 and 2 of a four-unit extent; each
// fault breaks the contract as it says, and only as it says.
func TestFaults(t *testing.T) {
	tests := []struct {
		fault     memtest.Fault
		outcome   contract.Outcome // nil: checked below
		rows      [4][]byte        // once Quiesce answered true
		flips     bool
		lateWrite bool
	}{
		{memtest.WriteAfterQuiesce, served(0, 1, 2), [4][]byte{content(0), content(1), content(2), untouched()}, false, true},
		{memtest.WriteUnserved, served(0, 1), [4][]byte{content(0), content(1), poison(), poison()}, false, false},
		{memtest.FlipOutcome, served(0, 1, 2), [4][]byte{content(0), content(1), content(2), untouched()}, true, false},
		{memtest.ServeUnasked, nil, [4][]byte{content(0), content(1), content(2), untouched()}, false, false},
	}
	covered := map[memtest.Fault]bool{}
	for _, tt := range tests {
		covered[tt.fault] = true
		t.Run(tt.fault.String(), func(t *testing.T) {
			st := newStaging(4)
			b, err := memtest.New(st, tt.fault)
			require.NoError(t, err)
			defer func() { require.NoError(t, b.Close()) }()
			for i := range 3 {
				b.Put(extName, name(i), content(i))
			}
			a, err := b.Fetch(extent(t, 4), nil)
			require.NoError(t, err)
			notified := make(chan contract.Outcome, 1)
			a.(contract.Notifier).Notify(func() {
				if tt.flips { // a poll here would count as one of its answers
					notified <- contract.Delivered{}
					return
				}
				notified <- a.Poll()
			})
			ctx := bounded(t)
			require.NoError(t, b.Settle(ctx, []contract.Attempt{a}))
			first := a.Poll()
			require.NotNil(t, first)
			select {
			case o := <-notified:
				assert.NotNil(t, o, "Notify fires once Poll answers the broken outcome")
			case <-ctx.Done():
				t.Fatal("Notify never fired")
			}
			if tt.outcome != nil {
				assert.Equal(t, tt.outcome, first)
			} else {
				d := first.(contract.Delivered)
				assert.Equal(t, 4, d.Served.Len(), "three served plus one not asked for")
				assert.False(t, d.Served.Has(name(3)))
			}
			if tt.flips {
				assert.Equal(t, contract.Failed{Reason: "flipped answer"}, a.Poll(), "broken: the answer changes")
				assert.Equal(t, first, a.Poll())
			} else {
				assert.Equal(t, first, a.Poll())
			}

			ok, err := b.Quiesce(ctx, []contract.Attempt{a})
			require.NoError(t, err)
			require.True(t, ok)
			for i, want := range tt.rows {
				assert.Equal(t, string(want), string(st.rows[i]), "row %d", i)
			}
			// The caller now owns the rows: a canary must survive any later call.
			for i := range st.rows {
				copy(st.rows[i], "CANARY!!")
			}
			require.NoError(t, b.Settle(ctx, nil))
			for i := range st.rows {
				wantCanary := !tt.lateWrite || i == 3
				assert.Equal(t, wantCanary, string(st.rows[i]) == "CANARY!!", "row %d after a later call: %q", i, st.rows[i])
			}
		})
	}
	for _, f := range memtest.Faults() {
		assert.True(t, covered[f], "fault %v has no row", f)
	}
}

// A late write is made by the next call of any kind after the proof, a
// publication's included, and by TryQuiesce's proof as by Quiesce's; Close
// drops the late writes still pending.
func TestWriteAfterQuiesceTiming(t *testing.T) {
	for _, tc := range []struct {
		name  string
		prove func(b *memtest.Backend, a contract.Attempt) bool
		next  func(t *testing.T, b *memtest.Backend, a contract.Attempt)
		close bool
	}{
		{"quiesce/poll", quiesce, func(_ *testing.T, _ *memtest.Backend, a contract.Attempt) { a.Poll() }, false},
		{"try-quiesce/probe", tryQuiesce, func(t *testing.T, b *memtest.Backend, _ contract.Attempt) {
			_, _, err := b.Probe(context.Background(), []byte(extName), nil)
			require.NoError(t, err)
		}, false},
		{"quiesce/close", quiesce, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStaging(2)
			b, err := memtest.New(st, memtest.WriteAfterQuiesce)
			require.NoError(t, err)
			b.Put(extName, name(0), content(0))
			a, err := b.Publish(extent(t, 1))
			require.NoError(t, err)
			require.NoError(t, b.Settle(bounded(t), []contract.Attempt{a}))
			require.True(t, tc.prove(b, a))
			copy(st.rows[0], "CANARY!!")
			if tc.close {
				require.NoError(t, b.Close())
				assert.Equal(t, "CANARY!!", string(st.rows[0]), "a closed backend makes no late write")
				return
			}
			defer func() { require.NoError(t, b.Close()) }()
			a.(contract.Cancellable).RequestCancel()
			assert.Equal(t, "CANARY!!", string(st.rows[0]), "RequestCancel must not wait: it makes no late write")
			tc.next(t, b, a)
			assert.Equal(t, string(poison()), string(st.rows[0]), "the next call made the late write")
		})
	}
}

func quiesce(b *memtest.Backend, a contract.Attempt) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok, err := b.Quiesce(ctx, []contract.Attempt{a})
	return ok && err == nil
}

func tryQuiesce(b *memtest.Backend, a contract.Attempt) bool {
	acc, err := b.TryQuiesce([]contract.Attempt{a})
	return acc == contract.AccessEnded && err == nil
}

// WithPolicy breaks only the calls its policy picks, and counts Seq as mem
// does, probes included, so that a mem policy and a fault policy agree on a
// call.
func TestPolicyPerCall(t *testing.T) {
	st := newStaging(4)
	var seqs []uint64
	b, err := memtest.WithPolicy(st, func(c memtest.Call) memtest.Fault {
		seqs = append(seqs, c.Seq)
		if c.Seq == 3 {
			return memtest.ServeUnasked
		}
		return memtest.None
	}, mem.WithPolicy(func(c mem.Call) mem.Mode {
		if c.Seq == 1 {
			return mem.Miss
		}
		return mem.Normal
	}))
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	b.Put(extName, name(0), content(0))
	ctx := bounded(t)
	outcome := func() contract.Outcome {
		a, err := b.Fetch(extent(t, 1), nil)
		require.NoError(t, err)
		require.NoError(t, b.Settle(ctx, []contract.Attempt{a}))
		return a.Poll()
	}
	assert.Equal(t, contract.Delivered{}, outcome(), "call 1: mem's miss, no fault")
	_, _, err = b.Probe(ctx, []byte(extName), nil) // call 2
	require.NoError(t, err)
	assert.Equal(t, 2, outcome().(contract.Delivered).Served.Len(), "call 3: served plus one not asked for")
	assert.Equal(t, served(0), outcome(), "call 4: as mem delivers")
	assert.Equal(t, []uint64{1, 3, 4}, seqs)
}

func TestRefusals(t *testing.T) {
	st := newStaging(1)
	for _, f := range []memtest.Fault{memtest.None, memtest.Fault(-1), memtest.Fault(99)} {
		_, err := memtest.New(st, f)
		assert.ErrorContains(t, err, "want one of", "fault %v", f)
	}
	_, err := memtest.WithPolicy(st, nil)
	assert.ErrorContains(t, err, "policy is nil")
	_, err = memtest.New(nil, memtest.FlipOutcome)
	assert.ErrorContains(t, err, "Memory is nil", "mem's own refusals come through")

	b, err := memtest.New(st, memtest.FlipOutcome)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	other, err := mem.New(st)
	require.NoError(t, err)
	defer func() { require.NoError(t, other.Close()) }()
	foreign, err := other.Fetch(extent(t, 1), nil)
	require.NoError(t, err)
	ctx := bounded(t)
	_, err = b.Quiesce(ctx, []contract.Attempt{foreign})
	assert.ErrorContains(t, err, "was not returned by this backend")
	_, err = b.TryQuiesce([]contract.Attempt{foreign})
	assert.ErrorContains(t, err, "was not returned by this backend")
	assert.ErrorContains(t, b.Settle(ctx, []contract.Attempt{foreign}), "was not returned by this backend")
	assert.ErrorContains(t, b.Drain(ctx, []contract.Attempt{foreign}), "was not returned by this backend")
	require.NoError(t, other.Drain(ctx, []contract.Attempt{foreign}))
}

func TestFaultNames(t *testing.T) {
	var names []string
	for _, f := range memtest.Faults() {
		names = append(names, f.String())
	}
	assert.Equal(t, []string{"write-after-quiesce", "write-unserved", "flip-outcome", "serve-unasked"}, names)
	assert.Equal(t, "none", memtest.None.String())
	assert.Equal(t, "fault(9)", memtest.Fault(9).String())
	for _, f := range memtest.Faults() {
		for _, m := range mem.Modes() {
			assert.NotEqual(t, m.String(), f.String(), "a URL's mode=%s must name one thing", f)
		}
	}
}
