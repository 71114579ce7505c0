package simulate

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// naivePrefill is the prefill side's foil: the same Senders, but it hands
// out its staging slots itself and takes a publication's back as soon as
// its outcome arrives — its DONE sent, a failure, a timeout, the
// receiver's cancel — never asking whether the puts that read them
// completed; and when its process's worker dies it takes back every slot
// the dead life lent at once, as if a restart ended what it posted
// (TensorRT-LLM PR #15546: a pinned host buffer overwritten under a pending
// copy). The next share lent a slot copies its own KV into it, so a put
// still in flight then carries another request's bytes, or the freed
// slot's sentinel, into the decode side's page.
type naivePrefill struct {
	d     *disaggDriver
	hosts map[transfer.Peer]*naiveHost
	st    prefillStats
}

// naiveHost is one prefill host of the naive side: its slots, which are
// free, its Senders and its publications in flight.
type naiveHost struct {
	peer    transfer.Peer
	slots   [][]byte
	used    []bool
	base    int // the checker's index of slot 0
	send    *peer.Sender
	senders []*peer.Sender
	live    []*naivePub
	ended   []*naivePub // slots taken back; asked until their Sender retires them
}

// naivePub is one share published.
type naivePub struct {
	send  *peer.Sender
	slots []int
	att   contract.Attempt
}

func newNaivePrefill(d *disaggDriver) (*naivePrefill, error) {
	m := &naivePrefill{d: d, hosts: map[transfer.Peer]*naiveHost{}, st: prefillStats{Outcomes: map[string]int{}}}
	for _, p := range d.work.prefills() {
		pool := make([]byte, d.cfg.Pages*SlotBytes)
		h := &naiveHost{peer: p, used: make([]bool, d.cfg.Pages)}
		for s := range d.cfg.Pages {
			h.slots = append(h.slots, pool[s*SlotBytes:(s+1)*SlotBytes:(s+1)*SlotBytes])
		}
		h.base = d.chk.watchSources(h.slots)
		send, err := d.newSender(d.prefillTransport(p), m.now, h.slot)
		if err != nil {
			m.close()
			return nil, err
		}
		h.send, h.senders = send, []*peer.Sender{send}
		m.hosts[p] = h
	}
	return m, nil
}

func (m *naivePrefill) now() time.Time { return m.d.now() }

func (h *naiveHost) slot(u contract.Unit) []byte {
	if u.LocalGroup != 0 || u.Local < 0 || u.Local >= len(h.slots) {
		return nil
	}
	return h.slots[u.Local]
}

func (m *naivePrefill) name() string { return "naive" }

func (m *naivePrefill) pending() int {
	n := 0
	for _, h := range m.hosts {
		n += len(h.live)
	}
	return n
}

func (m *naivePrefill) stats() prefillStats {
	st := m.st
	st.Outcomes = maps.Clone(m.st.Outcomes)
	return st
}

func (m *naivePrefill) close() {
	for _, h := range m.hosts {
		for _, s := range h.senders {
			_ = s.Close()
		}
	}
}

// publish takes the lowest free slots for w's share, copies its KV into
// them and publishes them on the current life's Sender.
func (m *naivePrefill) publish(a *dattempt, w dwriter) error {
	h := m.hosts[w.id.Peer]
	sp, err := sendPlan(a, w)
	if err != nil {
		return err
	}
	pages, err := h.send.Expect(sp)
	if err != nil {
		return err
	}
	var free []int
	for s, u := range h.used {
		if !u && len(free) < len(pages) {
			free = append(free, s)
		}
	}
	if len(free) < len(pages) {
		h.send.Forget(sp.Key(), sp.As)
		m.st.Refused++
		return nil
	}
	units := make([]contract.Unit, len(pages))
	for k, pg := range pages {
		s := free[k]
		h.used[s] = true
		m.d.chk.lendSource(h.base+s, pageTag{request: a.r.id, index: pg.Index, attempt: a.n})
		pageTag{kind: pageData, request: a.r.id, index: pg.Index, attempt: a.n}.fill(h.slots[s])
		units[k] = contract.Unit{Name: pg.Name, LocalGroup: 0, Local: s}
	}
	ext, err := contract.NewCacheExtent([]byte("kvready:simulate:prefill"), units, true)
	if err != nil {
		return err
	}
	m.st.Publishes++
	att, err := h.send.Publish(ext)
	pub := &naivePub{send: h.send, slots: free, att: att}
	if err != nil {
		m.free(h, pub, readiness.Rejected.String())
		return nil
	}
	h.live = append(h.live, pub)
	return nil
}

// free takes a publication's slots back.
func (m *naivePrefill) free(h *naiveHost, p *naivePub, kind string) {
	m.st.Outcomes[kind]++
	for _, s := range p.slots {
		h.used[s] = false
		m.d.chk.freeSource(h.base + s)
	}
}

// restarted starts the next life's Sender and takes back every slot the
// dead life's publications hold, at once.
func (m *naivePrefill) restarted(p transfer.Peer, node *sim.Node) error {
	h := m.hosts[p]
	send, err := m.d.newSender(node, m.now, h.slot)
	if err != nil {
		return err
	}
	h.send = send
	h.senders = append(h.senders, send)
	for _, pub := range h.live {
		m.free(h, pub, "ended by a restart")
	}
	h.ended = append(h.ended, h.live...)
	h.live = nil
	return nil
}

// round runs every Sender, then takes back the slots of every publication
// whose outcome arrived.
func (m *naivePrefill) round() error {
	for _, p := range slices.Sorted(maps.Keys(m.hosts)) {
		h := m.hosts[p]
		for _, s := range h.senders {
			s.Progress()
		}
		kept := h.live[:0]
		for _, pub := range h.live {
			o := pub.att.Poll()
			if o == nil {
				kept = append(kept, pub)
				continue
			}
			m.free(h, pub, outcomeName(o))
			h.ended = append(h.ended, pub)
		}
		clear(h.live[len(kept):])
		h.live = kept
		h.retire()
	}
	return nil
}

// retire asks each Sender about the publications whose slots were taken
// back, until it retires them: housekeeping of the Sender's table only — the
// naive manager never waits for the answer to reuse a slot.
func (h *naiveHost) retire() {
	kept := h.ended[:0]
	for _, pub := range h.ended {
		if acc, err := pub.send.TryQuiesce([]contract.Attempt{pub.att}); err != nil || acc != contract.AccessEnded {
			kept = append(kept, pub)
		}
	}
	clear(h.ended[len(kept):])
	h.ended = kept
}

// outcomeName names a publication's outcome as the kvready side's engine
// does.
func outcomeName(o contract.Outcome) string {
	switch o.(type) {
	case contract.Delivered:
		return readiness.Served.String()
	case contract.Cancelled:
		return readiness.Cancelled.String()
	case contract.Failed:
		return readiness.Failed.String()
	}
	return fmt.Sprintf("%v", o)
}
