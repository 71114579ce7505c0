package redis_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/internal/redistest"
)

// signal is a go-redis hook that reports each pipeline as it enters the
// network and as it returns, without holding it.
type signal struct {
	entered  chan struct{}
	returned chan []goredis.Cmder
}

func newSignal() *signal {
	return &signal{entered: make(chan struct{}, 1024), returned: make(chan []goredis.Cmder, 1024)}
}

func (s *signal) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (s *signal) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (s *signal) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		s.entered <- struct{}{}
		err := next(ctx, cmds)
		s.returned <- cmds
		return err
	}
}

// receive waits, bounded, for one value from ch.
func receive[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatalf("gave up waiting for %s after %v", what, wait)
		panic("unreachable")
	}
}

// pauseAll holds every client of srv for d (CLIENT PAUSE ... ALL cannot be
// lifted early: UNPAUSE would be held too).
func pauseAll(t testing.TB, srv *redistest.Server, d time.Duration) {
	t.Helper()
	admin := newClient(t, srv.Addr)
	require.NoError(t, admin.Do(waitCtx(t), "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err())
}

func isFailed(t testing.TB, o contract.Outcome) contract.Failed {
	t.Helper()
	f, ok := o.(contract.Failed)
	require.True(t, ok, "want Failed, got %v (a transport failure must never read as a miss)", o)
	return f
}

// TestFaultServerKilledMidFetch: the server dies (SIGKILL) while a fetch is on
// the wire. The fetch fails — it is never a miss — and writes nothing; once
// the server is back (empty: no persistence), the lost names are misses and
// fetches work again.
func TestFaultServerKilledMidFetch(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	sig := newSignal()
	c.AddHook(sig)
	mem := newStaging(2, 4, rowBytes)
	b := newBackend(t, c, mem, kvredis.WithTimeout(2*wait), kvredis.WithConcurrency(1))
	us := []contract.Unit{unit(1, 0, 0), unit(1, 1, 0), unit(2, 0, 1), unit(2, 1, 1)}
	ctx := waitCtx(t)
	for _, u := range us {
		require.NoError(t, b.Put(ctx, ext, u.Name, content(1, u.LocalGroup, rowBytes)))
	}
	// A first fetch works, and leaves its connection in the pool: the next
	// fetch goes straight onto the wire.
	a, err := b.Fetch(extentOf(t, us...), nil)
	require.NoError(t, err)
	s, ok := served(settled(t, b, a))
	require.True(t, ok)
	require.True(t, s.Equal(names(us...)))
	quiesced(t, b, a)
	for l := range 2 { // forget what it fetched
		for g := range 2 {
			copy(mem.rows[g][l], canary(g, l, rowBytes))
		}
	}
	for len(sig.entered) > 0 {
		<-sig.entered
	}
	pauseAll(t, srv, 2*wait) // the fetch stays on the wire until the kill

	a, err = b.Fetch(extentOf(t, us...), nil)
	require.NoError(t, err)
	receive(t, sig.entered, "the fetch to reach the network")
	assert.Nil(t, a.Poll(), "the server is paused: no answer yet")
	srv.Kill()

	f := isFailed(t, settled(t, b, a))
	t.Logf("outcome after SIGKILL: %v", f)
	quiesced(t, b, a)
	for _, u := range us {
		assert.True(t, mem.untouched(u.LocalGroup, u.Local), "a failed fetch copied unit (%d,%d)", u.LocalGroup, u.Local)
	}

	require.NoError(t, srv.Restart())
	a, err = b.Fetch(extentOf(t, us...), nil)
	require.NoError(t, err)
	s, ok = served(settled(t, b, a))
	require.True(t, ok, "after the restart the lost names are misses, not failures")
	assert.Zero(t, s.Len())
	quiesced(t, b, a)

	for _, u := range us {
		require.NoError(t, b.Put(ctx, ext, u.Name, content(1, u.LocalGroup, rowBytes)))
	}
	a, err = b.Fetch(extentOf(t, us...), nil)
	require.NoError(t, err)
	s, ok = served(settled(t, b, a))
	require.True(t, ok)
	assert.True(t, s.Equal(names(us...)), "fetches work again")
	quiesced(t, b, a)
}

// TestFaultServerDown: a store that cannot be reached fails fetches and
// publications; it never answers with a miss.
func TestFaultServerDown(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr, func(o *goredis.Options) { o.MaxRetries = -1 })
	mem := newStaging(1, 2, rowBytes)
	b := newBackend(t, c, mem)
	srv.Kill()
	a, err := b.Fetch(extentOf(t, unit(1, 0, 0)), nil)
	require.NoError(t, err)
	isFailed(t, settled(t, b, a))
	quiesced(t, b, a)
	assert.True(t, mem.untouched(0, 0))
	a, err = b.Publish(extentOf(t, unit(1, 0, 1)))
	require.NoError(t, err)
	isFailed(t, settled(t, b, a))
	quiesced(t, b, a)
}

// TestFaultSlowServer: a server held by CLIENT PAUSE answers after the
// attempt's timeout. The fetch fails with a timeout, Quiesce answers true, and
// the late reply — which does arrive, with the value — is never copied into
// staging.
func TestFaultSlowServer(t *testing.T) {
	const timeout = 100 * time.Millisecond
	const pause = 40 * timeout // the margin that keeps a loaded machine from answering in time
	for _, tc := range []struct {
		name string
		edit func(*goredis.Options)
		late bool // the network call outlives the attempt, and its reply arrives
	}{
		{"deadline-client", func(o *goredis.Options) { o.ContextTimeoutEnabled = true }, false},
		{"read-timeout-client", func(o *goredis.Options) { o.ContextTimeoutEnabled = false; o.ReadTimeout = 2 * wait }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			c := newClient(t, srv.Addr, tc.edit)
			sig := newSignal()
			mem := newStaging(1, 4, rowBytes)
			b := newBackend(t, c, mem, kvredis.WithTimeout(timeout), kvredis.WithConcurrency(1))
			us := []contract.Unit{unit(1, 0, 0), unit(2, 0, 1)}
			for _, u := range us {
				require.NoError(t, b.Put(waitCtx(t), ext, u.Name, content(u.Local, 0, rowBytes)))
			}
			c.AddHook(sig)
			pauseAll(t, srv, pause)

			a, err := b.Fetch(extentOf(t, us...), nil)
			require.NoError(t, err)
			f := isFailed(t, settled(t, b, a))
			assert.Contains(t, f.Reason, "timeout")
			quiesced(t, b, a)
			for _, u := range us {
				assert.True(t, mem.untouched(0, u.Local))
			}
			var cmds []goredis.Cmder
			for { // skip the connection's own handshake, a pipeline too
				cmds = receive(t, sig.returned, "the paused call to return")
				if isGet(cmds[0]) {
					break
				}
			}
			if tc.late {
				require.NoError(t, cmds[0].Err(), "the late reply arrived")
				n, _ := cmds[0].(*goredis.RawWriteToCmd).Result() // the raw reply: header, value, CRLF
				assert.Equal(t, int64(len(fmt.Sprintf("$%d\r\n", rowBytes))+rowBytes+2), n, "the late reply carried the value")
			}
			// The reply (or the error) is in; give a stray writer every chance.
			for range 3 {
				ok, err := b.Quiesce(waitCtx(t), []contract.Attempt{a})
				require.NoError(t, err)
				require.True(t, ok)
			}
			time.Sleep(10 * time.Millisecond)
			for _, u := range us {
				assert.True(t, mem.untouched(0, u.Local), "unit (0,%d) written after Quiesce answered true", u.Local)
			}
			assert.Equal(t, contract.Outcome(f), a.Poll(), "the outcome never changes")
		})
	}
}

// TestFaultWrongSizeValues: a value of any size but slot_bytes is never
// copied; the fetch is Failed, naming the unit, however long the value. The
// connection stays usable.
func TestFaultWrongSizeValues(t *testing.T) {
	c := newClient(t, shared.Addr)
	mem := newStaging(1, 3, rowBytes)
	b := newBackend(t, c, mem, kvredis.WithBatch(8))
	ctx := waitCtx(t)
	good := []contract.Unit{unit(1, 0, 0), unit(3, 0, 2)}
	for _, u := range good {
		require.NoError(t, b.Put(ctx, ext, u.Name, content(u.Local, 0, rowBytes)))
	}
	bad := unit(2, 0, 1)
	for _, size := range []int{0, 1, rowBytes - 1, rowBytes + 1, rowBytes + 2, rowBytes + 3, 2 * rowBytes, 4096} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			require.NoError(t, c.Set(ctx, b.Key(ext, bad.Name), content(9, 9, size), 0).Err())
			a, err := b.Fetch(extentOf(t, good[0], bad, good[1]), nil)
			require.NoError(t, err)
			f := isFailed(t, settled(t, b, a))
			assert.Regexp(t, `unit 1 \(.*\): the store holds `+strconv.Itoa(size)+` bytes, the staging row has 64 \(slot_bytes\)`, f.Reason)
			quiesced(t, b, a)
			assert.True(t, mem.untouched(0, 1), "a %d-byte value was copied into a %d-byte row", size, rowBytes)

			a, err = b.Fetch(extentOf(t, good...), nil)
			require.NoError(t, err)
			s, ok := served(settled(t, b, a))
			require.True(t, ok)
			assert.True(t, s.Equal(names(good...)))
			quiesced(t, b, a)
		})
	}
}

// TestFaultEvictedKeysAreMisses: a server at maxmemory with allkeys-lru drops
// units; fetching them is a partial delivery or a miss, never a failure.
func TestFaultEvictedKeysAreMisses(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
	c := newClient(t, srv.Addr)
	const slot, n = 16 << 10, 300 // 4.8 MB of values into 2 MB
	mem := newStaging(1, n, slot)
	b := newBackend(t, c, mem, kvredis.WithBatch(32))
	ctx := waitCtx(t)
	us := make([]contract.Unit, n)
	for i := range us {
		us[i] = unit(i, 0, i)
		require.NoError(t, b.Put(ctx, ext, us[i].Name, content(i, 0, slot)))
	}
	stats, err := c.Info(ctx, "stats").Result()
	require.NoError(t, err)
	m := regexp.MustCompile(`evicted_keys:(\d+)`).FindStringSubmatch(stats)
	require.NotNil(t, m)
	evicted, _ := strconv.Atoi(m[1])
	require.Positive(t, evicted, "the server evicted nothing: the test proves nothing")

	hits, answered, err := b.Probe(ctx, []byte(ext), nameList(us))
	require.NoError(t, err)
	assert.True(t, answered)
	assert.Less(t, hits.Len(), n)

	a, err := b.Fetch(extentOf(t, us...), nil)
	require.NoError(t, err)
	s, ok := served(settled(t, b, a))
	require.True(t, ok, "an evicted key is a miss, not a failure")
	quiesced(t, b, a)
	assert.Less(t, s.Len(), n)
	t.Logf("%d evicted; fetch served %d of %d", evicted, s.Len(), n)
	for i, u := range us {
		row, _ := mem.Row(0, i)
		if s.Has(u.Name) {
			assert.Equal(t, content(i, 0, slot), row)
		} else {
			assert.True(t, mem.untouched(0, i), "unserved row %d was written", i)
		}
	}
}
