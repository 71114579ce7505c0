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
// keeps its slot, generation, kind, result and body, and derives its ticket.
func TestLeaseRecordIs24Bytes(t *testing.T) {
	assert.EqualValues(t, 24, unsafe.Sizeof(lease{}))
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

// BenchmarkSlotMemory counts a lease's body struct as descriptors, although
// its fields from first on are engine state; docs/performance.md says how many
// bytes that leaves out, and this holds the numbers to the struct.
func TestBodyEngineStateIsDocumented(t *testing.T) {
	var b body
	assert.EqualValues(t, 560, unsafe.Sizeof(b), "docs/performance.md: the body struct's size")
	assert.EqualValues(t, 192, unsafe.Sizeof(b)-unsafe.Offsetof(b.first), "docs/performance.md: the body's engine state, from first on")
}
