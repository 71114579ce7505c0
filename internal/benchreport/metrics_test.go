package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLifecycleFiguresAreSideBySide: the runner's ratios to the core, the
// collector's to the runner and eight callers' to one come from the side-by-side sub-benchmark's own
// ratios (the median of the runs), not from the sub-benchmarks each run in
// its own second, which the input gives other values.
func TestLifecycleFiguresAreSideBySide(t *testing.T) {
	assert.Equal(t, "BenchmarkLifecycle/engine-metrics", trimProcs("BenchmarkLifecycle/engine-metrics-2"))
	seq := "BenchmarkLifecycle/core-2 1000000 1000 ns/op 0 B/op 0 allocs/op\n" +
		"BenchmarkLifecycle/core-one-2 1000000 3000 ns/op 0 B/op 0 allocs/op\n" +
		"BenchmarkLifecycle/engine-2 1000000 4000 ns/op 0 B/op 0 allocs/op\n" +
		"BenchmarkLifecycle/engine-256-2 1000000 2000 ns/op 0 B/op 0 allocs/op\n" +
		"BenchmarkLifecycle/engine-metrics-2 1000000 4000 ns/op 0 B/op 0 allocs/op\n"
	sbs := func(e256, engine, metrics string) string {
		return "BenchmarkLifecycle/side-by-side-2 100 7000000 ns/op 1000 ns/lease-core " +
			e256 + " x-engine-256 1.07 x-engine-256-cold " + engine + " x-engine 1.60 x-core-one 1.14 x-engine-core-one " +
			metrics + " x-metrics 1.02 x-metrics-cold\n"
	}
	callers := func(x string) string {
		return "BenchmarkConcurrentCallers/callers=1-2 1000 1000 ns/op 1000000 leases/s\n" +
			"BenchmarkConcurrentCallers/callers=8-2 1000 2000 ns/op 500000 leases/s\n" +
			"BenchmarkConcurrentCallers/side-by-side-2 100 6000000 ns/op " + x + " x-callers-8\n"
	}
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"met", seq + sbs("1.08", "1.45", "1.03") + callers("0.87"), []string{
			"| concurrent callers (rule 18): leases/s with 8 goroutines calling one engine ÷ with one | 0.87 × | ≥ 0.8× | yes |",
			"| lease lifecycle: the runner, 256 leases in flight a round ÷ the core | 1.08 × | ≤ 1.1× | yes |",
			"| lease lifecycle: the same, the first round of each way's four (right after another way's), in view | 1.07 × | — | — |",
			"| lease lifecycle: the runner, one lease in flight ÷ the core | 1.45 × | ≤ 1.5× | yes |",
			"| lease lifecycle: the core driven one lease a round ÷ the core (256 a round), in view | 1.60 × | — | — |",
			"| lease lifecycle: the runner, one lease in flight ÷ the core driven one lease a round, in view | 1.14 × | — | — |",
			"| metrics: engine with a Prometheus collector ÷ engine | 1.03 × | ≤ 1.05× | yes |",
		}},
		{"not met, the median of three runs", seq + sbs("1.30", "1.90", "1.20") + sbs("1.12", "1.80", "1.10") + sbs("1.11", "1.70", "1.00") + callers("0.70"), []string{
			"| concurrent callers (rule 18): leases/s with 8 goroutines calling one engine ÷ with one | 0.70 × | ≥ 0.8× | no |",
			"| lease lifecycle: the runner, 256 leases in flight a round ÷ the core | 1.12 × | ≤ 1.1× | no |",
			"| lease lifecycle: the runner, one lease in flight ÷ the core | 1.80 × | ≤ 1.5× | no |",
			"| metrics: engine with a Prometheus collector ÷ engine | 1.10 × | ≤ 1.05× | no |",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := parse(strings.NewReader(tc.in))
			require.NoError(t, err)
			var out bytes.Buffer
			render(&out, rep, time.Unix(0, 0), "go", 2)
			for _, w := range tc.want {
				assert.Contains(t, out.String(), w)
			}
		})
	}
}
