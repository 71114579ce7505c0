package mem_test

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
)

// A row evicted while a fetch still copies out of it keeps its bytes until
// that fetch stopped reading: the next occupant of a recycled row never
// reaches the fetch's slot. The fetch here reads late on purpose
// (TornUntilQuiesce copies the stored row again on every pass until Quiesce)
// while three puts, each the size of the row, evict one another.
func TestEvictedRowIsNotRecycledWhileRead(t *testing.T) {
	st := newStaging(1)
	b := newBackend(t, st, mem.WithCapacity(1), mem.WithPolicy(func(c mem.Call) mem.Mode {
		if c.Op == mem.OpFetch {
			return mem.TornUntilQuiesce
		}
		return mem.Normal
	}))
	b.Put(extName, name(0), content(0))
	a, err := b.Fetch(extentOf(t, 0), nil)
	require.NoError(t, err)
	list := []contract.Attempt{a}
	require.NoError(t, b.Settle(bounded(t), list))
	require.Equal(t, []int{0}, servedIdx(a.Poll()))

	seen := waitPasses(t, b, 1)
	for i := 1; i <= 3; i++ {
		b.Put(extName, name(i), content(i)) // evicts the row before it
	}
	waitPasses(t, b, seen+3) // the fetch goes on copying after the evictions

	ok, err := b.Quiesce(bounded(t), list)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, content(0), st.rows[0], "the fetch's slot holds what it was served, not a later row's bytes")
	got, ok := b.Get(extName, name(3))
	require.True(t, ok)
	assert.Equal(t, content(3), got)
	assert.Equal(t, 1, b.Len())
}

// At capacity, storing a row reuses the bytes of one the store dropped: no
// allocation of the row's size per Put or per published row.
func TestStoringAtCapacityReusesDroppedRows(t *testing.T) {
	const size, held = 64 << 10, 4
	row := bytes.Repeat([]byte{7}, size)
	tests := []struct {
		name  string
		store func(t *testing.T, b *mem.Backend, st *bigStaging, i int)
	}{
		{"Put", func(_ *testing.T, b *mem.Backend, _ *bigStaging, i int) { b.Put(extName, name(i), row) }},
		{"Publish", func(t *testing.T, b *mem.Backend, st *bigStaging, i int) {
			ext, err := contract.NewCacheExtent([]byte(extName), []contract.Unit{{Name: name(i), Local: 0}}, false)
			require.NoError(t, err)
			a, err := b.Publish(ext)
			require.Equal(t, []int{i}, servedIdx(deliver(t, b, a, err)))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newBigStaging(1, size)
			b := newBackend(t, st, mem.WithCapacity(held))
			for i := range 2 * held { // full, and rows dropped to reuse
				tt.store(t, b, st, i)
			}
			const stores = 64
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for i := range stores {
				tt.store(t, b, st, 2*held+i)
			}
			runtime.ReadMemStats(&after)
			// A submission allocates its own bookkeeping (about 2 KiB): far
			// below a row, and a row per store would be four times the bound.
			assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(stores*size/4),
				"%d rows of %d bytes stored at capacity allocated %d bytes in all; want no row-sized allocation per row", stores, size, after.TotalAlloc-before.TotalAlloc)
			assert.Equal(t, held, b.Len())
		})
	}
}

// Fetchers and writers at once over a small store that evicts all the time:
// every row a fetch serves is whole, one stored version of its own name,
// never bytes of a row recycled under it (and -race sees no shared access).
func TestRecycledRowsUnderConcurrentFetches(t *testing.T) {
	const (
		size     = 4 << 10
		names    = 6
		fetchers = 3
		rounds   = 150
	)
	st := newBigStaging(fetchers*names, size)
	b := newBackend(t, st, mem.WithCapacity(names/2))
	version := func(n, v int) []byte { return bytes.Repeat([]byte{byte(n<<4 | v&0xF)}, size) }

	var wg sync.WaitGroup
	errs := make(chan error, fetchers+1)
	wg.Add(1)
	go func() { // the writer: every name, again and again, new versions
		defer wg.Done()
		for v := range rounds {
			for n := range names {
				b.Put(extName, name(n), version(n, v))
			}
		}
	}()
	for f := range fetchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			units := make([]contract.Unit, names)
			for n := range units {
				units[n] = contract.Unit{Name: name(n), Local: f*names + n}
			}
			ext, err := contract.NewCacheExtent([]byte(extName), units, false)
			if err != nil {
				errs <- err
				return
			}
			for range rounds {
				a, err := b.Fetch(ext, nil)
				if err == nil {
					_, err = b.Quiesce(bounded(t), []contract.Attempt{a})
				}
				if err != nil {
					errs <- err
					return
				}
				for _, n := range servedIdx(a.Poll()) {
					got := st.rows[f*names+n]
					if want := bytes.Repeat(got[:1], size); got[0]>>4 != byte(n) || !bytes.Equal(got, want) {
						errs <- fmt.Errorf("fetcher %d, name %d: served a row that is not one whole version of its own name (first byte %#x)", f, n, got[0])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	assert.Positive(t, b.Evictions())
}

// bigStaging is staging of n rows of size bytes each.
type bigStaging struct{ rows [][]byte }

func newBigStaging(n, size int) *bigStaging {
	s := &bigStaging{}
	for range n {
		s.rows = append(s.rows, make([]byte, size))
	}
	return s
}

func (s *bigStaging) Row(group, local int) ([]byte, bool) {
	if group != 0 || local < 0 || local >= len(s.rows) {
		return nil, false
	}
	return s.rows[local], true
}
