package readiness

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/staging"
)

// A lease record is kept for every lease in flight, and SPEC §5 allows 64
// bytes of engine state per staging slot, 1-row leases included: the record
// keeps its slot, kind and result (12 bytes) and its generation in the
// column beside it (4), finds its body by its index and derives its ticket.
func TestLeaseRecordIs12BytesAndAGeneration(t *testing.T) {
	assert.EqualValues(t, 12, unsafe.Sizeof(lease{}))
	var c Core
	assert.EqualValues(t, 4, unsafe.Sizeof(c.gens[0]))
}

// A record's body is its own, by index: a retired record's next lease
// rebuilds the same body in place, and a record that was never lent has a
// body of its own in the chunk, untouched by its neighbours.
func TestABodyIsItsRecords(t *testing.T) {
	r := newCoreRig(t, nil)
	row := func(k byte) []staging.Row {
		return []staging.Row{{Block: 0, Name: coreName(k), Device: gpu.DevicePtr(0x1000)}}
	}
	a, err := r.c.Lend(Request{Kind: Fetch, Rows: row(1)})
	require.NoError(t, err)
	b, err := r.c.Lend(Request{Kind: Fetch, Rows: row(2)})
	require.NoError(t, err)
	require.NotSame(t, r.c.body(a.id), r.c.body(b.id))
	assert.Equal(t, coreName(1), r.c.body(a.id).names[0])
	assert.Equal(t, coreName(2), r.c.body(b.id).names[0])
	first := r.c.body(a.id)
	_, err = r.c.Cancel(a)
	require.NoError(t, err) // withdrawn: the record retires
	c, err := r.c.Lend(Request{Kind: Fetch, Rows: row(3)})
	require.NoError(t, err)
	require.Equal(t, a.id, c.id, "the retired record carries the next lease")
	assert.Same(t, first, r.c.body(c.id), "and its body with it, rebuilt in place")
	assert.Equal(t, coreName(3), r.c.body(c.id).names[0])
	assert.Equal(t, coreName(2), r.c.body(b.id).names[0], "the neighbour's body is untouched")
	// Refused once the next record's body was written: blocks must increase.
	_, err = r.c.Lend(Request{Kind: Fetch, Rows: []staging.Row{
		{Block: 1, Name: coreName(4), Device: gpu.DevicePtr(0x1000)},
		{Block: 0, Name: coreName(5), Device: gpu.DevicePtr(0x1000)}}})
	require.ErrorIs(t, err, ErrInvalidRequest)
	assert.Equal(t, coreName(3), r.c.body(c.id).names[0], "a refused Lend leaves the live bodies alone")
}

// The core names each lease's ticket after its record: a record whose
// withdrawn request still stands in the allocator's line carries the next
// lease at once, and that lease waits its own turn.
func TestARecordIsReusedWhileItsWithdrawnRequestIsInLine(t *testing.T) {
	r := newCoreRig(t, nil)
	rows := func(n int, k byte) []staging.Row {
		var out []staging.Row
		for i := range n {
			out = append(out, staging.Row{Block: i, Name: coreName(k + byte(i)), Device: gpu.DevicePtr(0x1000)})
		}
		return out
	}
	a, err := r.c.Lend(Request{Kind: Fetch, Rows: rows(4, 10)}) // every slot
	require.NoError(t, err)
	b, err := r.c.Lend(Request{Kind: Fetch, Rows: rows(1, 20)})
	require.NoError(t, err)
	c, err := r.c.Lend(Request{Kind: Fetch, Rows: rows(1, 30)}) // behind b
	require.NoError(t, err)
	require.NoError(t, cancelErr(r.c.Cancel(c))) // withdrawn: its entry stays in line behind b
	info, err := r.c.Lease(c)
	require.NoError(t, err)
	require.Equal(t, StateReleased, info.State)
	d, err := r.c.Lend(Request{Kind: Fetch, Rows: rows(1, 40)})
	require.NoError(t, err, "the record c left is named again at once")
	require.Equal(t, c.Index(), d.Index(), "d carries c's record")
	require.NotEqual(t, c, d)
	for _, h := range []Handle{b, d} {
		assert.False(t, r.c.alloc.Granted(r.c.ticket(h.id)), "%v waits behind a", h)
	}
	require.NoError(t, cancelErr(r.c.Cancel(a))) // a, not yet submitted, is withdrawn: its slots return
	r.tick(0)
	for _, h := range []Handle{b, d} {
		info, err := r.c.Lease(h)
		require.NoError(t, err)
		assert.NotEqual(t, StateWaiting, info.State, "%v granted once a's slots returned", h)
	}
	require.NoError(t, r.c.Err())
}

// Bodies come in chunks of a power of two (a shift and a mask find one) that
// waste, in their size class, no more per body than a body allocated alone
// (560 bytes in the 576-byte class): 32 bodies take the 18432-byte class. A
// chunk past 32 KiB would be a large object, rounded up to whole 8 KiB pages.
func TestBodyChunkWastesNoMoreThanABody(t *testing.T) {
	size := bodyChunk * unsafe.Sizeof(body{})
	require.Zero(t, bodyChunk&(bodyChunk-1), "a power of two")
	require.LessOrEqual(t, size, uintptr(32<<10), "a chunk of %d bodies is a small object", bodyChunk)
	class := uintptr(18432) // runtime/sizeclasses.go: the class a chunk of 32 bodies of 560 bytes takes
	require.LessOrEqual(t, size, class)
	assert.LessOrEqual(t, (class-size)/bodyChunk, uintptr(576-560), "bytes wasted per body")
}

// BenchmarkSlotMemory counts a lease's body struct as descriptors, although
// its fields from first on are engine state; docs/performance.md says how many
// bytes that leaves out, and this holds the numbers to the struct.
func TestBodyEngineStateIsDocumented(t *testing.T) {
	var b body
	assert.EqualValues(t, 560, unsafe.Sizeof(b), "docs/performance.md: the body struct's size")
	assert.EqualValues(t, 192, unsafe.Sizeof(b)-unsafe.Offsetof(b.first), "docs/performance.md: the body's engine state, from first on")
}
