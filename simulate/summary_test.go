package simulate

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func table(t *testing.T, s *Summary) string {
	t.Helper()
	var b strings.Builder
	require.NoError(t, s.WriteTable(&b))
	return b.String()
}

// rowValue returns the first number of the table row labelled label (its
// indentation included), or fails.
func rowValue(t *testing.T, tbl, label string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(label) + `\s+(\d+)`).FindStringSubmatch(tbl)
	require.NotNil(t, m, "no row %q in\n%s", label, tbl)
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// Every count the table breaks down is broken into labelled parts that add
// up to it: failed into timeouts, cancellations, rejections, violations and
// the other failures; the slot grants recycled before their fence into the
// ones found at the grant and the ones only a late write revealed. Late
// writes are writes, shown beside the grants, not as one of their parts.
func TestSummaryTableBreakdownsAddUp(t *testing.T) {
	c := small()
	c.Naive = true
	s := run(t, c)
	require.Positive(t, s.LateWrites, "the naive run has late writes to show")
	tbl := table(t, s)

	m := regexp.MustCompile(`failed\s+(\d+) = timeouts (\d+) \+ cancelled (\d+) \+ rejected (\d+) \+ violations (\d+) \+ other failures (\d+)`).FindStringSubmatch(tbl)
	require.NotNil(t, m, "the failed row labels every part:\n%s", tbl)
	sum := 0
	for _, p := range m[2:] {
		n, _ := strconv.Atoi(p)
		sum += n
	}
	total, _ := strconv.Atoi(m[1])
	assert.Equal(t, total, sum, "the failure kinds add up to failed")
	assert.Equal(t, s.Failed, total)
	assert.Positive(t, s.OtherFailures(), "the workload's injected failures are the other failures")

	recycled := rowValue(t, tbl, "  recycled before fence")
	atGrant := rowValue(t, tbl, "    found at the grant: access unproven")
	lateOnly := rowValue(t, tbl, "    found by a late write alone")
	assert.Equal(t, recycled, atGrant+lateOnly, "the parts under 'recycled before fence' add up to it:\n%s", tbl)
	assert.Equal(t, s.RecycledBeforeFence, recycled)
	assert.Equal(t, s.LateWrites, rowValue(t, tbl, "  late writes into re-lent slots"), "late writes stand beside the grants")
	assert.NotContains(t, tbl, "    late writes", "late writes are not listed as a part of the grants")
}

// Over a real store the checker does not watch late writes: the JSON says
// null, the table says so, and neither shows a 0 that was never counted.
func TestSummaryUnwatchedCountersAreNull(t *testing.T) {
	s := &Summary{Manager: "kvready", RealTime: true, Device: SimDevice, SlotGrants: 7}
	out, err := json.Marshal(s)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(out, &m))
	for _, k := range []string{"late_writes", "recycled_by_late_write_only"} {
		v, present := m[k]
		assert.True(t, present, "%s is in the JSON", k)
		assert.Nil(t, v, "%s is null when not watched: %s", k, out)
	}
	assert.Equal(t, "real", m["clock"])
	assert.Equal(t, "sim", m["device"])
	assert.EqualValues(t, 7, m["slot_grants_watched"])
	tbl := table(t, s)
	assert.Regexp(t, `late writes into re-lent slots\s+not watched over a real store`, tbl)
	assert.Regexp(t, `found by a late write alone\s+not watched over a real store`, tbl)

	s.RealTime = false
	out, err = json.Marshal(s)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(out, &m))
	assert.EqualValues(t, 0, m["late_writes"], "watched: a count")
	assert.Equal(t, "virtual", m["clock"])
}

// The JSON names the device, the clock and the slot grants the checker
// watched, and breaks failures down as the table does.
func TestSummaryJSONNamesWhatWasWatched(t *testing.T) {
	c := small()
	c.Requests = 60
	s := run(t, c)
	out, err := json.Marshal(s)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(out, &m))
	assert.Equal(t, "sim", m["device"])
	assert.Equal(t, "virtual", m["clock"])
	assert.EqualValues(t, s.SlotGrants, m["slot_grants_watched"])
	assert.Positive(t, s.SlotGrants)
	parts := 0.0
	for _, k := range []string{"timeouts", "cancelled", "rejected", "violations", "other_failures"} {
		parts += m[k].(float64)
	}
	assert.EqualValues(t, m["failed"], parts)
	assert.EqualValues(t, m["recycled_before_fence"], m["regrants_unproven"].(float64)+m["recycled_by_late_write_only"].(float64))
}

// Durations print one way: milliseconds with two decimals.
var anyDuration = regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|us|ms|s|m|h)\b`)

func TestDurationsPrintOneWay(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{1930 * time.Microsecond, "1.93ms"},
		{50 * time.Microsecond, "0.05ms"},
		{0, "0.00ms"},
		{210 * time.Millisecond, "210.00ms"},
		{2*time.Second + 5*time.Millisecond, "2005.00ms"},
	} {
		assert.Equal(t, tc.want, FormatDuration(tc.d))
	}
	c := small()
	c.Requests = 60
	for _, s := range []*Summary{run(t, c), {Manager: "kvready", RealTime: true, Wall: 1500 * time.Millisecond, ReadinessP50: 950 * time.Microsecond}} {
		tbl := table(t, s)
		found := anyDuration.FindAllString(tbl, -1)
		require.NotEmpty(t, found)
		for _, d := range found {
			assert.Regexp(t, `^\d+\.\d\dms$`, d, "in\n%s", tbl)
		}
	}
}

// Readiness latency counts the fetches the store answered (served, partial,
// missed) alone; failed fetches have figures of their own. So a store that
// fails every submission at once shows no readiness latency at all, instead
// of the fastest readiness of the run. Each fetch is in exactly one of the
// two (the runs are small enough for the samples to keep them all).
func TestReadinessLatencyCountsAnsweredFetchesOnly(t *testing.T) {
	for _, tc := range []struct {
		name         string
		fail, reject float64
	}{
		{"healthy", 0, 0},
		{"half the fetches fail", 0.5, 0},
		{"every submission rejected at once", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := small().WithoutFaults()
			c.Requests = 200
			c.FailRate, c.RejectRate = tc.fail, tc.reject
			s := run(t, c)
			require.True(t, s.Complete())
			require.Zero(t, s.RefusedLeases)
			answered, failed := len(s.ReadyLatencies), s.FetchFailures
			assert.Equal(t, c.Requests, answered+failed, "each request's fetch is answered or failed, and counted once")
			switch {
			case tc.reject == 1:
				assert.Zero(t, answered, "no fetch was answered")
				assert.Zero(t, s.ReadinessP50)
				assert.Zero(t, s.ReadinessP99)
			case tc.fail > 0:
				assert.Positive(t, answered)
				assert.Positive(t, failed)
			default:
				assert.Positive(t, answered)
				assert.LessOrEqual(t, failed, s.Timeouts, "the only fetches that fail are those the tail of the latency timed out")
			}
			tbl := table(t, s)
			assert.Regexp(t, `failures p50 / p99\s+\S+ / \S+ \(`+strconv.Itoa(failed)+` fetches`, tbl)
			out, err := json.Marshal(s)
			require.NoError(t, err)
			var m map[string]any
			require.NoError(t, json.Unmarshal(out, &m))
			assert.EqualValues(t, failed, m["fetch_failures"])
			assert.Contains(t, m, "failure_p50_us")
			assert.Contains(t, m, "failure_p99_us")
		})
	}
}
