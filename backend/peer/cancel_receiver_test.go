package peer_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
)

// The receiver's half of coordinated cancellation: on the owner's cancel
// and on the session's deadline — once, and never for a delivery — every
// writer offered the addresses is asked to stop, where its agreement grants
// IN_FLIGHT_CANCELLATION, at the next Progress. The request settles
// nothing: the pages stay lent until the writers' own evidence proves them.
func TestReceiverAsksWritersToStop(t *testing.T) {
	const owner, deadline = "cancelled by the owner", "the session's deadline passed"
	noCancel := transfer.KnownCapabilities &^ transfer.Caps(transfer.InFlightCancellation)
	tests := []struct {
		name      string
		writers   []transfer.AccessorID
		lacking   transfer.Peer // a peer whose agreement does not grant IN_FLIGHT_CANCELLATION
		offerErr  transfer.AccessorID
		cancelErr bool
		act       func(w *world, a contract.Attempt, p peer.Plan)
		want      []transfer.AccessorID // asked to stop, in offer order
		reason    string
		delivered bool
	}{
		{name: "the owner's cancel asks every writer offered", writers: []transfer.AccessorID{kvA, kvB, auxA},
			act: cancelTwice, want: []transfer.AccessorID{kvA, kvB, auxA}, reason: owner},
		{name: "a writer whose agreement lacks IN_FLIGHT_CANCELLATION is not asked", writers: []transfer.AccessorID{kvA, kvB}, lacking: "prefill-b",
			act: cancelTwice, want: []transfer.AccessorID{kvA}, reason: owner},
		{name: "the deadline asks, and a later cancel asks no more", writers: []transfer.AccessorID{kvA, kvB},
			act: func(w *world, a contract.Attempt, _ peer.Plan) {
				w.clock.Advance(99 * time.Millisecond)
				w.recv.Progress()
				require.Empty(w.t, w.cancels, "not before the deadline")
				w.clock.Advance(time.Millisecond)
				w.recv.Progress()
				cancelTwice(w, a, peer.Plan{})
			}, want: []transfer.AccessorID{kvA, kvB}, reason: deadline},
		{name: "a delivered session is not cancelled", writers: []transfer.AccessorID{kvA},
			act: func(w *world, a contract.Attempt, p peer.Plan) {
				w.say(transfer.Done, p.Key(), kvA, 48, 0)
				cancelTwice(w, a, p)
			}, delivered: true},
		{name: "a writer's failure asks nothing; the owner's cancel after it asks every writer", writers: []transfer.AccessorID{kvA, kvB},
			act: func(w *world, a contract.Attempt, p peer.Plan) {
				w.say(transfer.Failure, p.Key(), kvA, 0, 0)
				require.Empty(w.t, w.cancels)
				cancelTwice(w, a, p)
			}, want: []transfer.AccessorID{kvA, kvB}, reason: owner},
		{name: "an offer that fails asks the writers reached, not those never offered", writers: []transfer.AccessorID{kvA, kvB, auxA}, offerErr: kvB,
			act: func(*world, contract.Attempt, peer.Plan) {}, want: []transfer.AccessorID{kvA, kvB}, reason: "offer to prefill-b/1/kv failed: no route"},
		{name: "a cancel that cannot be sent is counted, and changes nothing else", writers: []transfer.AccessorID{kvA}, cancelErr: true,
			act: cancelTwice},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, worldOpt{})
			w.connect()
			if tt.lacking != "" {
				_, inc := w.nodes[tt.lacking].Self()
				_, err := w.recv.Connect(caps(tt.lacking, inc, noCancel))
				require.NoError(t, err)
			}
			if tt.offerErr.Peer != "" {
				w.offerErr[tt.offerErr] = errors.New("no route")
			}
			if tt.cancelErr {
				w.cancelErr = errors.New("endpoint failed")
			}
			p := plan(t, 1, 2, 3, tt.writers...)
			a := w.fetch(p, 0)
			tt.act(w, a, p)
			w.recv.Progress()
			var asked []transfer.AccessorID
			_, dinc := w.decode.Self()
			for _, c := range w.cancels {
				asked = append(asked, c.Writer)
				_, inc := w.nodes[c.Writer.Peer].Self()
				assert.Equal(t, peer.Cancel{Session: p.Key(), Writer: c.Writer, Incarnation: inc, Receiver: "decode", ReceiverInc: dinc, Reason: tt.reason}, c)
			}
			assert.Equal(t, tt.want, asked)
			st := w.recv.Stats()
			assert.Equal(t, uint64(len(tt.want)), st.Cancels)
			if tt.cancelErr {
				assert.Equal(t, uint64(len(tt.writers)), st.Unsent)
			}
			require.NotNil(t, a.Poll())
			assert.Equal(t, tt.delivered, w.quiesce(a), "a cancel request proves nothing: the pages wait for the writers' evidence")
		})
	}
}

// cancelTwice is the engine cancelling an attempt, then again: what it
// asks of the writers leaves at the next Progress, and only then.
func cancelTwice(w *world, a contract.Attempt, _ peer.Plan) {
	before := len(w.cancels)
	for range 2 {
		d, err := contract.RequestCancel(a)
		require.NoError(w.t, err)
		assert.Equal(w.t, contract.CancelRequested, d)
	}
	assert.Len(w.t, w.cancels, before, "nothing is sent outside Progress")
	w.recv.Progress()
}
