package redis_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/internal/redistest"
	"github.com/kvready/kvready/internal/sidebyside"
)

// The benchmarks run against the test binary's own redis-server on loopback.
// Each measures one lease of benchUnits rows (one layer group) at a row size:
// through the backend (submit, Settle, Quiesce), and beside it the bare
// clients moving the same keys and values into (or out of) the same rows, each
// the fastest way it can: go-redis with one pipelined MGET (MSET), go-redis
// reading each value straight into its row (fetch) or one SET NX per key
// (publish), and rueidis streaming each value into its row (fetch) or one
// MSET, or one SET NX per key (publish). The backend's MB/s over the best of them, measured lease by
// lease (BenchmarkRedisLeases), is the SPEC §5 figure (docs/backend-redis.md,
// docs/performance.md); the floor is the loopback round trip.
//
// Each variant gets its lease (staging, client, backend) once, not once per
// ramp-up run of the benchmark, and moves it once before the timer starts:
// what is measured is the steady state, not dialling and the first writes on
// new connections (on loopback, a new connection's first megabytes are far
// slower than the next).
//
// Names: BenchmarkRedisFetch/row=64KiB, and beside it /bare, /bare-zerocopy
// and /bare-rueidis, likewise 512KiB and 2MiB; BenchmarkRedisPublish/row=64KiB
// beside /bare, /bare-setnx, /bare-rueidis and /bare-rueidis-setnx, likewise (each way on its own,
// for its absolute MB/s, B/op and allocs/op); BenchmarkRedisLeases/fetch/row=64KiB
// and /publish/row=64KiB, likewise (every way lease by lease, for the ratios).
// internal/benchreport reads them.

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
	rue    rueidis.Client
	store  *kvredis.Backend
}

func newBenchLease(b *testing.B, slot int) *benchLease {
	l := &benchLease{mem: newStaging(1, benchUnits, slot), client: newClient(b, shared.Addr)}
	rue, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{shared.Addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rue.Close)
	l.rue = rue
	// The backend is opened as a deployment opens it (Open, its clients its
	// own): sharing one client's pipeline connections with a bare way slowed
	// the backend's 64 KiB publication to 0.6–0.8× of what it moves over
	// connections of its own, and left the bare ways as they were
	// (docs/backend-redis.md, "The 64 KiB publication and the bare clients'
	// connections"); and Open's publications write through a client of their
	// own that New over a caller's client does not have
	// ("Writing a publication straight from staging").
	store, err := kvredis.Open(context.Background(), shared.URL(), l.mem,
		kvredis.WithPrefix(uniquePrefix(b)), kvredis.WithAttemptTimeout(wait))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	l.store = store
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

// way is one way of moving a benchmarked lease: the backend's, or a bare
// client's. Its op moves one lease and leaves the timer alone.
type way struct {
	name string // "" for the backend, else the reference's suffix ("bare", ...)
	op   func(*testing.B)
}

// fetchWays are the backend's fetch and beside it the bare clients' fastest
// reads of the same keys into the same rows. The store must hold the lease.
func (l *benchLease) fetchWays() []way {
	fetch := func(b *testing.B) {
		a, err := l.store.Fetch(l.extent, nil)
		if err != nil {
			b.Fatal(err)
		}
		complete(b, l.store, a, benchUnits)
	}
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
	// The same keys read straight into the rows by go-redis (GetToBuffer,
	// no intermediate copy, no check that a value has its row's length).
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
	// The same keys streamed into the rows by rueidis: one pipeline on a
	// connection of its own (DoMultiStream), each value read straight
	// from the connection's buffer into its row.
	gets := make(rueidis.Commands, benchUnits)
	into := make([]rowFill, benchUnits)
	rue := func(b *testing.B) {
		for i, k := range l.keys {
			gets[i] = l.rue.B().Get().Key(k).Build()
		}
		s := l.rue.DoMultiStream(ctx, gets...)
		for i := 0; s.HasNext(); i++ {
			into[i] = rowFill{row: l.rows[i]}
			if n, err := s.WriteTo(&into[i]); err != nil || int(n) != len(l.rows[i]) {
				b.Fatalf("key %d: %d bytes, %v", i, n, err)
			}
		}
		if err := s.Error(); !errors.Is(err, io.EOF) {
			b.Fatal(err)
		}
	}
	return []way{{"", fetch}, {"bare", mget}, {"bare-zerocopy", zerocopy}, {"bare-rueidis", rue}}
}

// publishWays are the backend's publication and beside it the bare clients'
// fastest writes of the same rows under the same keys; clear deletes the
// keys, so that the next lease really stores its values (SET NX on a present
// key stores nothing).
func (l *benchLease) publishWays() (ways []way, clear func(*testing.B)) {
	ctx := context.Background()
	clear = func(b *testing.B) {
		if err := l.client.Del(ctx, l.keys...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	publish := func(b *testing.B) {
		a, err := l.store.Publish(l.extent)
		if err != nil {
			b.Fatal(err)
		}
		complete(b, l.store, a, benchUnits)
	}
	// The same rows under the same keys with one pipelined MSET.
	args := pairs(l.keys, l.rows)
	mset := func(b *testing.B) {
		pipe := l.client.Pipeline()
		pipe.MSet(ctx, args...)
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
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
	}
	// The same rows under the same keys with one MSET through rueidis
	// (its fastest write: one command, the rows passed without a copy).
	rue := func(b *testing.B) {
		m := l.rue.B().Mset().KeyValue()
		for i, k := range l.keys {
			m = m.KeyValue(k, rueidis.BinaryString(l.rows[i]))
		}
		if err := l.rue.Do(ctx, m.Build()).Error(); err != nil {
			b.Fatal(err)
		}
	}
	// The same rows under the same keys as the backend writes them, through
	// rueidis: one SET NX per key, pipelined (DoMulti), the rows passed
	// without a copy.
	sets := make(rueidis.Commands, benchUnits)
	rueSetnx := func(b *testing.B) {
		for i, k := range l.keys {
			sets[i] = l.rue.B().Set().Key(k).Value(rueidis.BinaryString(l.rows[i])).Nx().Build()
		}
		for i, r := range l.rue.DoMulti(ctx, sets...) {
			if err := r.Error(); err != nil {
				b.Fatalf("key %d: %v", i, err)
			}
		}
	}
	return []way{{"", publish}, {"bare", mset}, {"bare-setnx", setnx}, {"bare-rueidis", rue}, {"bare-rueidis-setnx", rueSetnx}}, clear
}

// runWays measures each way as its own sub-benchmark, one after another:
// row=SIZE for the backend, row=SIZE/NAME for a reference. after runs,
// untimed, after every lease.
func (l *benchLease) runWays(b *testing.B, row string, slot int, ways []way, after func(*testing.B)) {
	for _, w := range ways {
		name := "row=" + row
		if w.name != "" {
			name += "/" + w.name
		}
		l.run(b, name, slot, func(b *testing.B) {
			w.op(b)
			if after != nil {
				b.StopTimer()
				after(b)
				b.StartTimer()
			}
		})
	}
}

func BenchmarkRedisFetch(b *testing.B) {
	for _, size := range benchRows {
		l := newBenchLease(b, size.bytes)
		l.seed(b)
		l.runWays(b, size.name, size.bytes, l.fetchWays(), nil)
	}
}

// seed publishes the lease through the backend, so that a fetch finds it.
func (l *benchLease) seed(b *testing.B) {
	a, err := l.store.Publish(l.extent)
	if err != nil {
		b.Fatal(err)
	}
	complete(b, l.store, a, benchUnits)
}

// rowFill is where rueidis streams a value: its row, read into straight from
// the connection's buffer (io.Copy hands a ReaderFrom the reply's reader).
type rowFill struct {
	row []byte
	n   int
}

func (f *rowFill) Write(p []byte) (int, error) {
	if len(p) > len(f.row)-f.n {
		return 0, fmt.Errorf("a value longer than its row (%d bytes)", len(f.row))
	}
	f.n += copy(f.row[f.n:], p)
	return len(p), nil
}

func (f *rowFill) ReadFrom(r io.Reader) (int64, error) {
	n, err := io.ReadFull(r, f.row[f.n:])
	f.n += n
	return int64(n), err
}

func BenchmarkRedisPublish(b *testing.B) {
	for _, size := range benchRows {
		l := newBenchLease(b, size.bytes)
		ways, clear := l.publishWays()
		l.runWays(b, size.name, size.bytes, ways, clear)
	}
}

// BenchmarkRedisLeases measures the backend and every bare reference of
// BenchmarkRedisFetch (fetch/row=SIZE) and BenchmarkRedisPublish
// (publish/row=SIZE) lease by lease: each iteration moves one lease each way,
// in an order that rotates, and each way's figure is the median of its
// leases (at least minLeases: rounds past the timed ones, untimed, make them
// up). Measured one after another, as BenchmarkRedisFetch and
// BenchmarkRedisPublish do, each way meets the load of its own second or so;
// on a shared machine that load swings by more than the gaps being measured,
// and the best of three references measured so is biased upwards. Lease by
// lease, every way meets the same load. It reports, besides ns/op (one
// lease each way):
//
//   - x-best: the backend's MB/s ÷ the best reference's (the SPEC §5 figure;
//     the fastest reference's median lease time ÷ the backend's);
//   - x-NAME: the same against each reference;
//   - MB/s-backend, MB/s-NAME: each way's MB/s at its median lease.
func BenchmarkRedisLeases(b *testing.B) {
	for _, size := range benchRows {
		b.Run("fetch/row="+size.name, func(b *testing.B) {
			l := newBenchLease(b, size.bytes)
			l.seed(b)
			alternate(b, size.bytes, l.fetchWays(), nil)
		})
		b.Run("publish/row="+size.name, func(b *testing.B) {
			l := newBenchLease(b, size.bytes)
			ways, clear := l.publishWays()
			alternate(b, size.bytes, ways, clear)
		})
	}
}

// alternate moves one lease each way per iteration (internal/sidebyside),
// after (untimed) after every lease, and reports each way's median lease
// against the backend's (ways[0]).
func alternate(b *testing.B, slot int, ways []way, after func(*testing.B)) {
	sbs := make([]sidebyside.Way, len(ways))
	for k, w := range ways {
		sbs[k] = sidebyside.Way{Name: w.name, Op: w.op}
	}
	medians := sidebyside.Run(b, sbs, sidebyside.Options{After: after, MinOps: minLeases}).Warm
	ours := medians[0]
	best := time.Duration(0)
	mbps := func(d time.Duration) float64 { return float64(benchUnits*slot) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(ours), "MB/s-backend")
	for k, w := range ways[1:] {
		ref := medians[k+1]
		if best == 0 || ref < best {
			best = ref
		}
		b.ReportMetric(float64(ref)/float64(ours), "x-"+w.name)
		b.ReportMetric(mbps(ref), "MB/s-"+w.name)
	}
	b.ReportMetric(float64(best)/float64(ours), "x-best")
}

// minLeases is how many leases each way moves at least in BenchmarkRedisLeases.
const minLeases = 30

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
