package simulate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// Layers returns how many layers the simulated model has with Layerwise:
// LayersPerGroup in each layer group.
func (c Config) Layers() int { return c.Groups * c.LayersPerGroup }

// layerBytes is how many bytes of a row each layer takes.
func (c Config) layerBytes() int { return SlotBytes / c.LayersPerGroup }

// layerOf names where layer k lies: in the rows of layer group k mod Groups,
// the group's (k div Groups)-th layer. The checker and the layout both
// derive from it.
func (c Config) layerOf(k int) (group, index int) { return k % c.Groups, k / c.Groups }

// FullLayerCopy is how long one layer of a fully served fetch (Blocks rows
// of a full-attention group) takes on an idle copy engine: T of SPEC §5's
// layer figure.
func (c Config) FullLayerCopy() time.Duration {
	return time.Duration(float64(c.Blocks*c.layerBytes()) / c.CopyBandwidth * float64(time.Second))
}

// layout describes the simulated model's rows to the engine: layer group g
// on pool group g, one SlotBytes pool, its layers g, g+Groups, … in order
// along the row, each a key and a value of equal size.
func (c Config) layout() staging.Layout {
	lb := c.layerBytes()
	out := staging.Layout{TokensPerBlock: TokensPerBlock, PoolGroups: map[int][]int{}}
	for g, attn := range c.Attention() {
		out.PoolGroups[g] = []int{SlotBytes}
		lg := staging.LayerGroup{Kind: "attention", PoolGroup: g, Shard: staging.Whole}
		if attn.Window > 0 {
			w := attn.Window
			lg.Window, lg.SinkBlocks = &w, attn.SinkBlocks
		}
		for j := range c.LayersPerGroup {
			id := g + j*c.Groups
			lg.Layers = append(lg.Layers, id)
			out.Buffers = append(out.Buffers,
				staging.Buffer{Layer: id, Role: "key", Pool: [2]int{g, 0}, Offset: j * lb, Size: lb / 2, Expansion: 1},
				staging.Buffer{Layer: id, Role: "value", Pool: [2]int{g, 0}, Offset: j*lb + lb/2, Size: lb / 2, Expansion: 1})
		}
		out.LayerGroups = append(out.LayerGroups, lg)
	}
	return out
}

// layerwiseErrors reports what is wrong with the layerwise fields, and with
// what they do not go with. Without Layerwise they are not used.
func (c Config) layerwiseErrors() []error {
	if !c.Layerwise {
		return nil
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if v := c.LayersPerGroup; v < 1 || v > SlotBytes/2 || (SlotBytes/2)%v != 0 {
		bad("layers-per-group", "%d; want a divisor of %d (1, 2, 4, 8, 16 or 32): each layer's key and value take an equal share of a %d-byte row", v, SlotBytes/2, SlotBytes)
	}
	if c.ComputePerLayer < 0 || c.ComputePerLayer > maxLatency {
		bad("compute-per-layer", "%v; want a duration in 0..%v", c.ComputePerLayer, maxLatency)
	}
	if b := c.CopyBandwidth; math.IsNaN(b) || b <= 0 || b > maxBandwidth {
		bad("copy-bandwidth", "%v; want a rate in bytes per second, above 0 and at most %g", b, float64(maxBandwidth))
	}
	if c.Naive {
		bad("layerwise", "the naive manager has no per-layer readiness to wait for; drop --naive or --layerwise")
	}
	if c.RealTime() {
		bad("layerwise", "the pipeline is timed on the virtual clock, and a run over a Redis store or a stack of tiers is on real time; want --backend mem")
	}
	if c.Device == CUDADevice {
		bad("layerwise", "the forward pass is computed on the simulated device (gpu/sim Stream.Compute); want --device sim")
	}
	return errs
}

// layerwise is the forward-pass side of a layerwise run: three compute
// streams of the simulated device, one for the layer-by-layer passes, one
// for the whole-lease baseline's, so that the two never delay each other,
// and one for the passes that compute what publishes save; on each, the
// passes of all requests run one after another, as on one GPU.
type layerwise struct {
	cfg     Config
	layers  int
	compute time.Duration
	pipe    computeStream // layer by layer: layer l computed once it is ready
	whole   computeStream // the baseline: every layer computed once the lease is ready
	save    computeStream // the publishes' passes: layer l computed, then saved
	active  []*forward
	// saves are the publishes' passes waiting for the save stream, the
	// first in progress; inFlight the events after the layers queued there
	// not yet seen computed (at most saveDepth). withdrawn counts the
	// publishes the manager released before their last layer.
	saves     []*savePass
	inFlight  []gpu.Event
	withdrawn int

	pipeSample, wholeSample reservoir
	measured, failed        int
	pipeSum, wholeSum       time.Duration
}

// forward is one fetch's forward pass, measured from the round its copies
// were issued (the lease became access_fenced).
type forward struct {
	l      *lease
	start  time.Duration
	next   int  // the next layer to wait for
	failed bool // a layer's copy failed, or the lease ended before it landed
	// Events after the last layer's compute on each stream, and when each
	// was seen complete, from start (0: not yet).
	pipeEv, wholeEv gpu.Event
	pipeAt, wholeAt time.Duration
}

func newLayerwise(cfg Config, dev gpu.Device) (*layerwise, error) {
	var streams [3]computeStream
	for i := range streams {
		s, err := dev.NewStream()
		if err != nil {
			return nil, err
		}
		cs, ok := s.(computeStream)
		if !ok {
			return nil, fmt.Errorf("simulate: --layerwise: the device's streams cannot compute (%T); want --device sim", s)
		}
		streams[i] = cs
	}
	return &layerwise{cfg: cfg, layers: cfg.Layers(), compute: cfg.ComputePerLayer, pipe: streams[0], whole: streams[1], save: streams[2],
		pipeSample: newReservoir(cfg.Seed + 3), wholeSample: newReservoir(cfg.Seed + 4)}, nil
}

// computeStream is a stream that can occupy itself with work that touches
// no memory: gpu/sim's Compute, the simulated kernel of a layer.
type computeStream interface {
	gpu.Stream
	Compute(time.Duration) error
}

// fenced starts the forward pass of a fetch whose copies the engine has just
// issued, layer by layer. A fetch with nothing to copy (a miss) has no
// layers to wait for: its forward pass is a recomputation, not measured.
func (d *driver) fenced(l *lease) {
	if d.lw == nil || l.kind != readiness.Fetch || l.fwd != nil {
		return
	}
	d.mu.Lock()
	copied := l.copyUnrecorded || len(l.copySeqs) > 0 // the stream's account, not the engine's
	d.mu.Unlock()
	if !copied {
		return
	}
	l.fwd = &forward{l: l, start: d.clk.since()}
	d.lw.active = append(d.lw.active, l.fwd)
}

// pump computes every layer of f that is ready, in order: the manager waits
// for layer l (the engine's LayerReadiness: in virtual time a wait is a
// question asked each round), reads its bytes (the checker reads them, and
// checks the device had landed them), and queues its compute behind the
// ones before it. A layer that failed or will never land ends the pass: the
// manager recomputes the rows.
func (d *driver) pump(f *forward) {
	lw := d.lw
	for !f.failed && f.next < lw.layers {
		switch d.mgr.layer(f.l, f.next) {
		case readiness.LayerPending:
			return
		case readiness.LayerReady:
		default:
			f.failed = true
			return
		}
		d.mu.Lock()
		d.chk.readLayer(d.dev, f.l, f.next)
		d.mu.Unlock()
		if lw.pipe.Compute(lw.compute) != nil {
			f.failed = true
			return
		}
		f.next++
	}
	if !f.failed && f.pipeEv.IsZero() {
		ev, err := lw.pipe.Record()
		f.pipeEv, f.failed = ev, err != nil
	}
}

// complete is told that f's lease is logically complete — every layer
// landed — before the manager releases it: the layer-by-layer pass queues
// what it has not, and the whole-lease baseline, which waited for exactly
// this, queues every layer.
func (d *driver) complete(f *forward) {
	d.pump(f)
	if f.failed {
		return
	}
	lw := d.lw
	for range lw.layers {
		if lw.whole.Compute(lw.compute) != nil {
			f.failed = true
			return
		}
	}
	ev, err := lw.whole.Record()
	f.wholeEv, f.failed = ev, err != nil
}

// forwards runs every pass in flight one round on: it computes the layers
// that became ready, and takes in the passes both streams finished.
func (d *driver) forwards() {
	lw := d.lw
	if lw == nil {
		return
	}
	now := d.clk.since()
	kept := lw.active[:0]
	for _, f := range lw.active {
		d.pump(f)
		f.pipeAt = seen(lw.pipe, f.pipeEv, f.pipeAt, now-f.start, &f.failed)
		f.wholeAt = seen(lw.whole, f.wholeEv, f.wholeAt, now-f.start, &f.failed)
		switch {
		case f.failed:
			lw.failed++
		case f.pipeAt > 0 && f.wholeAt > 0:
			lw.measured++
			lw.pipeSum += f.pipeAt
			lw.wholeSum += f.wholeAt
			lw.pipeSample.add(f.pipeAt)
			lw.wholeSample.add(f.wholeAt)
		default:
			kept = append(kept, f)
			continue
		}
		f.l.fwd = nil
	}
	clear(lw.active[len(kept):])
	lw.active = kept
}

// seen returns when ev was first seen complete: at (this round) if it is now
// and was not before. A failed event (the device lost) fails the pass.
func seen(s gpu.Stream, ev gpu.Event, was, at time.Duration, failed *bool) time.Duration {
	if was > 0 || ev.IsZero() {
		return was
	}
	switch st, err := s.Query(ev); {
	case err != nil || st == gpu.Failed:
		*failed = true
	case st == gpu.Complete:
		return max(at, 1) // 0 means "not yet"
	}
	return was
}

// withdrawRate is the share of publishes the manager releases before it
// reported their last layer computed: a request cut short while its KV was
// being saved (vLLM aborts one mid-forward). Fixed and small, so that
// every run of the demo withdraws a few and the checker follows them.
const withdrawRate = 1.0 / 16

// withdrawAfter draws how many layers of request req's publish the manager
// reports before it releases the publish: all of them, but with
// withdrawRate fewer (0 to layers−1). Like behaviour, the draw depends on
// the seed and the request alone.
func (w *workload) withdrawAfter(req, layers int) int {
	rng := rand.New(rand.NewPCG(w.cfg.Seed^uint64(req)*0x9e3779b97f4a7c15, 0x7769746864726177))
	if rng.Float64() >= withdrawRate {
		return layers
	}
	return rng.IntN(layers)
}

// saveDepth bounds how far the host runs ahead of the save stream: at most
// this many layers of the publishes' passes are queued there and not yet
// computed. The engine's copy stream, which fetches share, waits for each
// reported layer's event; were the host to queue whole passes ahead, a
// compute stream behind its work would hold every fetch's copies behind it
// for as long (the engine would contain them as unproven). A manager
// launches a layer's compute a layer or two before the device gets to it.
const saveDepth = 2

// savePass is a publish's pass in progress: the layer it queues next, and
// how many it queues before the publish is released (withdrawn) or
// submitted (all of them).
type savePass struct {
	l          *lease
	out        []byte
	next, stop int
}

// save starts the pass whose KV the layerwise publish l saves, once l holds
// its slots: the passes run one after another on the save stream, as
// pumpSaves runs them.
func (d *driver) save(l *lease) {
	lw := d.lw
	if lw == nil || l.kind != readiness.Publish || l.saving {
		return
	}
	l.saving = true
	lw.saves = append(lw.saves, &savePass{l: l, out: lw.output(l.req, l.first), stop: d.w.withdrawAfter(l.req.id, lw.layers)})
}

// pumpSaves runs the publishes' passes one round on, as vLLM's save_kv_layer:
// for each layer it queues the layer's compute on the save stream, records
// an event after it, and at once reports the layer computed behind that
// event (Engine.Computed), up to saveDepth layers ahead of the device. The
// engine queues the layer's device→staging copies behind the event; the
// publish is submitted once every layer landed. A publish the workload
// withdraws is released after fewer layers, and so is one whose pass cannot
// go on (a lost device, a refused report): nothing of it is submitted. A
// publish that ended meanwhile (the engine closed it) is dropped.
func (d *driver) pumpSaves() {
	lw := d.lw
	done := 0
	for _, ev := range lw.inFlight {
		if st, err := lw.save.Query(ev); err == nil && st == gpu.Pending {
			break
		}
		done++
	}
	lw.inFlight = append(lw.inFlight[:0], lw.inFlight[done:]...)
	for len(lw.saves) > 0 {
		p := lw.saves[0]
		if p.l.reported || p.l.final != held {
			p.stop = p.next // it ended: nothing to report or release
		}
		for p.next < p.stop && len(lw.inFlight) < saveDepth {
			ev, err := lw.computeLayer(p.l.req, p.l.first, p.next, p.out)
			if err == nil {
				d.mu.Lock()
				d.chk.computed(p.l.req, p.next, ev)
				d.mu.Unlock()
				err = d.mgr.computed(p.l, p.next, ev)
			}
			if err != nil {
				p.stop = p.next
				break
			}
			lw.inFlight = append(lw.inFlight, ev)
			p.next++
		}
		if p.next < p.stop {
			return // the host is as far ahead as it goes
		}
		if p.stop < lw.layers && !p.l.reported && p.l.final == held {
			p.l.withdrawn = true
			lw.withdrawn++
			d.mgr.release(p.l)
		}
		lw.saves[0] = nil
		lw.saves = lw.saves[1:]
	}
}

// output is what a publish's pass computes for r: each row's content, for
// the blocks from first on (the ones the fetch did not bring), laid out as
// r's device rows are.
func (lw *layerwise) output(r *request, first int) []byte {
	blocks := lw.cfg.Blocks
	out := make([]byte, len(r.names)*blocks*SlotBytes)
	for g := range r.names {
		for b := first; b < blocks; b++ {
			i := g*blocks + b
			content(r.names[g][b], out[i*SlotBytes:(i+1)*SlotBytes])
		}
	}
	return out
}

// computeLayer queues layer k of a publish's pass on the save stream and
// returns the event recorded after it. The simulated device runs no kernel,
// so the pass writes what the layer produces itself: a host→device copy of
// the layer's bytes of each computed row (from out), queued after the
// compute and before the event. The device performs a copy when it
// resolves, in stream order, so the layer's bytes are on the device when
// the event resolves, and not a moment before: until then the rows hold the
// canary the checker wrote when the request arrived (or, in a row the fetch
// filled, the stored content it brought). A device→staging copy that ran
// before the event resolved — one the engine did not queue behind it —
// stages the canary: the checker's check of the submitted units, and its
// read of the store, see the wrong bytes. The write takes its bytes' time
// on the device's copy bandwidth, counted in the layer's compute time
// (it runs for C, or the write's time if that is longer).
func (lw *layerwise) computeLayer(r *request, first, k int, out []byte) (gpu.Event, error) {
	cfg := lw.cfg
	g, j := cfg.layerOf(k)
	lb, blocks := cfg.layerBytes(), cfg.Blocks
	write := time.Duration(float64((blocks-first)*lb) / cfg.CopyBandwidth * float64(time.Second))
	if err := lw.save.Compute(max(0, lw.compute-write)); err != nil {
		return gpu.Event{}, err
	}
	for b := first; b < blocks; b++ {
		off := (g*blocks+b)*SlotBytes + j*lb
		if err := lw.save.CopyHtoD(r.dev+gpu.DevicePtr(off), out[off:off+lb]); err != nil {
			return gpu.Event{}, err
		}
	}
	return lw.save.Record()
}

// idle reports whether no forward pass is in flight or waiting.
func (lw *layerwise) idle() bool { return lw == nil || (len(lw.active) == 0 && len(lw.saves) == 0) }

// summarize fills in the layerwise part of the summary.
func (lw *layerwise) summarize(cfg Config, s *Summary) {
	if lw == nil {
		return
	}
	s.Layerwise, s.Layers, s.ComputePerLayer, s.CopyBandwidth = true, lw.layers, cfg.ComputePerLayer, cfg.CopyBandwidth
	s.FullLayerCopy = cfg.FullLayerCopy()
	s.Forwards, s.ForwardsFailed, s.ForwardsUnfinished = lw.measured, lw.failed, len(lw.active)
	s.PublishesWithdrawn = lw.withdrawn
	s.LastLayerLatencies, s.WholeLeaseLatencies = lw.pipeSample.sorted(), lw.wholeSample.sorted()
	s.LastLayerP50, s.LastLayerP99 = quantile(s.LastLayerLatencies, 0.50), quantile(s.LastLayerLatencies, 0.99)
	s.WholeLeaseP50, s.WholeLeaseP99 = quantile(s.WholeLeaseLatencies, 0.50), quantile(s.WholeLeaseLatencies, 0.99)
	if lw.pipeSum > 0 {
		s.LayerwiseSpeedup = float64(lw.wholeSum) / float64(lw.pipeSum)
	}
}

// PipelineBound is SPEC §5's layer figure for L layers whose copies take T
// each on an idle copy engine and whose compute takes C: the last layer is
// computed at T + (L−1)·max(T, C) + C at the earliest, layer by layer;
// waiting for the whole lease first, at L·T + L·C.
func PipelineBound(layers int, t, c time.Duration) (layerwise, wholeLease time.Duration) {
	l := time.Duration(layers)
	return t + (l-1)*max(t, c) + c, l*t + l*c
}
