package simulate

import (
	"maps"
	"slices"

	"github.com/kvready/kvready/transfer"
)

// naiveDisagg is the foil of a disaggregated run: a decode-side manager that
// frees a request's pages as soon as its transfer's outcome arrives, as the
// incidents did —
//   - a DONE counted for every writer the request expects, keyed by the
//     request alone: a duplicated DONE, or one replayed from an earlier
//     attempt, completes it while a sibling still writes (vLLM's connector
//     counts notifications per request);
//   - the first writer's failure (vLLM PR #56104), a lost peer, a timeout
//     (Mooncake PR #3508), or its user's abort (SGLang PR #36707).
//
// Like a connector that registers its KV cache once, it never revokes a
// registration: a writer keeps the key it was given (vLLM #55470).
type naiveDisagg struct {
	d    *disaggDriver
	used []bool
	live map[transfer.RequestID]*naivePages
}

// naivePages is what the naive manager keeps of an attempt in flight.
type naivePages struct {
	a        *dattempt
	peers    map[transfer.Peer]bool
	dones    int
	deadline int64
}

func newNaiveDisagg(d *disaggDriver) *naiveDisagg {
	n := &naiveDisagg{d: d, used: make([]bool, d.cfg.Pages), live: map[transfer.RequestID]*naivePages{}}
	d.decode.SetHandlers(transfer.Handlers{Message: n.message, EndpointError: n.endpointError})
	return n
}

func (n *naiveDisagg) close() {}

func (n *naiveDisagg) name() string { return "naive" }

// submit lends the first free run of pages long enough, registers it and
// hands its key to every writer.
func (n *naiveDisagg) submit(a *dattempt) (bool, error) {
	first := firstFit(n.used, a.r.pages)
	if first < 0 {
		return false, nil
	}
	pages := make([]int, a.r.pages)
	for j := range pages {
		pages[j] = first + j
		n.used[first+j] = true
	}
	n.d.lend(a, pages)
	mem, err := n.d.decode.Register(n.d.pool[first*SlotBytes : (first+a.r.pages)*SlotBytes])
	if err != nil {
		return false, err
	}
	l := &naivePages{a: a, peers: map[transfer.Peer]bool{}, deadline: n.d.step + n.d.cfg.deadlineSteps()}
	n.live[a.r.id] = l
	for _, w := range a.writers {
		l.peers[w.id.Peer] = true
		if err := n.d.spawn(a, w.id, func(p int) ([]byte, int) { return mem.PackedKey(), p * SlotBytes }); err != nil {
			return false, err
		}
	}
	return true, nil
}

// free returns l's pages and forgets it.
func (n *naiveDisagg) free(l *naivePages, kind string) {
	delete(n.live, l.a.r.id)
	for _, p := range l.a.pages {
		n.used[p] = false
	}
	n.d.settled(l.a)
	n.d.outcome(l.a, kind)
}

// message counts DONEs by request and frees on the first failure.
func (n *naiveDisagg) message(_ transfer.Peer, _ transfer.Incarnation, msg []byte) {
	ev, err := transfer.DecodeEvidence(msg)
	if err != nil {
		return
	}
	l := n.live[ev.Session.Request]
	if l == nil {
		return
	}
	switch ev.Kind {
	case transfer.Done:
		if l.dones++; l.dones >= len(l.a.writers) {
			n.d.read(l.a)
			n.free(l, outDelivered)
		}
	case transfer.Failure:
		n.free(l, outFailed)
	case transfer.PeerCancel:
		n.free(l, outByPeer)
	}
}

// endpointError frees every request a writer of the lost peer was filling.
func (n *naiveDisagg) endpointError(peer transfer.Peer, inc transfer.Incarnation, _ error) {
	if !n.d.firstLoss(peer, inc) {
		return
	}
	for _, l := range n.sorted() {
		if l.peers[peer] {
			n.free(l, outPeerLost)
		}
	}
}

// cancel frees at once.
func (n *naiveDisagg) cancel(a *dattempt) {
	if l := n.live[a.r.id]; l != nil && l.a == a {
		n.free(l, outCancelled)
	}
}

// round hears the decode process's messages, then frees what timed out.
func (n *naiveDisagg) round() error {
	n.d.decode.Progress()
	for _, l := range n.sorted() {
		if n.d.step >= l.deadline {
			n.free(l, outTimeout)
		}
	}
	return nil
}

// sorted lists the attempts in flight in request order, so a run does not
// depend on map order.
func (n *naiveDisagg) sorted() []*naivePages {
	out := make([]*naivePages, 0, len(n.live))
	for _, id := range slices.Sorted(maps.Keys(n.live)) {
		out = append(out, n.live[id])
	}
	return out
}
