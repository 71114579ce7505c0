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
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Report files written by WriteReport, inside the report directory.
const (
	ReportIndex    = "index.html"
	PlotStates     = "leases-by-state.svg"
	PlotFence      = "fence-latency.svg"
	PlotReadiness  = "readiness-latency.svg"
	reportPlotSize = 6 * vg.Inch
)

// WriteReport writes an HTML page and its SVG plots into dir (created if
// needed): leases by state over time, the fence-latency histogram and the
// readiness-latency distribution. The page references only its own files, so it
// opens offline.
func WriteReport(dir string, s *Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("simulate: report directory: %w", err)
	}
	if err := statesPlot(s).Save(reportPlotSize, 4*vg.Inch, filepath.Join(dir, PlotStates)); err != nil {
		return fmt.Errorf("simulate: %s: %w", PlotStates, err)
	}
	fence := histPlot("Fence latency: submission to access proven", s.clock()+" µs", s.FenceLatencies)
	if len(s.FenceLatencies) == 0 {
		fence.Title.Text = "Fence latency: no access was ever proven (" + s.Manager + " manager)"
	}
	if err := fence.Save(reportPlotSize, 4*vg.Inch, filepath.Join(dir, PlotFence)); err != nil {
		return fmt.Errorf("simulate: %s: %w", PlotFence, err)
	}
	ready := histPlot("Readiness latency: fetch lent to readiness answerable", s.clock()+" µs", s.ReadyLatencies)
	if err := ready.Save(reportPlotSize, 4*vg.Inch, filepath.Join(dir, PlotReadiness)); err != nil {
		return fmt.Errorf("simulate: %s: %w", PlotReadiness, err)
	}
	var table strings.Builder
	if err := s.WriteTable(&table); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, ReportIndex))
	if err != nil {
		return fmt.Errorf("simulate: %s: %w", ReportIndex, err)
	}
	err = reportPage.Execute(f, map[string]any{
		"S": s, "Table": table.String(), "Safe": s.Safe(),
		"States": PlotStates, "Fence": PlotFence, "Ready": PlotReadiness,
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("simulate: %s: %w", ReportIndex, err)
	}
	return nil
}

func statesPlot(s *Summary) *plot.Plot {
	p := plot.New()
	p.Title.Text = "Leases by state over time (" + s.Manager + " manager)"
	p.X.Label.Text = s.clock() + " ms"
	p.Y.Label.Text = "leases"
	p.Legend.Top = true
	if len(s.Timeline) == 0 {
		return p
	}
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
			pts[k] = plotter.XY{X: float64(smp.At) / float64(time.Millisecond), Y: float64(n)}
		}
		if peak == 0 {
			continue // a state no lease ever sat in at a sample adds only legend noise
		}
		top = max(top, peak)
		line, err := plotter.NewLine(pts)
		if err != nil {
			continue
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.2)
		p.Add(line)
		p.Legend.Add(sc.State, line)
	}
	// Headroom above the highest line, so the legend never covers the data.
	p.Y.Max = float64(top)*1.8 + 1
	return p
}

func histPlot(title, unit string, ds []time.Duration) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = unit
	p.Y.Label.Text = "count"
	if len(ds) == 0 {
		return p
	}
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
	return p
}

var reportPage = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kvready simulate — {{.S.Manager}}</title>
<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}pre{background:#f4f4f4;padding:1em}
.ok{color:#070}.bad{color:#b00}</style></head><body>
<h1>kvready simulate — {{.S.Manager}} manager</h1>
{{if .Safe}}<p class="ok">The independent checker found no slot recycled before its fence, no corrupt row and no miss reported as a failure.</p>
{{else}}<p class="bad">The independent checker found {{.S.RecycledBeforeFence}} slot grants recycled before their fence ({{.S.LateWrites}} late writes landed in re-lent slots), {{.S.CorruptRows}} corrupt rows and {{.S.MissesReportedAsFailures}} misses reported as failures.</p>{{end}}
<pre>{{.Table}}</pre>
<h2>Leases by state over time</h2><img src="{{.States}}" alt="leases by state over time">
<h2>Fence latency</h2><img src="{{.Fence}}" alt="fence latency histogram">
<h2>Readiness latency</h2><img src="{{.Ready}}" alt="readiness latency histogram">
<p>See docs/simulate.md for how to read this page and how the checker works.</p>
</body></html>
`))
