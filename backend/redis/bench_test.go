package redis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/internal/redistest"
)

// The benchmarks run against the test binary's own redis-server on loopback.
// Each measures one lease of benchUnits rows (one layer group) at a row size:
// through the backend (submit, Settle, Quiesce), and beside it bare go-redis
// moving the same keys and values into (or out of) the same rows with one
// pipelined MGET (MSET). The ratio backend/bare of MB/s is the SPEC §5 figure
// (docs/backend-redis.md, docs/performance.md); the floor is the loopback
// round trip and the copies.
//
// Each variant gets its lease (staging, client, backend) once, not once per
// ramp-up run of the benchmark, and moves it once before the timer starts:
// what is measured is the steady state, not dialling and the first writes on
// new connections (on loopback, a new connection's first megabytes are far
// slower than the next).
//
// Names: BenchmarkRedisFetch/row=64KiB and BenchmarkRedisFetch/row=64KiB/bare,
// likewise 512KiB and 2MiB, likewise BenchmarkRedisPublish; internal/benchreport
// reads them.

// benchUnits is how many rows one benchmarked lease moves.
const benchUnits = 16

// benchRows are the row sizes SPEC §5 names.
var benchRows = []struct {
	name  string
	bytes int
}{{"64KiB", 64 << 10}, {"512KiB", 512 << 10}, {"2MiB", 2 << 20}}

type benchLease struct {
	mem    *staging
	extent contract.CacheExtent
	keys   []string
	rows   [][]byte
	client *goredis.Client
	store  *kvredis.Backend
}

func newBenchLease(b *testing.B, slot int) *benchLease {
	l := &benchLease{mem: newStaging(1, benchUnits, slot), client: newClient(b, shared.Addr)}
	l.store = newBackend(b, l.client, l.mem, kvredis.WithAttemptTimeout(wait))
	units := make([]contract.Unit, benchUnits)
	for i := range units {
		units[i] = unit(i, 0, i)
		l.keys = append(l.keys, l.store.Key(ext, units[i].Name))
		l.rows = append(l.rows, l.mem.rows[0][i])
		copy(l.rows[i], content(i, 0, slot))
	}
	l.extent = extentOf(b, units...)
	b.Cleanup(func() { _ = l.client.Del(context.Background(), l.keys...).Err() })
	return l
}

// run measures op as the sub-benchmark name, after one op to warm up.
func (l *benchLease) run(b *testing.B, name string, slot int, op func(*testing.B)) {
	b.Run(name, func(b *testing.B) {
		op(b)
		b.ResetTimer()
		for b.Loop() {
			op(b)
		}
		l.report(b, slot)
	})
}

func (l *benchLease) report(b *testing.B, slot int) {
	b.SetBytes(int64(benchUnits * slot))
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "leases/s")
}

// complete waits for the attempt's outcome and for Quiesce: the whole lease.
func complete(b *testing.B, store *kvredis.Backend, a contract.Attempt, want int) {
	ctx := context.Background()
	list := []contract.Attempt{a}
	if err := store.Settle(ctx, list); err != nil {
		b.Fatal(err)
	}
	if d, ok := a.Poll().(contract.Delivered); !ok || d.Served.Len() != want {
		b.Fatalf("outcome %v, want %d served", a.Poll(), want)
	}
	if ok, err := store.Quiesce(ctx, list); !ok || err != nil {
		b.Fatalf("Quiesce: %v %v", ok, err)
	}
}

func BenchmarkRedisFetch(b *testing.B) {
	for _, size := range benchRows {
		slot := size.bytes
		l := newBenchLease(b, slot)
		a, err := l.store.Publish(l.extent)
		if err != nil {
			b.Fatal(err)
		}
		complete(b, l.store, a, benchUnits)
		fetch := func(b *testing.B) {
			a, err := l.store.Fetch(l.extent, nil)
			if err != nil {
				b.Fatal(err)
			}
			complete(b, l.store, a, benchUnits)
		}
		l.run(b, "row="+size.name, slot, fetch)
		// The same keys into the same rows with one pipelined MGET.
		ctx := context.Background()
		mget := func(b *testing.B) {
			pipe := l.client.Pipeline()
			mget := pipe.MGet(ctx, l.keys...)
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			for i, v := range mget.Val() {
				s, ok := v.(string)
				if !ok || len(s) != len(l.rows[i]) {
					b.Fatalf("key %d: %T of %d bytes", i, v, len(s))
				}
				copy(l.rows[i], s)
			}
		}
		l.run(b, fmt.Sprintf("row=%s/bare", size.name), slot, mget)
		// The same keys read straight into the rows by go-redis (GetToBuffer,
		// no intermediate copy): a stricter reference than MGET, and one the
		// backend cannot use, since a late reply would land in staging.
		cmds := make([]*goredis.ZeroCopyStringCmd, benchUnits)
		zerocopy := func(b *testing.B) {
			pipe := l.client.Pipeline()
			for i, k := range l.keys {
				cmds[i] = pipe.GetToBuffer(ctx, k, l.rows[i])
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			for i, c := range cmds {
				if n, err := c.Result(); err != nil || n != len(l.rows[i]) {
					b.Fatalf("key %d: %d bytes, %v", i, n, err)
				}
			}
		}
		l.run(b, fmt.Sprintf("row=%s/bare-zerocopy", size.name), slot, zerocopy)
	}
}

func BenchmarkRedisPublish(b *testing.B) {
	for _, size := range benchRows {
		slot := size.bytes
		l := newBenchLease(b, slot)
		ctx := context.Background()
		// Between leases (timer stopped) the keys are deleted, so that every
		// lease really stores its values: SET NX on a present key stores nothing.
		clear := func(b *testing.B) {
			b.StopTimer()
			if err := l.client.Del(ctx, l.keys...).Err(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		publish := func(b *testing.B) {
			a, err := l.store.Publish(l.extent)
			if err != nil {
				b.Fatal(err)
			}
			complete(b, l.store, a, benchUnits)
			clear(b)
		}
		l.run(b, "row="+size.name, slot, publish)
		// The same rows under the same keys with one pipelined MSET.
		args := pairs(l.keys, l.rows)
		mset := func(b *testing.B) {
			pipe := l.client.Pipeline()
			pipe.MSet(ctx, args...)
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			clear(b)
		}
		l.run(b, fmt.Sprintf("row=%s/bare", size.name), slot, mset)
		// The same rows under the same keys as the backend writes them: one
		// pipelined SET NX per key on one connection, in view. Content
		// addresses need NX (a stored unit keeps its expiry and is never
		// rewritten), which MSET cannot say; the gap between this and MSET
		// is the command, the gap between the backend and this is ours.
		setnx := func(b *testing.B) {
			pipe := l.client.Pipeline()
			for i, k := range l.keys {
				pipe.SetNX(ctx, k, l.rows[i], 0)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			clear(b)
		}
		l.run(b, fmt.Sprintf("row=%s/bare-setnx", size.name), slot, setnx)
	}
}

func pairs(keys []string, rows [][]byte) []any {
	args := make([]any, 0, 2*len(keys))
	for i, k := range keys {
		args = append(args, k, rows[i])
	}
	return args
}

// BenchmarkRedisRefused measures what a lease costs to learn its fate while
// the store is held for down: a Fetch refused at once by the breaker (the
// store killed, one failed call opened it). ns/op is the time from the
// submission to the error, which is the outcome: nothing waits.
func BenchmarkRedisRefused(b *testing.B) {
	srv := redistest.Start(b)
	mem := newStaging(1, benchUnits, 64<<10)
	store, err := kvredis.Open(context.Background(), srv.URL()+"?breaker_failures=1&breaker_probe=1h", mem,
		kvredis.WithPrefix(uniquePrefix(b)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	units := make([]contract.Unit, benchUnits)
	for i := range units {
		units[i] = unit(i, 0, i)
	}
	extent := extentOf(b, units...)
	srv.Kill()
	if a, err := store.Fetch(extent, nil); err == nil { // meets the dead store, and opens the breaker
		if err := store.Settle(context.Background(), []contract.Attempt{a}); err != nil {
			b.Fatal(err)
		}
	}
	if store.Health().Reachable {
		b.Fatal("the breaker did not open against a dead store")
	}
	for b.Loop() {
		if _, err := store.Fetch(extent, nil); !errors.Is(err, kvredis.ErrUnavailable) {
			b.Fatalf("want a refusal wrapping ErrUnavailable, got %v", err)
		}
	}
}
