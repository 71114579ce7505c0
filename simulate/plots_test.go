package simulate

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot"
)

// A count axis has whole-number ticks only, labelled as whole numbers, and
// at least two labels, whatever its range: a plot of 0, 1 or 2 leases never
// shows 0.5 of one.
func TestCountAxesHaveWholeNumberTicks(t *testing.T) {
	for _, m := range []plot.Ticker{countTicks{}, log1pTicks{}} {
		for _, hi := range []float64{1, 1.1, 2.2, 3, 4.4, 7, 11, 23, 101, 1234, 50000, 1e6 + 3} {
			labelled := 0
			for _, tk := range m.Ticks(0, hi) {
				assert.Equal(t, math.Trunc(tk.Value), tk.Value, "%T on [0, %v]: tick at %v", m, hi, tk.Value)
				if tk.Label != "" {
					labelled++
					assert.Equal(t, strconv.FormatFloat(tk.Value, 'f', -1, 64), tk.Label, "%T on [0, %v]", m, hi)
				}
			}
			assert.GreaterOrEqual(t, labelled, 2, "%T on [0, %v]: labels", m, hi)
		}
	}
}

// On the log count axis a state of one lease stands clear of zero beside
// one of ten thousand (on a linear axis it would sit at 0.01% of the
// height), and the scale is monotonic from 0 (at the bottom) to the top.
func TestLogCountAxisShowsASmallStateBesideADominantOne(t *testing.T) {
	s := log1pScale{}
	assert.Equal(t, 0.0, s.Normalize(0, 10000, 0))
	assert.InDelta(t, 1.0, s.Normalize(0, 10000, 10000), 1e-12)
	assert.Greater(t, s.Normalize(0, 10000, 1), 0.05, "one lease is visible")
	prev := -1.0
	for _, x := range []float64{0, 1, 2, 5, 10, 100, 1000, 10000} {
		n := s.Normalize(0, 10000, x)
		assert.Greater(t, n, prev, "monotonic at %v", x)
		prev = n
	}

	// The states plot draws on it.
	sum := &Summary{Manager: "kvready", Timeline: []Sample{
		{At: time.Millisecond, States: []StateCount{{State: "requested", Leases: 10000}, {State: "granted", Leases: 1}}},
		{At: 2 * time.Millisecond, States: []StateCount{{State: "requested", Leases: 9000}, {State: "granted", Leases: 2}}},
	}}
	p, _ := statesPlot(sum)
	require.NotNil(t, p)
	assert.IsType(t, log1pScale{}, p.Y.Scale)
	assert.Greater(t, p.Y.Scale.Normalize(p.Y.Min, p.Y.Max, 1), 0.05)
}

// The latency histograms are in milliseconds, as the summary is, with their
// count on the log axis: the few fetches past the deadline show as bars
// well clear of zero beside the thousands before it, and the deadline's
// label says how many there were.
func TestLatencyHistogramShowsTheTailPastTheDeadline(t *testing.T) {
	var ds []time.Duration
	for range 5000 {
		ds = append(ds, time.Millisecond)
	}
	ds = append(ds, 30*time.Millisecond, 31*time.Millisecond, 40*time.Millisecond)
	p := histPlot("r", "virtual ms", ds, 10*time.Millisecond)
	assert.Equal(t, "virtual ms", p.X.Label.Text)
	assert.IsType(t, log1pScale{}, p.Y.Scale)
	assert.GreaterOrEqual(t, p.X.Max, 40.0, "the axis reaches the slowest fetch, in ms")
	assert.Less(t, p.X.Max, 100.0, "in ms, not µs")
	h, err := latencyHist(ds)
	require.NoError(t, err)
	tail := 0.0
	for _, b := range h.Bins {
		if b.Min >= 10 && b.Weight > 0 {
			tail += b.Weight
			assert.Greater(t, p.Y.Scale.Normalize(p.Y.Min, p.Y.Max, b.Weight), 0.05, "a tail bar of %v stands clear of zero", b.Weight)
		}
	}
	assert.Equal(t, 3.0, tail, "every fetch past the deadline is in a bar")
	dir := t.TempDir()
	require.NoError(t, savePlots(filepath.Join(dir, "r.svg"), reportPlotHeight, []*plot.Plot{p}, []*plot.Legend{nil}))
	svg, err := os.ReadFile(filepath.Join(dir, "r.svg"))
	require.NoError(t, err)
	assert.Contains(t, string(svg), "deadline 10.00ms: 3 fetches slower, timed out")
	assert.Equal(t, "deadline 10.00ms: 1 fetch slower, timed out", deadlineLabel(10*time.Millisecond, 1))
}
