package simulate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// SPEC §5's layer figure, in virtual time: for T < C, T = C and T > C, the
// last layer is computed within 1.05× of T + (L−1)·max(T, C) + C — and no
// sooner, since no schedule beats that pipeline — while waiting for the
// whole lease first pays L·T + L·C. T and C are whole rounds, so the run
// measures both exactly.
func TestLayerFigureWithinTheBound(t *testing.T) {
	for _, fc := range LayerFigureCases {
		t.Run(fc.Name, func(t *testing.T) {
			res, err := MeasureLayerFigure(context.Background(), fc)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, res.LastLayer, res.Bound, "no schedule beats the pipeline")
			assert.LessOrEqual(t, float64(res.LastLayer), 1.05*float64(res.Bound), "last layer computed at %v; bound %v", res.LastLayer, res.Bound)
			assert.Equal(t, res.WholeBound, res.WholeLease, "whole-lease readiness pays L·T + L·C")
			assert.Less(t, res.LastLayer, res.WholeLease)
			assert.Equal(t, fc.Layers*fc.Fetches, res.Summary.LayersRead, "every layer of every fetch read")
		})
	}
}

// The figure's bounds are the formula's, for the three cases.
func TestPipelineBound(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		layers      int
		T, C        time.Duration
		pipe, whole time.Duration
	}{
		{8, 1 * ms, 2 * ms, 17 * ms, 24 * ms},
		{8, 2 * ms, 2 * ms, 18 * ms, 32 * ms},
		{8, 2 * ms, 1 * ms, 17 * ms, 24 * ms},
		{1, 3 * ms, 5 * ms, 8 * ms, 8 * ms},
	} {
		pipe, whole := PipelineBound(tc.layers, tc.T, tc.C)
		assert.Equal(t, tc.pipe, pipe)
		assert.Equal(t, tc.whole, whole)
	}
}

func layerwiseSmall() Config {
	c := small().WithLayerwiseDefaults()
	c.NeverProvesRate = 0 // the layer passes, not containment, are what this run shows
	return c
}

// A layerwise run with every fault of the defaults: the checker finds no
// layer read before its copy landed and no corrupt layer, every fetch that
// copied anything is measured both ways, and layer by layer wins.
func TestLayerwiseRunIsSafe(t *testing.T) {
	s := run(t, layerwiseSmall())
	assert.True(t, s.Safe())
	assert.True(t, s.Complete())
	assert.Positive(t, s.Forwards)
	assert.Zero(t, s.ForwardsUnfinished)
	assert.Positive(t, s.LayersRead)
	assert.Zero(t, s.LayersReadEarly)
	assert.Zero(t, s.CorruptLayers)
	assert.Positive(t, s.Partial, "partial fetches copy some rows layer by layer too")
	assert.Greater(t, s.LayerwiseSpeedup, 1.0)
	assert.LessOrEqual(t, s.LastLayerP50, s.WholeLeaseP50)
	assert.Len(t, s.LastLayerLatencies, s.Forwards)
	assert.Len(t, s.WholeLeaseLatencies, s.Forwards)
	assert.Equal(t, 8, s.Layers)
}

// Virtual time: one seed, one result, forward passes included.
func TestLayerwiseRunIsDeterministic(t *testing.T) {
	c := layerwiseSmall()
	c.Requests = 200
	a, b := run(t, c), run(t, c)
	assert.Equal(t, a.LastLayerLatencies, b.LastLayerLatencies)
	assert.Equal(t, a.WholeLeaseLatencies, b.WholeLeaseLatencies)
	assert.Equal(t, a.LayersRead, b.LayersRead)
	assert.Equal(t, a.PublishesSubmitted, b.PublishesSubmitted)
	assert.Equal(t, a.PublishesWithdrawn, b.PublishesWithdrawn)
	assert.Equal(t, a.LayerSaves, b.LayerSaves)
}

// Hybrid layer groups: with a window group its rows are fewer, and its
// layers are waited for like the others'.
func TestLayerwiseRunWithAWindowGroup(t *testing.T) {
	c := layerwiseSmall()
	c.Requests, c.Blocks, c.Window, c.SinkBlocks, c.LayersPerGroup = 200, 16, 4*TokensPerBlock, 1, 2
	s := run(t, c)
	assert.True(t, s.Safe())
	assert.Positive(t, s.Forwards)
	assert.Equal(t, 4, s.Layers)
}

// A device lost mid-run fails the layer copies in flight: the pass waiting
// for them stops (the manager recomputes), nothing is read early, and the
// run ends with every request accounted for. 22ms is within a pass of this
// workload (deterministic on the virtual clock).
func TestLayerwiseDeviceLoss(t *testing.T) {
	c := layerwiseSmall()
	c.Requests, c.DeviceLossAt = 60, 22*time.Millisecond
	s, err := Run(context.Background(), c, nil)
	require.NoError(t, err)
	t.Logf("measured %d, stopped %d, layers read %d", s.Forwards, s.ForwardsFailed, s.LayersRead)
	assert.True(t, s.Safe())
	assert.True(t, s.Complete())
	assert.Equal(t, 1, s.ForwardsFailed, "the pass in flight at the loss")
	assert.Zero(t, s.ForwardsUnfinished)
	assert.Zero(t, s.LayersReadEarly)
}

func TestLayerwiseSummaryJSON(t *testing.T) {
	c := layerwiseSmall()
	c.Requests = 100
	s := run(t, c)
	data, err := json.Marshal(s)
	require.NoError(t, err)
	var got struct {
		Layerwise map[string]float64 `json:"layerwise"`
	}
	require.NoError(t, json.Unmarshal(data, &got))
	require.NotNil(t, got.Layerwise)
	for _, k := range []string{"layers", "compute_per_layer_us", "copy_bandwidth_bytes_per_s", "full_layer_copy_us", "pipeline_bound_us",
		"whole_lease_bound_us", "forwards", "forwards_failed", "forwards_unfinished", "last_layer_p50_us", "last_layer_p99_us",
		"whole_lease_p50_us", "whole_lease_p99_us", "speedup", "layers_read", "layers_read_early", "corrupt_layers",
		"publishes_submitted", "publishes_withdrawn", "layer_saves", "save_copies_early", "units_incomplete",
		"withdrawn_submitted", "withdrawn_freed_early"} {
		assert.Contains(t, got.Layerwise, k)
	}
	assert.Equal(t, float64(s.Forwards), got.Layerwise["forwards"])
	assert.Equal(t, float64(s.PublishesSubmitted), got.Layerwise["publishes_submitted"])
	assert.Equal(t, float64(s.PublishesWithdrawn), got.Layerwise["publishes_withdrawn"])
	assert.Equal(t, float64(s.LayerSaves), got.Layerwise["layer_saves"])
	pipe, whole := PipelineBound(s.Layers, s.FullLayerCopy, s.ComputePerLayer)
	assert.InDelta(t, float64(pipe)/1e3, got.Layerwise["pipeline_bound_us"], 1e-9)
	assert.InDelta(t, float64(whole)/1e3, got.Layerwise["whole_lease_bound_us"], 1e-9)

	plain := run(t, func() Config { c := small(); c.Requests = 50; return c }())
	data, err = json.Marshal(plain)
	require.NoError(t, err)
	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(data, &raw))
	assert.Equal(t, "null", string(raw["layerwise"]), "not a layerwise run: null, never zeros")
}

func TestLayerwiseConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, field, msg string
		change           func(*Config)
	}{
		{"three layers", "layers-per-group", "want a divisor of 32", func(c *Config) { c.LayersPerGroup = 3 }},
		{"no layers", "layers-per-group", "want a divisor of 32", func(c *Config) { c.LayersPerGroup = 0 }},
		{"more layers than bytes", "layers-per-group", "want a divisor of 32", func(c *Config) { c.LayersPerGroup = 64 }},
		{"negative compute", "compute-per-layer", "want a duration in 0..", func(c *Config) { c.ComputePerLayer = -time.Microsecond }},
		{"compute beyond an hour", "compute-per-layer", "want a duration in 0..", func(c *Config) { c.ComputePerLayer = 2 * time.Hour }},
		{"no bandwidth", "copy-bandwidth", "above 0", func(c *Config) { c.CopyBandwidth = 0 }},
		{"negative bandwidth", "copy-bandwidth", "above 0", func(c *Config) { c.CopyBandwidth = -1 }},
		{"NaN bandwidth", "copy-bandwidth", "above 0", func(c *Config) { c.CopyBandwidth = math.NaN() }},
		{"infinite bandwidth", "copy-bandwidth", "at most 1e+12", func(c *Config) { c.CopyBandwidth = math.Inf(1) }},
		{"naive", "layerwise", "drop --naive or --layerwise", func(c *Config) { c.Naive = true }},
		{"redis", "layerwise", "want --backend mem", func(c *Config) { *c = c.WithoutFaults(); c.Backend = "redis://127.0.0.1:6379" }},
		{"cuda", "layerwise", "want --device sim", func(c *Config) { c.Device = CUDADevice }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults().WithLayerwiseDefaults()
			tc.change(&c)
			err := c.Validate()
			require.Error(t, err)
			joined, ok := err.(interface{ Unwrap() []error })
			require.True(t, ok, "Validate reports every field: %v", err)
			found := false
			for _, e := range joined.Unwrap() {
				var fe *FieldError
				if errors.As(e, &fe) && fe.Field == tc.field {
					found = true
					assert.Contains(t, fe.Msg, tc.msg)
				}
			}
			assert.True(t, found, "no error names %s: %v", tc.field, err)
			_, runErr := Run(context.Background(), c, nil)
			require.Error(t, runErr, "an invalid configuration runs nothing")
		})
	}
	// Without Layerwise the fields are not used, so not checked.
	c := Defaults()
	c.LayersPerGroup, c.CopyBandwidth = 3, 0
	require.NoError(t, c.Validate())
}

// The checker's layer oracle is its own: which copies carried a layer's
// bytes into a row (from the device address), which event the engine
// recorded after them, and whether the device completed that event. Fed a
// workload that reads too soon — before the copy landed, or a layer whose
// copy was never queued — it counts the read as early (and its bytes as
// corrupt); the same read once the device completed the event is clean.
func TestCheckerCatchesALayerReadBeforeItsCopyLanded(t *testing.T) {
	cfg := Defaults().WithLayerwiseDefaults()
	cfg.Groups, cfg.Blocks, cfg.LayersPerGroup = 1, 1, 2 // layers 0 and 1, 32 bytes each
	cfg.CopyBandwidth = 32 / time.Millisecond.Seconds()  // a layer's copy takes 1ms
	clock := sim.NewManualClock(epoch)
	dev, err := sim.New(0, 1<<12, sim.WithBandwidth(clock, cfg.CopyBandwidth))
	require.NoError(t, err)
	inner, err := dev.NewStream()
	require.NoError(t, err)
	mem, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 1, SlotBytes: SlotBytes})
	require.NoError(t, err)
	chk := newChecker(mem)
	chk.layerwise(cfg, inner)
	s := &stream{inner: inner, chk: chk, mu: &sync.Mutex{}}

	var name contract.Name
	name[0] = 9
	r := &request{id: 1, names: [][]contract.Name{{name}}}
	r.dev, err = dev.Alloc(SlotBytes)
	require.NoError(t, err)
	chk.request(r, 1)
	canaryRow := make([]byte, SlotBytes)
	canary(r.id, 0, canaryRow)
	require.NoError(t, dev.Write(r.dev, canaryRow))
	l := &lease{req: r, kind: readiness.Fetch, blocks: 1, needed: [][]int{{0}},
		backend: contract.Delivered{Served: contract.NewNameSet(name)}}
	r.fetch = l

	slot, ok := mem.Row(0, 0)
	require.True(t, ok)
	content(name, slot)
	require.NoError(t, s.CopyHtoD(r.dev, slot[:32])) // layer 0 only
	_, err = s.Record()
	require.NoError(t, err)

	chk.readLayer(dev, l, 0) // the copy takes 1ms; no time has passed
	assert.Equal(t, 1, chk.layersRead)
	assert.Equal(t, 1, chk.layersReadEarly, "read before the copy landed")
	assert.Equal(t, 1, chk.corruptLayers, "its bytes were still the canary")

	chk.readLayer(dev, l, 1) // never copied at all
	assert.Equal(t, 2, chk.layersReadEarly, "a layer whose copy was never queued")

	clock.Advance(time.Millisecond)
	chk.readLayer(dev, l, 0)
	assert.Equal(t, 3, chk.layersRead)
	assert.Equal(t, 2, chk.layersReadEarly, "landed: the read is clean")
	assert.Equal(t, 2, chk.corruptLayers)
}

// The report of a layerwise run has a section of its own: both passes on
// one plot, each in its colour, the legend right of every line; a run that
// is not layerwise has no such section.
func TestLayerwiseReport(t *testing.T) {
	c := layerwiseSmall()
	c.Requests = 200
	s := run(t, c)
	dir := t.TempDir()
	require.NoError(t, WriteReport(dir, s))
	html, err := os.ReadFile(filepath.Join(dir, ReportIndex))
	require.NoError(t, err)
	assert.Contains(t, string(html), "<h2>Layer by layer</h2>")
	assert.Contains(t, string(html), fmt.Sprintf("%d submitted once every layer landed; %d withdrawn before their last layer", s.PublishesSubmitted, s.PublishesWithdrawn))
	assert.Contains(t, string(html), fmt.Sprintf("The checker found 0 of %d layer saves queued before their compute", s.LayerSaves))
	assert.Contains(t, images(t, dir, ReportIndex), PlotLayerwise)
	paths, texts, widthPt := parseSVG(t, filepath.Join(dir, PlotLayerwise))
	assert.InDelta(t, pageWidthPx*72/96, widthPt, 0.5)
	assert.Equal(t, hex(layerwiseColor), legendSwatch(t, paths, texts, "layer by layer"))
	assert.Equal(t, hex(wholeLeaseColor), legendSwatch(t, paths, texts, "whole lease first"))
	lineMaxX := 0.0
	for _, p := range paths {
		if len(p.xs) > 2 {
			lineMaxX = max(lineMaxX, slices.Max(p.xs))
		}
	}
	for _, tx := range texts {
		if tx.s == "layer by layer" || tx.s == "whole lease first" {
			assert.Greater(t, tx.x, lineMaxX, "legend entry %q over a line", tx.s)
		}
	}

	plain := small()
	plain.Requests = 50
	dir = t.TempDir()
	require.NoError(t, WriteReport(dir, run(t, plain)))
	html, err = os.ReadFile(filepath.Join(dir, ReportIndex))
	require.NoError(t, err)
	assert.NotContains(t, string(html), "Layer by layer")
	assert.NoFileExists(t, filepath.Join(dir, PlotLayerwise))
}

// publishRig is a checker following layerwise publishes on a simulated
// device whose copies and compute take whole milliseconds: one layer group
// of one block, layers 0 and 1 of 32 bytes each, a layer's copy 1ms.
type publishRig struct {
	t       *testing.T
	cfg     Config
	clock   *sim.ManualClock
	dev     *sim.Device
	copies  *stream // the engine's copy stream, through the checker
	compute *sim.Stream
	mem     *staging.Memory
	chk     *checker
}

func newPublishRig(t *testing.T) *publishRig {
	cfg := Defaults().WithLayerwiseDefaults()
	cfg.Groups, cfg.Blocks, cfg.LayersPerGroup = 1, 1, 2
	cfg.CopyBandwidth = 32 / time.Millisecond.Seconds()
	clock := sim.NewManualClock(epoch)
	dev, err := sim.New(0, 1<<12, sim.WithBandwidth(clock, cfg.CopyBandwidth))
	require.NoError(t, err)
	inner, err := dev.NewStream()
	require.NoError(t, err)
	cs, err := dev.NewStream()
	require.NoError(t, err)
	mem, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 4, SlotBytes: SlotBytes})
	require.NoError(t, err)
	chk := newChecker(mem)
	chk.layerwise(cfg, inner)
	chk.publishes(cs.(*sim.Stream))
	return &publishRig{t: t, cfg: cfg, clock: clock, dev: dev, copies: &stream{inner: inner, chk: chk, mu: &sync.Mutex{}},
		compute: cs.(*sim.Stream), mem: mem, chk: chk}
}

// publish starts request id's publish of its one row, which holds the
// canary, staged in slot id.
func (p *publishRig) publish(id int) *lease {
	var name contract.Name
	name[0] = byte(id)
	r := &request{id: id, names: [][]contract.Name{{name}}}
	var err error
	r.dev, err = p.dev.Alloc(SlotBytes)
	require.NoError(p.t, err)
	p.chk.request(r, 1)
	row := make([]byte, SlotBytes)
	canary(r.id, 0, row)
	require.NoError(p.t, p.dev.Write(r.dev, row))
	r.pub = &lease{req: r, kind: readiness.Publish, blocks: 1, needed: [][]int{{0}}}
	return r.pub
}

// computeLayer queues layer k of l's pass as the simulation does, and tells
// the checker its event.
func (p *publishRig) computeLayer(l *lease, k int) gpu.Event {
	lw := &layerwise{cfg: p.cfg, compute: time.Millisecond, save: p.compute}
	ev, err := lw.computeLayer(l.req, 0, k, lw.output(l.req, 0))
	require.NoError(p.t, err)
	p.chk.computed(l.req, k, ev)
	return ev
}

func (p *publishRig) slot(l *lease) []byte {
	row, ok := p.mem.Row(0, l.req.id)
	require.True(p.t, ok)
	return row
}

// save queues layer k's copy device→staging.
func (p *publishRig) save(l *lease, k int) {
	require.NoError(p.t, p.copies.CopyDtoH(p.slot(l)[k*32:(k+1)*32], l.req.dev+gpu.DevicePtr(k*32)))
}

func (p *publishRig) record() gpu.Event {
	ev, err := p.copies.Record()
	require.NoError(p.t, err)
	return ev
}

// land advances the clock and asks the copy stream, as the engine does,
// whether ev completed.
func (p *publishRig) land(ev gpu.Event) {
	p.clock.Advance(10 * time.Millisecond)
	st, err := p.copies.Query(ev)
	require.NoError(p.t, err)
	require.Equal(p.t, gpu.Complete, st)
}

func (p *publishRig) submit(l *lease, units ...contract.Unit) {
	ext, err := contract.NewCacheExtent([]byte("publish"), units, false)
	require.NoError(p.t, err)
	p.chk.submittedPublish(l, ext)
}

func unitOf(l *lease) contract.Unit {
	return contract.Unit{Name: l.req.names[0][0], LocalGroup: 0, Local: l.req.id}
}

// The checker's publish oracle is the device's: which compute event each
// layer's save must follow, whether the copy stream was put behind it (or
// it had completed) when the save was queued, whether the save's event
// completed, and what the slot holds. Fed a publish whose layer was saved
// without waiting for its compute — the simulated device then stages the
// canary the compute had not yet overwritten — and one whose layer was
// never computed, it counts both saves early and the unit incomplete; a
// publish whose saves waited for their compute is clean; a publish handed
// to the backend without its unit, or a save that never landed, is caught.
func TestCheckerCatchesALayerSavedBeforeItWasComputed(t *testing.T) {
	p := newPublishRig(t)

	early := p.publish(1)
	p.computeLayer(early, 0) // 1ms of compute, then its output written
	p.save(early, 0)         // not behind the compute event
	p.save(early, 1)         // layer 1 never computed at all
	p.land(p.record())       // the copy engine runs before the compute stream is asked
	assert.Equal(t, 2, p.chk.savesEarly)
	assert.Equal(t, 2, p.chk.layerSaves)
	want := make([]byte, SlotBytes)
	canary(early.req.id, 0, want)
	assert.Equal(t, want, p.slot(early), "the saves staged the canary: the compute had not written the row")
	p.submit(early, unitOf(early))
	assert.Equal(t, 1, p.chk.publishesSeen)
	assert.Equal(t, 1, p.chk.unitsIncomplete)

	good := p.publish(2)
	for k := range 2 {
		require.NoError(t, p.copies.Wait(p.computeLayer(good, k)))
		p.save(good, k)
	}
	p.land(p.record())
	content(good.req.names[0][0], want)
	assert.Equal(t, want, p.slot(good), "behind the compute, the saves staged what it produced")
	p.submit(good, unitOf(good))
	assert.Equal(t, 2, p.chk.savesEarly, "saves behind their compute are not early")
	assert.Equal(t, 1, p.chk.unitsIncomplete)

	// A save queued after its compute completed needs no wait.
	late := p.publish(3)
	p.computeLayer(late, 0)
	p.computeLayer(late, 1)
	p.clock.Advance(10 * time.Millisecond)
	p.save(late, 0)
	p.save(late, 1)
	pending := p.record()
	p.submit(late, unitOf(late)) // handed over before its saves landed
	assert.Equal(t, 2, p.chk.savesEarly)
	assert.Equal(t, 2, p.chk.unitsIncomplete, "a save not landed yet")
	p.land(pending)
	p.submit(late, unitOf(late))
	assert.Equal(t, 2, p.chk.unitsIncomplete, "landed: clean")

	p.submit(good) // its one unit left out
	assert.Equal(t, 3, p.chk.unitsIncomplete, "a row of the publish the backend was not handed")

	p.slot(good)[40] ^= 0xFF // something else wrote into the slot after the save
	p.submit(good, unitOf(good))
	assert.Equal(t, 4, p.chk.unitsIncomplete, "the staged bytes are not what the compute produced")
}

// A withdrawn publish's slots may return only once every save queued for it
// landed, and the backend must never see it: the checker counts a return
// with a save still in flight (or one with no event after it yet), and a
// withdrawn publish submitted; a return after its saves landed is clean.
func TestCheckerCatchesAWithdrawnPublishFreedEarlyOrSubmitted(t *testing.T) {
	p := newPublishRig(t)
	l := p.publish(1)
	l.withdrawn = true
	require.NoError(t, p.copies.Wait(p.computeLayer(l, 0)))
	p.save(l, 0)
	p.chk.withdrawnEnded(l)
	assert.Equal(t, 1, p.chk.withdrawnEarly, "a save with no event after it")
	ev := p.record()
	p.chk.withdrawnEnded(l)
	assert.Equal(t, 2, p.chk.withdrawnEarly, "a save still in flight")
	p.land(ev)
	p.chk.withdrawnEnded(l)
	assert.Equal(t, 2, p.chk.withdrawnEarly, "every save landed: clean")
	assert.Equal(t, 3, p.chk.withdrawals)

	assert.Zero(t, p.chk.withdrawnSent)
	p.submit(l, unitOf(l))
	assert.Equal(t, 1, p.chk.withdrawnSent, "the backend saw a withdrawn publish")
}

// Layer by layer, a run's publishes save each layer as it is computed: the
// checker follows every save, finds none queued before its compute, no unit
// handed with a layer missing, and the withdrawn publishes (some, at the
// workload's fixed rate) never submitted nor freed before their saves
// landed; the store holds only what the passes computed.
func TestLayerwisePublishesSaveEachLayer(t *testing.T) {
	s := run(t, layerwiseSmall())
	assert.True(t, s.Safe())
	assert.True(t, s.Complete())
	assert.Positive(t, s.PublishesSubmitted)
	assert.Positive(t, s.PublishesWithdrawn)
	assert.Less(t, s.PublishesWithdrawn, s.PublishesSubmitted/4, "a small share")
	assert.GreaterOrEqual(t, s.LayerSaves, s.PublishesSubmitted*layerwiseSmall().LayersPerGroup, "every row of a submitted publish saves each of its group's layers")
	assert.Zero(t, s.SaveCopiesEarly)
	assert.Zero(t, s.UnitsIncomplete)
	assert.Zero(t, s.WithdrawnSubmitted)
	assert.Zero(t, s.WithdrawnFreedEarly)
	assert.Zero(t, s.CorruptRows)
	assert.Positive(t, s.RowsVerified)
	assert.Equal(t, s.PublishesWithdrawn, s.Withdrawn, "a withdrawn publish ends with no outcome")
	assert.Equal(t, s.Leases, s.Served+s.Partial+s.Missed+s.Failed+s.Withdrawn, "every lease lent has an outcome or was withdrawn")

	var out strings.Builder
	require.NoError(t, s.WriteTable(&out))
	for _, want := range []string{
		fmt.Sprintf("  withdrawn  %d (layerwise publishes released before their last layer", s.Withdrawn),
		fmt.Sprintf("%d submitted once every layer landed; %d withdrawn before their last layer", s.PublishesSubmitted, s.PublishesWithdrawn),
		fmt.Sprintf("layer saves queued before computed     0 of %d layer saves  ok", s.LayerSaves),
		"units submitted with a layer missing   0  ok",
		"withdrawn publishes submitted          0  ok",
		"  slots back before copies landed      0  ok",
	} {
		assert.Contains(t, out.String(), want)
	}
	// A violation of any of them makes the run unsafe.
	for _, f := range []*int{&s.SaveCopiesEarly, &s.UnitsIncomplete, &s.WithdrawnSubmitted, &s.WithdrawnFreedEarly} {
		*f = 1
		assert.False(t, s.Safe())
		*f = 0
	}
	assert.True(t, s.Safe())
}

// The host runs at most saveDepth layers ahead of the publishes' compute
// stream. With 16 layers of 200µs a publish's pass takes 3.2ms, three
// times the arrival interval: the save stream falls behind for good. Had
// the host queued every pass ahead, the copy stream — the fetches' too —
// would wait behind it until the engine contained the fetches' copies as
// unproven; paced, nothing is contained and every publish is saved whole.
func TestLayerwisePublishesBehindASlowComputeStreamContainNothing(t *testing.T) {
	c := layerwiseSmall()
	c.Requests, c.Groups, c.LayersPerGroup, c.ComputePerLayer, c.CopyBandwidth = 60, 1, 16, 200*time.Microsecond, 1e6
	s := run(t, c)
	assert.True(t, s.Safe())
	assert.False(t, s.CapacityLost(), "%d slots quarantined: %v", s.SlotsQuarantined, s.ContainmentReasons)
	assert.Positive(t, s.PublishesSubmitted)
	assert.Zero(t, s.UnitsIncomplete)
}

// hastyManager reports every layer of a publish computed "and synchronised
// already" (the zero Event) the moment its compute is queued: the engine
// then queues the layer's saves at once, not behind the compute.
type hastyManager struct{ manager }

func (h hastyManager) computed(l *lease, k int, _ gpu.Event) error {
	return h.manager.computed(l, k, gpu.Event{})
}

// A manager that reports layers computed before they are finds the whole
// chain against it: the checker counts saves queued before their compute,
// units handed to the backend without the computed bytes, and the store
// holding canaries; the run is unsafe.
func TestLayerwiseRunCatchesAManagerThatSavesBeforeComputing(t *testing.T) {
	c := layerwiseSmall()
	c.Requests = 100
	s, err := runWith(context.Background(), c, nil, func(m manager) manager { return hastyManager{m} })
	require.NoError(t, err)
	assert.False(t, s.Safe())
	assert.Positive(t, s.SaveCopiesEarly)
	assert.Positive(t, s.UnitsIncomplete)
	assert.Positive(t, s.CorruptRows, "the store holds what the early saves staged")
}
