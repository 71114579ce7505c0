package simulate

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"os"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The plots of a disaggregated run's report.
const (
	// PlotDisaggSafety: the checker's counts over virtual time.
	PlotDisaggSafety = "disagg-safety.svg"
	// PlotDisaggTransfers: attempts in flight and in doubt over virtual time.
	PlotDisaggTransfers = "disagg-transfers.svg"
	// PlotDisaggSettle: the distribution of submit-to-settled times.
	PlotDisaggSettle = "disagg-settle.svg"
)

// WriteDisaggReport writes the report of one or more disaggregated runs of
// one workload into dir (created if needed): one page (ReportIndex) that
// opens with the page checker's counts over virtual time, one line per run,
// then each run's summary. The page references only its own files.
func WriteDisaggReport(dir string, runs ...*DisaggSummary) error {
	if len(runs) == 0 {
		return fmt.Errorf("simulate: a report needs at least one run")
	}
	for _, s := range runs[1:] {
		if s.Seed != runs[0].Seed || s.Config.Requests != runs[0].Config.Requests {
			return fmt.Errorf("simulate: comparison of different workloads: seed %d, %d requests vs seed %d, %d requests; want one workload",
				runs[0].Seed, runs[0].Config.Requests, s.Seed, s.Config.Requests)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("simulate: report directory: %w", err)
	}
	for _, pl := range []struct {
		name string
		save func([]*DisaggSummary, string) error
	}{{PlotDisaggSafety, saveDisaggSafety}, {PlotDisaggTransfers, saveDisaggTransfers}} {
		if err := pl.save(runs, filepath.Join(dir, pl.name)); err != nil {
			return fmt.Errorf("simulate: %s: %w", pl.name, err)
		}
	}
	settle := ""
	for _, s := range runs {
		if len(s.SettleLatencies) > 0 {
			settle = PlotDisaggSettle
		}
	}
	if settle != "" {
		if err := saveDisaggSettle(runs, filepath.Join(dir, settle)); err != nil {
			return fmt.Errorf("simulate: %s: %w", settle, err)
		}
	}
	type runView struct {
		S     *DisaggSummary
		Table string
	}
	var views []runView
	for _, s := range runs {
		var b bytes.Buffer
		if err := s.WriteTable(&b); err != nil {
			return err
		}
		views = append(views, runView{S: s, Table: b.String()})
	}
	var page bytes.Buffer
	if err := disaggTemplate.Execute(&page, struct {
		Runs                      []runView
		Safety, Transfers, Settle string
		UCX                       *DisaggUCXStats
	}{views, PlotDisaggSafety, PlotDisaggTransfers, settle, runs[0].UCX}); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ReportIndex), page.Bytes(), 0o644)
}

// saveDisaggSafety plots, for every run, the pages freed while a writer may
// write (top), the writes that landed where they must not, with the
// corrupt pages read (middle), and the prefill side's source slots returned
// while a put may read them, with the puts that read one (bottom),
// cumulative over virtual time.
func saveDisaggSafety(runs []*DisaggSummary, path string) error {
	panels := []struct {
		title string
		at    func(DisaggSample) int
		final func(*DisaggSummary) int
	}{
		{"Pages freed while a writer may still write them (cumulative)",
			func(s DisaggSample) int { return s.FreedWhileWritable },
			func(s *DisaggSummary) int { return s.FreedWhileWritable }},
		{"Writes into free or re-lent pages, corrupt pages read (cumulative)",
			func(s DisaggSample) int { return s.WritesIntoFree + s.LateWrites + s.CorruptReads },
			func(s *DisaggSummary) int { return s.WritesIntoFree + s.LateWrites + s.CorruptReads }},
		{"Sources freed under a pending put, freed sources read (cumulative)",
			func(s DisaggSample) int { return s.SourcesFreedWhileRead + s.FreedSourceReads },
			func(s *DisaggSummary) int { return s.SourcesFreedWhileRead + s.FreedSourceReads }},
	}
	plots := make([]*plot.Plot, len(panels))
	legends := make([]*plot.Legend, len(panels))
	for k, pn := range panels {
		p := newPlot()
		p.Title.Text = pn.title
		p.X.Label.Text = clockOf(runs) + " ms"
		p.Y.Label.Text = "count"
		legend := newLegend()
		top := 0
		for _, s := range runs {
			pts := plotter.XYs{{X: 0, Y: 0}}
			for _, smp := range s.Timeline {
				pts = append(pts, plotter.XY{X: ms(smp.At), Y: float64(pn.at(smp))})
			}
			end := pn.final(s) // counted after the last sample too, as late writes landed
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

// saveDisaggTransfers plots, for every run, the attempts in flight (their
// pages lent, neither back nor contained: top) and those in doubt (contained,
// their pages never reused: bottom) over virtual time, as the driver
// recorded them each time another hundredth of the requests ended.
func saveDisaggTransfers(runs []*DisaggSummary, path string) error {
	panels := []struct {
		title string
		at    func(DisaggSample) int
		label func(*DisaggSummary) string
	}{
		{"Attempts in flight: pages lent, neither back nor contained",
			func(s DisaggSample) int { return s.InFlight },
			func(s *DisaggSummary) string {
				peak := 0
				for _, smp := range s.Timeline {
					peak = max(peak, smp.InFlight)
				}
				return fmt.Sprintf("%s manager: peak %d", s.Manager, peak)
			}},
		{"Attempts in doubt: contained, pages never reused (cumulative)",
			func(s DisaggSample) int { return s.InDoubt },
			func(s *DisaggSummary) string { return fmt.Sprintf("%s manager: %d", s.Manager, s.AttemptsContained) }},
	}
	plots := make([]*plot.Plot, len(panels))
	legends := make([]*plot.Legend, len(panels))
	for k, pn := range panels {
		p := newPlot()
		p.Title.Text = pn.title
		p.X.Label.Text = clockOf(runs) + " ms"
		p.Y.Label.Text = "attempts"
		legend := newLegend()
		top := 0
		for _, s := range runs {
			pts := plotter.XYs{{X: 0, Y: 0}}
			for _, smp := range s.Timeline {
				pts = append(pts, plotter.XY{X: ms(smp.At), Y: float64(pn.at(smp))})
				top = max(top, pn.at(smp))
			}
			line, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			line.Color = runColor(s.Manager)
			line.Width = vg.Points(2)
			p.Add(line)
			legend.Add(pn.label(s), line)
		}
		p.Y.Min, p.Y.Max = 0, float64(top)*1.1+1
		plots[k], legends[k] = p, legend
	}
	return savePlots(path, safetyPlotHeight, plots, legends)
}

// settleQuantiles is how many points of each run's distribution the settle
// plot draws: enough for a smooth line, few enough for a small file.
const settleQuantiles = 256

// saveDisaggSettle plots, for every run with settled attempts, the share of
// them settled within each virtual time since their submission (the
// empirical distribution of SettleLatencies), with the deadline plus grace,
// where kvready contains what has not settled, marked.
func saveDisaggSettle(runs []*DisaggSummary, path string) error {
	p := newPlot()
	p.Title.Text = "Attempts settled by each time since submission"
	p.X.Label.Text = clockOf(runs) + " ms since submission"
	p.Y.Label.Text = "share of attempts settled"
	legend := newLegend()
	for _, s := range runs {
		xs := s.SettleLatencies
		if len(xs) == 0 {
			continue
		}
		pts := plotter.XYs{{X: 0, Y: 0}}
		for i := 1; i <= settleQuantiles; i++ {
			q := float64(i) / settleQuantiles
			pts = append(pts, plotter.XY{X: ms(quantileOf(xs, q)), Y: q})
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = runColor(s.Manager)
		line.Width = vg.Points(2)
		p.Add(line)
		legend.Add(fmt.Sprintf("%s manager: p99 %s", s.Manager, formatDuration(quantileOf(xs, 0.99))), line)
	}
	p.Y.Min, p.Y.Max = 0, 1.08
	c := runs[0].Config
	if bound := c.Deadline + c.Grace; bound > 0 {
		x := ms(bound)
		p.X.Max = max(p.X.Max, x*1.05)
		mark, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: 1.08}})
		if err != nil {
			return err
		}
		mark.Color = color.RGBA{R: 200, A: 255}
		mark.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		label, err := plotter.NewLabels(plotter.XYLabels{XYs: []plotter.XY{{X: x, Y: 1.08}},
			Labels: []string{"deadline + grace " + formatDuration(bound)}})
		if err != nil {
			return err
		}
		label.TextStyle[0].Color = mark.Color
		label.TextStyle[0].XAlign = draw.XRight
		sans(&label.TextStyle[0].Font)
		p.Add(mark, label)
	}
	p.X.Min = 0
	return savePlots(path, reportPlotHeight, []*plot.Plot{p}, []*plot.Legend{legend})
}

// clockOf names the runs' clock: virtual over the simulated network, the
// machine's over UCX (a step is then a microsecond of wall-clock time).
func clockOf(runs []*DisaggSummary) string {
	if len(runs) > 0 && runs[0].UCX != nil {
		return "wall-clock"
	}
	return "virtual"
}

// quantileOf is the q-quantile of sorted durations (the nearest rank).
func quantileOf(sorted []time.Duration, q float64) time.Duration {
	i := min(int(q*float64(len(sorted))), len(sorted)-1)
	return sorted[max(i, 0)]
}

var disaggTemplate = template.Must(template.New("disagg").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>kvready simulate --disagg</title>
<style>body{font-family:"Liberation Sans",Arial,Helvetica,sans-serif;max-width:60em;margin:2em auto;padding:0 1em}
img{display:block;width:100%;height:auto}pre{background:#f4f4f4;padding:1em;overflow-x:auto}
.ok{color:#070}.bad{color:#b00}</style></head><body>
<h1>kvready simulate --disagg — prefill to decode, peer to peer</h1>
{{if .UCX}}<p>Two processes over UCX ({{.UCX.Transports}}, Checked mode): this one the decode side, the other the prefill process it started, whose Sender puts each request's pages from source slots it lends, straight into the decode side's pages. The run is on the machine's clock. The prefill process is killed mid-transfer (SIGKILL) and restarted as a new incarnation, which replays the dead life's last offers with their keys (vLLM #55470), and paused (SIGSTOP, then SIGCONT) past the deadline. An independent checker watches the pages themselves: the bytes of every page after every progress of the decode transport (where a put lands), and the transport's own record of whether a registration may still be written (not revoked with a fence: the decode process cannot see whether the other process will use a key it holds, so every page returned unrevoked counts) — and the prefill process says when it returned a source slot a put could still read.</p>
{{else}}<p>Each request's KV cache is written by its prefill writers straight into the decode side's pages over the simulated network (transfer/sim), with its faults: writers that fail and write on, never report or post after their DONE; DONEs lost, withheld, duplicated or replayed; reports before data; prefill processes restarted while their posted puts still land; cancels and deadlines. The honest writers are the prefill side's Senders, putting from staging slots their manager lends them. An independent checker watches the pages themselves: the bytes of every page after every network step, and the network's own record of whether a registration may still be written — and the source slots, with the network's record of whether a put may still read one.</p>
{{end}}{{range .Runs}}{{if .S.Safe}}<p class="ok">{{.S.Manager}} manager: the checker found no page freed while a writer could write it, no write into a free or re-lent page, no corrupt page read, and no source slot freed while a put could read it.</p>
{{else}}<p class="bad">{{.S.Manager}} manager: the checker found {{.S.FreedWhileWritable}} pages freed while a writer could write them, {{.S.WritesIntoFree}} writes into free pages, {{.S.LateWrites}} late writes into re-lent pages, {{.S.CorruptReads}} corrupt pages read as delivered, {{.S.SourcesFreedWhileRead}} source slots freed while a put could read them and {{.S.FreedSourceReads}} puts that read a freed source.</p>
{{end}}{{if .S.Interrupted}}<p class="bad">{{.S.Manager}} manager: interrupted; its summary covers the run so far.</p>
{{end}}{{end}}<h2>Safety over time{{if gt (len .Runs) 1}}: one workload{{end}}</h2>
<img src="{{.Safety}}" alt="pages freed while a writer may write, writes where they must not land, and source slots freed while a put may read them, over time">
{{if gt (len .Runs) 1}}<p>One workload: the same seed, requests, writers and behaviours for every attempt; the network's choices follow the same seed, and differ where the managers act differently.</p>
{{end}}<h2>Transfers in flight and in doubt</h2>
<img src="{{.Transfers}}" alt="attempts in flight and attempts in doubt over time">
<p>In flight: attempts whose pages are lent, neither back in the pool nor contained. In doubt: attempts whose writers never settled by the deadline plus grace, their pages contained for ever — what kvready_transfers_in_doubt counts in production (docs/operations.md). A manager that frees pages on the outcome has none in doubt: it frees what a writer may still write, and the checker counts it above.</p>
<h2>Submit to settled</h2>
{{if .Settle}}<img src="{{.Settle}}" alt="share of attempts settled by each virtual time since submission">
<p>From an attempt's submission to its pages back in the pool, as the manager returned them: kvready once the whole cohort of writers is proven settled, the naive manager at the outcome. Attempts in doubt never settle and are not counted. In production kvready_transfer_settle_latency_seconds measures the same span.</p>
{{else}}<p>No attempt settled after its submission in this run: no distribution to show.</p>
{{end}}{{range .Runs}}<h2>{{.S.Manager}} manager</h2>
<pre>{{.Table}}</pre>
{{end}}<p>See docs/simulate.md, "Disaggregated serving", for how to read this page and how the checker works.</p>
</body></html>
`))
