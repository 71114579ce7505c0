package metrics_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvready/kvready/metrics"
	"github.com/kvready/kvready/readiness"
)

// handmade is a snapshot whose every counter has its own value, so that a
// field exported under the wrong name shows.
func handmade() *readiness.Snapshot {
	s := &readiness.Snapshot{
		Groups: []readiness.GroupSlots{{Free: 5, Held: 2, Quarantined: 1, SlotBytes: 512}, {Free: 7, Held: 0, Quarantined: 3, SlotBytes: 64}},
		Rounds: 41,
		At:     time.Unix(1700000000, 500_000_000),
	}
	s.InFlight = readiness.InFlight{Leases: 3, Bytes: 4096, Oldest: time.Unix(1699999998, 0)}
	st := &s.Stats
	st.Leases[readiness.StateWaiting], st.Leases[readiness.StateRequested], st.Leases[readiness.StateQuarantined] = 3, 2, 1
	st.Lent, st.Released, st.QuarantinedLeases = 101, 95, 1
	st.Outcomes[readiness.Served], st.Outcomes[readiness.Partial], st.Outcomes[readiness.Missed] = 60, 11, 12
	st.Outcomes[readiness.Failed], st.Outcomes[readiness.Cancelled], st.Outcomes[readiness.Rejected] = 4, 5, 6
	st.Outcomes[readiness.TimedOut], st.Outcomes[readiness.Violation] = 7, 8
	st.QuiesceCalls, st.QuiesceRetries, st.Unproven = 202, 13, 14
	st.Containments, st.Ungrantable, st.StaleEvidence = 15, 16, 17
	st.Refused, st.Violations, st.InvariantBreaches = 18, 19, 0
	st.Recovered, st.QuiesceTimeouts, st.CancelRequests, st.CancelErrors = 20, 21, 22, 23
	st.Outstanding, st.MaxOutstanding, st.Halted = 24, 25, true
	st.SlotsInherited = 33
	st.Handoffs, st.QuiesceProbes = 26, 27
	st.FetcherFaults = readiness.BackendFaults{Violations: 28, Panics: 29, RepeatedCompletions: 30, EarlyCompletions: 31}
	st.PublisherFaults.Panics = 32
	s.Moves[causeNamed("slots_granted")] = 99
	s.Moves[causeNamed("[fetch]")] = 77
	return s
}

// shown returns a collector that was shown s by hand, as no engine ever
// answers its scrapes: it never waits for one.
func shown(labels prometheus.Labels, s *readiness.Snapshot) *metrics.Collector {
	c := metrics.New(labels)
	c.MaxWait = 0
	c.Observe(s)
	return c
}

func TestCollectorExportsTheSnapshot(t *testing.T) {
	c := shown(prometheus.Labels{"device": "3"}, handmade())
	want := `
# HELP kvready_outcomes_total Outcomes latched, by kind. A miss is never a failure.
# TYPE kvready_outcomes_total counter
kvready_outcomes_total{device="3",outcome="cancelled"} 5
kvready_outcomes_total{device="3",outcome="failed"} 4
kvready_outcomes_total{device="3",outcome="missed"} 12
kvready_outcomes_total{device="3",outcome="partial"} 11
kvready_outcomes_total{device="3",outcome="rejected"} 6
kvready_outcomes_total{device="3",outcome="served"} 60
kvready_outcomes_total{device="3",outcome="timeout"} 7
kvready_outcomes_total{device="3",outcome="violation"} 8
# HELP kvready_slots Staging slots by pool group and state: free, held (lent) or quarantined (out of circulation for ever).
# TYPE kvready_slots gauge
kvready_slots{device="3",group="0",state="free"} 5
kvready_slots{device="3",group="0",state="held"} 2
kvready_slots{device="3",group="0",state="quarantined"} 1
kvready_slots{device="3",group="1",state="free"} 7
kvready_slots{device="3",group="1",state="held"} 0
kvready_slots{device="3",group="1",state="quarantined"} 3
# HELP kvready_quiesce_calls_total Quiesce calls made to the backends (one per batch).
# TYPE kvready_quiesce_calls_total counter
kvready_quiesce_calls_total{device="3"} 202
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want),
		"kvready_outcomes_total", "kvready_slots", "kvready_quiesce_calls_total"))

	mfs := gather(t, c)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"kvready_leases", map[string]string{"state": "waiting"}, 3},
		{"kvready_leases", map[string]string{"state": "requested"}, 2},
		{"kvready_leases", map[string]string{"state": "quarantined"}, 1},
		{"kvready_leases", map[string]string{"state": "released"}, 0},
		{"kvready_transitions_total", map[string]string{"event": "slots_granted"}, 99},
		{"kvready_transitions_total", map[string]string{"event": "[fetch]"}, 77},
		{"kvready_transitions_total", map[string]string{"event": "close"}, 0},
		{"kvready_leases_lent_total", nil, 101},
		{"kvready_leases_released_total", nil, 95},
		{"kvready_leases_quarantined_total", nil, 1},
		{"kvready_quiesce_retries_total", nil, 13},
		{"kvready_quiesce_unproven_total", nil, 14},
		{"kvready_containments_total", nil, 15},
		{"kvready_ungrantable_leases_total", nil, 16},
		{"kvready_stale_evidence_total", nil, 17},
		{"kvready_refused_evidence_total", nil, 18},
		{"kvready_contract_violations_total", nil, 19},
		{"kvready_invariant_breaches_total", nil, 0},
		{"kvready_rounds_total", nil, 41},
		{"kvready_recoveries_total", nil, 20},
		{"kvready_quiesce_timeouts_total", nil, 21},
		{"kvready_cancel_requests_total", nil, 22},
		{"kvready_cancel_errors_total", nil, 23},
		{"kvready_backend_outstanding", nil, 24},
		{"kvready_handoffs_total", nil, 26},
		{"kvready_quiesce_probes_total", nil, 27},
		{"kvready_backend_faults_total", map[string]string{"backend": "fetcher", "fault": "violation"}, 28},
		{"kvready_backend_faults_total", map[string]string{"backend": "fetcher", "fault": "panic"}, 29},
		{"kvready_backend_faults_total", map[string]string{"backend": "fetcher", "fault": "repeated_completion"}, 30},
		{"kvready_backend_faults_total", map[string]string{"backend": "fetcher", "fault": "early_completion"}, 31},
		{"kvready_backend_faults_total", map[string]string{"backend": "publisher", "fault": "panic"}, 32},
		{"kvready_backend_faults_total", map[string]string{"backend": "publisher", "fault": "violation"}, 0},
		{"kvready_backend_outstanding_limit", nil, 25},
		{"kvready_slots_inherited", nil, 33},
		{"kvready_halted", nil, 1},
		{"kvready_in_flight_leases", nil, 3},
		{"kvready_in_flight_bytes", nil, 4096},
		{"kvready_quarantined_bytes", nil, 1*512 + 3*64},
		{"kvready_oldest_unfenced_age_seconds", map[string]string{"clock": "wall"}, 2.5},
	} {
		t.Run(fmt.Sprintf("%s%v", tc.name, tc.labels), func(t *testing.T) {
			got, ok := value(mfs, tc.name, tc.labels)
			require.True(t, ok, "no such series")
			assert.Equal(t, tc.want, got)
		})
	}
	assert.Len(t, series(mfs, "kvready_leases"), int(readiness.NumStates), "one series per state")
	assert.Len(t, series(mfs, "kvready_transitions_total"), readiness.NumCauses, "one series per cause")
	assert.Len(t, series(mfs, "kvready_outcomes_total"), 8, "one series per outcome kind, none for 'none'")
}

func TestCollectorHistogramBuckets(t *testing.T) {
	s := handmade()
	h := &s.Stats.ReadyLatency
	// 0 ns; two in [512, 1024) ns; three in [1024, 2048) ns; four in
	// [2^19, 2^20) ns (about 0.5 to 1 ms); five beyond every bound.
	h.Counts[0], h.Counts[10], h.Counts[11], h.Counts[20], h.Counts[39] = 1, 2, 3, 4, 5
	h.Total, h.Sum = 15, 7_500_000_000
	c := shown(nil, s)
	want := `
# HELP kvready_readiness_latency_seconds From Lend to readiness being answerable (every local copy landed), for leases that did not fail (served, partial, missed). In seconds of the engine's clock, named by the clock label: wall is the system clock; virtual a simulated clock (kvready simulate over the in-memory backend), whose seconds are simulated time, not wall time.
# TYPE kvready_readiness_latency_seconds histogram
kvready_readiness_latency_seconds_bucket{clock="wall",le="1.023e-06"} 3
kvready_readiness_latency_seconds_bucket{clock="wall",le="4.095e-06"} 6
kvready_readiness_latency_seconds_bucket{clock="wall",le="1.6383e-05"} 6
kvready_readiness_latency_seconds_bucket{clock="wall",le="6.5535e-05"} 6
kvready_readiness_latency_seconds_bucket{clock="wall",le="0.000262143"} 6
kvready_readiness_latency_seconds_bucket{clock="wall",le="0.001048575"} 10
kvready_readiness_latency_seconds_bucket{clock="wall",le="0.004194303"} 10
kvready_readiness_latency_seconds_bucket{clock="wall",le="0.016777215"} 10
kvready_readiness_latency_seconds_bucket{clock="wall",le="0.067108863"} 10
kvready_readiness_latency_seconds_bucket{clock="wall",le="0.268435455"} 10
kvready_readiness_latency_seconds_bucket{clock="wall",le="1.073741823"} 10
kvready_readiness_latency_seconds_bucket{clock="wall",le="4.294967295"} 10
kvready_readiness_latency_seconds_bucket{clock="wall",le="17.179869183"} 10
kvready_readiness_latency_seconds_bucket{clock="wall",le="68.719476735"} 10
kvready_readiness_latency_seconds_bucket{clock="wall",le="+Inf"} 15
kvready_readiness_latency_seconds_sum{clock="wall"} 7.5
kvready_readiness_latency_seconds_count{clock="wall"} 15
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "kvready_readiness_latency_seconds"))
}

// The series measured on the engine's clock name it: wall by default, virtual
// once the collector is told (kvready simulate over the in-memory backend),
// and their HELP says what the label means. The age of the oldest unfenced
// lease is the round's time less its submission, both on that clock; 0 when
// nothing is in flight.
func TestCollectorNamesTheEngineClock(t *testing.T) {
	s := handmade()
	c := shown(nil, s)
	for _, clock := range []metrics.Clock{metrics.WallClock, metrics.VirtualClock, metrics.WallClock} {
		c.SetClock(clock)
		mfs := gather(t, c)
		for _, name := range []string{"kvready_readiness_latency_seconds", "kvready_fence_latency_seconds", "kvready_oldest_unfenced_age_seconds"} {
			m := only(t, mfs, name)
			assert.Equal(t, clock.String(), labelOf(m, "clock"), name)
			var help string
			for _, mf := range mfs {
				if mf.GetName() == name {
					help = mf.GetHelp()
				}
			}
			assert.Contains(t, help, "named by the clock label: wall is the system clock; virtual a simulated clock", name)
		}
		for _, name := range []string{"kvready_last_round_timestamp_seconds", "kvready_in_flight_bytes"} {
			assert.Empty(t, labelOf(only(t, mfs, name), "clock"), "%s is not on the engine's clock", name)
		}
	}
	assert.Equal(t, "wall", metrics.WallClock.String())
	assert.Equal(t, "virtual", metrics.VirtualClock.String())

	s.InFlight = readiness.InFlight{}
	age, ok := value(gather(t, shown(nil, s)), "kvready_oldest_unfenced_age_seconds", nil)
	require.True(t, ok)
	assert.Zero(t, age, "nothing in flight")
}

// TestCollectorHistogramProperty checks, for any histogram, every exported
// bucket against a count made independently: the durations the engine counted
// at or under the bound, bucket i of the engine holding [2^(i-1), 2^i) ns.
func TestCollectorHistogramProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := handmade()
		h := &s.Stats.FenceLatency
		var total uint64
		for i := range h.Counts {
			h.Counts[i] = rapid.Uint64Range(0, 1_000).Draw(t, fmt.Sprintf("count%d", i))
			total += h.Counts[i]
		}
		h.Total = total
		h.Sum = rapid.Uint64Range(0, 1<<50).Draw(t, "sum")
		c := shown(nil, s)
		m := only(t, gather(t, c), "kvready_fence_latency_seconds").GetHistogram()
		if m.GetSampleCount() != total || m.GetSampleSum() != float64(h.Sum)/1e9 {
			t.Fatalf("count %d sum %v, want %d and %v", m.GetSampleCount(), m.GetSampleSum(), total, float64(h.Sum)/1e9)
		}
		if len(m.GetBucket()) == 0 {
			t.Fatal("no buckets")
		}
		for _, b := range m.GetBucket() {
			bound := b.GetUpperBound() * 1e9 // ns
			var want uint64
			for i, n := range h.Counts[:len(h.Counts)-1] { // the last bucket has no upper edge
				top := math.Ldexp(1, i) - 1 // the largest duration bucket i holds
				if top <= bound+0.5 {
					want += n
				}
			}
			if b.GetCumulativeCount() != want {
				t.Fatalf("bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
			}
		}
	})
}

func TestCollectorBeforeAnySnapshot(t *testing.T) {
	c := metrics.New(nil)
	c.MaxWait = time.Millisecond // no engine will answer
	assert.Equal(t, 0, testutil.CollectAndCount(c), "nothing to export before the engine shows a snapshot")
	_, ok := c.Latest()
	assert.False(t, ok)
	assert.True(t, c.Due(), "the scrape asked the engine for a snapshot")
	ch := make(chan *prometheus.Desc, 64)
	c.Describe(ch)
	close(ch)
	assert.Len(t, ch, len(metrics.Names()))
}

func TestCollectorLint(t *testing.T) {
	c := shown(prometheus.Labels{"device": "0"}, handmade())
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// TestNamesAreWhatIsExported keeps Names, which the dashboard and rules tests
// check against, equal to what a scrape shows.
func TestNamesAreWhatIsExported(t *testing.T) {
	c := shown(nil, handmade())
	c.WatchStore(func() metrics.StoreHealth { return metrics.StoreHealth{Reachable: true} })
	c.WatchTiers(func() []metrics.TierStats { return []metrics.TierStats{{Name: "local", Sized: true}} })
	c.WatchTransfers(func() metrics.TransferStats {
		return metrics.TransferStats{Receiver: &metrics.TransferReceiverStats{}, Sender: &metrics.TransferSenderStats{}}
	})
	var got []string
	for _, mf := range gather(t, c) {
		got = append(got, mf.GetName())
	}
	want := metrics.Names()
	slices.Sort(want)
	assert.Equal(t, want, got)
	for _, n := range want {
		assert.True(t, strings.HasPrefix(n, "kvready_"), n)
	}
}

// TestStoreHealth: the store's series carry what the watched source says at
// each scrape, and are not sent while no store is watched.
func TestStoreHealth(t *testing.T) {
	c := shown(prometheus.Labels{"device": "0"}, handmade())
	storeSeries := func() map[string]float64 {
		out := map[string]float64{}
		for _, mf := range gather(t, c) {
			if !strings.HasPrefix(mf.GetName(), "kvready_store_") {
				continue
			}
			require.Len(t, mf.GetMetric(), 1, mf.GetName())
			m := mf.GetMetric()[0]
			require.Equal(t, "0", m.GetLabel()[0].GetValue(), "%s carries the collector's labels", mf.GetName())
			if g := m.GetGauge(); g != nil {
				out[mf.GetName()] = g.GetValue()
			} else {
				out[mf.GetName()] = m.GetCounter().GetValue()
			}
		}
		return out
	}
	assert.Empty(t, storeSeries(), "no store watched: no store series")
	h := metrics.StoreHealth{Reachable: false, FastFailures: 7, Unavailable: 1500 * time.Millisecond}
	c.WatchStore(func() metrics.StoreHealth { return h })
	assert.Equal(t, map[string]float64{"kvready_store_reachable": 0, "kvready_store_fast_failures_total": 7,
		"kvready_store_unavailable_seconds_total": 1.5}, storeSeries())
	h = metrics.StoreHealth{Reachable: true, FastFailures: 9, Unavailable: 2 * time.Second}
	assert.Equal(t, map[string]float64{"kvready_store_reachable": 1, "kvready_store_fast_failures_total": 9,
		"kvready_store_unavailable_seconds_total": 2}, storeSeries(), "asked again at each scrape")
	c.WatchStore(nil)
	assert.Empty(t, storeSeries())
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

func TestBucketBounds(t *testing.T) {
	b := metrics.BucketBounds()
	require.NotEmpty(t, b)
	assert.Less(t, b[0], 2e-6, "the first bound is about a microsecond")
	assert.Greater(t, b[len(b)-1], 10.0, "the last bound is beyond ten seconds")
	assert.True(t, slices.IsSorted(b))
}

// fataler is what the helpers need of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// gather collects c through a registry, sorted by name.
func gather(t fataler, c prometheus.Collector) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("registering the collector: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	return mfs
}

// only returns the one series of the family name.
func only(t fataler, mfs []*dto.MetricFamily, name string) *dto.Metric {
	t.Helper()
	s := series(mfs, name)
	if len(s) != 1 {
		t.Fatalf("%s: %d series, want 1", name, len(s))
	}
	return s[0]
}

func series(mfs []*dto.MetricFamily, name string) []*dto.Metric {
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

// value returns the value of the series of family name whose labels include
// every one given.
func value(mfs []*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	for _, m := range series(mfs, name) {
		match := 0
		for _, lp := range m.GetLabel() {
			if v, ok := labels[lp.GetName()]; ok && v == lp.GetValue() {
				match++
			}
		}
		if match != len(labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestBadConstLabelsAreRefused: constant labels Prometheus would refuse, or
// that clash with a family's own, fail the registration with the reason, and
// a scrape through an unchecked registry reports them; nothing panics.
func TestBadConstLabelsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels prometheus.Labels
	}{
		{"not UTF-8", prometheus.Labels{"gpu\xff": "0"}},
		{"empty name", prometheus.Labels{"": "0"}},
		{"a family's own label", prometheus.Labels{"state": "x"}},
		{"reserved", prometheus.Labels{"__name__": "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := shown(tc.labels, handmade())
			err := prometheus.NewRegistry().Register(c)
			require.Error(t, err)
			unchecked := prometheus.NewRegistry()
			require.NoError(t, unchecked.Register(uncheckedCollector{c}))
			assert.NotPanics(t, func() {
				_, err := unchecked.Gather()
				assert.Error(t, err, "the scrape reports the bad series")
			})
		})
	}
}

// uncheckedCollector hides its descriptors, so that the registry does not
// check them at registration.
type uncheckedCollector struct{ c *metrics.Collector }

func (uncheckedCollector) Describe(chan<- *prometheus.Desc)      {}
func (u uncheckedCollector) Collect(ch chan<- prometheus.Metric) { u.c.Collect(ch) }

// The last round's timestamp is wall-clock time: an engine on a virtual
// clock (kvready simulate's, here a date in 2027) exports when its round ran,
// not what its clock read. The value lies between two readings of the wall
// clock taken around the round; nothing is asserted about how long it took.
func TestLastRoundTimestampIsWallClock(t *testing.T) {
	s := handmade()
	s.At = time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC) // the engine's (virtual) clock
	before := time.Now()
	c := shown(nil, s)
	after := time.Now()
	mfs := gather(t, c)
	got := math.NaN()
	for _, mf := range mfs {
		if mf.GetName() == "kvready_last_round_timestamp_seconds" {
			require.Len(t, mf.GetMetric(), 1)
			got = mf.GetMetric()[0].GetGauge().GetValue()
			assert.Contains(t, mf.GetHelp(), "Wall-clock time")
		}
	}
	require.False(t, math.IsNaN(got), "the family is exported")
	at := time.Unix(0, int64(got*1e9))
	assert.False(t, at.Before(before.Truncate(time.Microsecond)), "%v is before the round (%v)", at, before)
	assert.False(t, at.After(after.Add(time.Microsecond)), "%v is after the round (%v)", at, after)
	assert.NotEqual(t, s.At.Year(), at.Year(), "not the engine's clock")
}

// causeNamed is the index in Snapshot.Moves of the cause the table names so.
func causeNamed(name string) int {
	for i := range readiness.NumCauses {
		if readiness.CauseName(i) == name {
			return i
		}
	}
	panic("no cause named " + name)
}
