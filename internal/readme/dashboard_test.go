package readme

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// counterRate matches rate(...) or increase(...) of a counter, capturing the
// counter's name.
var counterRate = regexp.MustCompile(`\b(?:rate|irate|increase)\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)

// targetKind says what a dashboard query draws: "fraction" for the rate of a
// counter of seconds (seconds per second: a share of time), "rate" for the
// rate of any other counter (things per second), "" for anything else.
func targetKind(expr string) string {
	m := counterRate.FindStringSubmatch(expr)
	switch {
	case m == nil || strings.HasSuffix(m[1], "_bucket"):
		return ""
	case strings.HasSuffix(m[1], "_seconds_total"):
		return "fraction"
	default:
		return "rate"
	}
}

type grafanaPanel struct {
	ID      int    `json:"id"`
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Options struct {
		YAxis struct {
			Unit      string `json:"unit"`
			AxisLabel string `json:"axisLabel"`
		} `json:"yAxis"`
		CellValues struct {
			Unit string `json:"unit"`
		} `json:"cellValues"`
	} `json:"options"`
	FieldConfig struct {
		Defaults struct {
			Unit string   `json:"unit"`
			Min  *float64 `json:"min"`
			Max  *float64 `json:"max"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

// dashboardProblems returns what a reader of the dashboard would misread: a
// panel that draws a rate and a fraction on one axis, a fraction not drawn
// as a share (unit percentunit, 0 to 1), a heatmap whose buckets or cells
// have no unit, or whose title does not say it.
func dashboardProblems(panels []grafanaPanel) []string {
	var problems []string
	for _, p := range panels {
		where := p.Title
		kinds := map[string]bool{}
		for _, tg := range p.Targets {
			kinds[targetKind(tg.Expr)] = true
		}
		if kinds["rate"] && kinds["fraction"] {
			problems = append(problems, where+": draws a rate (things per second) and a fraction (seconds per second) on one axis")
		}
		if kinds["fraction"] {
			d := p.FieldConfig.Defaults
			if d.Unit != "percentunit" || d.Min == nil || *d.Min != 0 || d.Max == nil || *d.Max != 1 {
				problems = append(problems, where+": a fraction wants unit percentunit from 0 to 1")
			}
		}
		if p.Type == "heatmap" {
			if p.Options.YAxis.Unit == "" || p.Options.YAxis.AxisLabel == "" {
				problems = append(problems, where+": a heatmap names its buckets' unit (options.yAxis.unit and axisLabel)")
			}
			if p.Options.CellValues.Unit == "" {
				problems = append(problems, where+": a heatmap names what its cells count (options.cellValues.unit)")
			}
			if !strings.Contains(p.Title, "seconds") {
				problems = append(problems, where+": a heatmap's title names its unit")
			}
		}
	}
	return problems
}

// The Grafana dashboard never puts a rate and a fraction on one axis, draws
// a fraction as a share, and its heatmaps name their unit.
func TestDashboardUnits(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(root, "docs", "grafana", "kvready.json"))
	require.NoError(t, err)
	var d struct {
		Panels []grafanaPanel `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &d))
	require.NotEmpty(t, d.Panels)
	heatmaps, fractions := 0, 0
	for _, p := range d.Panels {
		if p.Type == "heatmap" {
			heatmaps++
		}
		for _, tg := range p.Targets {
			if targetKind(tg.Expr) == "fraction" {
				fractions++
			}
		}
	}
	assert.Equal(t, 2, heatmaps, "readiness and fence latency")
	assert.Positive(t, fractions, "the share of time the store was down")
	assert.Empty(t, dashboardProblems(d.Panels))

	// The check finds what it exists for.
	var mixed []grafanaPanel
	require.NoError(t, json.Unmarshal([]byte(`[{"title":"mixed","type":"timeseries","targets":[
		{"expr":"sum(rate(kvready_store_fast_failures_total[5m]))"},{"expr":"sum(rate(kvready_store_unavailable_seconds_total[5m]))"}]},
		{"title":"bare heatmap","type":"heatmap","targets":[{"expr":"sum by (le) (increase(kvready_fence_latency_seconds_bucket[5m]))"}]}]`), &mixed))
	assert.Len(t, dashboardProblems(mixed), 5)
}
