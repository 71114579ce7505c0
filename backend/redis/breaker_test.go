package redis_test

import (
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/internal/redistest"
)

// The breaker against real redis-server processes, through the rig: a
// store that is down (killed), hung (SIGSTOP) or a black hole (accepts
// connections, never answers) is held for down after a few calls, after
// which leases are refused at once — nothing escaped, their slots reused at
// once, a failure never a miss — while the leases in flight keep their
// bound (none contained); the probe sees the store back and leases are
// served again. Every wait is bounded; no test asserts a duration.

// healthLog records what WithHealthFunc tells.
type healthLog struct {
	mu      sync.Mutex
	changes []kvredis.HealthChange
}

func (h *healthLog) add(c kvredis.HealthChange) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.changes = append(h.changes, c)
}

// check: the changes alternate down, up, ..., starting with down, each down
// with its reason and each up with the outage's length; at least one
// outage, over at the end.
func (h *healthLog) check(t *testing.T, reason string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	require.NotEmpty(t, h.changes, "the outage was never told")
	require.Zero(t, len(h.changes)%2, "an outage without its end: %+v", h.changes)
	for i, c := range h.changes {
		if i%2 == 0 {
			assert.False(t, c.Reachable, "change %d: want down, then up", i)
			assert.Contains(t, c.Reason, reason, "change %d: the reason", i)
		} else {
			assert.True(t, c.Reachable, "change %d: want up after down", i)
			assert.Positive(t, c.Down, "change %d: the outage's length", i)
			assert.False(t, c.At.Before(h.changes[i-1].At), "change %d: up before its down", i)
		}
	}
	t.Logf("health changes: %+v", h.changes)
}

// throughOutage runs the during phase with lanes in flight, applies down,
// waits until the store is held for down and a few leases per lane were
// refused at once, applies up, waits until the probe sees it back and
// leases are delivered again, and finishes: served again, the pool whole,
// the outage told.
func (r *rig) throughOutage(log *healthLog, reason string, down, up func()) {
	t := r.t
	stop := r.start(during, 1<<20) // ended by stop: refusals are quick
	r.waitLanes(during, 2)
	down()
	waitFor(t, "the store to be held for down", func() bool { return !r.b.Health().Reachable })
	h := r.b.Health()
	assert.Contains(t, h.Reason, reason)
	assert.False(t, h.Since.IsZero())
	mark := r.total("during/refused")
	// Long enough for probes to fail (each PING to a hung store waits out
	// the bound) before the store comes back.
	waitFor(t, "leases to be refused at once", func() bool { return r.total("during/refused") >= mark+200*r.lanes })
	up()
	waitFor(t, "the probe to see the store back", func() bool { return r.b.Health().Reachable })
	mark = r.total("during/published")
	waitFor(t, "publications to be delivered again", func() bool { return r.total("during/published") > mark })
	stop()
	r.servedAgain()
	h = r.b.Health()
	r.finish()
	assert.True(t, h.Reachable)
	assert.GreaterOrEqual(t, h.Outages, 1)
	assert.Positive(t, h.Unavailable)
	assert.GreaterOrEqual(t, h.FastFailures, uint64(r.total("during/refused")), "every refusal counted")
	assert.Positive(t, r.total("during/failed"), "the leases in flight when the store went down failed")
	log.check(t, reason)
}

// TestBreakerStoreKilledThenRestarted: SIGKILL with leases in flight, no
// restart: connections are refused, the breaker opens, leases are refused
// at once for as long as the store is gone; a new server on the same port
// later, and the probe closes the breaker.
func TestBreakerStoreKilledThenRestarted(t *testing.T) {
	srv := redistest.Start(t)
	var log healthLog
	r := openRig(t, srv.URL(), faultBound, faultRows, kvredis.WithHealthFunc(log.add))
	r.seed(16, false)
	r.run(before, nil, 4)
	r.throughOutage(&log, "calls in a row failed", func() {
		srv.Kill()
		r.lossEvent() // the new server starts empty
	}, func() {
		require.NoError(t, srv.Restart())
	})
}

// TestBreakerStoreStopped: SIGSTOP with leases in flight: the kernel still
// accepts connections, nothing answers. The calls in flight end at their
// bound, which opens the breaker; SIGCONT, and the probe closes it. Nothing
// was lost: no known unit is ever a miss.
func TestBreakerStoreStopped(t *testing.T) {
	srv := redistest.Start(t)
	var log healthLog
	r := openRig(t, srv.URL(), faultBound, faultRows, kvredis.WithHealthFunc(log.add))
	r.seed(16, false)
	r.run(before, nil, 4)
	r.throughOutage(&log, "no reply within the attempt bound", func() {
		require.NoError(t, srv.Freeze())
		t.Cleanup(func() { _ = srv.Thaw() })
	}, func() {
		require.NoError(t, srv.Thaw())
	})
}

// TestBreakerBlackHole: the store's address turns into one that accepts
// connections and never answers (a proxy that stops forwarding, both ways,
// on the connections it has and the ones it accepts); later it forwards
// again.
func TestBreakerBlackHole(t *testing.T) {
	srv := redistest.Start(t)
	hole := newBlackHole(t, srv.Addr)
	var log healthLog
	r := openRig(t, "redis://"+hole.addr()+"/0", faultBound, faultRows, kvredis.WithHealthFunc(log.add))
	r.seed(16, false)
	r.run(before, nil, 4)
	r.throughOutage(&log, "no reply within the attempt bound", func() { hole.swallow.Store(true) },
		func() { hole.swallow.Store(false) })
	assert.Positive(t, hole.accepted.Load(), "the proxy carried the connections")
}

// TestBreakerSequentialManager: a manager that sends one request at a time
// learns that the store is down within one attempt bound. Against a hung
// store (SIGSTOP, a black hole) the first fetch waits out its bound and
// opens the breaker on its own: every later one is refused at once. Against
// a dead one each call is refused by the kernel in microseconds, and the
// run of DefaultBreakerFailures of them opens it. Counts, never durations:
// how long each request took is only logged.
// sequentialBound is that test's attempt bound: long enough that a worker
// picks each call up well within half of it even on a loaded machine (the
// whole suite under -race on two cores), so that the slow-call guard — a
// call with less than half its bound on the wire never counts — cannot make
// a second request wait. With faultBound (500 ms) it did, once in a full
// run: the first call reached the wire 260 ms late.
const sequentialBound = 2 * time.Second

func TestBreakerSequentialManager(t *testing.T) {
	const requests = kvredis.DefaultBreakerFailures + 4
	for _, tc := range []struct {
		name   string
		start  func(t *testing.T) (url string, down func())
		waited int // requests that went to the store and failed there
		reason string
	}{
		{"stopped", func(t *testing.T) (string, func()) {
			srv := redistest.Start(t)
			return srv.URL(), func() {
				require.NoError(t, srv.Freeze())
				t.Cleanup(func() { _ = srv.Thaw() })
			}
		}, 1, "a call had no reply within the attempt bound"},
		{"black hole", func(t *testing.T) (string, func()) {
			hole := newBlackHole(t, redistest.Start(t).Addr)
			return "redis://" + hole.addr() + "/0", func() { hole.swallow.Store(true) }
		}, 1, "a call had no reply within the attempt bound"},
		{"killed", func(t *testing.T) (string, func()) {
			srv := redistest.Start(t)
			return srv.URL(), srv.Kill
		}, kvredis.DefaultBreakerFailures, "calls in a row failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, down := tc.start(t)
			mem := newStaging(1, 1, rowBytes)
			b, err := kvredis.Open(waitCtx(t), url, mem, kvredis.WithPrefix(uniquePrefix(t)), kvredis.WithAttemptTimeout(sequentialBound))
			require.NoError(t, err)
			defer b.Close()
			down()
			waited, refused := 0, 0
			for i := range requests {
				begin := time.Now()
				a, err := b.Fetch(extentOf(t, unit(i, 0, 0)), nil)
				if err != nil {
					require.ErrorIs(t, err, kvredis.ErrUnavailable, "request %d", i)
					require.ErrorIs(t, err, contract.ErrSubmissionRejected, "request %d", i)
					refused++
					t.Logf("request %d: refused at once, after %v", i, time.Since(begin))
					continue
				}
				f := isFailed(t, settled(t, b, a))
				quiesced(t, b, a)
				waited++
				t.Logf("request %d: failed after %v (%s)", i, time.Since(begin), f.Reason)
			}
			assert.Equal(t, tc.waited, waited, "requests that waited for the store before it was held for down")
			assert.Equal(t, requests-tc.waited, refused, "requests refused at once")
			h := b.Health()
			assert.False(t, h.Reachable)
			assert.Equal(t, 1, h.Outages)
			assert.Contains(t, h.Reason, tc.reason)
			assert.Equal(t, uint64(refused), h.FastFailures)
		})
	}
}

// TestBreakerClosesAfterALongOutage: an outage that outlasts the probe's
// whole back-off ramp (here 1ms doubling to 8ms: four waits) ends when the
// store comes back: the probe keeps PINGing at its ceiling for as long as
// it takes. The proxy in front of the store counts the PINGs' connections,
// so the test knows the ramp is behind it without timing anything.
func TestBreakerClosesAfterALongOutage(t *testing.T) {
	srv := redistest.Start(t)
	hole := newBlackHole(t, srv.Addr)
	var log healthLog
	mem := newStaging(1, 1, rowBytes)
	b, err := kvredis.Open(waitCtx(t), "redis://"+hole.addr()+"/0?breaker_failures=1&breaker_probe=1ms&breaker_probe_max=8ms", mem,
		kvredis.WithPrefix(uniquePrefix(t)), kvredis.WithAttemptTimeout(faultBound), kvredis.WithHealthFunc(log.add))
	require.NoError(t, err)
	defer b.Close()
	srv.Kill()
	a, err := b.Fetch(extentOf(t, unit(1, 0, 0)), nil)
	require.NoError(t, err, "the first fetch goes to the store")
	isFailed(t, settled(t, b, a))
	quiesced(t, b, a)
	require.False(t, b.Health().Reachable, "one refused call opens it (breaker_failures=1)")
	// Each PING dials the dead store through the proxy: four of them climb
	// the ramp, the rest are at its ceiling.
	mark := hole.accepted.Load()
	waitFor(t, "the probe to PING past its ramp", func() bool { return hole.accepted.Load() >= mark+20 })
	require.False(t, b.Health().Reachable, "still down")
	require.NoError(t, srv.Restart())
	waitFor(t, "the probe to see the store back", func() bool { return b.Health().Reachable })
	a, err = b.Fetch(extentOf(t, unit(1, 0, 0)), nil)
	require.NoError(t, err, "served again")
	d, ok := settled(t, b, a).(contract.Delivered)
	require.True(t, ok, "an answer, not a failure")
	assert.True(t, d.Miss(), "the restarted store is empty: a miss")
	quiesced(t, b, a)
	log.check(t, "calls in a row failed")
}

// TestBreakerOff: WithBreaker(0) never holds the store for down: against a
// dead store every submission is accepted and fails on its own.
func TestBreakerOff(t *testing.T) {
	srv := redistest.Start(t)
	mem := newStaging(2, 4, rowBytes)
	b, err := kvredis.Open(waitCtx(t), srv.URL(), mem, kvredis.WithPrefix(uniquePrefix(t)),
		kvredis.WithAttemptTimeout(faultBound), kvredis.WithBreaker(0))
	require.NoError(t, err)
	defer b.Close()
	srv.Kill()
	for i := range 3 * kvredis.DefaultBreakerFailures {
		a, err := b.Fetch(extentOf(t, unit(i, 0, 0)), nil)
		require.NoError(t, err, "fetch %d refused with the breaker off", i)
		isFailed(t, settled(t, b, a))
		quiesced(t, b, a)
	}
	assert.True(t, b.Health().Reachable)
	assert.Zero(t, b.Health().Outages)
}

// TestBreakerRefusals: while the store is held for down, Fetch and Publish
// refuse at once wrapping contract.ErrSubmissionRejected and ErrUnavailable,
// Probe answers ErrUnavailable, nothing is touched; each counts as a fast
// failure. The options come from the URL, as a C or Python embedder passes
// them.
func TestBreakerRefusals(t *testing.T) {
	srv := redistest.Start(t)
	mem := newStaging(2, 4, rowBytes)
	b, err := kvredis.Open(waitCtx(t), srv.URL()+"?breaker_failures=1&breaker_probe=1h", mem,
		kvredis.WithPrefix(uniquePrefix(t)), kvredis.WithAttemptTimeout(faultBound))
	require.NoError(t, err)
	defer b.Close()
	srv.Kill()
	a, err := b.Fetch(extentOf(t, unit(1, 0, 0)), nil)
	require.NoError(t, err, "the first fetch goes to the store")
	isFailed(t, settled(t, b, a))
	require.False(t, b.Health().Reachable, "breaker_failures=1: one refused call opens it")

	us := []contract.Unit{unit(1, 0, 0), unit(1, 1, 1)}
	for _, sub := range []struct {
		name string
		f    func() (contract.Attempt, error)
	}{
		{"Fetch", func() (contract.Attempt, error) { return b.Fetch(extentOf(t, us...), nil) }},
		{"Publish", func() (contract.Attempt, error) { return b.Publish(extentOf(t, us...)) }},
	} {
		a, err := sub.f()
		assert.Nil(t, a, sub.name)
		require.Error(t, err, sub.name)
		assert.ErrorIs(t, err, contract.ErrSubmissionRejected, sub.name)
		assert.ErrorIs(t, err, kvredis.ErrUnavailable, sub.name)
		assert.Contains(t, err.Error(), "store unavailable", sub.name)
		assert.Contains(t, err.Error(), "1 calls in a row failed, the last with", "%s: the error says what opened the breaker", sub.name)
	}
	for _, u := range us {
		assert.True(t, mem.untouched(u.LocalGroup, u.Local))
	}
	_, answered, err := b.Probe(waitCtx(t), []byte(ext), nameList(us))
	assert.ErrorIs(t, err, kvredis.ErrUnavailable)
	assert.False(t, answered)
	assert.Equal(t, uint64(3), b.Health().FastFailures)
}

// TestBreakerCloseWhileOpen: Close with the store held for down ends the
// probe with every other goroutine of the backend, however long its next
// wait, and the health log ends on the outage (no "back" was seen).
func TestBreakerCloseWhileOpen(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	srv := redistest.Start(t)
	var log healthLog
	b, err := kvredis.Open(waitCtx(t), srv.URL()+"?breaker_failures=1&breaker_probe=1h", newStaging(1, 1, rowBytes),
		kvredis.WithPrefix(uniquePrefix(t)), kvredis.WithHealthFunc(log.add))
	require.NoError(t, err)
	srv.Kill()
	a, err := b.Fetch(extentOf(t, unit(1, 0, 0)), nil)
	require.NoError(t, err)
	isFailed(t, settled(t, b, a))
	require.False(t, b.Health().Reachable)
	require.NoError(t, b.Close())
	srv.Stop()
	goleak.VerifyNone(t, ignore)
	h := b.Health()
	assert.False(t, h.Reachable, "Close does not make the store reachable")
	log.mu.Lock()
	defer log.mu.Unlock()
	require.Len(t, log.changes, 1, "the outage was told once, and no return")
	assert.False(t, log.changes[0].Reachable)
}

// TestBreakerOptions: bad thresholds and probe cadences are refused, each
// naming what was given and what is wanted, from Go options and from the
// URL alike; so is a query key given twice. Every such error wraps
// ErrConfig, and CheckURL finds it without connecting.
func TestBreakerOptions(t *testing.T) {
	mem := newStaging(1, 1, rowBytes)
	for _, tc := range []struct {
		name string
		url  string
		opts []kvredis.Option
		want string
	}{
		{"negative threshold", "", []kvredis.Option{kvredis.WithBreaker(-1)}, "WithBreaker(-1): want 0"},
		{"probe below 1ms", "", []kvredis.Option{kvredis.WithBreakerProbe(0, time.Second)}, "want 1ms <= first <= most"},
		{"probe max below first", "", []kvredis.Option{kvredis.WithBreakerProbe(time.Second, time.Millisecond)}, "want 1ms <= first <= most"},
		{"URL threshold not a number", "?breaker_failures=many", nil, `breaker_failures="many"; want a number`},
		{"URL threshold negative", "?breaker_failures=-1", nil, "want 0 (never hold the store for down)"},
		{"URL probe not a duration", "?breaker_probe=soon", nil, `breaker_probe="soon"; want a duration`},
		{"URL probe max below first", "?breaker_probe=2s&breaker_probe_max=1s", nil,
			"breaker_probe=2s, breaker_probe_max=1s; want 1ms <= breaker_probe <= breaker_probe_max <= 1h"},
		{"URL probe max alone, below the default first", "?breaker_probe_max=50ms", nil,
			"breaker_probe 100ms (not in the URL: the option's or the default), breaker_probe_max=50ms; want 1ms <= breaker_probe"},
		{"URL probe max alone, below the option's first", "?breaker_probe_max=1s", []kvredis.Option{kvredis.WithBreakerProbe(5*time.Second, 10*time.Second)},
			"breaker_probe 5s (not in the URL: the option's or the default), breaker_probe_max=1s"},
		{"URL probe alone, over 1h", "?breaker_probe=2h", nil, "breaker_probe=2h0m0s, breaker_probe_max 2h0m0s (not in the URL"},
		{"URL probe alone, zero", "?breaker_probe=0s", nil, "breaker_probe=0s, breaker_probe_max 2s (not in the URL"},
		{"URL threshold twice", "?breaker_failures=3&breaker_failures=5", nil, `breaker_failures given 2 times (["3" "5"]); want each query key once`},
		{"URL go-redis key twice", "?pool_size=4&pool_size=8", nil, `pool_size given 2 times`},
		{"URL go-redis value bad", "?pool_size=many", nil, `pool_size`},
		{"URL key unknown", "?breaker_failure=3", nil, `breaker_failure`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kvredis.Open(waitCtx(t), shared.URL()+tc.url, mem, tc.opts...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.ErrorIs(t, err, kvredis.ErrConfig)
			assert.NotErrorIs(t, err, kvredis.ErrUnavailable)
			cerr := kvredis.CheckURL("redis://127.0.0.1:1/0"+tc.url, tc.opts...) // nothing listens there: never asked
			require.Error(t, cerr)
			assert.Contains(t, cerr.Error(), tc.want)
			assert.ErrorIs(t, cerr, kvredis.ErrConfig)
		})
	}
	// Good values open; a probe alone raises the longest wait to it; addr
	// repeats (Cluster seeds) and is no repeated key.
	for _, q := range []string{"?breaker_failures=0", "?breaker_failures=5&breaker_probe=10ms&breaker_probe_max=1s", "?breaker_probe=5s", "?breaker_probe_max=5s"} {
		require.NoError(t, kvredis.CheckURL(shared.URL()+q), q)
		b, err := kvredis.Open(waitCtx(t), shared.URL()+q, mem)
		require.NoError(t, err, q)
		require.NoError(t, b.Close())
	}
	require.NoError(t, kvredis.CheckURL("redis://127.0.0.1:1?addr=127.0.0.1:2&addr=127.0.0.1:3"))
}

// TestOpenUnavailable: a store that does not answer is ErrUnavailable at
// Open, never ErrConfig: the configuration is fine, the store may come
// back.
func TestOpenUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	url := srv.URL()
	srv.Kill()
	_, err := kvredis.Open(waitCtx(t), url+"?breaker_failures=1", newStaging(1, 1, rowBytes))
	require.Error(t, err)
	assert.ErrorIs(t, err, kvredis.ErrUnavailable)
	assert.NotErrorIs(t, err, kvredis.ErrConfig)
	assert.Contains(t, err.Error(), "does not answer PING")
	require.NoError(t, kvredis.CheckURL(url+"?breaker_failures=1"), "the URL itself is fine")
}

// blackHole is a TCP proxy to a server that can turn into an address that
// accepts connections and never answers: while swallow is set it reads and
// drops what each connection carries, both ways, on the connections it has
// and on those it accepts meanwhile.
type blackHole struct {
	ln       net.Listener
	target   string
	swallow  atomic.Bool
	accepted atomic.Int64

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

func newBlackHole(t *testing.T, target string) *blackHole {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(redistest.Host, "0"))
	require.NoError(t, err)
	h := &blackHole{ln: ln, target: target}
	h.wg.Add(1)
	go h.accept()
	t.Cleanup(h.close)
	return h
}

func (h *blackHole) addr() string { return h.ln.Addr().String() }

func (h *blackHole) accept() {
	defer h.wg.Done()
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.accepted.Add(1)
		s, err := net.Dial("tcp", h.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			_, _ = c.Close(), s.Close()
			return
		}
		h.conns = append(h.conns, c, s)
		h.wg.Add(2)
		h.mu.Unlock()
		go h.pipe(s, c)
		go h.pipe(c, s)
	}
}

// pipe copies from src to dst, dropping what it reads while swallowing.
func (h *blackHole) pipe(dst, src net.Conn) {
	defer h.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !h.swallow.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = src.Close()
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

func (h *blackHole) close() {
	_ = h.ln.Close()
	h.mu.Lock()
	h.closed = true
	for _, c := range h.conns {
		_ = c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// TestPublicationBatching: without WithBatch a publication is split into at
// most one pipeline per two cores (at least DefaultBatch keys each), a fetch
// by DefaultBatch; WithBatch holds for both.
func TestPublicationBatching(t *testing.T) {
	const units = 2 * kvredis.DefaultBatch
	const bigRow = 256 << 10 // a call of DefaultBatch such rows is 2 MiB
	calls := max(1, runtime.GOMAXPROCS(0)/2)
	perCall := max(kvredis.DefaultBatch, (units+calls-1)/calls)
	wantBig := (units + perCall - 1) / perCall
	us := make([]contract.Unit, units)
	for i := range us {
		us[i] = unit(i, 0, i)
	}
	for _, tc := range []struct {
		name               string
		row                int
		opts               []kvredis.Option
		publishes, fetches int
	}{
		{"defaults, small rows", rowBytes, nil, units / kvredis.DefaultBatch, units / kvredis.DefaultBatch},
		{"defaults, large rows: one call per two cores", bigRow, nil, wantBig, units / kvredis.DefaultBatch},
		{"WithBatch", bigRow, []kvredis.Option{kvredis.WithBatch(4)}, units / 4, units / 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, shared.Addr)
			sig := newSignal()
			c.AddHook(sig)
			b := newBackend(t, c, newStaging(1, units, tc.row), tc.opts...)
			// Pipelines of SET NX or GET: a new connection's handshake is a
			// pipeline too.
			count := func() int {
				n := 0
				for len(sig.returned) > 0 {
					if cmds := <-sig.returned; len(cmds) > 0 && (cmds[0].Name() == "set" || cmds[0].Name() == "get") {
						n++
					}
				}
				return n
			}
			a, err := b.Publish(extentOf(t, us...))
			require.NoError(t, err)
			settled(t, b, a)
			quiesced(t, b, a)
			assert.Equal(t, tc.publishes, count(), "pipelines of a publication of %d units on %d cores", units, runtime.GOMAXPROCS(0))
			a, err = b.Fetch(extentOf(t, us...), nil)
			require.NoError(t, err)
			settled(t, b, a)
			quiesced(t, b, a)
			assert.Equal(t, tc.fetches, count(), "pipelines of a fetch of %d units", units)
		})
	}
}
