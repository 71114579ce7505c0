package simulate

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// The prefill side of a disaggregated run: two prefill processes, whose
// writers fill a request's pages on the decode side. A request's cohort is
// drawn from these accessors: a KV writer and an auxiliary writer of rank 0
// on one process, a KV writer of rank 1 on the other (SPEC §2: several
// ranks, KV and auxiliary writers, one session).
var (
	disaggPrefills  = []transfer.Peer{"prefill-0", "prefill-1"}
	disaggAccessors = []transfer.AccessorID{
		{Peer: "prefill-0", Rank: 0, Role: transfer.RoleKV},
		{Peer: "prefill-0", Rank: 0, Role: transfer.RoleAux},
		{Peer: "prefill-1", Rank: 1, Role: transfer.RoleKV},
	}
)

// Over UCX the prefill side is one process: its KV and auxiliary writers of
// rank 0 write each request's pages.
var (
	ucxPrefills  = []transfer.Peer{"prefill-0"}
	ucxAccessors = []transfer.AccessorID{
		{Peer: "prefill-0", Rank: 0, Role: transfer.RoleKV},
		{Peer: "prefill-0", Rank: 0, Role: transfer.RoleAux},
	}
)

// prefills and accessors are the run's prefill processes and the writers a
// cohort is drawn from.
func (w disaggWorkload) prefills() []transfer.Peer {
	if w.cfg.overUCX() {
		return ucxPrefills
	}
	return disaggPrefills
}

func (w disaggWorkload) accessors() []transfer.AccessorID {
	if w.cfg.overUCX() {
		return ucxAccessors
	}
	return disaggAccessors
}

// disaggDecode is the decode process's name on the simulated network.
const disaggDecode transfer.Peer = "decode"

// dreqState is where a request of a disaggregated run stands.
type dreqState uint8

const (
	dWaiting   dreqState = iota // arrived, no attempt submitted yet, or a retry waiting for pages
	dInFlight                   // an attempt submitted, its outcome not yet seen
	dDelivered                  // an attempt delivered and its pages were read
	dFailed                     // every attempt failed: the decode side recomputes the prompt
	dCancelled                  // aborted by its user
	dRefused                    // never lent: containment left no room for its pages, for good
)

// dreq is one request: the chunk of pages the decode side lends to the
// prefill side's writers, attempt after attempt.
type dreq struct {
	id       transfer.RequestID
	arrive   int64 // the step it arrives at
	pages    int
	cancelAt int64 // the step its user aborts it at, if still in flight (0: never)
	state    dreqState
	attempts []*dattempt
	endedAt  int64
}

// current is the request's latest attempt (nil before the first).
func (r *dreq) current() *dattempt {
	if len(r.attempts) == 0 {
		return nil
	}
	return r.attempts[len(r.attempts)-1]
}

// dattempt is one attempt to move a request's pages: a session of its own,
// with writers drawn for it.
type dattempt struct {
	r         *dreq
	n         transfer.AttemptID
	writers   []dwriter
	submitted int64 // the step it was submitted at (-1: not yet)
	outcome   string
	settled   bool // its pages are back in the pool (or were never lent)
	contained bool // its pages are out of circulation for ever
	pages     []int
}

// key is the attempt's session identity.
func (a *dattempt) key() transfer.SessionKey {
	return transfer.SessionKey{Request: a.r.id, Attempt: a.n}
}

// tokens is the span the attempt moves: the whole prompt, TokensPerBlock a
// page.
func (a *dattempt) tokens() transfer.TokenRange {
	return transfer.TokenRange{Start: 0, End: int64(a.r.pages * TokensPerBlock)}
}

// dwriter is one accessor of an attempt, as drawn: who, how it behaves,
// whether it reports progress (scripted), whether it is the prefill side's
// Sender, and which pages of the chunk it writes.
type dwriter struct {
	id        transfer.AccessorID
	behaviour sim.Behaviour
	reports   bool
	sender    bool
	pages     []int
}

// disaggWorkload draws the requests and, per attempt, its writers — from the
// seed alone, so the kvready and the naive manager face the same requests,
// the same writers and the same behaviours.
type disaggWorkload struct {
	cfg DisaggConfig
}

// request draws request i (0-based).
func (w disaggWorkload) request(i int) *dreq {
	rng := w.rng(uint64(i), 0)
	r := &dreq{id: transfer.RequestID(i + 1), arrive: int64(i) * w.cfg.arrivalSteps(), pages: w.cfg.PagesPerRequest}
	if rng.Float64() < w.cfg.CancelRate {
		// Aborted soon after it arrived: most often while its first
		// attempt is in flight, sometimes while it waits for pages.
		r.cancelAt = r.arrive + 1 + rng.Int64N(2*w.cfg.arrivalSteps())
	}
	return r
}

// attempt draws attempt n of r: 1 to 3 writers, each with a behaviour drawn
// by the configured rates and a share of the pages (writer k of m writes
// pages k, k+m, …).
func (w disaggWorkload) attempt(r *dreq, n transfer.AttemptID) *dattempt {
	rng := w.rng(uint64(r.id), uint64(n))
	a := &dattempt{r: r, n: n, submitted: -1}
	ids := append([]transfer.AccessorID(nil), w.accessors()...)
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	m := 1 + rng.IntN(len(ids))
	for k, id := range ids[:m] {
		wr := dwriter{id: id, behaviour: w.behaviour(rng), reports: rng.IntN(2) == 0}
		// Drawn whatever the behaviour, so the rate changes nothing else.
		wr.sender = rng.Float64() < w.cfg.SenderRate && wr.behaviour == sim.Honest
		for p := k; p < r.pages; p += m {
			wr.pages = append(wr.pages, p)
		}
		a.writers = append(a.writers, wr)
	}
	return a
}

func (w disaggWorkload) behaviour(rng *rand.Rand) sim.Behaviour {
	x := rng.Float64()
	for _, b := range []struct {
		rate float64
		b    sim.Behaviour
	}{{w.cfg.NeverReportsRate, sim.NeverReports}, {w.cfg.FailsMidwayRate, sim.FailsMidway}, {w.cfg.SubmitsLateRate, sim.SubmitsLate}} {
		if x < b.rate {
			return b.b
		}
		x -= b.rate
	}
	return sim.Honest
}

func (w disaggWorkload) rng(a, b uint64) *rand.Rand {
	return rand.New(rand.NewPCG(w.cfg.Seed^0x5eed_d15a_99, a<<20^b))
}

// restarts draws the steps at which a prefill process is restarted, and
// which: spread over the arrivals, in order.
func (w disaggWorkload) restarts() []drestart {
	rng := w.rng(1<<40, 0)
	span := int64(w.cfg.Requests) * w.cfg.arrivalSteps()
	out := make([]drestart, w.cfg.Restarts)
	for i := range out {
		out[i] = drestart{at: span * int64(i+1) / int64(w.cfg.Restarts+1), peer: w.prefills()[rng.IntN(len(w.prefills()))]}
	}
	return out
}

// drestart is one prefill process killed and started again.
type drestart struct {
	at   int64
	peer transfer.Peer
}

// Page contents. Every page the checker watches starts with an 8-byte
// header: a kind byte, then the request (4 bytes), the page's index in its
// chunk (2 bytes) and the attempt (1 byte); the rest of the page is filler
// derived from the header, so a page whose every byte is right was written
// whole by the one writer it names.
const (
	pageData = 'K' // written by a prefill writer: the KV the page should hold
	pageLent = 'L' // the checker's sentinel when the page is lent
	pageFree = 'F' // the checker's sentinel when the page returns to the pool
	// pageSourceFree is the checker's sentinel in a prefill source slot
	// returned to its allocator: a put that reads the slot after that
	// carries it into the decode page it lands in.
	pageSourceFree = 'S'
	headerLength   = 8
)

// pageTag is who a page's bytes speak for.
type pageTag struct {
	kind    byte
	request transfer.RequestID
	index   int
	attempt transfer.AttemptID
}

// fill writes the page t stands for into p.
func (t pageTag) fill(p []byte) {
	var h [headerLength]byte
	h[0] = t.kind
	binary.BigEndian.PutUint32(h[1:], uint32(t.request))
	binary.BigEndian.PutUint16(h[5:], uint16(t.index))
	h[7] = byte(t.attempt)
	n := copy(p, h[:])
	x := binary.BigEndian.Uint64(h[:])
	for i := n; i < len(p); i++ {
		x = x*6364136223846793005 + 1442695040888963407
		p[i] = byte(x >> 56)
	}
}

// content is the page t stands for, as a new slice.
func (t pageTag) content() []byte {
	p := make([]byte, SlotBytes)
	t.fill(p)
	return p
}

// readTag reads the header of p.
func readTag(p []byte) pageTag {
	return pageTag{
		kind:    p[0],
		request: transfer.RequestID(binary.BigEndian.Uint32(p[1:])),
		index:   int(binary.BigEndian.Uint16(p[5:])),
		attempt: transfer.AttemptID(p[7]),
	}
}

// sameTenant reports whether t and u speak for one attempt of one request.
func (t pageTag) sameTenant(u pageTag) bool { return t.request == u.request && t.attempt == u.attempt }
