package simulate

import (
	"context"
	"fmt"
	"time"
)

// LayerFigureCase is one case of SPEC §5's layer figure: L layers whose copy
// takes T each on an idle copy engine and whose compute takes C.
type LayerFigureCase struct {
	Name    string
	Layers  int
	T, C    time.Duration
	Fetches int // fetches measured, each alone on the device
}

// LayerFigureCases are the figure's three cases, T < C, T = C and T > C,
// with 8 layers. T and C are whole rounds of the virtual clock, so every
// copy and compute ends on a round and what the run measures is exact.
var LayerFigureCases = []LayerFigureCase{
	{Name: "T<C", Layers: 8, T: time.Millisecond, C: 2 * time.Millisecond, Fetches: 4},
	{Name: "T=C", Layers: 8, T: 2 * time.Millisecond, C: 2 * time.Millisecond, Fetches: 4},
	{Name: "T>C", Layers: 8, T: 2 * time.Millisecond, C: time.Millisecond, Fetches: 4},
}

// Config returns the run that measures the case: one layer group of
// Layers layers, one block a prompt, every prompt the same (so that every
// fetch after the first is served whole), no faults, and requests far
// enough apart that each fetch has the copy engine and the compute
// streams to itself; the copy bandwidth makes a layer's copy take T.
func (fc LayerFigureCase) Config() Config {
	c := Defaults().WithoutFaults().WithLayerwiseDefaults()
	c.Requests = fc.Fetches + 1 // the first one misses, computes and publishes
	c.Blocks, c.Groups, c.LayersPerGroup = 1, 1, fc.Layers
	c.Share, c.Families, c.LatencySigma = 1, 1, 0
	c.ComputePerLayer = fc.C
	c.CopyBandwidth = float64(c.layerBytes()) / fc.T.Seconds()
	// The publish of a whole row takes Layers·T on the copy engine: the
	// next request arrives well after it, and after the last layer.
	c.Arrival = 2*time.Duration(fc.Layers)*(fc.T+fc.C) + 4*c.LatencyMedian
	return c
}

// LayerFigureResult is what a case's run measured, beside its bounds.
type LayerFigureResult struct {
	LayerFigureCase
	// Bound is T + (L−1)·max(T, C) + C; WholeBound is L·T + L·C.
	Bound, WholeBound time.Duration
	// LastLayer and WholeLease are the slowest of the fetches measured:
	// from the round their copies were issued to the last layer computed,
	// layer by layer and after the whole lease was ready.
	LastLayer, WholeLease time.Duration
	Summary               *Summary
}

// MeasureLayerFigure runs the case and returns what it measured. A run that
// is unsafe, or measures fewer fetches than the case asks, is an error.
func MeasureLayerFigure(ctx context.Context, fc LayerFigureCase) (LayerFigureResult, error) {
	res := LayerFigureResult{LayerFigureCase: fc}
	res.Bound, res.WholeBound = PipelineBound(fc.Layers, fc.T, fc.C)
	s, err := Run(ctx, fc.Config(), nil)
	if err != nil {
		return res, err
	}
	res.Summary = s
	if !s.Safe() {
		return res, fmt.Errorf("simulate: layer figure %s: the checker found a violation (%d layers read early, %d corrupt)", fc.Name, s.LayersReadEarly, s.CorruptLayers)
	}
	if s.Forwards != fc.Fetches || len(s.LastLayerLatencies) == 0 {
		return res, fmt.Errorf("simulate: layer figure %s: %d forward passes measured (%d failed); want %d", fc.Name, s.Forwards, s.ForwardsFailed, fc.Fetches)
	}
	res.LastLayer = s.LastLayerLatencies[len(s.LastLayerLatencies)-1]
	res.WholeLease = s.WholeLeaseLatencies[len(s.WholeLeaseLatencies)-1]
	return res, nil
}
