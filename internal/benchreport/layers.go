package main

import (
	"fmt"
	"io"
)

// layerCases are the sub-benchmarks of simulate's BenchmarkLayerFigure
// (simulate.LayerFigureCases): SPEC §5's layer figure for T < C, T = C and
// T > C.
var layerCases = []string{"T<C", "T=C", "T>C"}

const layerFigure = "BenchmarkLayerFigure/"

func init() {
	for _, c := range layerCases {
		name := layerFigure + c
		figures = append(figures, figure{
			what:    fmt.Sprintf("layer by layer, %s: last layer computed ÷ T + (L−1)·max(T, C) + C (virtual time)", c),
			value:   ratio(name, "ms-last-layer", name, "ms-pipeline-bound"),
			unit:    "×",
			goal:    "≤ 1.05×",
			met:     func(v float64) bool { return v <= 1.05 },
			measure: name,
		})
	}
	figures = append(figures, figure{
		what:    "asking per-layer readiness (64 layers): allocations",
		value:   value("BenchmarkLayerReadiness", "allocs/op"),
		unit:    "allocs/op",
		goal:    "0",
		met:     func(v float64) bool { return v == 0 },
		measure: "BenchmarkLayerReadiness",
	})
}

// renderLayers writes the layer figure's section: for each case, what the
// run measured beside the pipeline's bound and the whole lease's.
func renderLayers(w io.Writer, r *report) {
	fmt.Fprintln(w, "## Layer by layer (SPEC §4 rule 16)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "`BenchmarkLayerFigure` (package simulate) runs `kvready simulate --layerwise` on one layer group of")
	fmt.Fprintln(w, "L layers, each fetch served whole and alone on the simulated device: a layer's copy takes T on the")
	fmt.Fprintln(w, "copy engine and its compute C on the compute stream. Layer by layer, the manager computes layer l")
	fmt.Fprintln(w, "once the engine says it is ready (`LayerReadiness`); whole lease first, every layer once the lease")
	fmt.Fprintln(w, "is. Times run from the round the engine issued the copies to the last layer computed, in virtual")
	fmt.Fprintln(w, "time: exact, the same at every run (T and C are whole rounds of the simulation's 50 µs clock).")
	fmt.Fprintln(w, "`TestLayerFigureWithinTheBound` asserts the SPEC's 1.05× for the three cases.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| case | L | T | C | last layer computed, layer by layer | T + (L−1)·max(T, C) + C | whole lease first | L·T + L·C |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, c := range layerCases {
		name := layerFigure + c
		cell := func(unit, suffix string) string {
			v, ok := r.metric(name, unit)
			if !ok {
				return "not measured"
			}
			return num(v) + suffix
		}
		layers := "not measured"
		if v, ok := r.metric(name, "layers"); ok {
			layers = fmt.Sprintf("%.0f", v)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", c, layers, cell("ms-T", " ms"), cell("ms-C", " ms"),
			cell("ms-last-layer", " ms"), cell("ms-pipeline-bound", " ms"), cell("ms-whole-lease", " ms"), cell("ms-whole-bound", " ms"))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "On a workload with faults, prefixes of random length and requests queueing behind each other,")
	fmt.Fprintln(w, "`kvready simulate --layerwise` reports the same comparison per fetch (docs/simulate.md).")
	fmt.Fprintln(w)
}
