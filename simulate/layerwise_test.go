package simulate

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/contract"
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
		"whole_lease_p50_us", "whole_lease_p99_us", "speedup", "layers_read", "layers_read_early", "corrupt_layers"} {
		assert.Contains(t, got.Layerwise, k)
	}
	assert.Equal(t, float64(s.Forwards), got.Layerwise["forwards"])
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
