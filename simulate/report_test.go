package simulate

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"gonum.org/v1/plot"
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

// The readiness plot marks and labels the deadline, where timed-out fetches
// pile up.
func TestReadinessPlotLabelsTheDeadline(t *testing.T) {
	ds := []time.Duration{time.Millisecond, 2 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}
	dir := t.TempDir()
	require.NoError(t, savePlots(filepath.Join(dir, "r.svg"), reportPlotHeight, []*plot.Plot{histPlot("r", "virtual ms", ds, 10*time.Millisecond)}, []*plot.Legend{nil}))
	svg, err := os.ReadFile(filepath.Join(dir, "r.svg"))
	require.NoError(t, err)
	assert.Contains(t, string(svg), "deadline 10.00ms: no fetch slower")
}

// svgPath is a stroked path of an SVG the report wrote: its points, in the
// canvas's units, and its stroke colour.
type svgPath struct {
	xs, ys []float64
	stroke string
}

// svgText is a text element: where it starts, in the canvas's units (the
// plots flip their y axis), and what it says.
type svgText struct {
	x, y float64
	s    string
}

var (
	svgPathRE  = regexp.MustCompile(`<path d="([^"]*)" style="([^"]*)"`)
	svgPointRE = regexp.MustCompile(`[ML]([-0-9.e]+),([-0-9.e]+)`)
	svgStroke  = regexp.MustCompile(`stroke:(#[0-9A-Fa-f]{6})`)
	svgTextRE  = regexp.MustCompile(`<text x="([-0-9.e]+)" y="([-0-9.e]+)"[^>]*>([^<]*)</text>`)
	svgWidth   = regexp.MustCompile(`<svg width="([0-9.]+)pt" height="([0-9.]+)pt" viewBox="0 0 ([0-9.]+) ([0-9.]+)"`)
)

func parseSVG(t *testing.T, path string) (paths []svgPath, texts []svgText, widthPt float64) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	num := func(s string) float64 {
		f, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err, s)
		return f
	}
	for _, m := range svgPathRE.FindAllStringSubmatch(string(data), -1) {
		st := svgStroke.FindStringSubmatch(m[2])
		if st == nil {
			continue // a fill: bars and the background
		}
		p := svgPath{stroke: strings.ToUpper(st[1])}
		for _, pt := range svgPointRE.FindAllStringSubmatch(m[1], -1) {
			p.xs, p.ys = append(p.xs, num(pt[1])), append(p.ys, num(pt[2]))
		}
		paths = append(paths, p)
	}
	for _, m := range svgTextRE.FindAllStringSubmatch(string(data), -1) {
		texts = append(texts, svgText{x: num(m[1]), y: -num(m[2]), s: m[3]})
	}
	w := svgWidth.FindStringSubmatch(string(data))
	require.NotNil(t, w, "%s: an <svg> with a width and a viewBox", path)
	assert.Equal(t, w[1], w[3], "%s: the viewBox spans the width, so the page can scale it", path)
	return paths, texts, num(w[1])
}

func hex(c color.RGBA) string { return fmt.Sprintf("#%02X%02X%02X", c.R, c.G, c.B) }

// legendSwatch returns the colour of the legend thumbnail drawn beside the
// legend entry text: the two-point path that ends just left of it, on its
// line.
func legendSwatch(t *testing.T, paths []svgPath, texts []svgText, text string) string {
	t.Helper()
	for _, tx := range texts {
		if tx.s != text {
			continue
		}
		best, dist := "", math.Inf(1)
		for _, p := range paths {
			if len(p.xs) != 2 || p.ys[0] != p.ys[1] || p.xs[1] > tx.x {
				continue
			}
			if d := math.Abs(p.ys[0]-tx.y) + (tx.x - p.xs[1]); d < dist {
				best, dist = p.stroke, d
			}
		}
		require.NotEmpty(t, best, "no thumbnail beside the legend entry %q", text)
		return best
	}
	t.Fatalf("no legend entry %q", text)
	return ""
}

// The report, read without a browser: a state has one colour on every page
// (its legend thumbnail and its line), every plot is as wide as the page's
// text column and scales to it, and every legend sits to the right of every
// line it could cover.
func TestReportColoursWidthAndLegends(t *testing.T) {
	c := small()
	c.Requests = 300
	engine := run(t, c)
	c.Naive = true
	naive := run(t, c)
	dir := t.TempDir()
	require.NoError(t, WriteComparison(dir, engine, naive))

	// One colour per state, on both pages: "waiting" and "requested" are
	// states of both managers.
	swatches := map[string]map[string]string{} // state -> page -> colour
	for _, file := range []string{PlotStates, "naive-" + PlotStates} {
		paths, texts, _ := parseSVG(t, filepath.Join(dir, file))
		for _, state := range []string{"waiting", "requested"} {
			if swatches[state] == nil {
				swatches[state] = map[string]string{}
			}
			swatches[state][file] = legendSwatch(t, paths, texts, state)
		}
	}
	for state, byPage := range swatches {
		assert.Len(t, byPage, 2)
		for page, colour := range byPage {
			assert.Equal(t, hex(stateColor(state)), colour, "%s on %s", state, page)
		}
	}
	// Every state, of either manager, has a colour of its own, and none is
	// a manager's colour in the safety plot.
	seen := map[string]string{}
	for state := range stateColors {
		h := hex(stateColor(state))
		other, dup := seen[h]
		assert.False(t, dup, "%s and %s share %s", state, other, h)
		seen[h] = state
		for _, m := range []string{"kvready", "naive"} {
			assert.NotEqual(t, hex(runColor(m)), h, "state %s has the %s manager's colour", state, m)
		}
	}

	// Width: the page's column is 60em and every image fills it; every plot
	// is drawn at that width (960 CSS pixels, 720 points).
	for _, page := range []string{ReportIndex, "naive.html"} {
		html, err := os.ReadFile(filepath.Join(dir, page))
		require.NoError(t, err)
		assert.Contains(t, string(html), "max-width:60em")
		assert.Regexp(t, `img\{[^}]*width:100%`, string(html), "%s: plots fill the column", page)
		assert.NotRegexp(t, `<img[^>]* (width|height)=`, string(html), "%s: no fixed size on an image", page)
		for _, file := range images(t, dir, page) {
			paths, texts, widthPt := parseSVG(t, filepath.Join(dir, file))
			assert.InDelta(t, pageWidthPx*72/96, widthPt, 0.5, "%s is drawn at the page's width", file)

			// Legends: every legend entry starts right of every data line
			// (a path of more than two points) of the plot.
			lineMaxX := 0.0
			for _, p := range paths {
				if len(p.xs) > 2 {
					for _, x := range p.xs {
						lineMaxX = max(lineMaxX, x)
					}
				}
			}
			for _, tx := range texts {
				if isLegendEntry(tx.s) {
					assert.Greater(t, tx.x, lineMaxX, "%s: legend entry %q at x=%.1f, over a line reaching x=%.1f", file, tx.s, tx.x, lineMaxX)
				}
			}
		}
	}
}

// isLegendEntry tells the legend entries of the report's plots from titles,
// axis labels and tick labels: state names and "… manager: N".
func isLegendEntry(s string) bool {
	_, state := stateColors[s]
	return state || strings.Contains(s, " manager: ")
}
