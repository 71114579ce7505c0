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
// capacity like Put; a row over the byte bound is not stored, and neither
// are empty bytes; Unreserve takes bytes back for the next Reserve.
func TestAdoptStoresTheBytesItIsHanded(t *testing.T) {
	for _, tt := range []struct {
		name    string
		opts    []mem.Option
		rows    []int // which content each adopted row holds, in order
		size    int   // bytes a row has (0: rowSize)
		stored  []bool
		held    []int // rows the store holds afterwards
		evicted uint64
	}{
		{name: "unbounded", rows: []int{0, 1, 2}, stored: []bool{true, true, true}, held: []int{0, 1, 2}},
		{name: "at capacity the least recently used goes", opts: []mem.Option{mem.WithCapacity(2)},
			rows: []int{0, 1, 2}, stored: []bool{true, true, true}, held: []int{1, 2}, evicted: 1},
		{name: "over the byte bound nothing is stored", opts: []mem.Option{mem.WithCapacityBytes(rowSize - 1)},
			rows: []int{0}, stored: []bool{false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t, newStaging(1), tt.opts...)
			for k, i := range tt.rows {
				buf := b.Reserve(rowSize)
				require.Len(t, buf, rowSize)
				copy(buf, content(i))
				assert.Equal(t, tt.stored[k], b.Adopt(extName, name(i), buf), "row %d", i)
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
		require.True(t, b.Adopt(extName, name(0), first))
		second := b.Reserve(rowSize)
		copy(second, content(1))
		require.True(t, b.Adopt(extName, name(1), second)) // evicts row 0: its bytes are free
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
		assert.False(t, b.Adopt(extName, name(0), nil))
		b.Unreserve(nil)
		assert.Zero(t, b.Len())
	})
}
