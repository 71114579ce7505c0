package simulate

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// checkerWorld is a small decode pool on a simulated network, watched by a
// page checker, and one prefill process to write it.
type checkerWorld struct {
	t       *testing.T
	net     *sim.Network
	decode  transfer.Transport
	prefill *sim.Node
	pool    []byte
	chk     *pageChecker
}

func newCheckerWorld(t *testing.T, pages int, f sim.Faults) *checkerWorld {
	t.Helper()
	net, err := sim.New(7, f)
	require.NoError(t, err)
	node, err := net.Join(disaggDecode)
	require.NoError(t, err)
	prefill, err := net.Join("prefill-0")
	require.NoError(t, err)
	w := &checkerWorld{t: t, net: net, prefill: prefill, pool: make([]byte, pages*SlotBytes)}
	var ps [][]byte
	for i := range pages {
		ps = append(ps, w.pool[i*SlotBytes:(i+1)*SlotBytes])
	}
	w.chk = newPageChecker(net, ps)
	w.decode = w.chk.watch(node)
	return w
}

// lend lends pages [first, first+n) to (req, att), registers them, and
// starts one writer with behaviour b writing all of them; it returns the
// registration.
func (w *checkerWorld) lend(req transfer.RequestID, att transfer.AttemptID, first, n int, b sim.Behaviour) transfer.Memory {
	w.t.Helper()
	for j := range n {
		w.chk.lend(first+j, pageTag{request: req, index: j, attempt: att})
	}
	mem, err := w.decode.Register(w.pool[first*SlotBytes : (first+n)*SlotBytes])
	require.NoError(w.t, err)
	id := transfer.AccessorID{Peer: "prefill-0", Rank: 0, Role: transfer.RoleKV}
	spec := sim.WriterSpec{Node: w.prefill, To: disaggDecode, Session: transfer.SessionKey{Request: req, Attempt: att}, Accessor: id,
		Key: mem.PackedKey(), Tokens: transfer.TokenRange{End: int64(n * TokensPerBlock)}, Behaviour: b}
	for j := range n {
		spec.Pieces = append(spec.Pieces, sim.Piece{Src: pageTag{kind: pageData, request: req, index: j, attempt: att}.content(), Off: j * SlotBytes})
	}
	_, err = w.net.Spawn(spec)
	require.NoError(w.t, err)
	return mem
}

// drain steps the network until nothing is left, the checker reading the
// pages after each step.
func (w *checkerWorld) drain() {
	for range 100_000 {
		stepped := w.net.Step()
		w.chk.scan()
		if !stepped {
			return
		}
	}
	w.t.Fatal("the network never went quiet")
}

func (w *checkerWorld) free(first, n int) {
	for j := range n {
		w.chk.free(first + j)
	}
}

func (w *checkerWorld) read(req transfer.RequestID, att transfer.AttemptID, first, n int) {
	for j := range n {
		w.chk.read(first+j, pageTag{request: req, index: j, attempt: att})
	}
}

// TestPageChecker feeds the checker each thing a manager can do wrong, and
// the same done right: every count must move for its fault alone.
func TestPageChecker(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(w *checkerWorld)
		want checkerCounts // the violation counts; what was watched is not compared
	}{
		{"freed only once nothing may write, read after the data", func(w *checkerWorld) {
			w.lend(1, 1, 0, 2, sim.Honest)
			w.drain()
			w.read(1, 1, 0, 2)
			w.free(0, 2)
		}, checkerCounts{}},
		{"freed while the writer will still post", func(w *checkerWorld) {
			w.lend(1, 1, 0, 2, sim.Honest)
			w.free(0, 2)
			w.drain()
		}, checkerCounts{FreedWhileWritable: 2, WritesIntoFree: 2}},
		{"re-lent while an earlier attempt still writes", func(w *checkerWorld) {
			w.lend(1, 1, 0, 2, sim.Honest)
			w.free(0, 2)
			for j := range 2 {
				w.chk.lend(j, pageTag{request: 1, index: j, attempt: 2})
			}
			w.drain()
		}, checkerCounts{FreedWhileWritable: 2, LateWrites: 2}},
		{"a late submission after the pages were freed", func(w *checkerWorld) {
			w.lend(1, 1, 0, 1, sim.SubmitsLate)
			for w.chk.counts().Landings == 0 {
				w.net.Step()
				w.chk.scan()
			}
			w.free(0, 1) // its DONE may not even be sent yet: it will post again
			w.drain()
		}, checkerCounts{FreedWhileWritable: 1, WritesIntoFree: 1}},
		{"freed after revoking a fencing registration", func(w *checkerWorld) {
			mem := w.lend(1, 1, 0, 2, sim.Honest)
			w.net.Step() // the writer posts its first put
			how, err := mem.Revoke()
			require.NoError(w.t, err)
			require.True(w.t, how.Fences())
			w.free(0, 2)
			w.drain()
		}, checkerCounts{}},
		{"read before the data landed", func(w *checkerWorld) {
			w.lend(1, 1, 0, 2, sim.Honest)
			w.read(1, 1, 0, 2)
			w.drain()
			w.free(0, 2)
		}, checkerCounts{CorruptReads: 2}},
		{"read as another attempt's", func(w *checkerWorld) {
			w.lend(1, 1, 0, 1, sim.Honest)
			w.drain()
			w.read(1, 2, 0, 1)
			w.free(0, 1)
		}, checkerCounts{CorruptReads: 1}},
		{"lent twice, freed twice", func(w *checkerWorld) {
			w.chk.lend(0, pageTag{request: 1, attempt: 1})
			w.chk.lend(0, pageTag{request: 2, attempt: 1})
			w.chk.free(0)
			w.chk.free(0)
		}, checkerCounts{DoubleLends: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newCheckerWorld(t, 4, sim.Faults{})
			tc.run(w)
			got := w.chk.counts()
			assert.Equal(t, tc.want, checkerCounts{
				FreedWhileWritable: got.FreedWhileWritable, WritesIntoFree: got.WritesIntoFree,
				LateWrites: got.LateWrites, CorruptReads: got.CorruptReads, DoubleLends: got.DoubleLends,
			})
		})
	}
}

// TestPageCheckerSeesEveryRegistration holds the watched transport to what
// it says: a registration is recorded against exactly the pages it covers.
func TestPageCheckerSeesEveryRegistration(t *testing.T) {
	w := newCheckerWorld(t, 4, sim.Faults{})
	mem := w.lend(1, 1, 1, 2, sim.Honest)
	assert.Empty(t, w.chk.state[0].regs)
	assert.Equal(t, []transfer.Memory{mem}, w.chk.state[1].regs)
	assert.Equal(t, []transfer.Memory{mem}, w.chk.state[2].regs)
	assert.Empty(t, w.chk.state[3].regs)
	assert.Equal(t, 1, w.chk.counts().Registrations)
}
