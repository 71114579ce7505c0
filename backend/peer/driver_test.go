package peer_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// With Poll set, a driver goroutine runs Progress: the outcome arrives and
// Settle returns with nobody calling Progress, and Close stops the driver
// (TestMain's leak check fails a driver left running).
func TestDriver(t *testing.T) {
	net, err := sim.New(5, sim.Faults{})
	require.NoError(t, err)
	decode, err := net.Join("decode")
	require.NoError(t, err)
	prefill, err := net.Join("prefill-a")
	require.NoError(t, err)
	slots := [][]byte{make([]byte, pageLen), make([]byte, pageLen)}
	_, dinc := decode.Self()
	recv, err := peer.NewReceiver(peer.ReceiverConfig{
		Transport: decode, Capabilities: all("decode", dinc),
		Slot:    func(u contract.Unit) []byte { return slots[u.Local] },
		Timeout: time.Minute, Grace: time.Minute, Limits: transfer.Limits{Sessions: 4, Tombstones: 4, Window: time.Hour},
		Poll: time.Millisecond,
		Offer: func(o peer.Offer) error {
			spec := sim.WriterSpec{Node: prefill, To: "decode", Session: o.Session, Accessor: o.Writer, Tokens: o.Tokens, Behaviour: sim.Honest}
			for _, pg := range o.Pages {
				spec.Pieces = append(spec.Pieces, sim.Piece{Src: bytes.Repeat([]byte{7}, pg.Len), Key: pg.Key})
			}
			_, err := net.Spawn(spec)
			return err
		},
	})
	require.NoError(t, err)
	_, pinc := prefill.Self()
	_, err = recv.Connect(all("prefill-a", pinc))
	require.NoError(t, err)
	pages, err := recv.Expect(plan(t, 1, 1, 2, kvA))
	require.NoError(t, err)
	a, err := recv.Fetch(extent(t, pages, 0), nil)
	require.NoError(t, err)
	for net.Step() { // the network only: the driver hands the receiver what arrives
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, recv.Settle(ctx, []contract.Attempt{a}))
	assert.Equal(t, "delivered(2 served)", a.Poll().String())
	require.NoError(t, recv.Close())
	require.NoError(t, recv.Close(), "Close is idempotent")
	_, err = recv.Expect(plan(t, 2, 1, 1, kvA))
	assert.ErrorContains(t, err, "closed")
}
