package simulate

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"pgregory.net/rapid"

	"github.com/kvready/kvready/internal/redistest"
)

func TestParseTiers(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []TierSpec
	}{
		{"mem?capacity=64KiB,redis://127.0.0.1:6379/0", []TierSpec{{Name: "mem", CapacityBytes: 64 << 10}, {Name: "redis", URL: "redis://127.0.0.1:6379/0"}}},
		{"mem,mem", []TierSpec{{Name: "mem0"}, {Name: "mem1"}}},
		{"mem?,mem?capacity=1000", []TierSpec{{Name: "mem0"}, {Name: "mem1", CapacityBytes: 1000}}},
		{"mem?capacity=1MB,mem?capacity=2MiB,mem?capacity=64B,unix:///tmp/r.sock?pool_size=4",
			[]TierSpec{{Name: "mem0", CapacityBytes: 1e6}, {Name: "mem1", CapacityBytes: 2 << 20}, {Name: "mem2", CapacityBytes: 64}, {Name: "redis", URL: "unix:///tmp/r.sock?pool_size=4"}}},
		{"mem?capacity=1GiB,rediss://:secret@cache:6380", []TierSpec{{Name: "mem", CapacityBytes: 1 << 30}, {Name: "redis", URL: "rediss://:secret@cache:6380"}}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTiers(tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			c := Defaults().WithoutFaults()
			c.Backend = tc.in
			assert.True(t, c.Tiered())
			assert.True(t, c.RealTime(), "a stack runs on real time")
			assert.Equal(t, strings.Contains(tc.in, "://"), c.Redis())
			assert.NoError(t, c.Validate())
		})
	}
}

// Every refusal names the tier at fault and what is wanted, names every
// mistake at once, and never shows a password.
func TestParseTiersRefusals(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"mem", []string{"1 stores given", "2 to 4 stores separated by commas"}},
		{"mem,mem,mem,mem,mem", []string{"5 stores given"}},
		{"mem,", []string{`tier 1 "": empty`, "want mem or mem?capacity=BYTES"}},
		{"redis://h:1,mem", []string{`tier 0 "redis://h:1": a Redis store is the shared tier: want it last`}},
		{"mem?size=1,mem", []string{`tier 0 "mem?size=1": unknown setting "size"`}},
		{"mem?capacity=1&capacity=2,mem", []string{"capacity is given 2 times"}},
		{"mem?capacity=63,mem", []string{"holds no row of 64 bytes"}},
		{"mem?capacity=-5,mem", []string{`capacity="-5": want a whole number of bytes`}},
		{"mem?capacity=2TiB,mem", []string{`capacity="2TiB"`}},
		{"mem?capacity=%zz,mem", []string{"does not parse"}},
		{"memcached://h:1,mem?capacity=1x", []string{`tier 0 "memcached://h:1"`, `tier 1 "mem?capacity=1x"`}},
		{"mem,redis://:hunter2@h:1?pool_size=x", []string{`tier 1 "redis://:xxxxx@h:1?pool_size=x"`}},
		{"mem,redis:///0", []string{"names no host"}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTiers(tc.in)
			require.Error(t, err)
			assert.Nil(t, got)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NotContains(t, err.Error(), "hunter2")
			c := Defaults().WithoutFaults()
			c.Backend = tc.in
			if c.Tiered() {
				var fe *FieldError
				require.ErrorAs(t, c.Validate(), &fe)
				assert.Equal(t, "backend", fe.Field)
			}
		})
	}
}

// A stack String writes parses back to itself.
func TestParseTiersRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(2, MaxTiers).Draw(t, "tiers")
		parts := make([]string, n)
		for i := range parts {
			spec := TierSpec{CapacityBytes: rapid.SampledFrom([]int64{0, SlotBytes, 4096, 1 << 20}).Draw(t, "capacity")}
			if i == n-1 && rapid.Bool().Draw(t, "redis") {
				spec = TierSpec{URL: "redis://127.0.0.1:6379/0"}
			}
			parts[i] = spec.String()
		}
		specs, err := ParseTiers(strings.Join(parts, ","))
		if err != nil {
			t.Fatalf("%v: %v", parts, err)
		}
		again := make([]string, len(specs))
		for i, s := range specs {
			again[i] = s.String()
		}
		back, err := ParseTiers(strings.Join(again, ","))
		if err != nil || !assert.ObjectsAreEqual(specs, back) {
			t.Fatalf("%v parsed to %v, which writes %v and parses back to %v (%v)", parts, specs, again, back, err)
		}
	})
}

// A stack refuses what only the in-process store of a mem run does: fault
// injection, the naive manager, the layerwise pipeline on the virtual clock.
func TestTieredConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		field string
		edit  func(*Config)
	}{
		{"miss-rate", func(c *Config) { c.MissRate = 0.1 }},
		{"naive", func(c *Config) { c.Naive = true }},
		{"layerwise", func(c *Config) { c.Layerwise = true }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			c := overTiers("mem?capacity=64KiB,mem")
			tc.edit(&c)
			var fe *FieldError
			require.ErrorAs(t, c.Validate(), &fe)
			assert.Equal(t, tc.field, fe.Field)
		})
	}
}

// overTiers is a small run over the stack backend, on real time.
func overTiers(backend string) Config {
	c := overRedis(backend)
	c.Deadline = 2 * time.Second // nothing may time out here: these tests count rows
	return c
}

// checkTiers holds what every run over a stack of tiers must show: each
// tier answered every row it was handed; the next tier was handed exactly
// the rows the one above missed; every row a lower tier served was
// promoted into the one above it (or counted as not); a bounded tier held
// no more than its bound; the timeline's tier hits never decrease and end at
// the totals.
func checkTiers(t *testing.T, s *Summary, n int) {
	t.Helper()
	require.Len(t, s.Tiers, n)
	for i, tr := range s.Tiers {
		assert.Equal(t, tr.Handed, tr.Hits+tr.Misses+tr.Failed, "tier %d answered every row it was handed", i)
		if i > 0 {
			assert.Equal(t, s.Tiers[i-1].Misses, tr.Handed, "tier %d was handed the rows tier %d missed", i, i-1)
			up := s.Tiers[i-1]
			assert.Equal(t, tr.Hits, up.Promoted+up.PromoteFailed+up.PromoteSkipped, "every row tier %d served was promoted into tier %d, or counted as not", i, i-1)
		}
		if tr.CapacityBytes > 0 {
			assert.True(t, tr.Sized)
			assert.LessOrEqual(t, tr.Bytes, tr.CapacityBytes, "tier %d stays within its bound", i)
		}
		assert.Zero(t, tr.Violations+tr.NoOutcome+tr.Rejected, "tier %d had no faults", i)
	}
	prev := make([]uint64, n)
	for _, smp := range s.Timeline {
		require.Len(t, smp.TierHits, n)
		for i, h := range smp.TierHits {
			assert.GreaterOrEqual(t, h, prev[i], "tier hits never decrease")
			assert.LessOrEqual(t, h, s.Tiers[i].Hits)
			prev[i] = h
		}
	}
}

// A stack of in-process tiers: a bounded local tier in front of an
// unbounded shared one, on real time, without a server. The checker reads
// back both tiers' rows (the local tier's were written through or promoted
// from staging) and finds them intact; the summary, its JSON and its table
// show each tier.
func TestTieredRunOverMem(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // nothing of the stack outlives the run
	c := overTiers("mem?capacity=16KiB,mem")
	// Arrivals 1ms apart, so that requests do not all queue for slots before
	// the first publication (fetches lent ahead of every publication would
	// find nothing in any tier), however loaded the machine.
	c.Share, c.Families, c.Requests, c.Arrival = 1, 8, 200, time.Millisecond
	s := run(t, c)
	assertClean(t, s)
	assert.True(t, s.RealTime)
	assert.Equal(t, "tiers mem?capacity=16KiB in front of mem", s.Store)
	checkTiers(t, s, 2)
	local, shared := s.Tiers[0], s.Tiers[1]
	assert.Equal(t, "mem0", local.Name)
	assert.EqualValues(t, 16<<10, local.CapacityBytes)
	assert.Positive(t, local.Hits, "rows published earlier in the run are served by the local tier")
	assert.Positive(t, local.Evictions, "16KiB holds 256 rows: the run has thousands")
	assert.Equal(t, local.Published, shared.Published, "every publication is written through to both")
	assert.Positive(t, s.RowsVerified)

	var table strings.Builder
	require.NoError(t, s.WriteTable(&table))
	for _, want := range []string{"tiers (every fetch asks them in order", "tier 0 mem0", "tier 1 mem1",
		"16384 bytes (16KiB)", "tier hits mem0 "} {
		assert.Contains(t, table.String(), want)
	}
	assert.NotContains(t, table.String(), "store availability", "no Redis store, no availability to report")

	raw, err := json.Marshal(s)
	require.NoError(t, err)
	var m struct {
		Tiers []map[string]any `json:"tiers"`
	}
	require.NoError(t, json.Unmarshal(raw, &m))
	require.Len(t, m.Tiers, 2)
	assert.Equal(t, "mem0", m.Tiers[0]["name"])
	assert.EqualValues(t, local.Hits, m.Tiers[0]["hits"])
	assert.EqualValues(t, 16<<10, m.Tiers[0]["capacity_bytes"])
	assert.Nil(t, m.Tiers[1]["capacity_bytes"], "unbounded: null")
	assert.EqualValues(t, shared.Evictions, m.Tiers[1]["evictions"])
	assert.InDelta(t, local.HitRate(), m.Tiers[0]["hit_ratio"], 1e-9)

	// A local tier of one row holds almost nothing: the rows fetched again
	// come from the shared tier, and each is promoted into the local one
	// (evicting the row before it). Which rows the 16KiB tier still held when
	// they were fetched again depends on the machine's timing; these do not.
	c.Backend = MemBackend + "?capacity=64," + MemBackend
	tiny := run(t, c)
	assertClean(t, tiny)
	checkTiers(t, tiny, 2)
	assert.Positive(t, tiny.Tiers[1].Hits, "rows fetched again come from the shared tier")
	assert.Positive(t, tiny.Tiers[0].Promoted, "and are promoted into the local one")
	assert.LessOrEqual(t, tiny.Tiers[0].Bytes, int64(SlotBytes))
	plain := run(t, small())
	raw, err = json.Marshal(plain)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"tiers":null`, "a single store: null, never an empty list")
}

// Two managers, each with its own local tier, over one Redis store: the
// first publishes through both its tiers; the second starts with an empty
// local tier, is served by Redis at first — each such row promoted into its
// local tier — and then by its local tier. The checker reads both tiers
// back.
func TestTieredRunOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := overTiers("mem?capacity=1MiB," + srv.URL())
	c.Share, c.Families, c.Requests, c.Arrival = 1, 8, 200, time.Millisecond // as in TestTieredRunOverMem

	first := run(t, c)
	assertClean(t, first)
	checkTiers(t, first, 2)
	require.Zero(t, first.Failed)
	assert.Contains(t, first.Store, "in front of "+srv.URL())
	assert.Equal(t, first.Tiers[0].Published, first.Tiers[1].Published, "written through to both")
	assert.Positive(t, first.Tiers[0].Hits, "its own publications, from its local tier")

	second := run(t, c)
	assertClean(t, second)
	checkTiers(t, second, 2)
	local, shared := second.Tiers[0], second.Tiers[1]
	assert.InDelta(t, 1.0, second.HitTokenRatio, 1e-9, "everything was published by the first")
	assert.Positive(t, shared.Hits, "served by Redis at first")
	assert.Equal(t, shared.Hits, local.Promoted, "every row Redis served was promoted into the local tier")
	assert.Positive(t, local.Hits, "then served by its local tier")
	assert.Zero(t, shared.Misses, "Redis held every row the local tier lacked")
	assert.Zero(t, local.Published, "the second manager computed nothing")
}

// The report of a stack's run shows a row per tier, with its hits, and the
// plot of each tier's rows served over time.
func TestWriteReportShowsTiers(t *testing.T) {
	c := overTiers("mem?capacity=16KiB,mem")
	c.Share, c.Families, c.Requests, c.Arrival = 1, 8, 120, time.Millisecond // some tier serves rows: a plot
	s := run(t, c)
	dir := filepath.Join(t.TempDir(), "report")
	require.NoError(t, WriteReport(dir, s))
	assert.Contains(t, images(t, dir, ReportIndex), PlotTiers)
	html, err := os.ReadFile(filepath.Join(dir, ReportIndex))
	require.NoError(t, err)
	page := string(html)
	assert.Contains(t, page, "<h2>Tiers</h2>")
	for i, tr := range s.Tiers {
		row := fmt.Sprintf(`<tr><td class="name">%d %s</td><td class="name store">%s</td><td>%d</td><td>%d</td>`, i, tr.Name, tr.Store, tr.Handed, tr.Hits)
		assert.Contains(t, page, row, "tier %d's row carries its hits", i)
	}
	svg, err := os.ReadFile(filepath.Join(dir, PlotTiers))
	require.NoError(t, err)
	assert.Contains(t, string(svg), "tier 0 mem0")
	assert.Contains(t, string(svg), "tier 1 mem1")

	plain := run(t, small())
	require.NoError(t, WriteReport(dir, plain))
	html, err = os.ReadFile(filepath.Join(dir, ReportIndex))
	require.NoError(t, err)
	assert.NotContains(t, string(html), "<h2>Tiers</h2>", "a single store has no tiers section")
	assert.NotContains(t, images(t, dir, ReportIndex), PlotTiers)
}

// The stack's per-tier counters reach the run's metrics, labelled by tier,
// and agree with the summary at the end.
func TestTieredRunMetrics(t *testing.T) {
	srv, err := ServeMetrics("127.0.0.1:0")
	require.NoError(t, err)
	defer srv.Close()
	c := overTiers("mem?capacity=16KiB,mem")
	c.Metrics = srv.Collector()
	s, err := Run(context.Background(), c, nil)
	require.NoError(t, err)
	mfs, _, err := scrape(srv.URL())
	require.NoError(t, err)
	for _, tr := range s.Tiers {
		assert.EqualValues(t, tr.Hits, metricValue(t, mfs, "kvready_tier_fetch_units_total", "tier", tr.Name, "result", "hit"))
		assert.EqualValues(t, tr.Misses, metricValue(t, mfs, "kvready_tier_fetch_units_total", "tier", tr.Name, "result", "miss"))
		assert.EqualValues(t, tr.Evictions, metricValue(t, mfs, "kvready_tier_evictions_total", "tier", tr.Name))
		assert.EqualValues(t, tr.Bytes, metricValue(t, mfs, "kvready_tier_bytes", "tier", tr.Name))
		assert.EqualValues(t, tr.Promoted, metricValue(t, mfs, "kvready_tier_publish_units_total", "tier", tr.Name, "kind", "promotion", "result", "accepted"))
	}
	assert.NotContains(t, mfs, "kvready_store_reachable", "no Redis tier: no store health")
}

func TestTierSpecString(t *testing.T) {
	for _, tc := range []struct {
		spec TierSpec
		want string
	}{
		{TierSpec{}, "mem"},
		{TierSpec{CapacityBytes: 64}, "mem?capacity=64"},
		{TierSpec{CapacityBytes: 1000}, "mem?capacity=1000"},
		{TierSpec{CapacityBytes: 3 << 10}, "mem?capacity=3KiB"},
		{TierSpec{CapacityBytes: 1536 << 10}, "mem?capacity=1536KiB"},
		{TierSpec{CapacityBytes: 256 << 20}, "mem?capacity=256MiB"},
		{TierSpec{CapacityBytes: 2 << 30}, "mem?capacity=2GiB"},
		{TierSpec{URL: "redis://h:1/0", Name: "redis"}, "redis://h:1/0"},
	} {
		assert.Equal(t, tc.want, tc.spec.String())
	}
}
