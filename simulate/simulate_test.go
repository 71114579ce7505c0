package simulate

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"pgregory.net/rapid"

	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// small is a workload that finishes fast under -race and still exercises
// every outcome kind.
func small() Config {
	c := Defaults()
	c.Requests = 400
	c.Slots = 256
	c.LatencySigma = 1.3
	c.NeverProvesRate = 0.01
	c.RejectRate = 0.02
	return c
}

func run(t *testing.T, c Config) *Summary {
	t.Helper()
	s, err := Run(context.Background(), c, nil)
	require.NoError(t, err)
	return s
}

func TestEngineRunIsSafeAndCoversEveryOutcome(t *testing.T) {
	s := run(t, small())
	assert.Zero(t, s.RecycledBeforeFence, "no slot recycled before its fence")
	assert.Zero(t, s.LateWrites)
	assert.Zero(t, s.CorruptRows)
	assert.Zero(t, s.MissesReportedAsFailures, "no miss reported as a failure")
	assert.Zero(t, s.FailuresReportedAsMisses)
	assert.Zero(t, s.OrphanSubmissions)
	assert.Zero(t, s.Unfinished)
	assert.Zero(t, s.UnfinishedRequests)
	assert.True(t, s.Complete())
	assert.Positive(t, s.RowsVerified)
	assert.Positive(t, s.SlotGrants)
	for name, n := range map[string]int{
		"served": s.Served, "partial": s.Partial, "missed": s.Missed, "failed": s.Failed,
		"timeouts": s.Timeouts, "cancelled": s.Cancelled, "rejected": s.Rejected,
		"quarantined": s.Quarantined, "released": s.Released,
	} {
		assert.Positive(t, n, "the workload exercises %s", name)
	}
	assert.Equal(t, s.Leases, s.Released+s.Quarantined+s.Unfinished)
	assert.Equal(t, s.Leases, s.Served+s.Partial+s.Missed+s.Failed, "every lease reports one outcome")
	assert.Positive(t, s.SlotsQuarantined, "a backend that never proves leaves slots out of circulation")
	assert.Equal(t, s.Quarantined, s.Containments, "every quarantined lease raised one containment")
	assert.Greater(t, s.HitTokenRatio, 0.0)
	assert.Less(t, s.HitTokenRatio, 1.0)
	assert.LessOrEqual(t, s.ReadinessP50, s.ReadinessP99)
	assert.NotEmpty(t, s.FenceLatencies)
	assert.NotEmpty(t, s.Timeline)
}

func TestNaiveRunIsCaught(t *testing.T) {
	c := small()
	c.Naive = true
	s := run(t, c)
	assert.Positive(t, s.RecycledBeforeFence, "freeing on outcome or timeout recycles slots before their fence")
	assert.Positive(t, s.RegrantsUnproven)
	assert.Positive(t, s.LateWrites, "timed-out deliveries land in re-lent slots")
	assert.Positive(t, s.CorruptRows, "and corrupt what later requests read")
	assert.Zero(t, s.Quarantined, "the naive manager never quarantines")
	assert.Empty(t, s.FenceLatencies, "it never proves a fence")
}

func TestRunIsDeterministicForASeed(t *testing.T) {
	c := small()
	c.Requests = 150
	a, b := run(t, c), run(t, c)
	strip := func(s *Summary) Summary {
		x := *s
		x.Wall, x.Throughput = 0, 0
		return x
	}
	assert.Equal(t, strip(a), strip(b))
	c.Seed++
	other := run(t, c)
	assert.NotEqual(t, strip(a).Timeline, strip(other).Timeline, "another seed, another run")
}

// The defaults model Quiesce "not yet" answers, which the engine's retries
// turn into proofs: nothing is contained and every request ends.
func TestDefaultsRetryNotYetAndContainNothing(t *testing.T) {
	c := Defaults()
	c.Requests = 600
	s := run(t, c)
	assert.True(t, s.Safe())
	assert.True(t, s.Complete())
	assert.Zero(t, s.Quarantined)
	assert.Zero(t, s.Containments)
	assert.Equal(t, s.Leases, s.Released)
}

// A run stopped early says so: the summary counts the requests that did not
// end and says why, and Run returns the same as an error.
func TestUnfinishedRequestsAreReported(t *testing.T) {
	c := small()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := Run(ctx, c, func(done, _ int) {
		if done >= 50 {
			cancel()
		}
	})
	require.Error(t, err)
	assert.False(t, s.Complete())
	assert.Positive(t, s.UnfinishedRequests)
	assert.NotEmpty(t, s.UnfinishedReason)
	assert.ErrorContains(t, err, "interrupted")
	var table strings.Builder
	require.NoError(t, s.WriteTable(&table))
	// Stopped by its context: said in plain words, once, without the
	// context's error.
	assert.True(t, s.Interrupted)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, table.String(), "interrupted: the run was stopped before it finished")
	assert.Contains(t, table.String(), "not run to the end")
	assert.NotContains(t, table.String(), "UNFINISHED")
	assert.NotContains(t, table.String(), "context canceled")
	assert.Zero(t, s.RecycledBeforeFence, "unfinished, but never unsafe")
}

// A backend that never proves gets its leases contained; the pool shrinks
// until requests cannot be staged at all, which the manager is told at once:
// every request still ends, refused rather than stuck.
func TestNeverProvingBackendIsContainedAndRequestsEnd(t *testing.T) {
	c := small()
	c.Requests = 300
	c.Slots = 16
	c.NeverProvesRate = 0.5
	s := run(t, c)
	assert.True(t, s.Complete())
	assert.Positive(t, s.Containments)
	assert.Positive(t, s.RefusedLeases, "leases no run of slots can hold any more are refused")
	assert.True(t, s.Safe())
}

func TestDeviceLossQuarantinesInFlightCopies(t *testing.T) {
	c := small()
	c.Requests = 200
	c.NeverProvesRate = 0
	c.DeviceLossAt = 5 * time.Millisecond
	s := run(t, c)
	assert.Positive(t, s.Quarantined, "copies in flight on the lost device are unproven")
	assert.Positive(t, s.RefusedRequests+s.RefusedLeases, "no lease is lent on a lost device")
	assert.Zero(t, s.RecycledBeforeFence)
	assert.Zero(t, s.MissesReportedAsFailures)
}

func TestValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		field string
		edit  func(*Config)
	}{
		{"requests", func(c *Config) { c.Requests = 0 }},
		{"blocks", func(c *Config) { c.Blocks = -1 }},
		{"groups", func(c *Config) { c.Groups = 0 }},
		{"slots", func(c *Config) { c.Slots = 4 }},
		{"families", func(c *Config) { c.Families = 0 }},
		{"share", func(c *Config) { c.Share = 1.5 }},
		{"miss-rate", func(c *Config) { c.MissRate = -0.1 }},
		{"fault-rates", func(c *Config) { c.MissRate, c.FailRate = 0.6, 0.6 }},
		{"never-proves-rate", func(c *Config) { c.NeverProvesRate = 2 }},
		{"drain-grace", func(c *Config) { c.DrainGrace = 0 }},
		{"store-capacity", func(c *Config) { c.StoreCapacity = -1 }},
		{"cancel-rate", func(c *Config) { c.CancelRate = 2 }},
		{"arrival", func(c *Config) { c.Arrival = 0 }},
		{"latency-median", func(c *Config) { c.LatencyMedian = -time.Second }},
		{"latency-sigma", func(c *Config) { c.LatencySigma = 9 }},
		{"deadline", func(c *Config) { c.Deadline = 0 }},
		{"gpu-latency", func(c *Config) { c.GPULatency = 0 }},
		{"device-loss-at", func(c *Config) { c.DeviceLossAt = -1 }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			c := Defaults()
			tc.edit(&c)
			err := c.Validate()
			require.Error(t, err)
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field)
			_, err = Run(context.Background(), c, nil)
			assert.ErrorContains(t, err, tc.field, "Run refuses it too")
		})
	}
	require.NoError(t, Defaults().Validate())
}

func TestSummaryJSONKeys(t *testing.T) {
	c := small()
	c.Requests = 50
	out, err := json.Marshal(run(t, c))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(out, &m))
	for _, k := range []string{"leases", "served", "partial", "missed", "failed", "quarantined", "released",
		"recycled_before_fence", "misses_reported_as_failures", "hit_token_ratio",
		"readiness_p50_us", "readiness_p99_us", "throughput_leases_per_s"} {
		assert.Contains(t, m, k)
	}
	assert.EqualValues(t, 0, m["recycled_before_fence"])
}

// The checker counts a grant whose previous tenant is unproven, and not one
// whose previous tenant is fenced.
func TestCheckerCountsUnfencedRegrant(t *testing.T) {
	c := Defaults()
	c.Requests, c.Slots, c.Blocks, c.Groups = 1, 4, 2, 1
	d, err := newDriver(context.Background(), c)
	require.NoError(t, err)
	chk := d.chk
	d.mu.Lock()
	defer d.mu.Unlock()
	a := &lease{submitted: true}
	b := &lease{}
	run := []staging.Run{{Group: 0, First: 0, Count: 2}}
	chk.granted(a, run)
	chk.granted(b, run)
	assert.Equal(t, 2, chk.recycledBeforeFence, "a submitted, never proven: both slots recycled early")
	a2 := &lease{submitted: true, proven: true}
	chk.granted(a2, run)
	chk.granted(b, run)
	assert.Equal(t, 2, chk.recycledBeforeFence, "b was never submitted; a2 was proven")
	c2 := &lease{submitted: true, proven: true, copySeqs: []uint64{3}}
	chk.granted(c2, run)
	chk.granted(b, run)
	assert.Equal(t, 4, chk.recycledBeforeFence, "c2's copy has not completed")
}

// Property: whatever the fault mix, the engine's run is safe by the checker.
func TestEngineSafeForAnyFaultMix(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := Defaults()
		c.Requests = rapid.IntRange(1, 30).Draw(t, "requests")
		c.Blocks = rapid.IntRange(1, 6).Draw(t, "blocks")
		c.Groups = rapid.IntRange(1, 3).Draw(t, "groups")
		c.Slots = rapid.IntRange(c.Blocks, 4*c.Blocks).Draw(t, "slots")
		c.Share = rapid.Float64Range(0, 1).Draw(t, "share")
		c.Families = rapid.IntRange(1, 4).Draw(t, "families")
		rate := func(name string) float64 { return rapid.Float64Range(0, 0.15).Draw(t, name) }
		c.MissRate, c.PartialRate, c.FailRate = rate("miss"), rate("partial"), rate("fail")
		c.CancelRate, c.QuiesceNotYetRate, c.RejectRate = rate("cancel"), rate("not-yet"), rate("reject")
		c.NeverProvesRate = rate("never-proves")
		c.LatencySigma = rapid.Float64Range(0, 2).Draw(t, "sigma")
		c.Deadline = time.Duration(rapid.IntRange(1, 20).Draw(t, "deadline-ms")) * time.Millisecond
		if rapid.Bool().Draw(t, "lose-device") {
			c.DeviceLossAt = time.Duration(rapid.IntRange(1, 5000).Draw(t, "loss-us")) * time.Microsecond
		}
		c.Seed = rapid.Uint64().Draw(t, "seed")
		s, err := Run(context.Background(), c, nil)
		if err != nil {
			// A pool shrunk by quarantine can leave a lease waiting for ever;
			// that is a liveness limit of the workload, not a safety breach.
			t.Logf("run ended early: %v", err)
		}
		if s.RecycledBeforeFence != 0 || s.MissesReportedAsFailures != 0 || s.CorruptRows != 0 || s.OrphanSubmissions != 0 {
			t.Fatalf("checker: recycled %d, late writes %d, corrupt %d, misses as failures %d, orphans %d",
				s.RecycledBeforeFence, s.LateWrites, s.CorruptRows, s.MissesReportedAsFailures, s.OrphanSubmissions)
		}
	})
}

// Under the fatal policy the first containment halts the engine and the run
// stops there: the summary says why, and the halted engine's goroutines are
// stopped, not left behind in the caller's process.
func TestFatalRunStopsAtTheHaltAndLeavesNoGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	c := small()
	c.Containment = readiness.Fatal
	s, err := Run(context.Background(), c, nil)
	require.Error(t, err, "requests were left unfinished")
	assert.Contains(t, err.Error(), "the engine halted")
	assert.NotEmpty(t, s.Halted, "the summary says the engine halted")
	assert.Positive(t, s.Containments)
	assert.Zero(t, s.RecycledBeforeFence)
	assert.Zero(t, s.CorruptRows)
	goleak.VerifyNone(t, before)
}
