package peer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// carrier is the prefill's transport with endpoints whose puts carry a
// report (transfer.ReportCarrier), counting what the Sender asks of them.
// Its PutReport keeps the report back until the put's request completed
// without an error, then sends it — the contract's order, at its latest:
// the report is never heard before the put landed, and never for a put
// that failed.
type carrier struct {
	*sim.Node
	carried, sent, puts int
}

func (c *carrier) Connect(p transfer.Peer) (transfer.Endpoint, error) {
	ep, err := c.Node.Connect(p)
	if err != nil {
		return nil, err
	}
	return &carryEP{Endpoint: ep, c: c}, nil
}

type carryEP struct {
	transfer.Endpoint
	c *carrier
}

func (e *carryEP) MaxCarried() int { return 1024 }

func (e *carryEP) Put(src []byte, key transfer.RemoteKey, off int) (transfer.Request, error) {
	e.c.puts++
	return e.Endpoint.Put(src, key, off)
}

func (e *carryEP) Send(msg []byte) (transfer.Request, error) {
	e.c.sent++
	return e.Endpoint.Send(msg)
}

func (e *carryEP) PutReport(src []byte, key transfer.RemoteKey, off int, msg []byte) (transfer.Request, error) {
	e.c.carried++
	r, err := e.Endpoint.Put(src, key, off)
	if err != nil {
		return nil, err
	}
	return &carriedReq{put: r, ep: e.Endpoint, msg: append([]byte(nil), msg...)}, nil
}

type carriedReq struct {
	put  transfer.Request
	ep   transfer.Endpoint
	msg  []byte
	sent bool
}

func (r *carriedReq) Test() (bool, error) {
	done, err := r.put.Test()
	if done && err == nil && !r.sent {
		r.sent = true
		if _, serr := r.ep.Send(r.msg); serr != nil {
			return true, serr
		}
	}
	return done, err
}

// TestSenderCarriesItsDone: over an endpoint whose puts carry reports, a
// one-page publication sends its DONE on its put and no message of its
// own, and both sides deliver; a publication of several pages puts,
// flushes and sends its DONE as before — carrying it on the last put would
// not prove the others landed.
func TestSenderCarriesItsDone(t *testing.T) {
	for _, tc := range []struct {
		pages               int
		carried, sent, puts int
	}{{pages: 1, carried: 1}, {pages: 3, sent: 1, puts: 3}} {
		c := newPair(t, 5, sim.Faults{ReportsOvertakeData: true})
		tr := &carrier{Node: c.prefill}
		_, pinc := c.prefill.Self()
		send, err := peer.NewSender(peer.SenderConfig{Transport: tr, Capabilities: all("prefill", pinc),
			Slot: func(u contract.Unit) []byte { return c.src[u.Local] }, Timeout: 500 * time.Millisecond, Clock: c.clock.Now,
			Limits: transfer.Limits{Sessions: 16, Tombstones: 4, Window: time.Hour}})
		require.NoError(t, err)
		require.NoError(t, c.send.Close())
		c.send = send
		_, dinc := c.decode.Self()
		_, err = c.send.Connect(all("decode", dinc))
		require.NoError(t, err)
		p, sp := c.plans(1, tc.pages)
		fetch := c.fetch(p, 0)
		pub := c.publish(sp, 0)
		c.run(10000)
		require.NotNil(t, pub.Poll())
		want := fmt.Sprintf("delivered(%d served)", tc.pages)
		assert.Equal(t, want, pub.Poll().String())
		require.NotNil(t, fetch.Poll())
		assert.Equal(t, want, fetch.Poll().String())
		ok, err := c.recv.Quiesce(t.Context(), []contract.Attempt{fetch})
		require.NoError(t, err)
		assert.True(t, ok, "the DONE settles the writer")
		assert.True(t, c.proven(pub))
		for i := range tc.pages {
			assert.Equal(t, c.src[i], c.dst[i], "page %d landed", i)
		}
		assert.Equal(t, tc.carried, tr.carried, "puts that carried the DONE")
		assert.Equal(t, tc.sent, tr.sent, "messages the Sender sent itself")
		assert.Equal(t, tc.puts, tr.puts, "plain puts")
		assert.Equal(t, uint64(1), c.recv.Stats().Evidence, "one report heard")
	}
}
