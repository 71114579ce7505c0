package tiers_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/contract"
)

// TestLocalTierHitRate measures the bounded local tier (backend/mem's LRU
// under WithCapacityBytes) on a skewed workload — a Zipf draw over prefix
// blocks, as shared prefixes are — and sets it beside Belady's offline
// optimum for the same trace and capacity: LRU can never beat it, and the
// log says how close it comes (docs/tiers.md quotes the numbers).
func TestLocalTierHitRate(t *testing.T) {
	const blocks, fetches = 400, 4000
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 4, blocks-1)
	trace := make([]int, fetches)
	for i := range trace {
		trace[i] = int(z.Uint64())
	}
	for _, capRows := range []int{10, 40, 100} {
		m := newMemory(1)
		local, err := mem.New(m, mem.WithCapacityBytes(int64(capRows*rowSize)))
		require.NoError(t, err)
		shared, err := mem.New(m)
		require.NoError(t, err)
		stack, err := tiers.New([]tiers.Tier{{Name: "local", Fetcher: local, Publisher: local}, {Name: "shared", Fetcher: shared, Publisher: shared}})
		require.NoError(t, err)
		for i := range blocks {
			shared.Put(extName, blockName(i), row(i%26))
		}
		for _, b := range trace {
			e, err := contract.NewCacheExtent([]byte(extName), []contract.Unit{{Name: blockName(b), Local: 0}}, false)
			require.NoError(t, err)
			a, err := stack.Fetch(e, nil)
			require.NoError(t, err)
			ok, err := stack.Quiesce(bounded(t), []contract.Attempt{a})
			require.NoError(t, err)
			require.True(t, ok)
		}
		st := stack.Stats()[0]
		opt := belady(trace, capRows)
		t.Logf("capacity %3d rows (%4d bytes): LRU local hit rate %.3f, Belady's optimum %.3f; %d evictions, %d bytes held",
			capRows, capRows*rowSize, st.HitRate(), opt, st.Evictions, st.Bytes)
		assert.LessOrEqual(t, st.HitRate(), opt+1e-9)
		assert.LessOrEqual(t, st.Bytes, int64(capRows*rowSize))
		_ = stack.Close()
		_ = local.Close()
		_ = shared.Close()
	}
}

func blockName(i int) contract.Name {
	var n contract.Name
	n[0], n[1], n[2] = 0xB1, byte(i>>8), byte(i)
	return n
}

// belady is the hit rate of the offline optimum: on a miss into a full
// cache, evict the block used furthest in the future.
func belady(trace []int, capacity int) float64 {
	next := make([]int, len(trace))
	last := map[int]int{}
	for i := len(trace) - 1; i >= 0; i-- {
		if j, ok := last[trace[i]]; ok {
			next[i] = j
		} else {
			next[i] = len(trace)
		}
		last[trace[i]] = i
	}
	cache := map[int]int{} // block -> its next use
	hits := 0
	for i, b := range trace {
		if _, ok := cache[b]; ok {
			hits++
		} else if len(cache) >= capacity {
			far, victim := -1, 0
			for c, nu := range cache {
				if nu > far {
					far, victim = nu, c
				}
			}
			delete(cache, victim)
		}
		cache[b] = next[i]
	}
	return float64(hits) / float64(len(trace))
}
