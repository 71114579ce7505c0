package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMetricsOverheadFigure(t *testing.T) {
	assert.Equal(t, "BenchmarkLifecycle/engine-metrics", trimProcs("BenchmarkLifecycle/engine-metrics-2"))
	for _, tc := range []struct {
		withMetrics string
		want        string
	}{
		{"1030", "| metrics: engine with a Prometheus collector ÷ engine | 1.03 × | ≤ 1.05× | yes |"},
		{"1100", "| metrics: engine with a Prometheus collector ÷ engine | 1.10 × | ≤ 1.05× | no |"},
	} {
		in := "BenchmarkLifecycle/engine-256-2 1000000 1000 ns/op 4 B/op 0 allocs/op\n" +
			"BenchmarkLifecycle/engine-metrics-2 1000000 " + tc.withMetrics + " ns/op 4 B/op 0 allocs/op\n"
		rep, err := parse(strings.NewReader(in))
		require.NoError(t, err)
		var out bytes.Buffer
		render(&out, rep, time.Unix(0, 0), "go", 2)
		assert.Contains(t, out.String(), tc.want)
	}
}
