package simulate

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/internal/redistest"
	"github.com/kvready/kvready/metrics"
)

// overRedis is a small run against the Redis server at url, on real time. The
// drain grace is generous: on a loaded machine a late scheduler must not turn
// a proof into a containment (which would be safe, but is not what these
// tests are about).
func overRedis(url string) Config {
	c := Defaults().WithoutFaults()
	c.Backend = url
	c.Requests = 300
	c.Slots = 256
	c.Arrival = 200 * time.Microsecond
	c.DrainGrace = 500 * time.Millisecond
	return c
}

func assertClean(t *testing.T, s *Summary) {
	t.Helper()
	assert.Zero(t, s.RecycledBeforeFence, "recycled before fence")
	assert.Zero(t, s.LateWrites)
	assert.Zero(t, s.CorruptRows, "corrupt rows")
	assert.Zero(t, s.MissesReportedAsFailures, "misses reported as failures")
	assert.Zero(t, s.FailuresReportedAsMisses)
	assert.Zero(t, s.OrphanSubmissions)
	assert.True(t, s.Complete(), "every request ended: %s", s.UnfinishedReason)
	assert.Zero(t, s.Unfinished)
	assert.Equal(t, s.Leases, s.Released+s.Quarantined, "every lease ended")
	assert.Equal(t, s.Leases, s.Served+s.Partial+s.Missed+s.Failed, "every lease reports one outcome")
}

// Two managers, one store: a second run of the same workload (same seed, same
// prefix) fetches everything the first one published; the checker reads the
// store back through its own connection and finds every row intact.
func TestRedisSecondRunHitsWhatTheFirstPublished(t *testing.T) {
	srv := redistest.Start(t)
	c := overRedis(srv.URL())
	c.Deadline = 2 * time.Second // nothing may time out here: the second run must find every block

	first := run(t, c)
	assertClean(t, first)
	assert.True(t, first.RealTime)
	assert.Contains(t, first.Store, srv.Addr)
	require.Zero(t, first.Failed, "the first run published every block it computed")
	assert.Positive(t, first.Missed, "the store started empty")
	assert.Less(t, first.HitTokenRatio, 1.0)
	assert.Positive(t, first.RowsVerified)
	assert.Zero(t, first.StoreChecksFailed)

	second := run(t, c)
	assertClean(t, second)
	assert.Equal(t, c.Requests, second.Served, "every fetch is served in full")
	assert.Equal(t, c.Requests, second.Leases, "so nothing is computed and published again")
	assert.Zero(t, second.Partial+second.Missed+second.Failed)
	assert.InDelta(t, 1.0, second.HitTokenRatio, 1e-9)
	assert.Positive(t, second.RowsVerified)

	// Another seed is another workload: it shares no block with these.
	c.Seed++
	other := run(t, c)
	assertClean(t, other)
	assert.Less(t, other.HitTokenRatio, second.HitTokenRatio)
	assert.Positive(t, other.Missed)
}

// The engine survives the store: the server is killed (SIGKILL) a quarter of
// the way through. Submissions fail from then on, every request still ends,
// the summary says so, and the checker finds nothing wrong.
func TestRedisServerKilledMidRun(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // nothing of the run outlives it
	srv := redistest.Start(t)
	c := overRedis(srv.URL())
	s := runKilledAtAQuarter(t, srv, c)
	out, err := json.Marshal(s)
	require.NoError(t, err)
	assertClean(t, s)
	// The whole summary goes with each claim: a failure says what the run did.
	assert.Positive(t, s.Served+s.Partial+s.Missed, "before the kill the store answered: %s", out)
	assert.Positive(t, s.Failed, "after it, submissions fail: %s", out)
	assert.Positive(t, s.StoreChecksFailed, "and the checker cannot read the store back, and says so: %s", out)
	var m map[string]any
	require.NoError(t, json.Unmarshal(out, &m))
	assert.EqualValues(t, "real", m["clock"])
	assert.Positive(t, m["failed"])
	assert.Positive(t, m["store_checks_failed"])
}

func TestRedisConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		field string
		edit  func(*Config)
	}{
		{"miss-rate", func(c *Config) { c.MissRate = 0.1 }},
		{"never-proves-rate", func(c *Config) { c.NeverProvesRate = 0.1 }},
		{"naive", func(c *Config) { c.Naive = true }},
		{"redis-prefix", func(c *Config) { c.RedisPrefix = "a{b}" }},
		{"backend", func(c *Config) { c.Backend = "memcached://127.0.0.1:11211" }},
		{"backend", func(c *Config) { c.Backend = "redis:///0" }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			c := overRedis("redis://127.0.0.1:1/0")
			tc.edit(&c)
			err := c.Validate()
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field)
		})
	}
	require.NoError(t, overRedis("redis://127.0.0.1:1/0").Validate())
	require.NoError(t, Defaults().Validate(), "the defaults' fault rates are the in-process store's")
}

// A store that does not answer at the start is an error, before any request.
func TestRedisStoreDownAtStart(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	s, err := Run(context.Background(), overRedis(srv.URL()+"?max_retries=-1"), nil)
	assert.Nil(t, s)
	assert.ErrorContains(t, err, "does not answer PING")
}

// realTime is what `kvready simulate --backend URL` runs: the defaults, no
// injected faults, and the deadline and grace a real store needs.
func realTime(url string) Config {
	c := Defaults().WithoutFaults().WithRealTimeDefaults()
	c.Backend = url
	return c
}

// assertPoolWhole checks that the run lost no staging capacity: nothing
// contained, no slot quarantined, nothing refused.
func assertPoolWhole(t *testing.T, s *Summary) {
	t.Helper()
	assert.Zero(t, s.Containments, "containments: %v", s.ContainmentReasons)
	assert.Zero(t, s.SlotsQuarantined, "slots quarantined")
	assert.Zero(t, s.Quarantined, "leases quarantined")
	assert.Zero(t, s.RefusedLeases+s.RefusedRequests, "refused: %v", s.Refusals)
	assert.False(t, s.CapacityLost(), s.PoolVerdict())
}

// With the real-time defaults (what `kvready simulate --backend redis://`
// uses) a healthy server costs no capacity: nothing contained, nothing
// refused, and the backend's admission limit bounds the submissions.
func TestRedisDefaultsLoseNoCapacityOnAHealthyServer(t *testing.T) {
	srv := redistest.Start(t)
	c := realTime(srv.URL())
	c.Requests = 1000
	c.RedisPrefix = "healthy:"
	s := run(t, c)
	assertClean(t, s)
	assertPoolWhole(t, s)
	assert.Equal(t, RealTimeDeadline, s.Deadline)
	assert.Equal(t, RealTimeDrainGrace, s.DrainGrace)
	assert.Positive(t, s.MaxOutstanding, "backend/redis's AdmissionLimit reaches the engine through the transport")
	assert.Equal(t, "quarantine", s.Policy)
	assert.Zero(t, s.StoreOutages, "a healthy store is never held for down")
	assert.Zero(t, s.FailedFast+s.FailedWaiting)
	assert.Contains(t, table(t, s), "never held for down")
}

// A store killed mid-run and never restarted costs seconds, not the run:
// after a few calls fail the backend holds it for down, and every request
// after that fails at once — a rejection that says "store unavailable",
// never a miss — instead of waiting out its deadline. The run says so while
// it happens (OnStoreHealth), in the summary and its JSON, and in the
// metrics; the pool is whole. No duration is asserted.
func TestRedisStoreDownFailsFast(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := redistest.Start(t)
	c := realTime(srv.URL())
	c.Requests = 2000
	c.RedisPrefix = "down:"
	c.Metrics = metrics.New(nil)
	var mu sync.Mutex
	var told []kvredis.HealthChange
	c.OnStoreHealth = func(h kvredis.HealthChange) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, h)
	}
	s := runKilledAtAQuarter(t, srv, c)
	assertClean(t, s)
	assertPoolWhole(t, s)
	assert.Equal(t, 1, s.StoreOutages)
	assert.Positive(t, s.StoreUnavailable)
	assert.Positive(t, s.FailedFast, "requests after the kill fail fast")
	assert.LessOrEqual(t, s.FailedFast, s.Rejected, "a fast failure is a rejection: nothing escaped")
	assert.Greater(t, s.FailedFast, s.FailedWaiting, "most failures did not wait")
	assert.Positive(t, s.FailedFastP50)

	mu.Lock()
	require.Len(t, told, 1, "told once that the store is down; it never came back")
	assert.False(t, told[0].Reachable)
	assert.NotEmpty(t, told[0].Reason)
	mu.Unlock()

	tbl := table(t, s)
	assert.Contains(t, tbl, "store availability")
	assert.Contains(t, tbl, "in 1 outage\n")
	assert.Contains(t, tbl, "leases refused at once")
	out, err := json.Marshal(s)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(out, &m))
	assert.EqualValues(t, 1, m["store_outages"])
	assert.EqualValues(t, s.FailedFast, m["failed_fast"])
	assert.EqualValues(t, s.FailedWaiting, m["failed_waiting"])
	assert.Positive(t, m["store_unavailable_us"])
	assert.Positive(t, m["failed_fast_p50_us"])

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c.Metrics))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			if g := mm.GetGauge(); g != nil {
				got[mf.GetName()] = g.GetValue()
			} else if cn := mm.GetCounter(); cn != nil {
				got[mf.GetName()] = cn.GetValue()
			}
		}
	}
	assert.Equal(t, 0.0, got["kvready_store_reachable"])
	assert.GreaterOrEqual(t, got["kvready_store_fast_failures_total"], float64(s.FailedFast))
	assert.Positive(t, got["kvready_store_unavailable_seconds_total"])
}

// The store killed (SIGKILL) and restarted on the same port mid-run, then
// paused (CLIENT PAUSE ... ALL) for longer than the request deadline: the
// requests in flight fail, nothing is contained, the pool is whole at the
// end, and requests after the faults are served again. The faults are set
// off by the run's progress, never by a timer; every wait is bounded, and
// nothing asserts a duration.
func TestRedisKillRestartAndPauseCostRequestsNotSlots(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // nothing of the run outlives it
	srv := redistest.Start(t)
	defer srv.Kill() // before goleak looks: the restarted server has a goroutine of its own
	c := realTime(srv.URL())
	c.RedisPrefix = "faults:"
	c.Requests = 1000
	c.Arrival = 5 * time.Millisecond // 5 s of arrivals: requests keep coming after the faults
	pause := 3 * c.Deadline          // calls the server holds time out at the attempt bound

	const bound = time.Minute // every wait of the fault goroutine
	kill, hold := make(chan struct{}), make(chan struct{})
	ran := make(chan struct{})
	faulted := make(chan error, 1)
	start := time.Now()
	var pauseEnds time.Duration // since start, on the test's clock (the run's starts later)
	go func() {
		faulted <- func() error {
			wait := func(ch <-chan struct{}) error {
				select {
				case <-ch:
					return nil
				case <-ran:
					return errors.New("the run ended before the fault")
				case <-time.After(bound):
					return errors.New("the run did not get there in a minute")
				}
			}
			if err := wait(kill); err != nil {
				return err
			}
			srv.Kill()
			time.Sleep(c.Deadline) // down for a while: submissions fail meanwhile
			if err := srv.Restart(); err != nil {
				return err
			}
			if err := wait(hold); err != nil {
				return err
			}
			admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
			defer admin.Close()
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			if err := admin.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
				return err
			}
			pauseEnds = time.Since(start) + pause
			return nil
		}()
	}()

	var killed, held bool
	s, err := Run(context.Background(), c, func(done, total int) {
		if !killed && done >= total/5 {
			killed = true
			close(kill)
		}
		if !held && done >= total/2 {
			held = true
			close(hold)
		}
	})
	close(ran)
	require.NoError(t, <-faulted, "the faults")
	require.NoError(t, err)
	assertClean(t, s)
	assertPoolWhole(t, s)
	assert.Positive(t, s.Failed, "the faults cost requests in flight")
	// Served again: the outcomes delivered after the pause ended (samples
	// are on the run's clock, which starts after the test's: a sample at or
	// past pauseEnds is past the pause).
	after := -1
	for i, smp := range s.Timeline {
		if smp.At >= pauseEnds {
			after = i
			break
		}
	}
	require.GreaterOrEqual(t, after, 0, "the run went on after the pause")
	delivered := s.Served + s.Partial + s.Missed
	assert.Greater(t, delivered, s.Timeline[after].Delivered, "requests after the faults are served again")
	tbl := table(t, s)
	assert.Contains(t, tbl, "outcomes over time")
	t.Log(tbl)
}

// runKilledAtAQuarter runs c and kills srv a quarter of the way through.
func runKilledAtAQuarter(t *testing.T, srv *redistest.Server, c Config) *Summary {
	t.Helper()
	killed := false
	s, err := Run(context.Background(), c, func(done, total int) {
		if !killed && done >= total/4 {
			killed = true
			srv.Kill()
		}
	})
	require.NoError(t, err)
	require.True(t, killed, "the run ended before a quarter of it")
	return s
}
