package metrics_test

// The operator docs load: docs/alert-rules.yml is a valid Prometheus rules
// file and docs/grafana/kvready.json a Grafana dashboard, and every
// expression in them parses as PromQL and names only metrics the collector
// exports.
//
// The rules file is checked against the schema of Prometheus's rulefmt
// (strict YAML: unknown keys refused), its `for` durations with Prometheus's
// own parser (prometheus/common/model) and its annotation templates with
// text/template, as Prometheus expands them. Expressions are parsed with
// VictoriaMetrics' metricsql, a small well-kept PromQL parser: the Prometheus
// module's own (promql/parser, model/rulefmt) would pull dozens of modules and
// raise the go directive of the whole project. metricsql accepts a superset of
// PromQL, so the test also refuses any function outside PromQL and any range
// function without its range.

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/VictoriaMetrics/metricsql"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/kvready/kvready/metrics"
)

// ruleFile is Prometheus's rules file format (model/rulefmt).
type ruleFile struct {
	Groups []struct {
		Name        string            `yaml:"name"`
		Interval    string            `yaml:"interval"`
		Limit       int               `yaml:"limit"`
		QueryOffset string            `yaml:"query_offset"`
		Labels      map[string]string `yaml:"labels"`
		Rules       []struct {
			Record        string            `yaml:"record"`
			Alert         string            `yaml:"alert"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for"`
			KeepFiringFor string            `yaml:"keep_firing_for"`
			Labels        map[string]string `yaml:"labels"`
			Annotations   map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

var (
	metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// promQLFunctions are the PromQL functions and aggregations the docs may use.
var promQLFunctions = []string{
	"abs", "absent", "avg", "avg_over_time", "ceil", "changes", "clamp_min", "clamp_max", "count", "count_over_time",
	"delta", "deriv", "floor", "histogram_quantile", "idelta", "increase", "irate", "label_replace", "max",
	"max_over_time", "min", "min_over_time", "predict_linear", "quantile", "rate", "resets", "round", "sum",
	"sum_over_time", "topk", "bottomk", "vector", "time", "timestamp",
}

// checkExpr parses a PromQL expression and returns the metric names it reads.
func checkExpr(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := metricsql.Parse(expr)
	if !assert.NoError(t, err, "%s: %q does not parse", where, expr) {
		return nil
	}
	var names []string
	metricsql.VisitAll(e, func(x metricsql.Expr) {
		switch x := x.(type) {
		case *metricsql.MetricExpr:
			for _, lfs := range x.LabelFilterss {
				for _, lf := range lfs {
					if lf.Label == "__name__" {
						names = append(names, lf.Value)
					}
				}
			}
		case *metricsql.AggrFuncExpr:
			assert.Contains(t, promQLFunctions, strings.ToLower(x.Name), "%s: %s is not a PromQL aggregation", where, x.Name)
		case *metricsql.FuncExpr:
			name := strings.ToLower(x.Name)
			assert.Contains(t, promQLFunctions, name, "%s: %s is not a PromQL function", where, x.Name)
			if metricsql.IsRollupFunc(name) {
				i := metricsql.GetRollupArgIdx(x)
				if assert.Less(t, i, len(x.Args), "%s: %s has no series argument", where, name) {
					re, ok := x.Args[i].(*metricsql.RollupExpr)
					assert.True(t, ok && re.Window != nil, "%s: %s needs a range, e.g. [5m] (PromQL requires one)", where, name)
				}
			}
		}
	})
	assert.NotEmpty(t, names, "%s: %q reads no metric", where, expr)
	return names
}

// exported reports whether name is a series name the collector exports: a
// family, or a histogram family's _bucket, _sum or _count.
func exported(name string) bool {
	families := metrics.Names()
	if slices.Contains(families, name) {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && strings.HasSuffix(base, "_seconds") && slices.Contains(families, base) {
			return true
		}
	}
	return false
}

// headingAnchors returns the GitHub anchors of the markdown file's headings.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range title {
			switch {
			case r == ' ' || r == '-':
				b.WriteRune('-')
			case r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
				b.WriteRune(r)
			}
		}
		anchors[b.String()] = true
	}
	return anchors
}

func TestAlertRulesLoad(t *testing.T) {
	raw, err := os.ReadFile("../docs/alert-rules.yml")
	require.NoError(t, err)
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	var rf ruleFile
	require.NoError(t, dec.Decode(&rf), "the rules file follows Prometheus's format, no unknown keys")
	require.NotEmpty(t, rf.Groups)
	anchors := headingAnchors(t, "../docs/operations.md")
	groups := map[string]bool{}
	alerts := map[string]string{} // alert name -> expr
	for _, g := range rf.Groups {
		require.NotEmpty(t, g.Name, "a group has a name")
		require.False(t, groups[g.Name], "group %q defined twice", g.Name)
		groups[g.Name] = true
		require.NotEmpty(t, g.Rules, "group %q has rules", g.Name)
		for i, r := range g.Rules {
			where := fmt.Sprintf("group %s rule %d (%s%s)", g.Name, i, r.Alert, r.Record)
			require.True(t, (r.Alert == "") != (r.Record == ""), "%s: exactly one of alert and record", where)
			if r.Record != "" {
				assert.Regexp(t, metricName, r.Record, where)
			} else {
				assert.Regexp(t, labelName, r.Alert, where)
				assert.NotContains(t, alerts, r.Alert, "%s: alert defined twice", where)
				alerts[r.Alert] = r.Expr
				assert.Contains(t, []string{"page", "warning"}, r.Labels["severity"], "%s: severity", where)
				assert.NotEmpty(t, r.Annotations["summary"], "%s: a summary", where)
				if rb := r.Annotations["runbook"]; assert.NotEmpty(t, rb, "%s: a runbook", where) {
					anchor, ok := strings.CutPrefix(rb, "docs/operations.md#")
					assert.True(t, ok && anchors[anchor], "%s: runbook %s names no heading of docs/operations.md", where, rb)
				}
			}
			for _, d := range []string{r.For, r.KeepFiringFor} {
				if d != "" {
					_, err := model.ParseDuration(d)
					assert.NoError(t, err, "%s: duration %q", where, d)
				}
			}
			for k := range r.Labels {
				assert.Regexp(t, labelName, k, where)
			}
			for k, v := range r.Annotations {
				assert.Regexp(t, labelName, k, where)
				// Prometheus defines these variables before expanding.
				_, err := template.New(k).Option("missingkey=zero").
					Parse("{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}" + v)
				assert.NoError(t, err, "%s: annotation %s", where, k)
			}
			for _, name := range checkExpr(t, where, r.Expr) {
				assert.True(t, exported(name), "%s: %s is not a metric the collector exports", where, name)
			}
		}
	}
	// What the issue asks the rules to catch.
	for what, metric := range map[string]string{
		"quarantined slots growing": "kvready_slots", "a containment fired": "kvready_containments_total",
		"ungrantable leases": "kvready_ungrantable_leases_total", "readiness p99": "kvready_readiness_latency_seconds_bucket",
		"a stuck transfer":         "kvready_oldest_unfenced_age_seconds",
		"the store unavailable":    "kvready_store_reachable",
		"a peer transfer in doubt": "kvready_transfers_in_doubt",
		"transfer reports refused": "kvready_transfer_reports_total",
	} {
		found := false
		for _, expr := range alerts {
			found = found || strings.Contains(expr, metric)
		}
		assert.True(t, found, "an alert for %s (on %s)", what, metric)
	}
}

// grafanaVars stand in for the dashboard's variables when its queries are
// parsed.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$__interval", "1m", "$device", ".*", "${device}", ".*")

type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Title      string `json:"title"`
		Type       string `json:"type"`
		Datasource struct {
			Type string `json:"type"`
		} `json:"datasource"`
		GridPos struct{ X, Y, W, H int } `json:"gridPos"`
		Targets []struct {
			RefID  string `json:"refId"`
			Expr   string `json:"expr"`
			Format string `json:"format"`
		} `json:"targets"`
	} `json:"panels"`
}

func TestGrafanaDashboardLoads(t *testing.T) {
	raw, err := os.ReadFile("../docs/grafana/kvready.json")
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(raw, &d), "the dashboard is JSON")
	require.NotEmpty(t, d.Title)
	require.NotEmpty(t, d.UID)
	require.Positive(t, d.SchemaVersion)
	require.NotEmpty(t, d.Panels)

	labelValues := regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*), *([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		m := labelValues.FindStringSubmatch(fmt.Sprint(q["query"]))
		if assert.NotNil(t, m, "variable %s: a label_values(metric, label) query", v.Name) {
			assert.True(t, exported(m[1]), "variable %s reads %s, which the collector does not export", v.Name, m[1])
		}
	}

	ids := map[int]bool{}
	var cells [][4]int
	kinds := map[string][]string{} // panel type -> metrics it reads
	for _, p := range d.Panels {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		assert.False(t, ids[p.ID], "%s: id used twice", where)
		ids[p.ID] = true
		assert.Contains(t, []string{"timeseries", "stat", "heatmap", "gauge", "bargauge", "table"}, p.Type, where)
		assert.Equal(t, "prometheus", p.Datasource.Type, where)
		g := p.GridPos
		assert.True(t, g.W > 0 && g.H > 0 && g.X >= 0 && g.X+g.W <= 24, "%s: gridPos %+v", where, g)
		for _, c := range cells {
			overlap := g.X < c[0]+c[2] && c[0] < g.X+g.W && g.Y < c[1]+c[3] && c[1] < g.Y+g.H
			assert.False(t, overlap, "%s overlaps another panel", where)
		}
		cells = append(cells, [4]int{g.X, g.Y, g.W, g.H})
		require.NotEmpty(t, p.Targets, "%s: a query", where)
		for _, tg := range p.Targets {
			for _, name := range checkExpr(t, where+" "+tg.RefID, grafanaVars.Replace(tg.Expr)) {
				assert.True(t, exported(name), "%s: %s is not a metric the collector exports", where, name)
				kinds[p.Type] = append(kinds[p.Type], name)
			}
			if p.Type == "heatmap" {
				assert.Equal(t, "heatmap", tg.Format, "%s: a heatmap reads buckets as a heatmap", where)
			}
		}
	}
	// The panels the issue asks for.
	assert.Contains(t, kinds["timeseries"], "kvready_leases", "leases by state")
	assert.Contains(t, kinds["timeseries"], "kvready_outcomes_total", "outcome rates")
	assert.Contains(t, kinds["timeseries"], "kvready_slots", "quarantine")
	assert.Contains(t, kinds["heatmap"], "kvready_readiness_latency_seconds_bucket", "readiness latency heatmap")
	assert.Contains(t, kinds["heatmap"], "kvready_fence_latency_seconds_bucket", "fence latency heatmap")
	assert.Contains(t, kinds["timeseries"], "kvready_oldest_unfenced_age_seconds", "the oldest unfenced lease's age")
	assert.Contains(t, kinds["timeseries"], "kvready_in_flight_bytes", "bytes in flight")
	assert.Contains(t, kinds["timeseries"], "kvready_quarantined_bytes", "bytes quarantined")
	assert.Contains(t, kinds["timeseries"], "kvready_store_reachable", "the store reachable")
	assert.Contains(t, kinds["timeseries"], "kvready_store_fast_failures_total", "requests failed fast")
	assert.Contains(t, kinds["timeseries"], "kvready_transfers_in_doubt", "peer transfers in doubt")
	assert.Contains(t, kinds["timeseries"], "kvready_transfer_settle_latency_seconds_bucket", "peer transfers' submit-to-settled latency")
}

// Every family the collector exports has its row in the table of
// docs/operations.md, of the type a scrape shows: an operator reads what a
// series means, and what healthy looks like, there.
func TestEveryFamilyIsDocumented(t *testing.T) {
	raw, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	rows := map[string]string{} // family -> type column
	for _, line := range strings.Split(string(raw), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`kvready_") {
			continue
		}
		rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.TrimSpace(cells[2])
	}
	c := shown(nil, handmade())
	c.WatchStore(func() metrics.StoreHealth { return metrics.StoreHealth{} })
	c.WatchTiers(func() []metrics.TierStats { return []metrics.TierStats{{Name: "local", Sized: true}} })
	c.WatchTransfers(func() metrics.TransferStats {
		return metrics.TransferStats{Receiver: &metrics.TransferReceiverStats{}, Sender: &metrics.TransferSenderStats{}}
	})
	mfs := gather(t, c)
	require.Len(t, mfs, len(metrics.Names()), "every family sent")
	for _, mf := range mfs {
		typ, ok := rows[mf.GetName()]
		if !assert.True(t, ok, "%s has no row in the table of docs/operations.md", mf.GetName()) {
			continue
		}
		assert.Equal(t, strings.ToLower(mf.GetType().String()), typ, "%s: the type docs/operations.md gives", mf.GetName())
	}
}
