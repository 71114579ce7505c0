package simulate

import (
	"context"
	"testing"
	"time"
)

// BenchmarkLayerFigure is SPEC §5's layer figure (LayerFigureCases: T < C,
// T = C, T > C, 8 layers), for docs/performance.md through benchreport. Its
// metrics are virtual time, exact and the same at every run, not a timing:
// the last layer computed layer by layer (ms-last-layer) beside
// T + (L−1)·max(T, C) + C (ms-pipeline-bound), and whole lease first
// (ms-whole-lease) beside L·T + L·C (ms-whole-bound), with L, T and C.
// TestLayerFigureWithinTheBound asserts the bound.
func BenchmarkLayerFigure(b *testing.B) {
	msOf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, fc := range LayerFigureCases {
		b.Run(fc.Name, func(b *testing.B) {
			var res LayerFigureResult
			for b.Loop() {
				var err error
				if res, err = MeasureLayerFigure(context.Background(), fc); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(fc.Layers), "layers")
			b.ReportMetric(msOf(fc.T), "ms-T")
			b.ReportMetric(msOf(fc.C), "ms-C")
			b.ReportMetric(msOf(res.LastLayer), "ms-last-layer")
			b.ReportMetric(msOf(res.Bound), "ms-pipeline-bound")
			b.ReportMetric(msOf(res.WholeLease), "ms-whole-lease")
			b.ReportMetric(msOf(res.WholeBound), "ms-whole-bound")
		})
	}
}
