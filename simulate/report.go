package simulate

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"html/template"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/kvready/kvready/internal/words"
)

// Report files written by WriteReport and WriteComparison, inside the report
// directory. The plots of a comparison's second run carry its manager's name
// as a prefix (naive-leases-by-state.svg); its page is named after it too
// (naive.html).
const (
	ReportIndex   = "index.html"
	PlotSafety    = "safety.svg"
	PlotStates    = "leases-by-state.svg"
	PlotFence     = "fence-latency.svg"
	PlotReadiness = "readiness-latency.svg"
	PlotLayerwise = "layerwise.svg"
	PlotTiers     = "tier-hits.svg"
)

// Plot sizes. A plot is as wide as the page's text column (pageWidthPx CSS
// pixels, 96 to the inch) and the page scales it to the column's width, so
// its text is drawn at the size it was laid out at.
const (
	pageWidthPx      = 960
	reportPlotWidth  = pageWidthPx * vg.Inch / 96
	reportPlotHeight = reportPlotWidth * 9 / 20
	safetyPlotHeight = reportPlotWidth * 7 / 10
)

// fontFamily is the plots' typeface, and fontFallbacks what a browser that
// lacks it uses instead: the plots are laid out with Liberation Sans's
// metrics, which Arial and Helvetica share; other fallbacks run wider, so
// every legend sits beside its plot, thumbnails first, with room to spare.
const (
	fontFamily    = "Liberation Sans"
	fontFallbacks = ",Arial,Helvetica,sans-serif"
)

// legendSlack is how much wider than measured a legend's column is: room for
// a fallback font that runs wider than Liberation Sans.
const legendSlack = 1.35

// WriteReport writes an HTML page and its SVG plots into dir (created if
// needed): the checker's safety counters over time first, then leases by
// state over time, the fence-latency histogram and the readiness-latency
// distribution with the deadline marked. A plot with nothing to show is left
// out and the page says why. The page references only its own files, so it
// opens offline.
func WriteReport(dir string, s *Summary) error { return writeReport(dir, []*Summary{s}) }

// WriteComparison writes the report of two runs of one workload, the engine's
// (index.html) and the naive manager's (naive.html), which link to each other.
// Both open with one plot of the two runs' safety counters over time, and say
// whether their outcome counts agree and, where they do not, why.
func WriteComparison(dir string, engine, naive *Summary) error {
	if engine.Seed != naive.Seed || engine.Requests != naive.Requests {
		return fmt.Errorf("simulate: comparison of different workloads: seed %d, %d requests vs seed %d, %d requests; want one workload",
			engine.Seed, engine.Requests, naive.Seed, naive.Requests)
	}
	return writeReport(dir, []*Summary{engine, naive})
}

// reportPage is one run's page.
type reportPage struct {
	S                                *Summary
	File                             string
	Table                            string
	Safe                             bool
	States, Fence, Ready             string // plot files; "" when there is nothing to plot
	StatesNote, FenceNote, ReadyNote string // why a plot is missing
	Layers, LayersNote               string // a layerwise run's plot, or why it has none
	Tiers, TiersNote                 string // a stack of tiers' plot, or why it has none
}

func writeReport(dir string, runs []*Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("simulate: report directory: %w", err)
	}
	if err := saveSafety(runs, filepath.Join(dir, PlotSafety)); err != nil {
		return fmt.Errorf("simulate: %s: %w", PlotSafety, err)
	}
	pages := make([]*reportPage, len(runs))
	used := map[string]bool{}
	for i, s := range runs {
		pg, err := writeRunPlots(dir, s, i, used)
		if err != nil {
			return err
		}
		pages[i] = pg
	}
	workload := sameWorkload(runs)
	for _, pg := range pages {
		if err := writePage(dir, pg, pages, workload); err != nil {
			return err
		}
	}
	return nil
}

// writeRunPlots writes one run's plots and returns its page, not yet written.
func writeRunPlots(dir string, s *Summary, i int, used map[string]bool) (*reportPage, error) {
	prefix, file := "", ReportIndex
	if i > 0 {
		prefix = s.Manager + "-"
		if used[prefix] || prefix == "-" {
			prefix = fmt.Sprintf("run%d-", i+1)
		}
		file = strings.TrimSuffix(prefix, "-") + ".html"
	}
	used[prefix] = true
	var table strings.Builder
	if err := s.WriteTable(&table); err != nil {
		return nil, err
	}
	pg := &reportPage{S: s, File: file, Table: table.String(), Safe: s.Safe()}
	save := func(p *plot.Plot, legend *plot.Legend, name string) (string, error) {
		if err := savePlots(filepath.Join(dir, prefix+name), reportPlotHeight, []*plot.Plot{p}, []*plot.Legend{legend}); err != nil {
			return "", fmt.Errorf("simulate: %s: %w", prefix+name, err)
		}
		return prefix + name, nil
	}
	var err error
	if p, legend := statesPlot(s); p != nil {
		if pg.States, err = save(p, legend, PlotStates); err != nil {
			return nil, err
		}
	} else {
		pg.StatesNote = "No lease was ever in flight at a sample instant: nothing to plot."
	}
	if len(s.FenceLatencies) > 0 {
		if pg.Fence, err = save(histPlot("Fence latency: submission to access proven", s.clock()+" ms", s.FenceLatencies, 0), nil, PlotFence); err != nil {
			return nil, err
		}
	} else if s.Manager == "naive" {
		pg.FenceNote = "No fence latency to show: the naive manager never waits for the backend's access to be proven over. It frees the slots on the outcome, an error or a timeout — the bug this run demonstrates."
	} else {
		pg.FenceNote = "No access was proven over in this run: no fence latency to show."
	}
	if len(s.ReadyLatencies) > 0 {
		if pg.Ready, err = save(histPlot("Readiness latency: fetch lent to readiness answerable", s.clock()+" ms", s.ReadyLatencies, s.Deadline), nil, PlotReadiness); err != nil {
			return nil, err
		}
	} else {
		pg.ReadyNote = "No fetch became ready in this run: no readiness latency to show."
	}
	if s.Layerwise && len(s.LastLayerLatencies) > 0 {
		p, legend := layerwisePlot(s)
		if pg.Layers, err = save(p, legend, PlotLayerwise); err != nil {
			return nil, err
		}
	} else if s.Layerwise {
		pg.LayersNote = "No fetch copied anything to the device in this run: no forward pass to show."
	}
	if p, legend := tiersPlot(s); p != nil {
		if pg.Tiers, err = save(p, legend, PlotTiers); err != nil {
			return nil, err
		}
	} else if s.Tiers != nil {
		pg.TiersNote = "No tier served a row in this run: no hits to plot."
	}
	return pg, nil
}

// Colours of the layerwise plot's two passes: their own, none of a state's
// or a manager's.
var (
	layerwiseColor  = color.RGBA{R: 0, G: 120, B: 200, A: 255}
	wholeLeaseColor = color.RGBA{R: 220, G: 120, B: 0, A: 255}
)

// layerwisePlot draws, for the forward passes measured, the fraction done
// by each time: layer by layer and whole lease first, one line each, with
// the idle device's bounds for a fully served fetch as dashed marks in the
// same colours (the title says so: the legend names the passes only).
func layerwisePlot(s *Summary) (*plot.Plot, *plot.Legend) {
	p := newPlot()
	p.Title.Text = "Time to last layer computed (dashed: a full fetch alone)"
	p.X.Label.Text = s.clock() + " ms"
	p.Y.Label.Text = "fraction of fetches"
	p.Y.Tick.Marker = plot.DefaultTicks{}
	legend := newLegend()
	pipe, whole := PipelineBound(s.Layers, s.FullLayerCopy, s.ComputePerLayer)
	for _, c := range []struct {
		name  string
		ds    []time.Duration
		bound time.Duration
		color color.RGBA
	}{
		{"layer by layer", s.LastLayerLatencies, pipe, layerwiseColor},
		{"whole lease first", s.WholeLeaseLatencies, whole, wholeLeaseColor},
	} {
		pts := make(plotter.XYs, 0, 2*len(c.ds)+1)
		pts = append(pts, plotter.XY{X: 0, Y: 0})
		for i, d := range c.ds { // sorted: a step up at each one
			pts = append(pts, plotter.XY{X: ms(d), Y: float64(i) / float64(len(c.ds))}, plotter.XY{X: ms(d), Y: float64(i+1) / float64(len(c.ds))})
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			continue
		}
		line.Color, line.Width = c.color, vg.Points(2)
		p.Add(line)
		legend.Add(c.name, line)
		mark, err := plotter.NewLine(plotter.XYs{{X: ms(c.bound), Y: 0}, {X: ms(c.bound), Y: 1.05}})
		if err != nil {
			continue
		}
		mark.Color, mark.Dashes = c.color, []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(mark)
	}
	p.X.Min, p.Y.Min, p.Y.Max = 0, 0, 1.05
	p.X.Max += 0.05 * p.X.Max
	return p, legend
}

func writePage(dir string, pg *reportPage, pages []*reportPage, workload []string) error {
	f, err := os.Create(filepath.Join(dir, pg.File))
	if err != nil {
		return fmt.Errorf("simulate: %s: %w", pg.File, err)
	}
	err = pageTemplate.Execute(f, map[string]any{
		"P": pg, "Pages": pages, "Safety": PlotSafety, "Workload": workload, "Compared": len(pages) > 1,
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("simulate: %s: %w", pg.File, err)
	}
	return nil
}

// sameWorkload says, for a comparison, what the runs share and whether their
// outcome counts agree, and why not where they differ.
func sameWorkload(runs []*Summary) []string {
	if len(runs) < 2 {
		return nil
	}
	a, b := runs[0], runs[1]
	out := []string{fmt.Sprintf("Both runs served the same workload: the same %d requests drawn from seed %d, "+
		"and the same fault draw for each request's fetch and publish (drawn from the seed, the request and the kind of lease, "+
		"never from the order in which a manager happens to submit).", a.Requests, a.Seed)}
	type count struct {
		name string
		x, y int
	}
	counts := []count{{"leases", a.Leases, b.Leases}, {"served", a.Served, b.Served}, {"partial", a.Partial, b.Partial},
		{"missed", a.Missed, b.Missed}, {"failed", a.Failed, b.Failed}, {"timeouts", a.Timeouts, b.Timeouts},
		{"cancelled", a.Cancelled, b.Cancelled}, {"rejected", a.Rejected, b.Rejected}, {"violations", a.Violations, b.Violations}}
	var diff []string
	totalsDiffer := false
	for i, c := range counts {
		if c.x != c.y {
			diff = append(diff, fmt.Sprintf("%s %d (%s) vs %d (%s)", c.name, c.x, a.Manager, c.y, b.Manager))
			totalsDiffer = totalsDiffer || i <= 4
		}
	}
	if len(diff) == 0 {
		return append(out, fmt.Sprintf("Their outcome counts agree: %s; served %d, partial %d, missed %d, failed %d "+
			"(timeouts %d, cancelled %d, rejected %d). The difference is only in what the checker saw.",
			words.Count(a.Leases, "lease"), a.Served, a.Partial, a.Missed, a.Failed, a.Timeouts, a.Cancelled, a.Rejected))
	}
	why := "Why: the two managers look at their leases at different instants (the engine's runner each tick, " +
		"the naive manager in its own loop), so a delivery that ends within a tick of its deadline can count as a timeout " +
		"in one run and as its own outcome in the other. The totals agree."
	if totalsDiffer {
		why = "Why: the naive manager frees slots on the outcome, so its slots come back sooner and its leases are granted, " +
			"and so submitted, at other instants than the engine's; a delivery near its deadline can then end before it " +
			"in one run and after it in the other, and a publish that one run made and the other did not changes what later fetches find."
	}
	return append(out, "Their outcome counts differ: "+strings.Join(diff, "; ")+". "+why)
}

// stateColors gives every state its one colour, on every page: the engine's
// states (fsm's names) and the naive manager's, which shares some of them
// ("waiting", "requested"). A state of either manager is drawn in the same
// colour wherever it appears. None is the safety plot's kvready green or
// naive red, which mean the managers, not states.
var stateColors = map[string]color.RGBA{
	"waiting":            {31, 119, 180, 255},  // blue
	"granted":            {255, 127, 14, 255},  // orange
	"staged":             {148, 103, 189, 255}, // purple
	"requested":          {23, 190, 207, 255},  // cyan
	"served":             {140, 86, 75, 255},   // brown
	"partial":            {227, 119, 194, 255}, // pink
	"missed":             {127, 127, 127, 255}, // grey
	"failed":             {188, 189, 34, 255},  // olive
	"access_fenced":      {0, 0, 128, 255},     // navy
	"copy_unproven":      {255, 215, 0, 255},   // gold
	"logically_complete": {0, 128, 128, 255},   // teal
	"quarantined":        {0, 0, 0, 255},       // black
	"released":           {174, 199, 232, 255}, // light blue
	"copying_in":         {255, 152, 150, 255}, // salmon
	"copying_out":        {197, 176, 213, 255}, // lavender
	"done":               {196, 156, 148, 255}, // tan
}

// stateColor is the colour of the state named state: its own from
// stateColors, or, for a name not listed there, a grey drawn from the name,
// so that it too is the same on every page.
func stateColor(state string) color.RGBA {
	if c, ok := stateColors[state]; ok {
		return c
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(state))
	g := uint8(80 + h.Sum32()%120)
	return color.RGBA{g, g, g, 255}
}

// statesPlot draws leases by state over time, and returns the legend to
// draw beside it, or nil, nil when no lease was ever in flight at a sample.
func statesPlot(s *Summary) (*plot.Plot, *plot.Legend) {
	if len(s.Timeline) == 0 {
		return nil, nil
	}
	p := newPlot()
	p.Title.Text = "Leases by state over time (" + s.Manager + " manager)"
	p.X.Label.Text = s.clock() + " ms"
	p.Y.Label.Text = "leases (log scale)"
	// One state often holds most leases (requested, under load): on a
	// linear axis the others lie flat on zero. A log axis (through 0) keeps
	// a state of a few leases readable beside one of thousands.
	logCounts(p)
	legend := newLegend()
	top := 0
	for i, sc := range s.Timeline[0].States {
		pts := make(plotter.XYs, len(s.Timeline))
		peak := 0
		for k, smp := range s.Timeline {
			n := 0
			if i < len(smp.States) {
				n = smp.States[i].Leases
			}
			peak = max(peak, n)
			pts[k] = plotter.XY{X: ms(smp.At), Y: float64(n)}
		}
		if peak == 0 {
			continue // a state no lease ever sat in at a sample adds only legend noise
		}
		top = max(top, peak)
		line, err := plotter.NewLine(pts)
		if err != nil {
			continue
		}
		line.Color = stateColor(sc.State)
		line.Width = vg.Points(1.2)
		p.Add(line)
		legend.Add(sc.State, line)
	}
	if top == 0 {
		return nil, nil
	}
	p.Y.Min, p.Y.Max = 0, logHeadroom(float64(top))
	return p, legend
}

// newPlot is a plot in the report's typeface.
func newPlot() *plot.Plot {
	p := plot.New()
	for _, f := range []*font.Font{&p.Title.TextStyle.Font, &p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font,
		&p.X.Tick.Label.Font, &p.Y.Tick.Label.Font, &p.Legend.TextStyle.Font} {
		sans(f)
	}
	p.Y.Tick.Marker = countTicks{}
	return p
}

// countTicks are the ticks of a count axis: whole numbers only, labelled as
// such (50000, not 50000.00; never 0.5 of a lease).
type countTicks struct{}

// Ticks returns plot.DefaultTicks' whole-number ticks between lo and hi,
// relabelled; where those are fewer than two labelled ones (a range of a few
// counts), every whole number from lo to hi.
func (countTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	labelled := 0
	for _, t := range (plot.DefaultTicks{}).Ticks(lo, hi) {
		if t.Value != math.Trunc(t.Value) {
			continue
		}
		if t.Label != "" {
			t.Label = strconv.FormatFloat(t.Value, 'f', -1, 64)
			labelled++
		}
		out = append(out, t)
	}
	if labelled >= 2 {
		return out
	}
	out = out[:0]
	for v := math.Ceil(lo); v <= math.Floor(hi); v++ {
		out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return out
}

// log1pScale is a count axis on a log scale that still reaches 0: a count n
// sits at log(1+n), so 0, 1, 10 and 10000 are all distinct and visible.
type log1pScale struct{}

// Normalize returns x's place between lo and hi on the axis, from 0 to 1.
func (log1pScale) Normalize(lo, hi, x float64) float64 {
	l, h := math.Log1p(max(lo, 0)), math.Log1p(max(hi, 0))
	if h <= l {
		return 0
	}
	return (math.Log1p(max(x, 0)) - l) / (h - l)
}

// log1pTicks are a log count axis's ticks: 0, then 1, 2, 5, 10, 20, 50, ...
// up to hi — whole numbers — labelled at 0 and the powers of ten (and at 2
// and 5 too when hi is under 100, so that a short axis has labels).
type log1pTicks struct{}

// Ticks returns the ticks between lo and hi.
func (log1pTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	if lo <= 0 {
		out = append(out, plot.Tick{Value: 0, Label: "0"})
	}
	for p := 1.0; p <= hi; p *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := m * p
			if v > hi || v < lo {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || hi < 100 {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			out = append(out, t)
		}
	}
	return out
}

// logCounts puts p's y axis, a count, on the log1p scale.
func logCounts(p *plot.Plot) {
	p.Y.Scale, p.Y.Tick.Marker = log1pScale{}, log1pTicks{}
}

// logHeadroom is the top of a log count axis whose largest value is top:
// room above it on the log scale, as 1.1× gives a linear one.
func logHeadroom(top float64) float64 { return math.Expm1(math.Log1p(top)*1.08) + 1 }

// newLegend is a legend in the report's typeface, drawn thumbnails first, so
// that text wider than measured runs into empty space, never over a thumbnail.
func newLegend() *plot.Legend {
	l := plot.NewLegend()
	sans(&l.TextStyle.Font)
	l.Top, l.Left = true, true
	l.Padding = vg.Points(3)
	return &l
}

func sans(f *font.Font) { f.Typeface, f.Variant = "Liberation", "Sans" }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// histPlot draws a latency histogram in milliseconds, as the summary says
// them, its count on a log axis so that the tail's few leases show beside
// the bulk's thousands; a positive deadline is marked with a line labelled
// with how many fetches were slower: they timed out, and their readiness
// came once their access was proven, to the right of it.
func histPlot(title, unit string, ds []time.Duration, deadline time.Duration) *plot.Plot {
	p := newPlot()
	p.Title.Text = title
	p.X.Label.Text = unit
	p.Y.Label.Text = "count (log scale)"
	logCounts(p)
	h, err := latencyHist(ds)
	if err != nil {
		return p
	}
	h.FillColor = color.RGBA{R: 70, G: 110, B: 190, A: 255}
	p.Add(h)
	// Room past the last bin, so that the last tick's label is not cut at
	// the plot's right edge; latencies start at 0; and room above the
	// tallest bar, which would otherwise meet the axis's top tick.
	p.X.Max += 0.05 * (p.X.Max - p.X.Min)
	p.X.Min = 0
	top := 0.0
	for _, b := range h.Bins {
		top = max(top, b.Weight)
	}
	p.Y.Min, p.Y.Max = 0, logHeadroom(top)
	if deadline <= 0 {
		return p
	}
	x := ms(deadline)
	slower := 0
	for _, d := range ds {
		if d > deadline {
			slower++
		}
	}
	mark, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: p.Y.Max}})
	if err != nil {
		return p
	}
	mark.Color = color.RGBA{R: 200, A: 255}
	mark.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	label, err := plotter.NewLabels(plotter.XYLabels{
		XYs:    []plotter.XY{{X: x, Y: p.Y.Max}},
		Labels: []string{deadlineLabel(deadline, slower)},
	})
	if err != nil {
		return p
	}
	label.TextStyle[0].Color = mark.Color
	label.TextStyle[0].XAlign = draw.XRight
	sans(&label.TextStyle[0].Font)
	p.Add(mark, label)
	p.Y.Max = logHeadroom(logHeadroom(top)) // room for the label above the tallest bar
	return p
}

// deadlineLabel labels the deadline's mark with the fetches slower than it.
func deadlineLabel(deadline time.Duration, slower int) string {
	if slower == 0 {
		return fmt.Sprintf("deadline %s: no fetch slower", formatDuration(deadline))
	}
	return fmt.Sprintf("deadline %s: %s slower, timed out", formatDuration(deadline), words.Count(slower, "fetch", "fetches"))
}

// latencyHist bins latencies in milliseconds: 40 bins from the fastest to
// the slowest, so the tail is drawn however far it goes.
func latencyHist(ds []time.Duration) (*plotter.Histogram, error) {
	vals := make(plotter.Values, len(ds))
	for i, d := range ds {
		vals[i] = ms(d)
	}
	return plotter.NewHist(vals, 40)
}

// runColor is a run's colour in the safety plot: kvready green, naive red,
// another manager a grey drawn from its name.
func runColor(manager string) color.RGBA {
	switch manager {
	case "kvready":
		return color.RGBA{G: 140, A: 255}
	case "naive":
		return color.RGBA{R: 200, G: 30, B: 30, A: 255}
	}
	return stateColor("manager " + manager)
}

// saveSafety writes the first plot of the report: for every run, the slot
// grants recycled before their fence (top) and the corrupt rows (bottom),
// cumulative, over the run's time; one figure, one line per run per panel,
// each panel's legend beside it.
func saveSafety(runs []*Summary, path string) error {
	panels := []struct {
		title string
		at    func(Sample) int
		final func(*Summary) int
	}{
		{"Slot grants recycled before their fence (cumulative)", func(s Sample) int { return s.Recycled }, func(s *Summary) int { return s.RecycledBeforeFence }},
		{"Corrupt rows found, device or store (cumulative)", func(s Sample) int { return s.Corrupt }, func(s *Summary) int { return s.CorruptRows }},
	}
	plots := make([]*plot.Plot, len(panels))
	legends := make([]*plot.Legend, len(panels))
	for k, pn := range panels {
		p := newPlot()
		p.Title.Text = pn.title
		p.X.Label.Text = runs[0].clock() + " ms"
		p.Y.Label.Text = "count"
		legend := newLegend()
		top := 0
		for _, s := range runs {
			pts := make(plotter.XYs, 0, len(s.Timeline)+1)
			for _, smp := range s.Timeline {
				pts = append(pts, plotter.XY{X: ms(smp.At), Y: float64(pn.at(smp))})
			}
			end := pn.final(s) // counted after the last sample too, as requests ended
			pts = append(pts, plotter.XY{X: ms(s.Virtual), Y: float64(end)})
			top = max(top, end)
			line, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			line.Color = runColor(s.Manager)
			line.Width = vg.Points(2)
			p.Add(line)
			legend.Add(fmt.Sprintf("%s manager: %d", s.Manager, end), line)
		}
		p.Y.Min, p.Y.Max = 0, float64(top)*1.1+1
		plots[k], legends[k] = p, legend
	}
	return savePlots(path, safetyPlotHeight, plots, legends)
}

// savePlots writes plots stacked in one SVG as wide as the page, each with
// its legend (nil for none) in a column of its own on the right: a legend
// never covers a line. Every legend column is as wide as the widest legend
// measures, with legendSlack to spare; the plots share the rest and align.
func savePlots(path string, height vg.Length, plots []*plot.Plot, legends []*plot.Legend) error {
	c := vgsvg.NewWith(vgsvg.UseWH(reportPlotWidth, height))
	dc := draw.New(c)
	legendWidth := vg.Length(0)
	for _, l := range legends {
		if l != nil {
			r := l.Rectangle(dc)
			legendWidth = max(legendWidth, vg.Length(legendSlack)*(r.Max.X-r.Min.X))
		}
	}
	if legendWidth > 0 {
		legendWidth += 4 * vg.Millimeter
	}
	pad := 3 * vg.Millimeter
	rows := len(plots)
	grid := make([][]*plot.Plot, rows)
	for i, p := range plots {
		grid[i] = []*plot.Plot{p}
	}
	plotArea := draw.Crop(dc, pad, -legendWidth-pad, pad, -pad)
	canvases := plot.Align(grid, draw.Tiles{Rows: rows, Cols: 1, PadY: 6 * vg.Millimeter}, plotArea)
	for i, p := range plots {
		p.Draw(canvases[i][0])
		if l := legends[i]; l != nil {
			// The legend's column spans the plot's height, to the right of
			// the whole figure, below the plot's title.
			col := canvases[i][0]
			col.Min.X, col.Max.X = dc.Max.X-legendWidth, dc.Max.X-pad
			col.Max.Y -= p.Title.TextStyle.Rectangle(p.Title.Text).Max.Y + 2*p.Title.Padding
			l.Draw(col)
		}
	}
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return err
	}
	// Name the fallbacks a browser without Liberation Sans should use.
	out := bytes.ReplaceAll(b.Bytes(), []byte("font-family:"+fontFamily+";"), []byte("font-family:"+fontFamily+fontFallbacks+";"))
	return os.WriteFile(path, out, 0o644)
}

var pageTemplate = template.Must(template.New("report").Funcs(template.FuncMap{"ms": formatDuration}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>kvready simulate — {{.P.S.Manager}}</title>
<style>body{font-family:"Liberation Sans",Arial,Helvetica,sans-serif;max-width:60em;margin:2em auto;padding:0 1em}
img{display:block;width:100%;height:auto}pre{background:#f4f4f4;padding:1em;overflow-x:auto}
.ok{color:#070}.bad{color:#b00}nav a{margin-right:1em}
table{border-collapse:collapse;margin:1em 0;font-size:.9em}th,td{padding:.2em .5em;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}th.name,td.name{text-align:left}td.store{white-space:normal;overflow-wrap:anywhere}</style></head><body>
{{if .Compared}}<nav>{{range .Pages}}{{if eq .File $.P.File}}<strong>{{.S.Manager}} manager</strong> {{else}}<a href="{{.File}}">{{.S.Manager}} manager</a>{{end}}{{end}}</nav>{{end}}
<h1>kvready simulate — {{.P.S.Manager}} manager</h1>
{{if .P.S.Interrupted}}<p class="bad">Interrupted: the run was stopped before it finished; this page covers the run so far.</p>
{{end}}{{if .P.Safe}}<p class="ok">The independent checker found no slot recycled before its fence, no corrupt row and no miss reported as a failure.</p>
{{else}}<p class="bad">The independent checker found {{.P.S.RecycledBeforeFence}} slot grants recycled before their fence{{if .P.S.LateWritesWatched}} ({{.P.S.LateWrites}} late writes landed in re-lent slots){{end}}, {{.P.S.CorruptRows}} corrupt rows and {{.P.S.MissesReportedAsFailures}} misses reported as failures.</p>{{end}}
<h2>Safety over time{{if .Compared}}: {{range $i, $p := .Pages}}{{if $i}} and {{end}}{{$p.S.Manager}}{{end}}, one workload{{end}}</h2>
<img src="{{.Safety}}" alt="slot grants recycled before their fence and corrupt rows over time">
{{range .Workload}}<p>{{.}}</p>
{{end}}<h2>Summary</h2>
<pre>{{.P.Table}}</pre>
<h2>Leases by state over time</h2>{{if .P.States}}<img src="{{.P.States}}" alt="leases by state over time">
<p>Every state has one colour on every page of this report.</p>{{else}}<p>{{.P.StatesNote}}</p>{{end}}
<h2>Fence latency</h2>{{if .P.Fence}}<img src="{{.P.Fence}}" alt="fence latency histogram">{{else}}<p>{{.P.FenceNote}}</p>{{end}}
<h2>Readiness latency</h2>{{if .P.Ready}}<img src="{{.P.Ready}}" alt="readiness latency histogram, deadline marked">
<p>The dashed line is the deadline ({{ms .P.S.Deadline}}). A fetch whose delivery is slower times out; its readiness (nothing usable) is answered once the backend's access to its slots is proven over, so the tail right of the line is mostly timed-out fetches.</p>{{else}}<p>{{.P.ReadyNote}}</p>{{end}}
{{if .P.S.Layerwise}}<h2>Layer by layer</h2>{{if .P.Layers}}<img src="{{.P.Layers}}" alt="time to last layer computed, layer by layer and whole lease first">
<p>Each fetch whose copies went to the device ran its forward pass twice on the simulated device ({{.P.S.Layers}} layers, {{ms .P.S.ComputePerLayer}} of compute each): layer by layer, each layer computed once the engine said it was ready, and whole lease first, every layer computed once the whole lease was ready. The dashed lines are a fully served fetch alone on the device: T + (L−1)·max(T, C) + C and L·T + L·C, with T = {{ms .P.S.FullLayerCopy}}. Fetches served in part copy less and land sooner; fetches that queue behind others' copies or compute land later.</p>{{else}}<p>{{.P.LayersNote}}</p>{{end}}
<p>Publishes saved layer by layer: each layer's device→staging copies queued behind its compute on the device. {{.P.S.PublishesSubmitted}} submitted once every layer landed; {{.P.S.PublishesWithdrawn}} withdrawn before their last layer (released, never submitted). The checker found {{.P.S.SaveCopiesEarly}} of {{.P.S.LayerSaves}} layer saves queued before their compute, {{.P.S.UnitsIncomplete}} units submitted with a layer missing, {{.P.S.WithdrawnSubmitted}} withdrawn publishes submitted and {{.P.S.WithdrawnFreedEarly}} whose slots came back before their copies landed.</p>{{end}}
{{if .P.S.Tiers}}<h2>Tiers</h2>
<p>Every fetch asks the tiers in order, each for the rows the ones above did not serve; a row a lower tier served is promoted into the ones above, from the staging rows, while the lease still holds them; every publication is written through to every tier. Counts are rows: written through, promoted in from a lower tier, evicted by the tier's bound. The lease's slots return only once every tier's access — promotions included — is proven over.</p>
<table><thead><tr><th class="name">tier</th><th class="name">store</th><th>handed</th><th>hits</th><th>hit rate</th><th>misses</th><th>failed</th><th>written</th><th>promoted</th><th>evictions</th><th>bytes held</th></tr></thead><tbody>
{{range $i, $t := .P.S.Tiers}}<tr><td class="name">{{$i}} {{$t.Name}}</td><td class="name store">{{$t.Store}}</td><td>{{$t.Handed}}</td><td>{{$t.Hits}}</td><td>{{printf "%.3f" $t.HitRate}}</td><td>{{$t.Misses}}</td><td>{{$t.Failed}}</td><td>{{$t.Published}}</td><td>{{$t.Promoted}}</td><td>{{$t.Evictions}}</td><td>{{if $t.Sized}}{{$t.Bytes}}{{if $t.CapacityBytes}} of {{$t.CapacityBytes}}{{end}}{{else}}—{{end}}</td></tr>
{{end}}</tbody></table>
{{if .P.Tiers}}<img src="{{.P.Tiers}}" alt="rows served by each tier over time">{{else}}<p>{{.P.TiersNote}}</p>{{end}}{{end}}
<p>See docs/simulate.md for how to read this page and how the checker works.</p>
</body></html>
`))
