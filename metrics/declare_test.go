package metrics_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvready/kvready/readiness"
)

// notExported is every readiness.Stats leaf the collector does not export as
// itself, with its reason. A leaf in neither the exposition nor this list
// fails TestEveryCounterIsExported.
var notExported = func() map[string]string {
	m := map[string]string{
		"SlotsFree":        "exported per pool group from Snapshot.Groups (kvready_slots{state=\"free\"}), whose sum it is (TestCollectorMatchesStats)",
		"SlotsHeld":        "exported per pool group (kvready_slots{state=\"held\"}), as SlotsFree",
		"SlotsQuarantined": "exported per pool group (kvready_slots{state=\"quarantined\"}), as SlotsFree",
		"Outcomes[0]":      "NoOutcome: never latched, so never counted",
	}
	for _, h := range []string{"FenceLatency", "ReadyLatency", "FailureLatency"} {
		for i := 37; i < 40; i++ {
			m[fmt.Sprintf("%s.Counts[%d]", h, i)] = "above the top bucket bound (2^36 ns, about 69 s): counted in +Inf alone, which is Total"
		}
	}
	return m
}()

// statLeaf is one leaf of readiness.Stats: its path (Stats.FetcherFaults.Panics
// is "FetcherFaults.Panics", an array element "Leases[3]").
type statLeaf struct {
	path string
	v    reflect.Value
}

func statLeaves(v reflect.Value, path string, out *[]statLeaf) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			p := v.Type().Field(i).Name
			if path != "" {
				p = path + "." + p
			}
			statLeaves(v.Field(i), p, out)
		}
	case reflect.Array:
		for i := range v.Len() {
			statLeaves(v.Index(i), fmt.Sprintf("%s[%d]", path, i), out)
		}
	default:
		*out = append(*out, statLeaf{path, v})
	}
}

// exposition is what the collector sends for s, as text, without the
// wall-clock timestamp of the round (it moves between two gathers).
func exposition(t *testing.T, s *readiness.Snapshot) ([]*dto.MetricFamily, string) {
	mfs := gather(t, shown(prometheus.Labels{"device": "0"}, s))
	var b strings.Builder
	for _, mf := range mfs {
		if mf.GetName() != "kvready_last_round_timestamp_seconds" {
			b.WriteString(mf.String())
		}
	}
	return mfs, b.String()
}

// Every leaf of readiness.Stats — each counter, each array element, each
// BackendFaults count, each histogram's buckets, total and sum — is exported:
// filled with a distinct value, a counter or gauge carries that value, and
// changing the leaf alone changes what a scrape sees. A leaf neither exported
// nor listed in notExported with its reason fails: a new counter fails until
// the collector exports it.
func TestEveryCounterIsExported(t *testing.T) {
	s := &readiness.Snapshot{Groups: []readiness.GroupSlots{{Free: 1, SlotBytes: 64}}, Rounds: 3, At: time.Unix(1700000000, 0)}
	var ls []statLeaf
	statLeaves(reflect.ValueOf(&s.Stats).Elem(), "", &ls)
	distinct := func(i int) uint64 { return uint64(7_000_000 + 1000*i) }
	for i, l := range ls {
		set(l.v, distinct(i))
	}
	for name := range notExported {
		found := false
		for _, l := range ls {
			found = found || l.path == name
		}
		if !found {
			t.Errorf("notExported lists %s, which readiness.Stats no longer has", name)
		}
	}
	mfs, base := exposition(t, s)
	samples := map[float64]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			samples[m.GetCounter().GetValue()] = true
			samples[m.GetGauge().GetValue()] = true
		}
	}
	for i, l := range ls {
		if _, ok := notExported[l.path]; ok {
			continue
		}
		histogram := strings.Contains(l.path, "Latency.")
		if !histogram && l.v.Kind() != reflect.Bool && !samples[float64(distinct(i))] {
			t.Errorf("readiness.Stats.%s = %d: no series the collector sends carries it; export it (metrics/collector.go) or list it in notExported with the reason", l.path, distinct(i))
			continue
		}
		old := reflect.ValueOf(l.v.Interface())
		set(l.v, distinct(i)+1)
		if _, got := exposition(t, s); got == base {
			t.Errorf("readiness.Stats.%s: changing it changes nothing a scrape sees; export it (metrics/collector.go) or list it in notExported with the reason", l.path)
		}
		l.v.Set(old)
	}
}

// set writes n into an integer leaf, and n's parity into a bool.
func set(v reflect.Value, n uint64) {
	switch {
	case v.Kind() == reflect.Bool:
		v.SetBool(n%2 == 1)
	case v.CanInt():
		v.SetInt(int64(n))
	default:
		v.SetUint(n)
	}
}
