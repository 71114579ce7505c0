package redis_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/internal/redistest"
)

// TestOpenBoundsTheClient: the client Open builds keeps everything an attempt
// starts inside the attempt's bound — context deadlines on every call, dial,
// pool-wait and backoff times no longer than the bound, one dial try, one
// retry — and holds a connection per worker; what the URL says is kept where
// it is already inside the bound.
func TestOpenBoundsTheClient(t *testing.T) {
	defaultPool := 10 * runtime.GOMAXPROCS(0)
	for _, tc := range []struct {
		name  string
		query string
		opts  []kvredis.Option
		check func(t *testing.T, o *goredis.Options)
	}{
		{"defaults", "", nil, func(t *testing.T, o *goredis.Options) {
			assert.True(t, o.ContextTimeoutEnabled)
			assert.Equal(t, kvredis.DefaultAttemptTimeout, o.DialTimeout) // 5s capped
			assert.Equal(t, kvredis.DefaultAttemptTimeout, o.PoolTimeout)
			assert.Equal(t, 1, o.DialerRetries)
			assert.Equal(t, 100*time.Millisecond, o.DialerRetryTimeout)
			assert.Equal(t, 1, o.MaxRetries)
			assert.Equal(t, 500*time.Millisecond, o.MaxRetryBackoff) // bound/4
			assert.Equal(t, max(defaultPool, kvredis.DefaultConcurrency), o.PoolSize)
			assert.GreaterOrEqual(t, o.PipelinePoolSize, kvredis.DefaultConcurrency)
		}},
		{"short bound", "", []kvredis.Option{kvredis.WithAttemptTimeout(40 * time.Millisecond)}, func(t *testing.T, o *goredis.Options) {
			assert.Equal(t, 40*time.Millisecond, o.DialTimeout)
			assert.Equal(t, 40*time.Millisecond, o.PoolTimeout)
			assert.Equal(t, 40*time.Millisecond, o.DialerRetryTimeout)
			assert.Equal(t, 10*time.Millisecond, o.MaxRetryBackoff)
		}},
		{"the URL's own values inside the bound", "?dial_timeout=300ms&pool_timeout=200ms&max_retries=-1&max_retry_backoff=20ms", nil,
			func(t *testing.T, o *goredis.Options) {
				assert.Equal(t, 300*time.Millisecond, o.DialTimeout)
				assert.Equal(t, 200*time.Millisecond, o.PoolTimeout)
				assert.Equal(t, 0, o.MaxRetries, "max_retries=-1: no retries, as go-redis reads it")
				assert.Equal(t, 20*time.Millisecond, o.MaxRetryBackoff)
			}},
		{"the URL's values past the bound", "?dial_timeout=1m&pool_timeout=1m", []kvredis.Option{kvredis.WithAttemptTimeout(time.Second)},
			func(t *testing.T, o *goredis.Options) {
				assert.Equal(t, time.Second, o.DialTimeout)
				assert.Equal(t, time.Second, o.PoolTimeout)
			}},
		{"a pool smaller than the workers", "?pool_size=2&pipeline_pool_size=1", []kvredis.Option{kvredis.WithConcurrency(12)},
			func(t *testing.T, o *goredis.Options) {
				assert.Equal(t, 12, o.PoolSize)
				assert.Equal(t, 12, o.PipelinePoolSize)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]kvredis.Option{kvredis.WithPrefix(uniquePrefix(t))}, tc.opts...)
			b, err := kvredis.Open(waitCtx(t), shared.URL()+tc.query, newStaging(1, 1, rowBytes), opts...)
			require.NoError(t, err)
			defer b.Close()
			c, ok := b.Client().(*goredis.Client)
			require.True(t, ok)
			tc.check(t, c.Options())
		})
	}
	// A URL cannot turn socket deadlines off: go-redis reads any timeout
	// that is not positive as "none of its own", and the attempt's deadline
	// still bounds every call.
	for _, q := range []string{"read_timeout=-2", "write_timeout=0", "read_timeout=-1s"} {
		b, err := kvredis.Open(waitCtx(t), shared.URL()+"?"+q, newStaging(1, 1, rowBytes))
		require.NoError(t, err, q)
		o := b.Client().(*goredis.Client).Options()
		assert.True(t, o.ReadTimeout >= 0 && o.WriteTimeout >= 0, "%s: read %v, write %v", q, o.ReadTimeout, o.WriteTimeout)
		require.NoError(t, b.Close())
	}
}

// TestOpenBoundsTheClusterClient: the same for a Cluster, whose per-node
// retries go-redis leaves off (the Cluster retries through redirects).
func TestOpenBoundsTheClusterClient(t *testing.T) {
	cl := sharedCluster(t)
	b, err := kvredis.Open(waitCtx(t), "redis://"+cl.Nodes[0].Addr, newStaging(1, 1, rowBytes),
		kvredis.WithPrefix(uniquePrefix(t)), kvredis.WithAttemptTimeout(time.Second), kvredis.WithConcurrency(40))
	require.NoError(t, err)
	defer b.Close()
	cc, ok := b.Client().(*goredis.ClusterClient)
	require.True(t, ok)
	o := cc.Options()
	assert.True(t, o.ContextTimeoutEnabled)
	assert.Equal(t, time.Second, o.DialTimeout)
	assert.Equal(t, time.Second, o.PoolTimeout)
	assert.Equal(t, 1, o.DialerRetries)
	assert.Equal(t, -1, o.MaxRetries, "per node: none")
	assert.Equal(t, 40, o.PoolSize)
	assert.Equal(t, 40, b.AdmissionLimit())
}

// opaque is a client the backend cannot look into (a wrapper): it is used
// as it is, with the backend's own counts.
type opaque struct{ goredis.UniversalClient }

// TestAdmissionLimit: workers, capped by the connections of the client's pool
// where the backend sees them, divided by the calls a typical attempt needs.
func TestAdmissionLimit(t *testing.T) {
	plain := newClient(t, shared.Addr)
	small := newClient(t, shared.Addr, func(o *goredis.Options) { o.PoolSize = 3 })
	for _, tc := range []struct {
		name   string
		client goredis.UniversalClient
		opts   []kvredis.Option
		want   int
	}{
		{"defaults", plain, nil, kvredis.DefaultConcurrency},
		{"workers", plain, []kvredis.Option{kvredis.WithConcurrency(5)}, 5},
		{"attempts of one batch", plain, []kvredis.Option{kvredis.WithUnitsPerAttempt(8), kvredis.WithBatch(8)}, 8},
		{"attempts of four batches", plain, []kvredis.Option{kvredis.WithUnitsPerAttempt(32), kvredis.WithBatch(8)}, 2},
		{"attempts of three batches, rounded down", plain, []kvredis.Option{kvredis.WithUnitsPerAttempt(17), kvredis.WithBatch(8)}, 2},
		{"at least one", plain, []kvredis.Option{kvredis.WithUnitsPerAttempt(1000), kvredis.WithBatch(1)}, 1},
		{"a pool smaller than the workers", small, nil, 3},
		{"a client the backend cannot look into", opaque{small}, nil, kvredis.DefaultConcurrency},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t, tc.client, newStaging(1, 1, rowBytes), tc.opts...)
			assert.Equal(t, tc.want, b.AdmissionLimit())
		})
	}
}

// TestAdmittedAttemptsDoNotQueue: AdmissionLimit attempts submitted at once
// all reach the network together (none waits for a worker); one more waits
// until a call returns. The gate holds every pipeline, so the count of
// pipelines at the gate is exactly the attempts being served.
func TestAdmittedAttemptsDoNotQueue(t *testing.T) {
	c := newClient(t, shared.Addr)
	g := &fetchGate{gate: newGate()}
	c.AddHook(g)
	const units = 6
	b := newBackend(t, c, newStaging(1, 64, rowBytes), kvredis.WithConcurrency(6), kvredis.WithBatch(3),
		kvredis.WithUnitsPerAttempt(units), kvredis.WithAttemptTimeout(2*wait))
	limit := b.AdmissionLimit()
	require.Equal(t, 3, limit) // 6 workers, 2 calls per attempt
	var as []contract.Attempt
	for i := range limit + 1 {
		var us []contract.Unit
		for k := range units {
			us = append(us, unit(100*i+k, 0, units*i+k))
		}
		a, err := b.Fetch(extentOf(t, us...), nil)
		require.NoError(t, err)
		as = append(as, a)
	}
	for range 2 * limit { // every call of the admitted attempts reaches the gate
		receive(t, g.entered, "a call of an admitted attempt to reach the network")
	}
	// A wrong limit would let the next attempt's calls through now; give
	// them a moment to show (this wait can only miss a failure, never make
	// one up).
	select {
	case <-g.entered:
		t.Fatal("a call past the admission limit was served while the admitted ones were held")
	case <-time.After(100 * time.Millisecond):
	}
	close(g.open)
	for _, a := range as {
		s, ok := served(settled(t, b, a))
		require.True(t, ok)
		assert.Zero(t, s.Len())
		quiesced(t, b, a)
	}
	assert.Len(t, g.entered, 2, "the last attempt's calls ran once the others returned")
}

// fetchGate is a gate for the pipelines that carry GETs only: a new
// connection's handshake, a pipeline too, passes.
type fetchGate struct{ *gate }

func (g *fetchGate) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	held := g.gate.ProcessPipelineHook(next)
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if !isGet(cmds[0]) {
			return next(ctx, cmds)
		}
		return held(ctx, cmds)
	}
}

// TestNewRefusesTheNewOptions: the options this change adds refuse bad values,
// naming themselves.
func TestNewRefusesTheNewOptions(t *testing.T) {
	c := newClient(t, shared.Addr)
	_, err := kvredis.New(c, newStaging(1, 1, 8), kvredis.WithAttemptTimeout(-time.Second), kvredis.WithUnitsPerAttempt(-1))
	require.Error(t, err)
	for _, want := range []string{"WithAttemptTimeout(-1s): want a positive duration", "WithUnitsPerAttempt(-1)"} {
		assert.ErrorContains(t, err, want)
	}
	_, err = kvredis.Open(context.Background(), shared.URL(), newStaging(1, 1, 8), kvredis.WithAttemptTimeout(0))
	assert.ErrorContains(t, err, "Open: WithAttemptTimeout(0s)")
}

// TestDialFailuresLeaveNothingBehind: with the store down for many more
// failed dials than the pool has connections, go-redis would stop dialling,
// fail every call with the last dial's error, and probe once a second from a
// goroutine that outlives Close. The client Open builds does not: the first
// fetch after a restart is served, and Close leaves no goroutine behind.
// The breaker is off: every fetch must reach the client's dialling.
func TestDialFailuresLeaveNothingBehind(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	srv := redistest.Start(t)
	mem := newStaging(1, 1, rowBytes)
	b, err := kvredis.Open(waitCtx(t), srv.URL()+"?pool_size=1&pipeline_pool_size=1", mem,
		kvredis.WithPrefix(uniquePrefix(t)), kvredis.WithConcurrency(1), kvredis.WithBreaker(0))
	require.NoError(t, err)
	require.Equal(t, 1, b.Client().(*goredis.Client).Options().PoolSize)
	u := unit(1, 0, 0)
	require.NoError(t, b.Put(waitCtx(t), ext, u.Name, content(1, 0, rowBytes)))
	srv.Kill()
	for range 5 {
		a, err := b.Fetch(extentOf(t, u), nil)
		require.NoError(t, err)
		isFailed(t, settled(t, b, a))
		quiesced(t, b, a)
	}
	require.NoError(t, srv.Restart())
	a, err := b.Fetch(extentOf(t, u), nil)
	require.NoError(t, err)
	s, ok := served(settled(t, b, a))
	require.True(t, ok, "the first fetch after the restart reached the new server (a miss: it is empty)")
	assert.Zero(t, s.Len())
	quiesced(t, b, a)
	require.NoError(t, b.Close())
	srv.Stop() // and its output reader
	goleak.VerifyNone(t, ignore)
}
