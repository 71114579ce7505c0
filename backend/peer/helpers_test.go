package peer_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// Every test stops what it started: no driver goroutine outlives it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const pageLen = 16

var epoch = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// clock is a manual clock the receiver reads.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func caps(p transfer.Peer, inc transfer.Incarnation, set transfer.CapabilitySet) transfer.Capabilities {
	return transfer.Capabilities{Peer: p, Incarnation: inc, Version: transfer.ProtocolVersion, Supported: set}
}

func all(p transfer.Peer, inc transfer.Incarnation) transfer.Capabilities {
	return caps(p, inc, transfer.KnownCapabilities)
}

var (
	kvA  = transfer.AccessorID{Peer: "prefill-a", Rank: 0, Role: transfer.RoleKV}
	auxA = transfer.AccessorID{Peer: "prefill-a", Rank: 0, Role: transfer.RoleAux}
	kvB  = transfer.AccessorID{Peer: "prefill-b", Rank: 1, Role: transfer.RoleKV}
)

// world is a decode process with a Receiver over a simulated network, its
// staging slots, and two prefill processes. Offers are recorded, not sent:
// tests speak for the writers themselves.
type world struct {
	t      *testing.T
	net    *sim.Network
	decode *sim.Node
	nodes  map[transfer.Peer]*sim.Node
	clock  *clock
	slots  [][]byte // staging: group 0's slots
	recv   *peer.Receiver
	offers []peer.Offer
	eps    map[transfer.Peer]transfer.Endpoint
	// offerErr, when set, fails the offer to that writer
	offerErr map[transfer.AccessorID]error
	// cancels are the cancel requests the receiver handed out, recorded
	// (not sent); cancelErr, when set, fails every one
	cancels   []peer.Cancel
	cancelErr error
}

type worldOpt struct {
	leased bool
	wrap   func(transfer.Transport) transfer.Transport // nil: the receiver uses the decode node itself
	faults sim.Faults
	offer  func(w *world) func(peer.Offer) error // nil: record
}

func newWorld(t *testing.T, o worldOpt) *world {
	t.Helper()
	net, err := sim.New(7, o.faults)
	require.NoError(t, err)
	w := &world{t: t, net: net, nodes: map[transfer.Peer]*sim.Node{}, clock: &clock{now: epoch},
		eps: map[transfer.Peer]transfer.Endpoint{}, offerErr: map[transfer.AccessorID]error{}}
	w.decode, err = net.Join("decode")
	require.NoError(t, err)
	for _, p := range []transfer.Peer{"prefill-a", "prefill-b"} {
		w.nodes[p], err = net.Join(p)
		require.NoError(t, err)
		// the writers' connection: the receiver hears of their death on it
		w.eps[p], err = w.nodes[p].Connect("decode")
		require.NoError(t, err)
	}
	for range 8 {
		w.slots = append(w.slots, make([]byte, pageLen))
	}
	offer := func(of peer.Offer) error {
		if err := w.offerErr[of.Writer]; err != nil {
			return err
		}
		w.offers = append(w.offers, of)
		return nil
	}
	if o.offer != nil {
		offer = o.offer(w)
	}
	_, inc := w.decode.Self()
	var tr transfer.Transport = w.decode
	if o.wrap != nil {
		tr = o.wrap(tr)
	}
	w.recv, err = peer.NewReceiver(peer.ReceiverConfig{
		Transport: tr, Capabilities: all("decode", inc),
		Slot: func(u contract.Unit) []byte {
			if u.LocalGroup != 0 || u.Local < 0 || u.Local >= len(w.slots) {
				return nil
			}
			return w.slots[u.Local]
		},
		Leased: o.leased, Timeout: 100 * time.Millisecond, Grace: 200 * time.Millisecond,
		Clock: w.clock.Now, Limits: transfer.Limits{Sessions: 64, Tombstones: 8, Window: time.Hour},
		Offer: offer,
		Cancel: func(c peer.Cancel) error {
			if w.cancelErr != nil {
				return w.cancelErr
			}
			w.cancels = append(w.cancels, c)
			return nil
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.recv.Close() })
	return w
}

// connect negotiates with every prefill process's current life.
func (w *world) connect() {
	for p, n := range w.nodes {
		_, inc := n.Self()
		_, err := w.recv.Connect(all(p, inc))
		require.NoError(w.t, err)
	}
}

// chunk is a PAGED group of n pages over [0, n·16) and, with state, a STATE
// group of one slot.
func chunk(t *testing.T, n int, state bool) transfer.Chunk {
	t.Helper()
	ids := make([]int, n)
	for i := range ids {
		ids[i] = 100 + i
	}
	groups := []transfer.Group{{Kind: transfer.Paged, Blocks: ids}}
	if state {
		groups = append(groups, transfer.Group{Kind: transfer.State, Blocks: []int{7}})
	}
	c, err := transfer.NewChunk(groups, transfer.TokenRange{End: int64(n * 16)}, true)
	require.NoError(t, err)
	return c
}

func plan(t *testing.T, req transfer.RequestID, att transfer.AttemptID, pages int, writers ...transfer.AccessorID) peer.Plan {
	return peer.Plan{Request: req, Attempt: att, Writers: writers, Chunk: chunk(t, pages, false), BlockTokens: 16}
}

// extent lends a plan's pages on slots first, first+1, …
func extent(t *testing.T, pages []peer.Page, first int) contract.CacheExtent {
	t.Helper()
	units := make([]contract.Unit, len(pages))
	for i, pg := range pages {
		units[i] = contract.Unit{Name: pg.Name, LocalGroup: 0, Local: first + i}
	}
	e, err := contract.NewCacheExtent([]byte("kvready:peer:test"), units, true)
	require.NoError(t, err)
	return e
}

// fetch expects a plan and fetches it on slots from first.
func (w *world) fetch(p peer.Plan, first int) contract.Attempt {
	w.t.Helper()
	pages, err := w.recv.Expect(p)
	require.NoError(w.t, err)
	a, err := w.recv.Fetch(extent(w.t, pages, first), nil)
	require.NoError(w.t, err)
	return a
}

// say sends one piece of evidence from the accessor's peer's current life
// (or inc, when not zero) and delivers it.
func (w *world) say(kind transfer.EvidenceKind, key transfer.SessionKey, id transfer.AccessorID, tokenEnd int64, inc transfer.Incarnation) {
	w.t.Helper()
	node := w.nodes[id.Peer]
	if inc == 0 {
		_, inc = node.Self()
	}
	ev := transfer.Evidence{Kind: kind, Session: key, Accessor: id, Incarnation: inc, TokenEnd: tokenEnd}
	if kind == transfer.Failure {
		ev.Reason = "writer failed"
	}
	msg, err := transfer.AppendEvidence(nil, ev)
	require.NoError(w.t, err)
	w.send(id.Peer, msg)
}

func (w *world) send(from transfer.Peer, msg []byte) {
	w.t.Helper()
	ep := w.eps[from]
	if ep == nil || ep.Err() != nil {
		var err error
		ep, err = w.nodes[from].Connect("decode")
		require.NoError(w.t, err)
		w.eps[from] = ep
	}
	_, err := ep.Send(msg)
	require.NoError(w.t, err)
	w.drain()
}

// drain runs the network and the receiver until nothing is left to do.
func (w *world) drain() {
	for range 10000 {
		stepped := w.net.Step()
		w.recv.Progress()
		if !stepped {
			return
		}
	}
	w.t.Fatal("the network did not go quiet in 10000 steps")
}

// quiesce asks TryQuiesce and Quiesce, which must agree.
func (w *world) quiesce(a contract.Attempt) bool {
	w.t.Helper()
	acc, err := w.recv.TryQuiesce([]contract.Attempt{a})
	require.NoError(w.t, err)
	require.NotEqual(w.t, contract.AccessUnknown, acc, "the receiver always knows")
	ok, err := w.recv.Quiesce(w.t.Context(), []contract.Attempt{a})
	require.NoError(w.t, err)
	require.Equal(w.t, acc == contract.AccessEnded, ok, "TryQuiesce and Quiesce agree")
	return ok
}
