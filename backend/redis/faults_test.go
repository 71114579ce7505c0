package redis_test

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/internal/redistest"
)

// Store faults against real redis-server processes, each driven through the
// rig (rig_test.go): leases in flight on every lane while the fault hits, and
// for each fault the same three findings — nothing corrupt (the checker),
// every lease's access proven over within its bound plus grace (no lease
// contained: an engine with its default drain grace would contain none), and
// the store serving again afterwards. Every wait is bounded; no test asserts
// a duration; each phase is bounded in attempts per lane.

// faultBound is the attempt bound of the fault tests: short, so that faults
// outlast it.
const faultBound = 500 * time.Millisecond

// faultRows is the row size of the fault tests.
const faultRows = 4 << 10

// faultLasts is how long a pause or a sleep holds the server: longer than an
// attempt's bound plus the grace, so that only a backend that ends its own
// work at the bound — not when the server answers again — proves its access
// over in time.
const faultLasts = faultBound + 2*grace

// maxPerLane bounds each phase's attempts per lane.
const maxPerLane = 400

// openRig opens a backend on url the way a deployment does (Open: the
// client configured from the bound), with more lanes than it admits: the
// bound holds with queueing too.
func openRig(t *testing.T, url string, bound time.Duration, slotBytes int, opts ...kvredis.Option) *rig {
	t.Helper()
	const lanes = 8
	mem := rigStaging(lanes, slotBytes)
	opts = append([]kvredis.Option{kvredis.WithPrefix(uniquePrefix(t)), kvredis.WithAttemptTimeout(bound),
		kvredis.WithConcurrency(4), kvredis.WithBatch(2), kvredis.WithUnitsPerAttempt(rigBlocks * rigGroups)}, opts...)
	b, err := kvredis.Open(waitCtx(t), url, mem, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.Less(t, b.AdmissionLimit(), lanes, "the rig runs more leases than the backend admits")
	return newRig(t, b, mem, slotBytes, bound, lanes)
}

var (
	before = phase{name: "before", noFetchFailures: true, publish: 0.3}
	during = phase{name: "during", publish: 0.3}
)

// TestFaultKillAndRestart: SIGKILL while leases are in flight, then a new
// server on the same port (empty: no persistence). In flight and while it is
// down, attempts fail or are refused at once (never a miss of what it held);
// after the restart what it held is gone (misses), new publications and
// fetches are served.
func TestFaultKillAndRestart(t *testing.T) {
	srv := redistest.Start(t)
	r := openRig(t, srv.URL(), faultBound, faultRows)
	r.seed(16, false)
	r.run(before, nil, 4)

	r.throughFault("kill", func() {
		srv.Kill()
		// A few fail; the breaker then refuses the rest at once.
		down := func() int { return r.total("during/failed") + r.total("during/refused") }
		mark := down()
		waitFor(t, "attempts to fail against the dead server", func() bool { return down() >= mark+r.lanes })
		r.lossEvent() // the new server starts empty
		require.NoError(t, srv.Restart())
	})
}

// TestFaultClientPause: CLIENT PAUSE ALL for longer than the bound plus the
// grace while
// leases are in flight. The calls held by the server end at their attempt's
// deadline; nothing is lost, so no known unit is ever a miss.
func TestFaultClientPause(t *testing.T) {
	srv := redistest.Start(t)
	r := openRig(t, srv.URL(), faultBound, faultRows)
	admin := newClient(t, srv.Addr)
	r.seed(16, false)
	r.run(before, nil, 4)

	r.throughFault("pause", func() {
		require.NoError(t, admin.Do(waitCtx(t), "CLIENT", "PAUSE", faultLasts.Milliseconds(), "ALL").Err())
		// A PING from a paused client returns once the pause is over.
		require.NoError(t, admin.Ping(waitCtx(t)).Err())
	})
}

// TestFaultDebugSleep: the server's one thread stops (DEBUG SLEEP) for
// longer than the bound plus the grace while leases are in flight: as the pause, but the server
// answers nothing at all meanwhile, not even its own clients.
func TestFaultDebugSleep(t *testing.T) {
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	r := openRig(t, srv.URL(), faultBound, faultRows)
	admin := newClient(t, srv.Addr)
	r.seed(16, false)
	r.run(before, nil, 4)

	r.throughFault("sleep", func() {
		secs := strconv.FormatFloat(faultLasts.Seconds(), 'f', 3, 64)
		require.NoError(t, admin.Do(waitCtx(t), "DEBUG", "SLEEP", secs).Err()) // returns when the server wakes
	})
}

// TestFaultEvictionUnderLoad: a server at maxmemory with allkeys-lru while
// leases publish fresh blocks and fetch what was published: units vanish
// under the fetches' feet. An evicted unit is a miss — a fetch never fails
// for it — and a served unit always holds exactly what was published. The
// bound is generous: on a healthy store no attempt may time out here.
func TestFaultEvictionUnderLoad(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")
	const rows = 16 << 10
	r := openRig(t, srv.URL(), wait/4, rows)
	admin := newClient(t, srv.Addr)
	r.seed(16, false)
	evicted := func() int {
		info, err := admin.Info(waitCtx(t), "stats").Result()
		require.NoError(t, err)
		m := regexp.MustCompile(`evicted_keys:(\d+)`).FindStringSubmatch(info)
		require.NotNil(t, m, "INFO stats has no evicted_keys")
		n, _ := strconv.Atoi(m[1])
		return n
	}
	require.Zero(t, evicted(), "the seed alone filled the store")

	evicting := phase{name: "evicting", lossy: true, noFetchFailures: true, publish: 0.5}
	stop := r.start(evicting, maxPerLane)
	waitFor(t, "the server to evict what the leases publish", func() bool { return evicted() >= 400 })
	r.waitLanes(evicting, 10)
	stop()
	r.servedAgain()
	r.finish()
	assert.Positive(t, r.total("evicting/missed")+r.total("evicting/partial"),
		"no fetch missed an evicted unit: the test proves nothing")
	t.Logf("%d keys evicted", evicted())
}

// TestFaultClusterFailover: a Redis Cluster of three masters with a replica
// each; a master is killed (SIGKILL) while leases are in flight and its
// replica takes over. The seed was replicated before (WAIT), so it is never
// lost: a miss of it is a failure taken for a miss. Leases on the dead
// master's slots fail until the Cluster and the client see the new master.
func TestFaultClusterFailover(t *testing.T) {
	cl, err := redistest.NewReplicatedCluster(t.TempDir(), time.Second)
	require.NoError(t, err)
	t.Cleanup(cl.Stop)
	masters, err := cl.Masters(waitCtx(t))
	require.NoError(t, err)
	require.Len(t, masters, 3)
	url := "redis://" + masters[0].Addr + "?addr=" + masters[1].Addr + "&addr=" + masters[2].Addr
	r := openRig(t, url, faultBound, faultRows)
	r.seed(24, true)
	for _, m := range masters {
		replicated(t, m)
	}
	r.run(before, nil, 4)

	dead := masters[0]
	r.throughFault("failover", func() {
		// Publications acknowledged by the dead master after the WAIT may not
		// have reached its replica: only the replicated seed stays known.
		r.lossEvent()
		dead.Kill()
		promoted, err := cl.WaitFailover(waitCtx(t), dead)
		require.NoError(t, err)
		t.Logf("%s killed, %s took over", dead.Addr, promoted.Addr)
		mark := r.total("during/served")
		waitFor(t, "fetches to be served after the failover", func() bool { return r.total("during/served") > mark })
	})
}

// replicated waits, bounded, until the replica of master m has everything
// m had written when called: its offset reaches m's. (WAIT would count only
// the writes of its own connection.)
func replicated(t *testing.T, m *redistest.Server) {
	t.Helper()
	c := newClient(t, m.Addr)
	info, err := c.Info(waitCtx(t), "replication").Result()
	require.NoError(t, err)
	mo := regexp.MustCompile(`master_repl_offset:(\d+)`).FindStringSubmatch(info)
	require.NotNil(t, mo, "INFO replication of %s has no master_repl_offset", m.Addr)
	want, _ := strconv.ParseInt(mo[1], 10, 64)
	replica := regexp.MustCompile(`slave0:.*offset=(\d+)`)
	waitFor(t, "the replica of "+m.Addr+" to have the seed", func() bool {
		info, err := c.Info(waitCtx(t), "replication").Result()
		if err != nil {
			return false
		}
		got := replica.FindStringSubmatch(info)
		if got == nil {
			return false
		}
		n, _ := strconv.ParseInt(got[1], 10, 64)
		return n >= want
	})
}
