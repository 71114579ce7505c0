package redis_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/internal/redistest"
)

// cancel asks a to cancel and checks the answer: CancelRequested, no error,
// every time (the request is idempotent).
func cancel(t tb, a contract.Attempt) {
	t.Helper()
	for range 2 {
		d, err := contract.RequestCancel(a)
		require.NoError(t, err)
		require.Equal(t, contract.CancelRequested, d)
	}
}

// TestCancelDropsWhatIsNotSent: a fetch of three calls on one worker, its
// first call held before the network. A cancel ends it as Cancelled (local),
// Quiesce is true, nothing reaches staging, and the two calls not yet sent
// never reach the network.
func TestCancelDropsWhatIsNotSent(t *testing.T) {
	c := newClient(t, shared.Addr)
	g := &fetchGate{gate: newGate()}
	c.AddHook(g)
	mem := newStaging(1, 3, rowBytes)
	b, err := kvredis.New(c, mem, kvredis.WithPrefix(uniquePrefix(t)), kvredis.WithConcurrency(1), kvredis.WithBatch(1),
		kvredis.WithAttemptTimeout(2*wait))
	require.NoError(t, err)
	us := []contract.Unit{unit(1, 0, 0), unit(2, 0, 1), unit(3, 0, 2)}
	for _, u := range us {
		require.NoError(t, b.Put(waitCtx(t), ext, u.Name, content(u.Local, 0, rowBytes)))
	}
	a, err := b.Fetch(extentOf(t, us...), nil)
	require.NoError(t, err)
	receive(t, g.entered, "the first call to reach the gate")
	require.Nil(t, a.Poll())

	cancel(t, a)
	assert.Equal(t, contract.Outcome(contract.Cancelled{}), settled(t, b, a))
	quiesced(t, b, a)
	close(g.open)
	require.NoError(t, b.Close()) // every goroutine of the backend has ended
	assert.Empty(t, g.entered, "a call not yet sent was sent after the cancel")
	for _, u := range us {
		assert.True(t, mem.untouched(0, u.Local), "unit %d reached staging after the cancel", u.Local)
	}
	cancel(t, a)
	assert.Equal(t, contract.Outcome(contract.Cancelled{}), a.Poll(), "the outcome stays")
}

// TestCancelLetsTheWireFinish: a publication writing straight from staging,
// its SET on the wire and held by the server (CLIENT PAUSE WRITE). A cancel
// reports Cancelled at once; the write on the wire is not abandoned: Quiesce
// stays unproven while it is out, the write lands once the server lets it,
// the store keeps it (a cancel rolls nothing back), and then Quiesce is true.
func TestCancelLetsTheWireFinish(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	sig := newSignal()
	c.AddHook(sig)
	admin := newClient(t, srv.Addr)
	mem := newStaging(1, 2, rowBytes)
	b := newBackend(t, c, mem, kvredis.WithAttemptTimeout(2*wait))
	us := []contract.Unit{unit(1, 0, 0), unit(2, 0, 1)}
	for _, u := range us {
		copy(mem.rows[0][u.Local], content(u.Local, 0, rowBytes))
	}
	ctx := waitCtx(t)
	require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", wait.Milliseconds(), "WRITE").Err())
	t.Cleanup(func() { _ = admin.Do(context.Background(), "CLIENT", "UNPAUSE").Err() })

	a, err := b.Publish(extentOf(t, us...))
	require.NoError(t, err)
	// On the wire: the server holds the SET (a paused client counts as blocked).
	waitFor(t, "the server to hold the SET", func() bool {
		info, err := admin.Info(ctx, "clients").Result()
		return err == nil && strings.Contains(info, "blocked_clients:1")
	})
	cancel(t, a)
	assert.Equal(t, contract.Outcome(contract.Cancelled{}), settled(t, b, a))
	// The SET still reads staging (it is the row itself): no proof yet.
	// (This wait can only miss an early answer, never make one up.)
	short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	ok, err := b.Quiesce(short, []contract.Attempt{a})
	stop()
	assert.False(t, ok, "Quiesce answered true while the write on the wire held staging")
	assert.Error(t, err)

	require.NoError(t, admin.Do(ctx, "CLIENT", "UNPAUSE").Err())
	var cmds []goredis.Cmder
	for { // skip the connection's own handshake, a pipeline too
		cmds = receive(t, sig.returned, "the SET to return")
		if _, isSet := cmds[0].(*goredis.BoolCmd); isSet {
			break
		}
	}
	for _, cmd := range cmds {
		assert.NoError(t, cmd.Err(), "the write on the wire finished")
	}
	quiesced(t, b, a)
	for _, u := range us {
		got, found, err := b.Get(ctx, ext, u.Name)
		require.NoError(t, err)
		require.True(t, found, "the cancel rolled back a write that had landed")
		assert.Equal(t, content(u.Local, 0, rowBytes), got)
	}
	assert.Equal(t, contract.Outcome(contract.Cancelled{}), a.Poll(), "the outcome stays")
}

// waitFor polls cond, bounded by wait, until it holds.
func waitFor(t tb, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s after %v", what, wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCancelAfterTheOutcome: completion won the race. The cancel answers as
// ever and changes nothing: not the outcome, not the proof, not staging.
func TestCancelAfterTheOutcome(t *testing.T) {
	c := newClient(t, shared.Addr)
	mem := newStaging(1, 2, rowBytes)
	b := newBackend(t, c, mem)
	u := unit(1, 0, 0)
	require.NoError(t, b.Put(waitCtx(t), ext, u.Name, content(1, 0, rowBytes)))
	a, err := b.Fetch(extentOf(t, u), nil)
	require.NoError(t, err)
	o := settled(t, b, a)
	quiesced(t, b, a)
	cancel(t, a)
	assert.Equal(t, o, a.Poll())
	quiesced(t, b, a)
	assert.Equal(t, content(1, 0, rowBytes), mem.rows[0][0])

	empty, err := contract.NewCacheExtent([]byte(ext), nil, false)
	require.NoError(t, err)
	e, err := b.Publish(empty)
	require.NoError(t, err)
	cancel(t, e)
	assert.Equal(t, contract.Outcome(contract.Delivered{}), e.Poll(), "an empty attempt is done at once")
}

// TestNotify: f is called exactly once, when Poll has the outcome — before
// Notify returns if it already has one.
func TestNotify(t *testing.T) {
	c := newClient(t, shared.Addr)
	g := &fetchGate{gate: newGate()}
	c.AddHook(g)
	mem := newStaging(1, 2, rowBytes)
	b := newBackend(t, c, mem, kvredis.WithAttemptTimeout(2*wait))
	a, err := b.Fetch(extentOf(t, unit(1, 0, 0)), nil)
	require.NoError(t, err)
	receive(t, g.entered, "the fetch to reach the gate")
	n, ok := a.(contract.Notifier)
	require.True(t, ok, "attempts are contract.Notifier")
	var calls atomic.Int32
	woke := make(chan contract.Outcome, 2)
	n.Notify(func() { calls.Add(1); woke <- a.Poll() })
	n.Notify(nil) // ignored
	assert.Zero(t, calls.Load(), "no outcome yet")
	close(g.open)
	assert.NotNil(t, receive(t, woke, "the notification"), "Poll has the outcome when f is called")
	quiesced(t, b, a)
	require.NoError(t, b.Close())
	assert.Equal(t, int32(1), calls.Load())

	var late atomic.Int32
	n.Notify(func() { late.Add(1) })
	assert.Equal(t, int32(1), late.Load(), "an attempt with an outcome calls f before Notify returns")
}

// TestNotifyRacesTheOutcome: many attempts, each notified while its outcome
// is being set: every f is called exactly once.
func TestNotifyRacesTheOutcome(t *testing.T) {
	c := newClient(t, shared.Addr)
	const n = 64
	mem := newStaging(1, n, rowBytes)
	b, err := kvredis.New(c, mem, kvredis.WithPrefix(uniquePrefix(t)))
	require.NoError(t, err)
	counts := make([]atomic.Int32, n)
	var called sync.WaitGroup
	for i := range n {
		a, err := b.Fetch(extentOf(t, unit(i, 0, i)), nil)
		require.NoError(t, err)
		called.Add(1)
		a.(contract.Notifier).Notify(func() { counts[i].Add(1); called.Done() })
	}
	done := make(chan struct{})
	go func() { called.Wait(); close(done) }()
	receive(t, done, "every notification")
	require.NoError(t, b.Close())
	for i := range counts {
		assert.Equal(t, int32(1), counts[i].Load(), "attempt %d", i)
	}
}

// TestCancelProperty: random attempts (fetches of stored and unknown units,
// publications), each cancelled at a random moment or not, notified at a
// random moment. Whatever the interleaving: the cancel answers
// CancelRequested; f is called exactly once; an outcome is Delivered (the
// stored units exactly, for a fetch; every unit, for a publication) or — only
// if a cancel came before it — Cancelled, never Failed; Quiesce is true;
// staging holds what the outcome says and nothing after Quiesce; and the
// store holds, for every name, nothing or its content.
func TestCancelProperty(t *testing.T) {
	c := newClient(t, shared.Addr)
	rapid.Check(t, func(rt *rapid.T) {
		const slots = 8
		mem := newStaging(1, slots, rowBytes)
		b, err := kvredis.New(c, mem, kvredis.WithPrefix(uniquePrefix(t)), kvredis.WithBatch(rapid.IntRange(1, 4).Draw(rt, "batch")),
			kvredis.WithConcurrency(rapid.IntRange(1, 4).Draw(rt, "workers")), kvredis.WithAttemptTimeout(wait))
		require.NoError(rt, err)
		defer b.Close()
		ctx := waitCtx(t)
		stored := map[int]bool{}
		for blk := range 8 {
			if rapid.Bool().Draw(rt, "stored") {
				stored[blk] = true
				require.NoError(rt, b.Put(ctx, ext, name(blk, 0), content(blk, 0, rowBytes)))
			}
		}
		type run struct {
			a          contract.Attempt
			publish    bool
			blocks     []int
			slots      []int // the staging slot of each block
			cancelled  bool  // a cancel was asked before the outcome was seen
			notified   atomic.Int32
			notifyLate bool
		}
		var runs []*run
		slot := 0
		for slot < slots {
			k := rapid.IntRange(1, min(3, slots-slot)).Draw(rt, "units")
			r := &run{publish: rapid.Bool().Draw(rt, "publish")}
			var us []contract.Unit
			for i := range k {
				blk := rapid.IntRange(0, 9).Draw(rt, "block") // 8, 9: never stored
				if r.publish {
					blk = 20 + slot + i // fresh names: a publication of a stored name keeps the old value
					copy(mem.rows[0][slot+i], content(blk, 0, rowBytes))
				}
				if containsInt(r.blocks, blk) {
					continue
				}
				r.blocks = append(r.blocks, blk)
				r.slots = append(r.slots, slot+i)
				us = append(us, unit(blk, 0, slot+i))
			}
			slot += k
			if r.publish {
				r.a, err = b.Publish(extentOf(t, us...))
			} else {
				r.a, err = b.Fetch(extentOf(t, us...), nil)
			}
			require.NoError(rt, err)
			r.notifyLate = rapid.Bool().Draw(rt, "notify late")
			if !r.notifyLate {
				r.a.(contract.Notifier).Notify(func() { r.notified.Add(1) })
			}
			if rapid.Bool().Draw(rt, "cancel at once") {
				r.cancelled = r.a.Poll() == nil
				cancel(rt, r.a)
			}
			runs = append(runs, r)
		}
		for _, r := range runs {
			o := settled(rt, b, r.a)
			if r.notifyLate {
				r.a.(contract.Notifier).Notify(func() { r.notified.Add(1) })
			}
			if !r.cancelled && rapid.Bool().Draw(rt, "cancel after the outcome") {
				cancel(rt, r.a)
				require.Equal(rt, o, r.a.Poll(), "a cancel after the outcome changed it")
			}
			quiesced(rt, b, r.a)
			switch o := o.(type) {
			case contract.Cancelled:
				require.True(rt, r.cancelled, "Cancelled without a cancel before the outcome")
				require.False(rt, o.ByPeer, "a local cancel is not the peer's")
			case contract.Delivered:
				for i, blk := range r.blocks {
					want := r.publish || stored[blk]
					require.Equal(rt, want, o.Served.Has(name(blk, 0)), "block %d", blk)
					row := mem.rows[0][r.slots[i]]
					if !r.publish && !want {
						require.True(rt, mem.untouched(0, r.slots[i]), "an unserved row was written")
					} else {
						require.Equal(rt, content(blk, 0, rowBytes), row)
					}
				}
			default:
				rt.Fatalf("outcome %v on a healthy store", o)
			}
			if _, ok := o.(contract.Cancelled); ok && !r.publish {
				for i, blk := range r.blocks {
					row := mem.rows[0][r.slots[i]]
					require.True(rt, mem.untouched(0, r.slots[i]) || string(row) == string(content(blk, 0, rowBytes)),
						"a cancelled fetch left a torn row")
				}
			}
			for i := range r.blocks { // reuse staging: nothing may write it now
				copy(mem.rows[0][r.slots[i]], poison(r.slots[i]))
			}
		}
		require.NoError(rt, b.Close())
		for _, r := range runs {
			require.Equal(rt, int32(1), r.notified.Load(), "notifications")
			for i, blk := range r.blocks {
				require.Equal(rt, poison(r.slots[i]), mem.rows[0][r.slots[i]], "staging written after Quiesce answered true")
				if r.publish {
					got, found, err := getDirect(ctx, c, b.Key(ext, name(blk, 0)))
					require.NoError(rt, err)
					require.True(rt, !found || string(got) == string(content(blk, 0, rowBytes)), "the store holds another value for block %d", blk)
				}
			}
		}
	})
}

// poison is what a test writes into a staging row once Quiesce answered true,
// as a manager reusing the slot would; finding anything else later means the
// backend wrote the row after its proof.
func poison(slot int) []byte {
	b := make([]byte, rowBytes)
	for i := range b {
		b[i] = byte(0x5A ^ slot ^ i*11)
	}
	return b
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// getDirect reads a key with the test's own client: the backend may be closed.
func getDirect(ctx context.Context, c goredis.UniversalClient, key string) ([]byte, bool, error) {
	v, err := c.Get(ctx, key).Bytes()
	if err == goredis.Nil {
		return nil, false, nil
	}
	return v, err == nil, err
}
