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

// amCSV is ucx_perftest 1.13.1's -t ucp_am_bw -f -v output over sm, 64 KiB
// messages: the same header, its row without the leading space.
const amCSV = "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr\n" +
	"2000,7.159,7.431,7.431,8410.68,8410.68,134571,134571\n"

func TestParsePerftest(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      float64 // bytes/s; 0: an error containing err
		iters     int64   // 0: 500
		err       string
	}{
		{name: "final row", out: perftestCSV, want: 2000 * (1 << 20)},
		{name: "ucp_am_bw's row", out: amCSV, want: 8410.68 * (1 << 20), iters: 2000},
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
			want := tc.iters
			if want == 0 {
				want = 500
			}
			assert.Equal(t, want, got.Iterations)
		})
	}
}

// FuzzParsePerftest: whatever the output, the parser answers an error or a
// positive, finite bandwidth with positive iterations — never a panic.
func FuzzParsePerftest(f *testing.F) {
	f.Add([]byte(perftestCSV))
	f.Add([]byte("warn\n" + perftestCSV))
	f.Add([]byte(amCSV))
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

// TestPerftestConfig: the test a config names reaches the client's command
// line (put by default), and what ucx_perftest would run as something else
// is refused before any process starts.
func TestPerftestConfig(t *testing.T) {
	ok := PerftestConfig{Transports: "sm", Size: 64 << 10, Iterations: 10, Warmup: 1}
	with := func(f func(*PerftestConfig)) PerftestConfig { c := ok; f(&c); return c }
	for _, tc := range []struct {
		name string
		cfg  PerftestConfig
		test string // the -t expected; "": refused with err
		err  string
	}{
		{name: "put by default", cfg: ok, test: PutBW},
		{name: "put", cfg: with(func(c *PerftestConfig) { c.Test = PutBW }), test: PutBW},
		{name: "active messages", cfg: with(func(c *PerftestConfig) { c.Test = AMBW }), test: AMBW},
		{name: "another test", cfg: with(func(c *PerftestConfig) { c.Test = "ucp_get" }), err: `test "ucp_get"`},
		{name: "a UCT test", cfg: with(func(c *PerftestConfig) { c.Test = "am_bw" }), err: `test "am_bw"`},
		{name: "no size", cfg: with(func(c *PerftestConfig) { c.Size = 0 }), err: "size and iterations > 0"},
		{name: "no iterations", cfg: with(func(c *PerftestConfig) { c.Test = AMBW; c.Iterations = 0 }), err: "size and iterations > 0"},
		{name: "negative warmup", cfg: with(func(c *PerftestConfig) { c.Warmup = -1 }), err: "warmup ≥ 0"},
		{name: "no transports", cfg: with(func(c *PerftestConfig) { c.Transports = "" }), err: "transports expected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.check()
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []string{"127.0.0.1", "-p", "4242", "-t", tc.test, "-s", "65536", "-n", "10", "-w", "1", "-f", "-v"},
				tc.cfg.clientArgs(4242))
		})
	}
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
	am, err := RunPerftest(ctx, PerftestConfig{Test: AMBW, Transports: "tcp", Size: 64 << 10, Iterations: 200, Warmup: 20})
	require.NoError(t, err)
	assert.Equal(t, int64(200), am.Iterations)
	assert.Positive(t, am.BytesPerSec)

	_, err = RunPerftest(ctx, PerftestConfig{Transports: "tcp", Size: 0, Iterations: 1})
	require.Error(t, err, "a size of 0 is refused")
	_, err = RunPerftest(ctx, PerftestConfig{Binary: "no-such-ucx_perftest", Transports: "tcp", Size: 1, Iterations: 1})
	require.ErrorContains(t, err, "apt-get install ucx-utils")
	_, err = RunPerftest(ctx, PerftestConfig{Test: "ucp_put_lat", Transports: "tcp", Size: 1, Iterations: 1})
	require.ErrorContains(t, err, `test "ucp_put_lat"`)
}
