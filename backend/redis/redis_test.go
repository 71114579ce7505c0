package redis_test

import (
	"cmp"
	"context"
	"errors"
	"hash/fnv"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/internal/redistest"
)

const rowBytes = 64

// TestKeyLayout pins the key layout that every process sharing a store must
// agree on: prefix "{" 16 hex digits of FNV-1a-64 "}" extent "/" raw name.
func TestKeyLayout(t *testing.T) {
	c := newClient(t, shared.Addr)
	n := name(7, 1)
	tag := func(b []byte) string {
		h := fnv.New64a()
		h.Write(b)
		return hex16(h.Sum64())
	}
	for _, tc := range []struct {
		policy kvredis.SlotPolicy
		tagged []byte
	}{
		{kvredis.SlotPerBlock, n[:48]},
		{kvredis.SlotPerUnit, n[:]},
	} {
		b := newBackend(t, c, newStaging(1, 1, 8), kvredis.WithPrefix("kv:"), kvredis.WithSlotPolicy(tc.policy))
		want := "kv:{" + tag(tc.tagged) + "}" + ext + "/" + string(n[:])
		assert.Equal(t, want, b.Key(ext, n), "policy %v", tc.policy)
	}
	b := newBackend(t, c, newStaging(1, 1, 8))
	assert.True(t, strings.HasPrefix(b.Key(ext, n), "test:"), "WithPrefix given by the test")
	plain, err := kvredis.New(c, newStaging(1, 1, 8))
	require.NoError(t, err)
	defer plain.Close()
	assert.True(t, strings.HasPrefix(plain.Key(ext, n), kvredis.DefaultPrefix+"{"))

	// Per block: every layer group of a block shares the tag; blocks differ.
	pb := newBackend(t, c, newStaging(1, 1, 8), kvredis.WithSlotPolicy(kvredis.SlotPerBlock))
	tagOf := func(k string) string { return k[strings.IndexByte(k, '{') : strings.IndexByte(k, '}')+1] }
	assert.Equal(t, tagOf(pb.Key(ext, name(3, 0))), tagOf(pb.Key(ext, name(3, 1))))
	assert.NotEqual(t, tagOf(pb.Key(ext, name(3, 0))), tagOf(pb.Key(ext, name(4, 0))))
	pu := newBackend(t, c, newStaging(1, 1, 8), kvredis.WithSlotPolicy(kvredis.SlotPerUnit))
	assert.NotEqual(t, tagOf(pu.Key(ext, name(3, 0))), tagOf(pu.Key(ext, name(3, 1))))
	assert.Equal(t, "per-block", kvredis.SlotPerBlock.String())
	assert.Equal(t, "per-unit", kvredis.SlotPerUnit.String())
}

func hex16(v uint64) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 16)
	for i := 15; i >= 0; i-- {
		out[i] = digits[v&0xf]
		v >>= 4
	}
	return string(out)
}

func TestNewRefusesBadInput(t *testing.T) {
	c := newClient(t, shared.Addr)
	mem := newStaging(1, 1, 8)
	_, err := kvredis.New(nil, mem)
	assert.ErrorContains(t, err, "client is nil")
	_, err = kvredis.New(c, nil)
	assert.ErrorContains(t, err, "Memory is nil")
	_, err = kvredis.New(c, mem,
		kvredis.WithPrefix("a{b"), kvredis.WithTimeout(0), kvredis.WithConcurrency(0),
		kvredis.WithBatch(0), kvredis.WithTTL(time.Nanosecond), kvredis.WithSlotPolicy(7), nil)
	require.Error(t, err)
	for _, want := range []string{"WithPrefix", "WithTimeout", "WithConcurrency", "WithBatch", "WithTTL", "WithSlotPolicy", "option 6 is nil"} {
		assert.ErrorContains(t, err, want, "every bad option is reported at once")
	}
}

func TestOpen(t *testing.T) {
	mem := newStaging(1, 2, rowBytes)
	for _, tc := range []struct{ url, want string }{
		{"http://127.0.0.1:1", `scheme "http"`},
		{"redis://127.0.0.1:1?cluster=maybe", `cluster="maybe"`},
		{"redis://" + shared.Addr + "?no_such_option=1", "no_such_option"},
		{"unix:///tmp/x.sock?cluster=true", "unix:// URL names one server"},
		{"redis://user:hunter2@127.0.0.1:1/0?dial_timeout=1s&max_retries=-1", "does not answer PING"},
		{"redis://user:hunter2@%zz", "not a URL"},
	} {
		_, err := kvredis.Open(waitCtx(t), tc.url, mem)
		if assert.Error(t, err, tc.url) {
			assert.Contains(t, err.Error(), tc.want, tc.url)
			assert.NotContains(t, err.Error(), "hunter2", "the password never appears in an error")
		}
	}

	b, err := kvredis.Open(waitCtx(t), shared.URL(), mem, kvredis.WithPrefix(uniquePrefix(t)))
	require.NoError(t, err)
	_, isPlain := b.Client().(*goredis.Client)
	assert.True(t, isPlain, "a plain server is opened with a plain client")
	require.NoError(t, b.Put(waitCtx(t), ext, name(1, 0), content(1, 0, rowBytes)))
	a, err := b.Fetch(extentOf(t, unit(1, 0, 0)), nil)
	require.NoError(t, err)
	s, ok := served(settled(t, b, a))
	require.True(t, ok)
	assert.True(t, s.Has(name(1, 0)))
	require.NoError(t, b.Close())
	assert.Error(t, b.Client().Ping(context.Background()).Err(), "Close closes the client Open built")
	require.NoError(t, b.Close(), "Close is idempotent")
}

// TestFetch: the store holds some of the units; Delivered names exactly those,
// their rows hold the content, and every other row keeps its canary.
func TestFetch(t *testing.T) {
	c := newClient(t, shared.Addr)
	mem := newStaging(2, 8, rowBytes)
	b := newBackend(t, c, mem, kvredis.WithBatch(3), kvredis.WithConcurrency(2))
	ctx := waitCtx(t)
	var us []contract.Unit
	stored := map[contract.Name]bool{}
	for blk := range 6 {
		for g := range 2 {
			u := unit(blk, g, blk)
			us = append(us, u)
			if (blk+g)%3 != 0 {
				require.NoError(t, b.Put(ctx, ext, u.Name, content(blk, g, rowBytes)))
				stored[u.Name] = true
			}
		}
	}
	a, err := b.Fetch(extentOf(t, us...), nil)
	require.NoError(t, err)
	o := settled(t, b, a)
	s, ok := served(o)
	require.True(t, ok, "outcome %v", o)
	quiesced(t, b, a)
	assert.Equal(t, len(stored), s.Len())
	for blk := range 6 {
		for g := range 2 {
			row, _ := mem.Row(g, blk)
			if stored[name(blk, g)] {
				assert.True(t, s.Has(name(blk, g)))
				assert.Equal(t, content(blk, g, rowBytes), row, "block %d group %d", blk, g)
			} else {
				assert.False(t, s.Has(name(blk, g)))
				assert.True(t, mem.untouched(g, blk), "unserved row (%d,%d) was written", g, blk)
			}
		}
	}
	for g := range 2 {
		for l := 6; l < 8; l++ {
			assert.True(t, mem.untouched(g, l), "row (%d,%d) outside the extent was written", g, l)
		}
	}
	for range 3 {
		assert.Equal(t, o, a.Poll(), "an outcome never changes")
	}

	// A fetch of names the store never had is a miss, not a failure.
	a, err = b.Fetch(extentOf(t, unit(100, 0, 6), unit(101, 1, 7)), nil)
	require.NoError(t, err)
	s, ok = served(settled(t, b, a))
	require.True(t, ok)
	assert.Zero(t, s.Len())
	quiesced(t, b, a)
	assert.True(t, mem.untouched(0, 6))
	assert.True(t, mem.untouched(1, 7))
}

func TestEmptyExtent(t *testing.T) {
	c := newClient(t, shared.Addr)
	b := newBackend(t, c, newStaging(1, 1, 8))
	empty, err := contract.NewCacheExtent([]byte(ext), nil, true)
	require.NoError(t, err)
	for _, submit := range []func() (contract.Attempt, error){
		func() (contract.Attempt, error) { return b.Fetch(empty, nil) },
		func() (contract.Attempt, error) { return b.Publish(empty) },
	} {
		a, err := submit()
		require.NoError(t, err)
		assert.Equal(t, contract.Delivered{}, a.Poll())
		quiesced(t, b, a)
	}
}

// TestRejections: what is refused is refused before anything escapes.
func TestRejections(t *testing.T) {
	c := newClient(t, shared.Addr)
	mem := newStaging(1, 2, rowBytes)
	mem.rows[0][1] = mem.rows[0][1][:0] // an empty row
	b := newBackend(t, c, mem)
	require.NoError(t, b.Put(waitCtx(t), ext, name(1, 0), content(1, 0, rowBytes)))

	a, err := b.Fetch(extentOf(t, unit(1, 0, 0)), route{})
	assert.Nil(t, a)
	assert.ErrorIs(t, err, contract.ErrSubmissionRejected)
	assert.ErrorContains(t, err, "route")
	for _, u := range []contract.Unit{unit(1, 0, 5), unit(1, 3, 0), unit(1, 0, 1)} {
		a, err = b.Fetch(extentOf(t, u), nil)
		assert.Nil(t, a)
		assert.ErrorIs(t, err, contract.ErrSubmissionRejected)
		a, err = b.Publish(extentOf(t, u))
		assert.Nil(t, a)
		assert.ErrorIs(t, err, contract.ErrSubmissionRejected)
	}
	assert.True(t, mem.untouched(0, 0))

	require.NoError(t, b.Close())
	a, err = b.Fetch(extentOf(t, unit(1, 0, 0)), nil)
	assert.Nil(t, a)
	assert.ErrorIs(t, err, contract.ErrSubmissionRejected)
	assert.ErrorIs(t, err, kvredis.ErrClosed)
	a, err = b.Publish(extentOf(t, unit(1, 0, 0)))
	assert.Nil(t, a)
	assert.ErrorIs(t, err, kvredis.ErrClosed)
	_, _, err = b.Probe(waitCtx(t), []byte(ext), []contract.Name{name(1, 0)})
	assert.ErrorIs(t, err, kvredis.ErrClosed)
	assert.ErrorIs(t, b.Put(waitCtx(t), ext, name(1, 0), nil), kvredis.ErrClosed)
	_, _, err = b.Get(waitCtx(t), ext, name(1, 0))
	assert.ErrorIs(t, err, kvredis.ErrClosed)
	assert.True(t, mem.untouched(0, 0))
}

type route struct{}

func (route) Close() error { return nil }

// TestPublish: a publication stores what was staged, SET NX keeps the first
// value of a name, and a TTL is set when asked for.
func TestPublish(t *testing.T) {
	c := newClient(t, shared.Addr)
	mem := newStaging(2, 4, rowBytes)
	b := newBackend(t, c, mem, kvredis.WithTTL(time.Hour), kvredis.WithBatch(2))
	var us []contract.Unit
	for blk := range 4 {
		for g := range 2 {
			us = append(us, unit(blk, g, blk))
			row, _ := mem.Row(g, blk)
			copy(row, content(blk, g, rowBytes))
		}
	}
	a, err := b.Publish(extentOf(t, us...))
	require.NoError(t, err)
	s, ok := served(settled(t, b, a))
	require.True(t, ok)
	quiesced(t, b, a)
	assert.True(t, s.Equal(names(us...)), "every unit published")
	ctx := waitCtx(t)
	for _, u := range us {
		got, found, err := b.Get(ctx, ext, u.Name)
		require.NoError(t, err)
		require.True(t, found)
		row, _ := mem.Row(u.LocalGroup, u.Local)
		assert.Equal(t, row, got)
		ttl, err := c.PTTL(ctx, b.Key(ext, u.Name)).Result()
		require.NoError(t, err)
		assert.Positive(t, ttl, "WithTTL sets an expiry")
	}

	// Names are content addresses: publishing a name again keeps the first
	// value and still counts as published.
	row, _ := mem.Row(0, 0)
	copy(row, content(99, 0, rowBytes))
	a, err = b.Publish(extentOf(t, us[0]))
	require.NoError(t, err)
	s, ok = served(settled(t, b, a))
	require.True(t, ok)
	assert.True(t, s.Has(us[0].Name))
	got, _, err := b.Get(ctx, ext, us[0].Name)
	require.NoError(t, err)
	assert.Equal(t, content(0, 0, rowBytes), got)

	_, found, err := b.Get(ctx, ext, name(1000, 0))
	require.NoError(t, err)
	assert.False(t, found, "Get of a missing name is not found, not an error")
}

// TestPublicationQuiesce: what a publication holds on to until Quiesce, with
// the server holding its writes (CLIENT PAUSE WRITE).
//
// Over a client whose calls do not end at their deadline, the publication
// copies staging into the backend's buffers first, so Quiesce is true while
// the writes are still held, and the store ends up with what was staged then.
//
// Over a client that ends its calls at the deadline (ContextTimeoutEnabled,
// as Open builds), the workers write straight from staging, so Quiesce waits
// for those calls — which end at the attempt's bound: the outcome (a timeout)
// comes first, then Quiesce is true, and whatever the store ends up with is
// what was staged at submission, never what staging held after Quiesce.
func TestPublicationQuiesce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		direct bool
	}{{"copies", false}, {"direct", true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			c := newClient(t, srv.Addr, func(o *goredis.Options) { o.ContextTimeoutEnabled = tc.direct })
			admin := newClient(t, srv.Addr)
			mem := newStaging(1, 4, rowBytes)
			bound := 2 * wait
			if tc.direct {
				bound = 200 * time.Millisecond
			}
			b := newBackend(t, c, mem, kvredis.WithAttemptTimeout(bound))
			us := []contract.Unit{unit(0, 0, 0), unit(1, 0, 1), unit(2, 0, 2)}
			for i := range us {
				row, _ := mem.Row(0, i)
				copy(row, content(i, 0, rowBytes))
			}
			ctx := waitCtx(t)
			require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", wait.Milliseconds(), "WRITE").Err())
			unpaused := false
			unpause := func() {
				if !unpaused {
					unpaused = true
					require.NoError(t, admin.Do(context.Background(), "CLIENT", "UNPAUSE").Err())
				}
			}
			t.Cleanup(unpause)

			a, err := b.Publish(extentOf(t, us...))
			require.NoError(t, err)
			quiesced(t, b, a)
			if tc.direct {
				assert.Contains(t, isFailed(t, a.Poll()).Reason, "timeout",
					"the calls held staging until the bound: the outcome came first")
			} else {
				assert.Nil(t, a.Poll(), "the writes are paused, so there is no outcome yet")
			}
			for i := range us { // the caller may reuse staging now
				row, _ := mem.Row(0, i)
				copy(row, content(50+i, 0, rowBytes))
			}
			unpause()
			o := settled(t, b, a)
			if !tc.direct {
				s, ok := served(o)
				require.True(t, ok)
				assert.True(t, s.Equal(names(us...)))
			}
			for i, u := range us {
				got, found, err := b.Get(ctx, ext, u.Name)
				require.NoError(t, err)
				if tc.direct && !found {
					continue // the timed-out connection was closed before the server ran the write
				}
				require.True(t, found)
				assert.Equal(t, content(i, 0, rowBytes), got, "the store holds what was staged at submission")
			}
		})
	}
}

func TestQuiesceAndSettleRefuseWhatTheyCannotAnswer(t *testing.T) {
	c := newClient(t, shared.Addr)
	mem := newStaging(1, 1, rowBytes)
	b := newBackend(t, c, mem)
	other := newBackend(t, c, mem)
	a, err := b.Fetch(extentOf(t, unit(1, 0, 0)), nil)
	require.NoError(t, err)
	settled(t, b, a)
	quiesced(t, b, a)

	foreign, err := other.Fetch(extentOf(t, unit(1, 0, 0)), nil)
	require.NoError(t, err)
	for _, list := range [][]contract.Attempt{{foreign}, {nil}, {a, nil}} {
		ok, err := b.Quiesce(waitCtx(t), list)
		assert.False(t, ok)
		assert.ErrorContains(t, err, "not returned by this backend")
		assert.ErrorContains(t, b.Settle(waitCtx(t), list), "not returned by this backend")
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	ok, err := b.Quiesce(done, []contract.Attempt{a})
	assert.False(t, ok, "a cancelled ctx is never true, even for a finished attempt")
	assert.ErrorIs(t, err, context.Canceled)
	var noCtx context.Context // a nil ctx is refused, not a panic
	ok, err = b.Quiesce(noCtx, []contract.Attempt{a})
	assert.False(t, ok)
	assert.Error(t, err)
	ok, err = b.Quiesce(waitCtx(t), nil)
	assert.True(t, ok, "nothing listed: nothing can touch memory")
	assert.NoError(t, err)
	settled(t, other, foreign)
}

func TestProbe(t *testing.T) {
	c := newClient(t, shared.Addr)
	mem := newStaging(1, 4, rowBytes)
	b := newBackend(t, c, mem)
	ctx := waitCtx(t)
	require.NoError(t, b.Put(ctx, ext, name(1, 0), content(1, 0, rowBytes)))
	require.NoError(t, b.Put(ctx, ext, name(3, 0), content(3, 0, rowBytes)))
	probed := []contract.Name{name(1, 0), name(2, 0), name(3, 0)}
	hits, answered, err := b.Probe(ctx, []byte(ext), probed)
	require.NoError(t, err)
	assert.True(t, answered)
	assert.True(t, hits.Equal(contract.NewNameSet(name(1, 0), name(3, 0))))

	hits, answered, err = b.Probe(ctx, []byte("another:extent:1"), probed)
	require.NoError(t, err)
	assert.True(t, answered, "no hits is an answer")
	assert.Zero(t, hits.Len())

	_, _, err = b.Probe(ctx, nil, probed)
	assert.ErrorContains(t, err, "extent name is empty")
	done, cancel := context.WithCancel(context.Background())
	cancel()
	_, answered, err = b.Probe(done, []byte(ext), probed)
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, answered)

	lazy := newBackend(t, c, mem, kvredis.WithoutProbe())
	hits, answered, err = lazy.Probe(ctx, []byte(ext), probed)
	require.NoError(t, err)
	assert.False(t, answered, "WithoutProbe: cannot answer cheaply")
	assert.Zero(t, hits.Len())

	// A store that does not answer is an error, never an empty answer.
	srv := redistest.Start(t)
	gone := newBackend(t, newClient(t, srv.Addr, func(o *goredis.Options) { o.MaxRetries = -1 }), mem)
	srv.Kill()
	_, answered, err = gone.Probe(ctx, []byte(ext), probed)
	assert.Error(t, err)
	assert.False(t, answered)
}

func TestOpenRouteAndRegisterPool(t *testing.T) {
	c := newClient(t, shared.Addr)
	b := newBackend(t, c, newStaging(1, 1, 8))
	r, err := b.OpenRoute(map[string]string{"peer": "x"})
	assert.Nil(t, r)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.NotErrorIs(t, err, contract.ErrSubmissionRejected)

	for _, bad := range []struct {
		addr uintptr
		size int
	}{{0, 8}, {0x1000, 0}, {0x1000, -1}, {^uintptr(0) - 4, 8}} {
		_, err := b.RegisterPool(bad.addr, bad.size)
		assert.Error(t, err)
	}
	assert.Zero(t, b.Registered())
	old, err := b.RegisterPool(0x1000, 0x100)
	require.NoError(t, err)
	_, err = b.RegisterPool(0x10ff, 1)
	assert.ErrorContains(t, err, "overlaps")
	require.NoError(t, old.Close())
	again, err := b.RegisterPool(0x1000, 0x100)
	require.NoError(t, err)
	require.NoError(t, old.Close(), "closing an old handle again")
	assert.Equal(t, 1, b.Registered(), "an old handle never revokes a newer registration")
	require.NoError(t, again.Close())
	assert.Zero(t, b.Registered())
}

// gate is a go-redis hook that holds every pipeline until released or until
// its context ends, as a slow network call honouring its deadline would.
type gate struct {
	entered chan struct{} // one value per pipeline that reached the gate
	open    chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 1024), open: make(chan struct{})} }

func (g *gate) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (g *gate) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (g *gate) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		g.entered <- struct{}{}
		select {
		case <-g.open:
		case <-ctx.Done():
			return ctx.Err()
		}
		return next(ctx, cmds)
	}
}

// TestCloseEndsInFlightSubmissions: Close reports the held submissions as
// failed, they quiesce, and nothing is written into staging.
func TestCloseEndsInFlightSubmissions(t *testing.T) {
	mem := newStaging(1, 4, rowBytes)
	held := newClient(t, shared.Addr)
	g := newGate()
	held.AddHook(g)
	b, err := kvredis.New(held, mem, kvredis.WithTimeout(2*wait))
	require.NoError(t, err)
	f, err := b.Fetch(extentOf(t, unit(1, 0, 0)), nil)
	require.NoError(t, err)
	p, err := b.Publish(extentOf(t, unit(2, 0, 1)))
	require.NoError(t, err)
	for range 2 {
		<-g.entered // both are in the "network"
	}
	assert.Nil(t, f.Poll())
	require.NoError(t, b.Close())
	for _, a := range []contract.Attempt{f, p} {
		o := settled(t, b, a)
		assert.IsType(t, contract.Failed{}, o)
		assert.Contains(t, o.String(), "backend closed")
		quiesced(t, b, a)
	}
	assert.True(t, mem.untouched(0, 0))
	close(g.open)
	assert.NoError(t, held.Ping(waitCtx(t)).Err(), "Close leaves a client it was given open")
}

// TestConcurrentUse: many goroutines fetch and publish through one backend
// at once (run under -race).
func TestConcurrentUse(t *testing.T) {
	c := newClient(t, shared.Addr)
	const workers, slots = 8, 8
	mem := newStaging(workers, slots, rowBytes)
	b := newBackend(t, c, mem, kvredis.WithConcurrency(3), kvredis.WithBatch(3))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var us []contract.Unit
			for l := range slots {
				u := unit(w*100+l, w, l)
				us = append(us, u)
				row, _ := mem.Row(w, l)
				copy(row, content(w*100+l, w, rowBytes))
			}
			a, err := b.Publish(extentOf(t, us...))
			if !assert.NoError(t, err) {
				return
			}
			if s, ok := served(settled(t, b, a)); assert.True(t, ok) {
				assert.Equal(t, slots, s.Len())
			}
			quiesced(t, b, a)
			for l := range slots { // forget the rows, then fetch them back
				row, _ := mem.Row(w, l)
				copy(row, canary(w, l, rowBytes))
			}
			a, err = b.Fetch(extentOf(t, us...), nil)
			if !assert.NoError(t, err) {
				return
			}
			if s, ok := served(settled(t, b, a)); assert.True(t, ok) {
				assert.Equal(t, slots, s.Len())
			}
			quiesced(t, b, a)
			for l := range slots {
				row, _ := mem.Row(w, l)
				assert.Equal(t, content(w*100+l, w, rowBytes), row)
			}
		})
	}
	wg.Wait()
}

// refuse is a go-redis hook that fails every pipeline without running it and
// without setting any command's error, as a circuit breaker might.
type refuse struct{}

func (refuse) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (refuse) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (refuse) ProcessPipelineHook(goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(context.Context, []goredis.Cmder) error { return errors.New("circuit open") }
}

// TestPipelineRefusedByAHook: a pipeline that failed as a whole, with no
// command carrying the error, is a failure — never an empty value, a
// publication, or a probe without hits.
func TestPipelineRefusedByAHook(t *testing.T) {
	c := newClient(t, shared.Addr)
	c.AddHook(refuse{})
	mem := newStaging(1, 2, rowBytes)
	b := newBackend(t, c, mem)
	a, err := b.Fetch(extentOf(t, unit(1, 0, 0)), nil)
	require.NoError(t, err)
	assert.Contains(t, isFailed(t, settled(t, b, a)).Reason, "circuit open")
	quiesced(t, b, a)
	assert.True(t, mem.untouched(0, 0))
	a, err = b.Publish(extentOf(t, unit(1, 0, 1)))
	require.NoError(t, err)
	assert.Contains(t, isFailed(t, settled(t, b, a)).Reason, "circuit open")
	_, answered, err := b.Probe(waitCtx(t), []byte(ext), []contract.Name{name(1, 0)})
	assert.ErrorContains(t, err, "circuit open")
	assert.False(t, answered)
}

// TestFetchReusesItsScratch: a fetch reads straight into staging, or into
// scratch buffers of the backend's that come back once copied, so fetching
// the same lease again and again allocates a small fraction of the bytes it
// moves (a fetch that allocated its scratch anew would allocate them all,
// every time).
func TestFetchReusesItsScratch(t *testing.T) {
	const rows, slot, fetches = 16, 64 << 10, 20
	for _, kind := range clientKinds { // straight into staging, and through scratch
		t.Run(kind.name, func(t *testing.T) {
			c := newClient(t, shared.Addr, kind.edit)
			mem := newStaging(1, rows, slot)
			b := newBackend(t, c, mem)
			var us []contract.Unit
			for i := range rows {
				us = append(us, unit(i, 0, i))
				require.NoError(t, b.Put(waitCtx(t), ext, name(i, 0), content(i, 0, slot)))
			}
			fetch := func() {
				a, err := b.Fetch(extentOf(t, us...), nil)
				require.NoError(t, err)
				s, ok := served(settled(t, b, a))
				require.True(t, ok)
				require.Equal(t, rows, s.Len())
				quiesced(t, b, a)
			}
			fetch() // the first one fills the backend's buffers
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range fetches {
				fetch()
			}
			runtime.ReadMemStats(&after)
			moved := uint64(fetches * rows * slot)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d fetches moved %d bytes and allocated %d", fetches, moved, allocated)
			assert.Less(t, allocated, moved/4, "the scratch buffers are allocated again for each fetch")
		})
	}
}

// TestQuiesceWaitsOnTheListedAttemptsOnly: a fetch held before the network
// does not keep Quiesce from answering true for a publication that is done.
func TestQuiesceWaitsOnTheListedAttemptsOnly(t *testing.T) {
	c := newClient(t, shared.Addr)
	g := &fetchGate{gate: newGate()} // holds GETs only
	c.AddHook(g)
	mem := newStaging(1, 2, rowBytes)
	b := newBackend(t, c, mem, kvredis.WithAttemptTimeout(2*wait))
	held, err := b.Fetch(extentOf(t, unit(1, 0, 0)), nil)
	require.NoError(t, err)
	receive(t, g.entered, "the fetch to reach the gate")
	copy(mem.rows[0][1], content(2, 0, rowBytes))
	done, err := b.Publish(extentOf(t, unit(2, 0, 1)))
	require.NoError(t, err)
	settled(t, b, done)
	quiesced(t, b, done)
	assert.Nil(t, held.Poll(), "the fetch is still held")
	close(g.open)
	settled(t, b, held)
	quiesced(t, b, held)
}

// TestPublishOverOpenKeepsEveryStoredValue: over Open's publication client to
// one Redis server a call without a TTL sends its names in runs of up to 16,
// each one MSETNX, which stores nothing when any of its names is stored
// already; that run's names then go again, one SET NX each. Every unit reads
// as published, a stored name keeps its first value, a new one gets what was
// staged — in runs whose names are all new, mixed, or all stored — only the
// runs that stored nothing go twice, and a TTL has every name go with SET NX
// and an expiry. A server that refuses MSETNX (it does not know it, an ACL
// forbids it) has the refused run go as SET NX and no MSETNX sent again; one
// that does not answer INFO, as a proxy in front of several, is sent none.
func TestPublishOverOpenKeepsEveryStoredValue(t *testing.T) {
	for _, tc := range []struct {
		name          string
		slots, batch  int
		stored        []int // published first, with other values
		ttl           time.Duration
		args          []string                          // the server's
		edit          func(admin *goredis.Client) error // before the backend opens
		info          string                            // the server's INFO command
		msetnx, setnx int                               // the commands the two publications send
		refusals      string                            // an INFO errorstats line the refusals leave
	}{
		// Calls of 4: 0-3 new, 4-7 stored, 8-11 mixed. The first
		// publication: one MSETNX (4-7) and one SET NX (9, a call alone).
		{name: "calls of 4", slots: 12, batch: 4, stored: []int{4, 5, 6, 7, 9}, msetnx: 1 + 3, setnx: 1 + 8},
		// One call of 48, runs of 16: only the run holding 20 goes twice.
		{name: "runs of 16", slots: 48, batch: 48, stored: []int{20}, msetnx: 3, setnx: 1 + 16},
		{name: "TTL", slots: 12, batch: 4, stored: []int{4, 5, 6, 7, 9}, ttl: time.Hour, setnx: 5 + 12},
		// The first MSETNX (4-7) is refused, then every name goes as SET
		// NX: one refusal in all, not one a run (counted where only the
		// refusal can leave it: errorstat_ERR also counts go-redis's CLIENT
		// SETINFO on each new connection, which this server does not know).
		{name: "MSETNX unknown", slots: 12, batch: 4, stored: []int{4, 5, 6, 7, 9},
			args: []string{"--rename-command", "MSETNX", "msetnx-hidden"}, setnx: 5 + 12},
		{name: "MSETNX forbidden", slots: 12, batch: 4, stored: []int{4, 5, 6, 7, 9},
			edit: func(admin *goredis.Client) error {
				return admin.Do(context.Background(), "ACL", "SETUSER", "default", "-msetnx").Err()
			}, setnx: 5 + 12, refusals: "errorstat_NOPERM:count=1"},
		{name: "no INFO", slots: 12, batch: 4, stored: []int{4, 5, 6, 7, 9},
			args: []string{"--rename-command", "INFO", "info-hidden"}, info: "info-hidden", setnx: 5 + 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.args...)
			admin := newClient(t, srv.Addr)
			if tc.edit != nil {
				require.NoError(t, tc.edit(admin))
			}
			mem := newStaging(1, tc.slots, rowBytes)
			b, err := kvredis.Open(waitCtx(t), srv.URL(), mem, kvredis.WithPrefix(uniquePrefix(t)),
				kvredis.WithBatch(tc.batch), kvredis.WithTTL(tc.ttl))
			require.NoError(t, err)
			t.Cleanup(func() { _ = b.Close() })
			ctx := waitCtx(t)
			publish := func(us ...contract.Unit) {
				t.Helper()
				a, err := b.Publish(extentOf(t, us...))
				require.NoError(t, err)
				s, ok := served(settled(t, b, a))
				require.True(t, ok, "a publication over a live server is Delivered")
				quiesced(t, b, a)
				assert.True(t, s.Equal(names(us...)), "every unit reads as published, stored before or not")
			}
			var first, all []contract.Unit
			stored := map[int]bool{}
			for _, i := range tc.stored {
				stored[i] = true
				first = append(first, unit(i, 0, i))
				row, _ := mem.Row(0, i)
				copy(row, content(i, 0, rowBytes))
			}
			publish(first...)
			for i := range tc.slots {
				all = append(all, unit(i, 0, i))
				row, _ := mem.Row(0, i)
				copy(row, content(1000+i, 0, rowBytes))
			}
			publish(all...)
			for i, u := range all {
				want := content(1000+i, 0, rowBytes)
				if stored[i] {
					want = content(i, 0, rowBytes)
				}
				got, found, err := b.Get(ctx, ext, u.Name)
				require.NoError(t, err)
				require.True(t, found, "unit %d stored", i)
				require.Equal(t, want, got, "unit %d: a stored name keeps its first value, a new one what was staged", i)
				ttl, err := admin.PTTL(ctx, b.Key(ext, u.Name)).Result()
				require.NoError(t, err)
				if tc.ttl == 0 {
					assert.Equal(t, time.Duration(-1), ttl, "unit %d: no expiry without WithTTL", i)
				} else {
					assert.Positive(t, ttl, "unit %d: WithTTL sets an expiry", i)
				}
			}
			info := cmp.Or(tc.info, "INFO")
			stats, err := admin.Do(ctx, info, "commandstats").Text()
			require.NoError(t, err)
			assert.Equal(t, tc.msetnx, commandCalls(t, stats, "msetnx"), "MSETNX commands sent")
			assert.Equal(t, tc.setnx, commandCalls(t, stats, "set"), "SET NX commands sent")
			if tc.refusals != "" {
				errs, err := admin.Do(ctx, info, "errorstats").Text()
				require.NoError(t, err)
				assert.Contains(t, strings.Fields(errs), tc.refusals, "the server refused MSETNX once, and was sent none after")
			}
		})
	}
}

// commandCalls reads a command's count from INFO commandstats (0 if absent).
func commandCalls(t *testing.T, stats, command string) int {
	t.Helper()
	for _, line := range strings.Split(stats, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		require.NoError(t, err, line)
		return n
	}
	return 0
}
