package mem_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
)

// TestAdoptStoresTheBytesItIsHanded: Reserve hands out rows' worth of bytes,
// recycled from the rows the store dropped; Adopt stores the bytes
// themselves (what a fetch then serves, and what Get returns), evicting at
// capacity like Put — one row a call, or many; a row over the byte bound is
// not stored, and neither are empty bytes; Unreserve takes bytes back for the
// next Reserve.
func TestAdoptStoresTheBytesItIsHanded(t *testing.T) {
	for _, tt := range []struct {
		name    string
		opts    []mem.Option
		rows    []int // which content each adopted row holds, in order
		size    int   // bytes a row has (0: rowSize)
		stored  []bool
		held    []int // rows the store holds afterwards
		evicted uint64
		batch   bool // all rows in one Adopt
	}{
		{name: "unbounded", rows: []int{0, 1, 2}, stored: []bool{true, true, true}, held: []int{0, 1, 2}},
		{name: "at capacity the least recently used goes", opts: []mem.Option{mem.WithCapacity(2)},
			rows: []int{0, 1, 2}, stored: []bool{true, true, true}, held: []int{1, 2}, evicted: 1},
		{name: "over the byte bound nothing is stored", opts: []mem.Option{mem.WithCapacityBytes(rowSize - 1)},
			rows: []int{0}, stored: []bool{false}},
		{name: "one call, at the byte bound", opts: []mem.Option{mem.WithCapacityBytes(2 * rowSize)}, batch: true,
			rows: []int{0, 1, 2, 3}, stored: []bool{true, true, true, true}, held: []int{2, 3}, evicted: 2},
		{name: "one call, at capacity", opts: []mem.Option{mem.WithCapacity(3)}, batch: true,
			rows: []int{0, 1, 2, 3}, stored: []bool{true, true, true, true}, held: []int{1, 2, 3}, evicted: 1},
		{name: "one call, over the byte bound", opts: []mem.Option{mem.WithCapacityBytes(rowSize - 1)}, batch: true,
			rows: []int{0, 1}, stored: []bool{false, false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t, newStaging(1), tt.opts...)
			bufs := make([][]byte, len(tt.rows))
			want := 0
			for k, i := range tt.rows {
				bufs[k] = b.Reserve(rowSize)
				require.Len(t, bufs[k], rowSize)
				copy(bufs[k], content(i))
				if tt.stored[k] {
					want++
				}
				if !tt.batch {
					assert.Equal(t, boolInt(tt.stored[k]), b.Adopt(extentOf(t, i), bufs[k:k+1]), "row %d", i)
				}
			}
			if tt.batch {
				assert.Equal(t, want, b.Adopt(extentOf(t, tt.rows...), bufs))
			}
			assert.Equal(t, len(tt.held), b.Len())
			for _, i := range tt.held {
				got, ok := b.Get(extName, name(i))
				require.True(t, ok, "row %d not held", i)
				assert.Equal(t, content(i), got)
			}
			assert.Equal(t, tt.evicted, b.Evictions())
		})
	}
	t.Run("the bytes themselves, recycled", func(t *testing.T) {
		b := newBackend(t, newStaging(1), mem.WithCapacity(1))
		first := b.Reserve(rowSize)
		copy(first, content(0))
		require.Equal(t, 1, b.Adopt(extentOf(t, 0), [][]byte{first}))
		second := b.Reserve(rowSize)
		copy(second, content(1))
		require.Equal(t, 1, b.Adopt(extentOf(t, 1), [][]byte{second})) // evicts row 0: its bytes are free
		third := b.Reserve(rowSize)
		assert.Same(t, &first[0], &third[0], "the evicted row's bytes were not reused")
		b.Unreserve(third)
		assert.Same(t, &first[0], &b.Reserve(rowSize)[0], "unreserved bytes were not reused")
		got, _ := b.Get(extName, name(1))
		assert.Equal(t, content(1), got, "reserving recycled bytes touched a stored row")
	})
	t.Run("nothing to reserve or adopt", func(t *testing.T) {
		b := newBackend(t, newStaging(1))
		assert.Nil(t, b.Reserve(0))
		assert.Nil(t, b.Reserve(-1))
		assert.Zero(t, b.Adopt(extentOf(t, 0), nil))
		assert.Zero(t, b.Adopt(extentOf(t, 0), [][]byte{nil}))
		b.Unreserve(nil)
		assert.Zero(t, b.Len())
	})
	t.Run("only what the extent names: a nil row and rows past it are not taken", func(t *testing.T) {
		b := newBackend(t, newStaging(1))
		bufs := [][]byte{content(0), nil, content(2), content(3)}
		assert.Equal(t, 2, b.Adopt(extentOf(t, 0, 1, 2), bufs))
		assert.Equal(t, 2, b.Len())
		for _, i := range []int{0, 2} {
			got, ok := b.Get(extName, name(i))
			require.True(t, ok, "row %d not held", i)
			assert.Equal(t, content(i), got)
		}
		_, ok := b.Get(extName, name(1))
		assert.False(t, ok, "a nil row was stored")
		_, ok = b.Get(extName, name(3))
		assert.False(t, ok, "a row past the extent's units was stored")
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
