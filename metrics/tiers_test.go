package metrics_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/metrics"
)

// The conversion an embedder writes over backend/tiers Stats compiles: the
// two types have the same fields, so a field added to one and not the other
// fails here (and in simulate, which converts the same way).
var _ = func(s tiers.TierStats) metrics.TierStats { return metrics.TierStats(s) }

// tierNotExported is every metrics.TierStats field the collector does not
// export as a value of its own, with the reason. A field in neither the
// exposition nor this list fails TestEveryTierCounterIsExported.
var tierNotExported = map[string]string{
	"Name":   "the tier label of every series",
	"Handed": "every unit handed ends a hit, a miss or a failure within the stack's wait: kvready_tier_fetch_units_total summed over result (a tier that gives no outcome is counted failed once the wait ends)",
	"Sized":  "whether kvready_tier_bytes is sent for the tier (TestTierSeries)",
}

// tierSeries gathers c and returns its kvready_tier_* series as
// "family{label=value,...} value" lines, sorted, the device label aside.
func tierSeries(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	var out []string
	for _, mf := range gather(t, c) {
		if !strings.HasPrefix(mf.GetName(), "kvready_tier_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				if lp.GetName() != "device" {
					ls = append(ls, lp.GetName()+"="+lp.GetValue())
				}
			}
			v := m.GetCounter().GetValue()
			if m.Gauge != nil {
				v = m.GetGauge().GetValue()
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", mf.GetName(), strings.Join(ls, ","), v))
		}
	}
	return out
}

// Every counter of metrics.TierStats is exported per tier: filled with a
// distinct value it shows in a series labelled with its tier, and changing
// it alone changes what a scrape sees. A new field neither exported nor
// listed in tierNotExported with its reason fails.
func TestEveryTierCounterIsExported(t *testing.T) {
	s := metrics.TierStats{Name: "local", Sized: true}
	v := reflect.ValueOf(&s).Elem()
	distinct := func(i int) uint64 { return uint64(9_000_000 + 1000*i) }
	for i := range v.NumField() {
		if _, ok := tierNotExported[v.Type().Field(i).Name]; !ok {
			set(v.Field(i), distinct(i))
		}
	}
	for name := range tierNotExported {
		_, ok := v.Type().FieldByName(name)
		assert.True(t, ok, "tierNotExported lists %s, which metrics.TierStats no longer has", name)
	}
	c := shown(prometheus.Labels{"device": "0"}, handmade())
	c.WatchTiers(func() []metrics.TierStats { return []metrics.TierStats{s} })
	base := tierSeries(t, c)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if _, ok := tierNotExported[f.Name]; ok {
			continue
		}
		found := false
		for _, line := range base {
			found = found || (strings.Contains(line, "tier=local") && strings.HasSuffix(line, fmt.Sprintf(" %g", float64(distinct(i)))))
		}
		if !found {
			t.Errorf("TierStats.%s = %d: no series of tier local carries it; export it (metrics/tiers.go) or list it in tierNotExported with the reason", f.Name, distinct(i))
			continue
		}
		old := reflect.ValueOf(v.Field(i).Interface())
		set(v.Field(i), distinct(i)+1)
		assert.NotEqual(t, base, tierSeries(t, c), "TierStats.%s: changing it changes nothing a scrape sees", f.Name)
		v.Field(i).Set(old)
	}
}

// TestTierSeries: each watched tier's series carry what the source says at
// each scrape under its own tier label; kvready_tier_bytes only for a tier
// that reports its bytes; nothing without a source; a tier named twice fails
// the scrape naming it, and nothing panics.
func TestTierSeries(t *testing.T) {
	c := shown(prometheus.Labels{"device": "0"}, handmade())
	assert.Empty(t, tierSeries(t, c), "no tiers watched: no tier series")
	stats := []metrics.TierStats{
		{Name: "mem", Handed: 10, Hits: 6, Misses: 3, Failed: 1, Published: 4, Promoted: 3, PromoteSkipped: 1, Bytes: 448, Sized: true, Evictions: 2},
		{Name: "redis", Handed: 4, Hits: 3, Misses: 1, Published: 4, PublishFailed: 1, Rejected: 5, NoOutcome: 6, Violations: 7, CancelErrors: 8},
	}
	c.WatchTiers(func() []metrics.TierStats { return stats })
	assert.ElementsMatch(t, []string{
		"kvready_tier_bytes{tier=mem} 448",
		"kvready_tier_evictions_total{tier=mem} 2",
		"kvready_tier_evictions_total{tier=redis} 0",
		"kvready_tier_faults_total{fault=cancel_error,tier=mem} 0",
		"kvready_tier_faults_total{fault=no_outcome,tier=mem} 0",
		"kvready_tier_faults_total{fault=rejected,tier=mem} 0",
		"kvready_tier_faults_total{fault=violation,tier=mem} 0",
		"kvready_tier_faults_total{fault=cancel_error,tier=redis} 8",
		"kvready_tier_faults_total{fault=no_outcome,tier=redis} 6",
		"kvready_tier_faults_total{fault=rejected,tier=redis} 5",
		"kvready_tier_faults_total{fault=violation,tier=redis} 7",
		"kvready_tier_fetch_units_total{result=failed,tier=mem} 1",
		"kvready_tier_fetch_units_total{result=hit,tier=mem} 6",
		"kvready_tier_fetch_units_total{result=miss,tier=mem} 3",
		"kvready_tier_fetch_units_total{result=failed,tier=redis} 0",
		"kvready_tier_fetch_units_total{result=hit,tier=redis} 3",
		"kvready_tier_fetch_units_total{result=miss,tier=redis} 1",
		"kvready_tier_publish_units_total{kind=promotion,result=accepted,tier=mem} 3",
		"kvready_tier_publish_units_total{kind=promotion,result=failed,tier=mem} 0",
		"kvready_tier_publish_units_total{kind=promotion,result=skipped,tier=mem} 1",
		"kvready_tier_publish_units_total{kind=write_through,result=accepted,tier=mem} 4",
		"kvready_tier_publish_units_total{kind=write_through,result=failed,tier=mem} 0",
		"kvready_tier_publish_units_total{kind=promotion,result=accepted,tier=redis} 0",
		"kvready_tier_publish_units_total{kind=promotion,result=failed,tier=redis} 0",
		"kvready_tier_publish_units_total{kind=promotion,result=skipped,tier=redis} 0",
		"kvready_tier_publish_units_total{kind=write_through,result=accepted,tier=redis} 4",
		"kvready_tier_publish_units_total{kind=write_through,result=failed,tier=redis} 1",
	}, tierSeries(t, c))
	stats[0].Hits = 7
	v, ok := value(gather(t, c), "kvready_tier_fetch_units_total", map[string]string{"tier": "mem", "result": "hit"})
	assert.True(t, ok)
	assert.Equal(t, 7.0, v, "asked again at each scrape")
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)

	stats[1].Name = "mem"
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	_, err = reg.Gather()
	require.Error(t, err, "two tiers under one name")
	assert.Contains(t, err.Error(), `two tiers are named "mem"`)

	c.WatchTiers(nil)
	assert.Empty(t, tierSeries(t, c))
}
