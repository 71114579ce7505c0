package simulate

import (
	"context"
	"testing"
)

// BenchmarkRun measures a whole simulated run, checker included, per lease:
// the engine and the naive foil side by side on the same workload.
func BenchmarkRun(b *testing.B) {
	for _, naive := range []bool{false, true} {
		name := "engine"
		if naive {
			name = "naive"
		}
		b.Run(name, func(b *testing.B) {
			c := Defaults()
			c.Requests = 500
			c.Naive = naive
			leases := 0
			for b.Loop() {
				s, err := Run(context.Background(), c, nil)
				if err != nil {
					b.Fatal(err)
				}
				leases += s.Leases
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(leases), "ns/lease")
		})
	}
}
