package ucxfigure

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const perftestCSV = "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr\n" +
	" 500,30.575,34.998,34.998,1785.82,2000.00,28573,28573\n"

func TestParsePerftest(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      float64 // bytes/s; 0: an error containing err
		err       string
	}{
		{name: "final row", out: perftestCSV, want: 2000 * (1 << 20)},
		{name: "UCX warnings before", out: "[1.2] [vm:1] ucp_context.c:1 UCX WARN something\n" + perftestCSV, want: 2000 * (1 << 20)},
		{name: "no newline at the end", out: strings.TrimSuffix(perftestCSV, "\n"), want: 2000 * (1 << 20)},
		{name: "the table, not CSV", out: "Final:   500  26.8 30.4 30.4 2051.33 2051.33 32821 32821\n", err: "no CSV header"},
		{name: "empty", out: "", err: "no CSV header"},
		{name: "header only", out: strings.SplitAfter(perftestCSV, "\n")[0], err: "0 lines after"},
		{name: "two rows", out: perftestCSV + " 500,1,1,1,1,1,1,1\n", err: "2 lines after"},
		{name: "two headers", out: perftestCSV + perftestCSV, err: "two CSV headers"},
		{name: "short row", out: strings.Replace(perftestCSV, ",28573,28573", "", 1), err: "6 fields"},
		{name: "zero bandwidth", out: strings.Replace(perftestCSV, "2000.00", "0", 1), err: "overall_bw"},
		{name: "NaN bandwidth", out: strings.Replace(perftestCSV, "2000.00", "NaN", 1), err: "overall_bw"},
		{name: "infinite bandwidth", out: strings.Replace(perftestCSV, "2000.00", "+Inf", 1), err: "overall_bw"},
		{name: "bad iterations", out: strings.Replace(perftestCSV, " 500", " -1", 1), err: "iterations"},
		{name: "bad latency", out: strings.Replace(perftestCSV, "30.575", "x", 1), err: "50.0_percentile_lat"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePerftest([]byte(tc.out))
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				assert.Zero(t, got)
				return
			}
			require.NoError(t, err)
			assert.InDelta(t, tc.want, got.BytesPerSec, 1e-6)
			assert.Equal(t, int64(500), got.Iterations)
		})
	}
}

// FuzzParsePerftest: whatever the output, the parser answers an error or a
// positive, finite bandwidth with positive iterations — never a panic.
func FuzzParsePerftest(f *testing.F) {
	f.Add([]byte(perftestCSV))
	f.Add([]byte("warn\n" + perftestCSV))
	f.Add([]byte("iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr\n1,1,1,1,1,1e308,1,1"))
	f.Fuzz(func(t *testing.T, out []byte) {
		got, err := ParsePerftest(out)
		if err != nil {
			require.Zero(t, got)
			return
		}
		require.Positive(t, got.Iterations)
		require.Positive(t, got.BytesPerSec)
		require.False(t, math.IsInf(got.BytesPerSec, 0), "finite")
	})
}

// TestRunPerftest runs the anchor for real, briefly, over tcp: the server
// and the client between two processes, the client's bandwidth parsed. A
// missing ucx_perftest fails the test with how to install it.
func TestRunPerftest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := RunPerftest(ctx, PerftestConfig{Transports: "tcp", Size: 64 << 10, Iterations: 200, Warmup: 20})
	require.NoError(t, err)
	assert.Equal(t, int64(200), p.Iterations)
	assert.Positive(t, p.BytesPerSec)

	_, err = RunPerftest(ctx, PerftestConfig{Transports: "tcp", Size: 0, Iterations: 1})
	require.Error(t, err, "a size of 0 is refused")
	_, err = RunPerftest(ctx, PerftestConfig{Binary: "no-such-ucx_perftest", Transports: "tcp", Size: 1, Iterations: 1})
	require.ErrorContains(t, err, "apt-get install ucx-utils")
}
