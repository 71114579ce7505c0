package simulate

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// SlotBytes is the size of one staging row in the simulation: small, because
// the demo is about when bytes may be reused, not about moving many of them.
const SlotBytes = 64

// TokensPerBlock is the simulated model's block size in tokens.
const TokensPerBlock = 32

// request is one prompt: its names, its device rows and its two leases.
type request struct {
	id     int
	arrive time.Duration
	names  [][]contract.Name // [group][block]
	dev    gpu.DevicePtr     // row (g, b) is at dev + (g*blocks+b)*SlotBytes
	fetch  *lease
	pub    *lease
	ended  bool
	// layerCopies is the checker's (Layerwise): for row i and layer k, at
	// i*layers+k, the event the engine recorded after the copy of that
	// layer into the row (zero: none yet).
	layerCopies []gpu.Event
	// computed and saves are the checker's account of the publish
	// (Layerwise): per layer, the event recorded after its compute (zero:
	// not computed yet); per row i and layer k, at i*layers+k, its
	// device→staging copy.
	computed []gpu.Event
	saves    []saveCopy
}

// find returns where the request's name n lies: its layer group and block.
func (r *request) find(n contract.Name) (g, b int, ok bool) {
	for g, names := range r.names {
		for b, m := range names {
			if m == n {
				return g, b, true
			}
		}
	}
	return 0, 0, false
}

func (r *request) row(blocks, g, b int) gpu.DevicePtr {
	return r.dev + gpu.DevicePtr((g*blocks+b)*SlotBytes)
}

// final is where a lease ended.
type final uint8

const (
	held        final = iota // still held when the run ended
	released                 // slots returned to the allocator
	quarantined              // slots out of circulation for ever
	refused                  // the manager refused to lend
)

// lease is one fetch or publish of a request, as the simulation tracks it.
type lease struct {
	req     *request
	kind    readiness.Kind
	first   int     // first block moved
	blocks  int     // blocks of the range [first, first+blocks)
	needed  [][]int // per group, the blocks of the range it moves (a window group fewer)
	mode    mem.Mode
	latency time.Duration
	lentAt  time.Duration

	// What the manager reported.
	outcome  readiness.OutcomeKind
	reason   string
	ready    bool
	interval staging.Interval
	final    final
	endedAt  time.Duration
	// ungrantable: refused because quarantine left no run of slots that
	// could ever hold it (lack of capacity).
	ungrantable bool

	// What the checker saw.
	submitted             bool // a submission reached the backend
	rejected              bool // the backend refused it before any work
	storeDown             bool // ... because it held the store for down (failed fast)
	proven                bool // the backend's Quiesce answered true for it
	reported              bool // the manager reported its outcome
	submittedAt, provenAt time.Duration
	copySeqs              []uint64         // events recorded after its copies
	copyUnrecorded        bool             // a copy with no event after it yet
	delivery              *delivery        // its delivery, if one was made
	backend               contract.Outcome // the first outcome the manager polled from the backend

	fwd *forward // its forward pass in flight (a layerwise fetch)
	// saving: a layerwise publish whose pass the manager started (once).
	// withdrawn: one it released before reporting its last layer computed.
	saving, withdrawn bool
}

// rows returns the lease's rows, in group then block order.
func (l *lease) rows() []staging.Row {
	r := l.req
	blocks := len(r.names[0])
	out := make([]staging.Row, 0, len(r.names)*l.blocks)
	for g, ords := range l.needed {
		for _, b := range ords {
			out = append(out, staging.Row{Name: r.names[g][b], Group: g, Block: b, Device: r.row(blocks, g, b)})
		}
	}
	return out
}

// neededBlocks lists, per layer group, the blocks of [first, first+blocks)
// that a lease moves: all of them, but for a window group only those a resume
// at the range's end (the prompt's end) reads.
func neededBlocks(attn []staging.Attention, first, blocks int) [][]int {
	rows, err := staging.NeededRows(nil, TokensPerBlock, attn, first*TokensPerBlock, (first+blocks)*TokensPerBlock)
	if err != nil {
		panic("simulate: " + err.Error()) // first, blocks and the config are validated
	}
	return rows
}

// workload draws requests and per-submission behaviour from one seeded source.
type workload struct {
	cfg Config
	rng *rand.Rand
	id  *staging.Identity
}

func newWorkload(cfg Config) (*workload, error) {
	layers := make([][]int, cfg.Groups)
	shards := make([]staging.Shard, cfg.Groups)
	for g := range layers {
		layers[g] = []int{g}
		shards[g] = staging.Whole
	}
	scope := sha256.Sum256([]byte("kvready simulate: model"))
	layout := sha256.Sum256([]byte("kvready simulate: layout"))
	id, err := staging.NewIdentity(scope[:], layout[:], layers, shards)
	if err != nil {
		return nil, err
	}
	return &workload{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x6b7672656164790a)), id: id}, nil
}

// request draws request i: with probability Share its prompt starts with a
// prefix of one of the shared families, of a random length; the rest of its
// blocks are its own.
func (w *workload) request(i int) (*request, error) {
	r := &request{id: i, arrive: time.Duration(i) * w.cfg.Arrival}
	shared, family := 0, 0
	if w.rng.Float64() < w.cfg.Share {
		shared = 1 + w.rng.IntN(w.cfg.Blocks)
		family = w.rng.IntN(w.cfg.Families)
	}
	r.names = make([][]contract.Name, w.cfg.Groups)
	for g := range r.names {
		r.names[g] = make([]contract.Name, w.cfg.Blocks)
		for b := range r.names[g] {
			var key staging.Key
			if b < shared {
				key = blockKey('f', w.cfg.Seed, family, b)
			} else {
				key = blockKey('r', w.cfg.Seed, i, b)
			}
			n, err := w.id.Name(g, key)
			if err != nil {
				return nil, fmt.Errorf("simulate: request %d: naming block %d of group %d: %w", i, b, g, err)
			}
			r.names[g][b] = n
		}
	}
	return r, nil
}

// blockKey is a block's content key: derived from the seed, the owner (a
// shared family, or the request) and the block's position, and nothing else.
// Two runs of one workload (one seed) name their blocks alike, so over a
// shared store the second fetches what the first published; another seed is
// another workload, sharing nothing.
func blockKey(kind byte, seed uint64, owner, block int) staging.Key {
	var buf [25]byte
	buf[0] = kind
	binary.BigEndian.PutUint64(buf[1:], seed)
	binary.BigEndian.PutUint64(buf[9:], uint64(owner))
	binary.BigEndian.PutUint64(buf[17:], uint64(block))
	return staging.Key(sha256.Sum256(buf[:]))
}

// behaviour draws how the backend treats one lease's submission and how long
// it takes. The draw depends on the seed, the request and the kind alone — not
// on the order in which a manager submits — so the engine and the naive
// manager meet exactly the same faults.
func (w *workload) behaviour(req int, k readiness.Kind) (mem.Mode, time.Duration) {
	c := w.cfg
	rng := rand.New(rand.NewPCG(c.Seed^uint64(req)*0x9e3779b97f4a7c15, uint64(k)))
	u := rng.Float64()
	mode := mem.Normal
	for _, m := range []struct {
		p    float64
		mode mem.Mode
	}{{c.MissRate, mem.Miss}, {c.PartialRate, mem.Partial}, {c.FailRate, mem.Fail},
		{c.CancelRate / 2, mem.CancelLocal}, {c.CancelRate / 2, mem.CancelByPeer},
		{c.QuiesceNotYetRate, mem.QuiesceNotYet}, {c.NeverProvesRate, mem.QuiesceFalse},
		{c.RejectRate, mem.Reject}} {
		if u < m.p {
			mode = m.mode
			break
		}
		u -= m.p
	}
	lat := float64(c.LatencyMedian) * math.Exp(c.LatencySigma*rng.NormFloat64())
	// Cap the tail past the deadline, so that slow deliveries time out and land
	// late, but before the containment deadline (deadline plus grace): a
	// backend that proves access ends is never contained.
	lat = min(lat, float64(c.Deadline+c.DrainGrace/2))
	return mode, max(time.Duration(lat), time.Microsecond)
}

// content is the bytes the store holds for a name: derived from the name, so
// the checker can tell what any row should contain.
func content(n contract.Name, dst []byte) {
	h := uint64(14695981039346656037)
	for _, c := range n {
		h = (h ^ uint64(c)) * 1099511628211
	}
	for i := range dst {
		h ^= h << 13
		h ^= h >> 7
		h ^= h << 17
		dst[i] = byte(h)
	}
}

// canary is what the checker writes into a device row before the request
// starts: a fetch leaves it in every row it did not serve.
func canary(req, row int, dst []byte) {
	for i := range dst {
		dst[i] = byte(0xC0 ^ (req * 31) ^ (row * 7) ^ i)
	}
}
