package simulate

import (
	"fmt"
	"html/template"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Report files written by WriteReport and WriteComparison, inside the report
// directory. The plots of a comparison's second run carry its manager's name
// as a prefix (naive-leases-by-state.svg); its page is named after it too
// (naive.html).
const (
	ReportIndex    = "index.html"
	PlotSafety     = "safety.svg"
	PlotStates     = "leases-by-state.svg"
	PlotFence      = "fence-latency.svg"
	PlotReadiness  = "readiness-latency.svg"
	reportPlotSize = 6 * vg.Inch
)

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
	save := func(p *plot.Plot, name string) (string, error) {
		if err := p.Save(reportPlotSize, 4*vg.Inch, filepath.Join(dir, prefix+name)); err != nil {
			return "", fmt.Errorf("simulate: %s: %w", prefix+name, err)
		}
		return prefix + name, nil
	}
	var err error
	if p := statesPlot(s); p != nil {
		if pg.States, err = save(p, PlotStates); err != nil {
			return nil, err
		}
	} else {
		pg.StatesNote = "No lease was ever in flight at a sample instant: nothing to plot."
	}
	if len(s.FenceLatencies) > 0 {
		if pg.Fence, err = save(histPlot("Fence latency: submission to access proven", s.clock()+" µs", s.FenceLatencies, 0), PlotFence); err != nil {
			return nil, err
		}
	} else if s.Manager == "naive" {
		pg.FenceNote = "No fence latency to show: the naive manager never waits for the backend's access to be proven over. It frees the slots on the outcome, an error or a timeout — the bug this run demonstrates."
	} else {
		pg.FenceNote = "No access was proven over in this run: no fence latency to show."
	}
	if len(s.ReadyLatencies) > 0 {
		if pg.Ready, err = save(histPlot("Readiness latency: fetch lent to readiness answerable", s.clock()+" µs", s.ReadyLatencies, s.Deadline), PlotReadiness); err != nil {
			return nil, err
		}
	} else {
		pg.ReadyNote = "No fetch became ready in this run: no readiness latency to show."
	}
	return pg, nil
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
		return append(out, fmt.Sprintf("Their outcome counts agree: %d leases; served %d, partial %d, missed %d, failed %d "+
			"(timeouts %d, cancelled %d, rejected %d). The difference is only in what the checker saw.",
			a.Leases, a.Served, a.Partial, a.Missed, a.Failed, a.Timeouts, a.Cancelled, a.Rejected))
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

// palette gives every state of a run its own colour: more entries than the
// engine has states (fsm.NumStates) or the naive manager has.
var palette = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
	{188, 189, 34, 255}, {23, 190, 207, 255}, {0, 100, 0, 255}, {255, 215, 0, 255},
	{0, 0, 128, 255}, {128, 0, 0, 255}, {0, 128, 128, 255}, {255, 0, 255, 255},
}

// stateColor is the colour of the i-th state of a run's timeline.
func stateColor(i int) color.RGBA { return palette[i%len(palette)] }

// statesPlot draws leases by state over time, or returns nil when no lease was
// ever in flight at a sample.
func statesPlot(s *Summary) *plot.Plot {
	if len(s.Timeline) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "Leases by state over time (" + s.Manager + " manager)"
	p.X.Label.Text = s.clock() + " ms"
	p.Y.Label.Text = "leases"
	p.Legend.Top = true
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
		line.Color = stateColor(i)
		line.Width = vg.Points(1.2)
		p.Add(line)
		p.Legend.Add(sc.State, line)
	}
	if top == 0 {
		return nil
	}
	// Headroom above the highest line, so the legend never covers the data.
	p.Y.Max = float64(top)*1.8 + 1
	return p
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// histPlot draws a latency histogram; a positive deadline is marked with a
// labelled line, since the requests that time out pile up at it.
func histPlot(title, unit string, ds []time.Duration, deadline time.Duration) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = unit
	p.Y.Label.Text = "count"
	vals := make(plotter.Values, len(ds))
	for i, d := range ds {
		vals[i] = float64(d) / float64(time.Microsecond)
	}
	h, err := plotter.NewHist(vals, 40)
	if err != nil {
		return p
	}
	h.FillColor = color.RGBA{R: 70, G: 110, B: 190, A: 255}
	p.Add(h)
	// Room past the last bin, so that the last tick's label is not cut at
	// the plot's right edge.
	p.X.Max += 0.05 * (p.X.Max - p.X.Min)
	if deadline <= 0 {
		return p
	}
	top := 0.0
	for _, b := range h.Bins {
		top = max(top, b.Weight)
	}
	x := float64(deadline) / float64(time.Microsecond)
	mark, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: top * 1.1}})
	if err != nil {
		return p
	}
	mark.Color = color.RGBA{R: 200, A: 255}
	mark.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	label, err := plotter.NewLabels(plotter.XYLabels{
		XYs:    []plotter.XY{{X: x, Y: top * 1.1}},
		Labels: []string{fmt.Sprintf("deadline %v: fetches that timed out", deadline)},
	})
	if err != nil {
		return p
	}
	label.TextStyle[0].Color = mark.Color
	label.TextStyle[0].XAlign = draw.XRight
	p.Add(mark, label)
	p.Y.Max = max(p.Y.Max, top*1.25)
	return p
}

// runColor is a run's colour in the safety plot: kvready green, naive red.
func runColor(manager string, i int) color.RGBA {
	switch manager {
	case "kvready":
		return color.RGBA{G: 140, A: 255}
	case "naive":
		return color.RGBA{R: 200, G: 30, B: 30, A: 255}
	}
	return stateColor(i)
}

// saveSafety writes the first plot of the report: for every run, the slot
// grants recycled before their fence (top) and the corrupt rows (bottom),
// cumulative, over the run's time; one figure, one line per run per panel.
func saveSafety(runs []*Summary, path string) error {
	panels := []struct {
		title string
		at    func(Sample) int
		final func(*Summary) int
	}{
		{"Slot grants recycled before their fence (cumulative)", func(s Sample) int { return s.Recycled }, func(s *Summary) int { return s.RecycledBeforeFence }},
		{"Corrupt rows found, device or store (cumulative)", func(s Sample) int { return s.Corrupt }, func(s *Summary) int { return s.CorruptRows }},
	}
	plots := make([][]*plot.Plot, len(panels))
	for k, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = runs[0].clock() + " ms"
		p.Y.Label.Text = "count"
		p.Legend.Top, p.Legend.Left = true, true
		top := 0
		for i, s := range runs {
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
			line.Color = runColor(s.Manager, i)
			line.Width = vg.Points(2)
			p.Add(line)
			p.Legend.Add(fmt.Sprintf("%s manager: %d", s.Manager, end), line)
		}
		p.Y.Min, p.Y.Max = 0, float64(top)*1.3+1
		plots[k] = []*plot.Plot{p}
	}
	c := vgsvg.New(reportPlotSize, 6*vg.Inch)
	canvases := plot.Align(plots, draw.Tiles{Rows: len(panels), Cols: 1, PadY: vg.Millimeter * 6, PadX: vg.Millimeter * 2,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2}, draw.New(c))
	for k := range plots {
		plots[k][0].Draw(canvases[k][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

var pageTemplate = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kvready simulate — {{.P.S.Manager}}</title>
<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}pre{background:#f4f4f4;padding:1em}
.ok{color:#070}.bad{color:#b00}nav a{margin-right:1em}</style></head><body>
{{if .Compared}}<nav>{{range .Pages}}{{if eq .File $.P.File}}<strong>{{.S.Manager}} manager</strong> {{else}}<a href="{{.File}}">{{.S.Manager}} manager</a>{{end}}{{end}}</nav>{{end}}
<h1>kvready simulate — {{.P.S.Manager}} manager</h1>
{{if .P.Safe}}<p class="ok">The independent checker found no slot recycled before its fence, no corrupt row and no miss reported as a failure.</p>
{{else}}<p class="bad">The independent checker found {{.P.S.RecycledBeforeFence}} slot grants recycled before their fence ({{.P.S.LateWrites}} late writes landed in re-lent slots), {{.P.S.CorruptRows}} corrupt rows and {{.P.S.MissesReportedAsFailures}} misses reported as failures.</p>{{end}}
<h2>Safety over time{{if .Compared}}: {{range $i, $p := .Pages}}{{if $i}} and {{end}}{{$p.S.Manager}}{{end}}, one workload{{end}}</h2>
<img src="{{.Safety}}" alt="slot grants recycled before their fence and corrupt rows over time">
{{range .Workload}}<p>{{.}}</p>
{{end}}<h2>Summary</h2>
<pre>{{.P.Table}}</pre>
<h2>Leases by state over time</h2>{{if .P.States}}<img src="{{.P.States}}" alt="leases by state over time">{{else}}<p>{{.P.StatesNote}}</p>{{end}}
<h2>Fence latency</h2>{{if .P.Fence}}<img src="{{.P.Fence}}" alt="fence latency histogram">{{else}}<p>{{.P.FenceNote}}</p>{{end}}
<h2>Readiness latency</h2>{{if .P.Ready}}<img src="{{.P.Ready}}" alt="readiness latency histogram, deadline marked">
<p>The spike at the dashed line is the deadline ({{.P.S.Deadline}}): a fetch whose delivery is slower times out there.</p>{{else}}<p>{{.P.ReadyNote}}</p>{{end}}
<p>See docs/simulate.md for how to read this page and how the checker works.</p>
</body></html>
`))
