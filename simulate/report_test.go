package simulate

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/fsm"
)

var imgSrc = regexp.MustCompile(`<img src="([^"]+)"`)

// images returns the plot files a page shows, in order, after checking that
// each exists and draws something.
func images(t *testing.T, dir, page string) []string {
	t.Helper()
	html, err := os.ReadFile(filepath.Join(dir, page))
	require.NoError(t, err)
	assert.NotContains(t, string(html), "http://", "the page opens offline")
	var files []string
	for _, m := range imgSrc.FindAllStringSubmatch(string(html), -1) {
		data, err := os.ReadFile(filepath.Join(dir, m[1]))
		require.NoError(t, err, m[1])
		assert.Contains(t, string(data), "<svg", m[1])
		assert.Regexp(t, `<path d="M[^"]*L`, string(data), "%s draws lines or bars", m[1])
		files = append(files, m[1])
	}
	return files
}

// A single run's page: the safety plot first, every plot with something to
// show, and a sentence where there is nothing (the naive manager proves no
// fence, so it has no fence latency).
func TestWriteReport(t *testing.T) {
	for _, naive := range []bool{false, true} {
		c := small()
		c.Requests = 80
		c.Naive = naive
		s := run(t, c)
		dir := filepath.Join(t.TempDir(), "report")
		require.NoError(t, WriteReport(dir, s))
		files := images(t, dir, ReportIndex)
		require.NotEmpty(t, files)
		assert.Equal(t, PlotSafety, files[0], "the safety result comes first")
		assert.Contains(t, files, PlotStates)
		assert.Contains(t, files, PlotReadiness)
		html, _ := os.ReadFile(filepath.Join(dir, ReportIndex))
		if naive {
			assert.NotContains(t, files, PlotFence, "no empty chart")
			assert.Contains(t, string(html), "never waits for the backend&#39;s access to be proven over")
		} else {
			assert.Contains(t, files, PlotFence)
		}
		assert.NotContains(t, string(html), "<nav>", "one run: no links to other pages")
	}
}

// The comparison: one workload, two pages that link to each other, both
// opening with one plot of both runs' safety counters.
func TestWriteComparison(t *testing.T) {
	c := small()
	c.Requests = 300
	engine := run(t, c)
	c.Naive = true
	naive := run(t, c)
	require.Positive(t, naive.RecycledBeforeFence, "the naive run shows the bug")
	dir := t.TempDir()
	require.NoError(t, WriteComparison(dir, engine, naive))
	for _, pg := range []struct{ file, other string }{{ReportIndex, "naive.html"}, {"naive.html", ReportIndex}} {
		files := images(t, dir, pg.file)
		require.NotEmpty(t, files)
		assert.Equal(t, PlotSafety, files[0], pg.file)
		html, err := os.ReadFile(filepath.Join(dir, pg.file))
		require.NoError(t, err)
		assert.Contains(t, string(html), `<a href="`+pg.other+`">`, "%s links to %s", pg.file, pg.other)
		assert.Contains(t, string(html), "the same fault draw for each request")
		assert.Regexp(t, `outcome counts (agree|differ: .* Why: )`, string(html))
	}
	svg, err := os.ReadFile(filepath.Join(dir, PlotSafety))
	require.NoError(t, err)
	assert.Contains(t, string(svg), "kvready manager: 0")
	assert.Contains(t, string(svg), "naive manager: "+itoa(naive.RecycledBeforeFence))
	assert.Contains(t, string(svg), "naive manager: "+itoa(naive.CorruptRows))
	_, err = os.Stat(filepath.Join(dir, "naive-"+PlotStates))
	assert.NoError(t, err, "the second run's plots carry its name")

	other := *naive
	other.Seed++
	assert.ErrorContains(t, WriteComparison(t.TempDir(), engine, &other), "different workloads")
}

func itoa(n int) string { return strconv.Itoa(n) }

// The safety series only grow, and end at or below the summary's totals
// (the report draws the totals as the last point).
func TestSafetyTimeline(t *testing.T) {
	c := small()
	c.Naive = true
	s := run(t, c)
	require.NotEmpty(t, s.Timeline)
	prev := Sample{}
	for _, smp := range s.Timeline {
		assert.GreaterOrEqual(t, smp.Recycled, prev.Recycled)
		assert.GreaterOrEqual(t, smp.Corrupt, prev.Corrupt)
		prev = smp
	}
	assert.LessOrEqual(t, prev.Recycled, s.RecycledBeforeFence)
	assert.LessOrEqual(t, prev.Corrupt, s.CorruptRows)
	assert.Positive(t, prev.Recycled, "the naive run recycles during the run, not only at its end")
}

// What the page says about the workload: agreement, a difference only in the
// failure breakdown (polling instants), or in the totals.
func TestSameWorkloadText(t *testing.T) {
	a := &Summary{Manager: "kvready", Requests: 10, Seed: 3, Leases: 12, Served: 5, Partial: 3, Missed: 2, Failed: 2, Timeouts: 1, Cancelled: 1}
	b := *a
	b.Manager = "naive"
	assert.Nil(t, sameWorkload([]*Summary{a}))
	text := strings.Join(sameWorkload([]*Summary{a, &b}), " ")
	assert.Contains(t, text, "same 10 requests drawn from seed 3")
	assert.Contains(t, text, "outcome counts agree")
	b.Timeouts, b.Cancelled = 0, 2
	text = strings.Join(sameWorkload([]*Summary{a, &b}), " ")
	assert.Contains(t, text, "timeouts 1 (kvready) vs 0 (naive); cancelled 1 (kvready) vs 2 (naive)")
	assert.Contains(t, text, "within a tick of its deadline")
	b.Served, b.Missed = 4, 3
	text = strings.Join(sameWorkload([]*Summary{a, &b}), " ")
	assert.Contains(t, text, "served 5 (kvready) vs 4 (naive)")
	assert.Contains(t, text, "frees slots on the outcome")
}

// Every state of the engine (and of the naive manager) has its own colour.
func TestStateColoursDistinct(t *testing.T) {
	seen := map[[4]uint8]int{}
	for i := range int(fsm.NumStates) {
		c := stateColor(i)
		k := [4]uint8{c.R, c.G, c.B, c.A}
		j, dup := seen[k]
		assert.False(t, dup, "states %d and %d share a colour", j, i)
		seen[k] = i
	}
	// And the states plot uses them: a timeline where every state holds a
	// lease draws one stroke colour per state.
	var states []StateCount
	for i := range int(fsm.NumStates) {
		states = append(states, StateCount{State: fsm.State(i).String(), Leases: i + 1})
	}
	s := &Summary{Manager: "kvready", Timeline: []Sample{{At: 0, States: states}, {At: time.Millisecond, States: states}}}
	dir := t.TempDir()
	require.NoError(t, statesPlot(s).Save(reportPlotSize, reportPlotSize, filepath.Join(dir, "s.svg")))
	svg, err := os.ReadFile(filepath.Join(dir, "s.svg"))
	require.NoError(t, err)
	strokes := map[string]bool{}
	for _, m := range regexp.MustCompile(`stroke:(#[0-9A-F]{6})`).FindAllStringSubmatch(string(svg), -1) {
		strokes[m[1]] = true
	}
	assert.Contains(t, strokes, "#000000", "the axes")
	assert.Len(t, strokes, int(fsm.NumStates)+1, "one stroke colour per state, and black for the axes: %v", strokes)
}

// The readiness plot marks and labels the deadline, where timed-out fetches
// pile up.
func TestReadinessPlotLabelsTheDeadline(t *testing.T) {
	ds := []time.Duration{time.Millisecond, 2 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}
	dir := t.TempDir()
	require.NoError(t, histPlot("r", "µs", ds, 10*time.Millisecond).Save(reportPlotSize, reportPlotSize, filepath.Join(dir, "r.svg")))
	svg, err := os.ReadFile(filepath.Join(dir, "r.svg"))
	require.NoError(t, err)
	assert.Contains(t, string(svg), "deadline 10ms: fetches that timed out")
}
