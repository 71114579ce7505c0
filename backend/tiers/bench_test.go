package tiers_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/kvready/kvready/backend/mem"
	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/internal/redistest"
	"github.com/kvready/kvready/internal/sidebyside"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// BenchmarkTiers measures SPEC §5's tier figures, each beside its reference
// in the same run (internal/benchreport reads the names; docs/tiers.md and
// docs/performance.md report the ratios):
//
//   - local: whole one-row fetch lifecycles through the runner users embed
//     (readiness.New on the simulated device, as BenchmarkLifecycle's
//     engine-256), every row served by backend/mem: through a stack whose
//     local tier holds every row (hit; the tier behind it is never asked),
//     and through the same backend/mem alone (alone), localBlock rounds of
//     64 leases each way in turn (benchLocal), each lease one 64-byte row
//     (localSlot). The figure: x-hit ≤ 1.1.
//   - local/row=64KiB: the same with 64 KiB rows, a KV block a lease — its
//     copy into staging, on both ways, the bulk of the lease (in view).
//   - redis/row=SIZE: a lease of 16 rows fetched from a real redis-server
//     (the bench's own, on loopback) as backend/redis's BenchmarkRedisFetch
//     moves one (submit, Settle, Quiesce), four ways, redisBlock leases
//     each way a round (internal/sidebyside: every way meets the same load,
//     the Redis server's on the same cores included), each way's figure its
//     median lease after the first of each block (x-WAY-cold, in view: the
//     first, after another way's). alone: through backend/redis alone. promoted: through a stack
//     whose local tier misses every row — it holds one lease's rows, and
//     each way alternates two leases, so each fetch finds the other lease's
//     rows there, and the rows Redis served are promoted into it, evicting
//     those, before the lease's proof. Redis tees (tee.go): the promotion is
//     the local tier adopting the copies Redis landed as it read the rows.
//     unpromoted: the same chain (a local miss, then Redis) with promotion
//     off, its local tier always empty: what the promotion costs, apart
//     from the stack's own. copied: the same stack with Redis seen as a
//     fetcher without FetchTee (noTee), its rows promoted by a publication
//     from the staging rows after its proof — the copy on the lease's path.
//     MB/s-WAY counts a lease's bytes at the way's median lease; x-WAY is
//     that ÷ MB/s-alone. The figure: x-promoted ≥ 0.9.
//   - promotion/row=SIZE: the promotion of a lower tier that does not tee,
//     with no Redis and no stack — the publication of a lease's rows into
//     a local tier at capacity, evicting the other lease's, to its proof —
//     whose MB/s would bound the figure with that copy on the lease's path
//     (rule 19): promoted ÷ alone ≤ 1 / (1 + MB/s-alone ÷ promotion MB/s).
func BenchmarkTiers(b *testing.B) {
	b.Run("local", func(b *testing.B) { benchLocal(b, localSlot) })
	b.Run("local/row=64KiB", func(b *testing.B) { benchLocal(b, 64<<10) })
	// The server is started by the first Redis sub-benchmark that runs
	// (none, when -bench selects only the local pair), and each size's
	// leases by its own.
	var srv *redistest.Server
	made := map[int]*redisBench{}
	bench := func(slot int) *redisBench {
		if srv == nil {
			srv = redistest.Start(b)
		}
		r := made[slot]
		if r == nil {
			r = newRedisBench(b, srv, slot)
			// Warm every connection of the pool and the server's buffers
			// first, through each: on loopback, a new connection's first
			// megabytes are far slower than the next, and whichever ran
			// first would pay it.
			for range 8 { // in pairs: each alternates the two leases
				for _, w := range r.ways() {
					r.lease(b, w.f)
					r.lease(b, w.f)
				}
			}
			for _, w := range r.ways() {
				r.lease(b, w.f)
				if got, want := r.rows.rows[redisUnits-1][0], byte((r.next[w.f]^1)<<4|(redisUnits-1)); got != want {
					b.Fatalf("%s: staging row %d holds %#x; want %#x, the last lease's", w.name, redisUnits-1, got, want)
				}
			}
			made[slot] = r
		}
		return r
	}
	for _, size := range []struct {
		name  string
		bytes int
	}{{"64KiB", 64 << 10}, {"512KiB", 512 << 10}, {"2MiB", 2 << 20}} {
		b.Run("redis/row="+size.name, func(b *testing.B) { r := bench(size.bytes); r.sideBySide(b) })
		b.Run("promotion/row="+size.name, func(b *testing.B) { benchPromotion(b, size.bytes) })
	}
	for _, r := range made {
		r.check(b)
	}
}

// localLeases is how many one-row leases a round of benchLocal has in
// flight (BenchmarkLifecycle's engine-256 has 256: the owner's rounds
// amortised over them; here each lease also starts a backend goroutine).
const localLeases = 64

// localSlot is the row of the figure's local hit: BenchmarkLifecycle's,
// so small that the lease is almost all the runner's and the tiers' own
// work — the stack's cost at its harshest. local/row=64KiB moves a KV
// block a lease instead (in view).
const localSlot = 64

// localRig runs whole one-row fetch lifecycles through the runner, every row
// served by a backend/mem holding it: behind a stack, or alone.
type localRig struct {
	eng    *readiness.Engine
	stack  *tiers.Backend // nil alone
	round  func(b *testing.B, n int)
	closer func(b *testing.B)
}

// newLocalRig builds a rig and runs a round to warm it up and check what it
// measures: every lease served, its row on the device, and (stacked) by the
// local tier alone.
func newLocalRig(b *testing.B, stacked bool, slot int) *localRig {
	dev, err := sim.New(0, max(1<<20, 2*localLeases*slot), sim.WithLatency(sim.WallClock{}, 0))
	if err != nil {
		b.Fatal(err)
	}
	stream, err := dev.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	staged, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: localLeases, SlotBytes: slot})
	if err != nil {
		b.Fatal(err)
	}
	local, err := mem.New(staged, mem.WithCapacityBytes(int64(localLeases*slot)))
	if err != nil {
		b.Fatal(err)
	}
	shared, err := mem.New(staged) // never asked: every row is a local hit
	if err != nil {
		b.Fatal(err)
	}
	rig := &localRig{}
	var fetcher contract.Fetcher = local
	if stacked {
		rig.stack, err = tiers.New([]tiers.Tier{{Name: "local", Fetcher: local, Publisher: local}, {Name: "shared", Fetcher: shared, Publisher: shared}})
		if err != nil {
			b.Fatal(err)
		}
		fetcher = rig.stack
	}
	eng, err := readiness.New(readiness.Config{Memory: staged, TokensPerBlock: 32, RequestTimeout: time.Hour, DrainGrace: time.Hour,
		Fetcher: fetcher, Stream: stream})
	if err != nil {
		b.Fatal(err)
	}
	rig.eng = eng
	rig.closer = func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := eng.Shutdown(ctx); err != nil {
			b.Error(err)
		}
		if rig.stack != nil {
			_ = rig.stack.Close()
		}
		_ = local.Close()
		_ = shared.Close()
	}
	reqs := make([]readiness.Request, localLeases)
	blocks := make([]gpu.DevicePtr, localLeases)
	for k := range reqs {
		n := benchName(k)
		local.Put(staging.ExtentName, n, bytes.Repeat([]byte{byte(k)}, slot))
		if blocks[k], err = dev.Alloc(slot); err != nil {
			b.Fatal(err)
		}
		reqs[k] = readiness.Request{Kind: readiness.Fetch, Rows: []staging.Row{{Name: n, Group: 0, Block: 0, Device: blocks[k]}}}
	}
	hs := make([]readiness.Handle, localLeases)
	wait := time.NewTimer(time.Hour)
	rig.round = func(b *testing.B, n int) {
		for k := range n {
			h, err := eng.Lend(reqs[k])
			if err != nil {
				b.Fatal(err)
			}
			hs[k] = h
		}
		for eng.Count(readiness.StateLogicallyComplete) < n {
			dev.CompleteAll()
			if eng.Progress() == 0 && eng.Count(readiness.StateLogicallyComplete) < n {
				wait.Reset(bound)
				select {
				case <-eng.Wake():
				case <-wait.C:
					b.Fatalf("no lease moved within %v: %v", bound, eng.Stats().Leases)
				}
			}
		}
		for k := range n {
			if err := eng.Release(hs[k]); err != nil {
				b.Fatal(err)
			}
		}
	}
	rig.round(b, localLeases)
	for k, h := range hs[:localLeases] {
		info, err := eng.Lease(h)
		if err != nil || info.Outcome != readiness.Served {
			b.Fatalf("lease %d: %v %v; want served", k, info.Outcome, err)
		}
		got := make([]byte, slot)
		if err := dev.Read(got, blocks[k]); err != nil || got[0] != byte(k) {
			b.Fatalf("lease %d: device row %x %v; want its stored row", k, got[:4], err)
		}
	}
	return rig
}

// check fails b unless every row the stack was asked for was a local hit.
func (rig *localRig) check(b *testing.B) {
	if rig.stack == nil {
		return
	}
	st := rig.stack.Stats()
	if st[0].Misses != 0 || st[1].Handed != 0 {
		b.Fatalf("the local tier missed %d rows and the shared one was handed %d; want every row a local hit", st[0].Misses, st[1].Handed)
	}
}

// benchLocal measures rounds of localLeases leases through a rig whose stack
// serves every row from its local tier and through one whose backend/mem
// serves them alone, localBlock rounds each way in turn (internal/sidebyside),
// and reports per lease each way's median round after the first of each block
// (ns/lease-WAY), the local hit's ÷ alone's (x-hit; x-hit-cold, the same of
// the first rounds, after the other way's), allocations (allocs/lease-WAY, counted over rounds of
// their own after the timed ones) and hand-offs (handoffs/lease-WAY: a proof
// a worker answered, the owner woken by another goroutine — they depend on
// how soon the backend's goroutine ends, so on the machine's scheduling, and
// the time follows them).
func benchLocal(b *testing.B, slot int) {
	rigs := []*localRig{newLocalRig(b, false, slot), newLocalRig(b, true, slot)}
	names := []string{"alone", "hit"}
	defer func() {
		for _, rig := range rigs {
			rig.closer(b)
		}
	}()
	ways := make([]sidebyside.Way, len(rigs))
	for k, rig := range rigs {
		ways[k] = sidebyside.Way{Name: names[k], Op: func(b *testing.B) { rig.round(b, localLeases) }}
	}
	res := sidebyside.Run(b, ways, sidebyside.Options{MinOps: localMinRounds, Block: localBlock})
	b.StopTimer()
	for k, rig := range rigs {
		b.ReportMetric(float64(res.Warm[k].Nanoseconds())/localLeases, "ns/lease-"+names[k])
		rig.check(b)
	}
	b.ReportMetric(float64(res.Warm[1])/float64(res.Warm[0]), "x-hit")
	b.ReportMetric(float64(res.Cold[1])/float64(res.Cold[0]), "x-hit-cold")
	for k, rig := range rigs {
		var before, after runtime.MemStats
		handoffs := rig.eng.Stats().Handoffs
		runtime.ReadMemStats(&before)
		for range localAllocRounds {
			rig.round(b, localLeases)
		}
		runtime.ReadMemStats(&after)
		const leases = localAllocRounds * localLeases
		b.ReportMetric(float64(after.Mallocs-before.Mallocs)/leases, "allocs/lease-"+names[k])
		b.ReportMetric(float64(rig.eng.Stats().Handoffs-handoffs)/leases, "handoffs/lease-"+names[k])
	}
}

// localMinRounds is how many rounds each way of benchLocal runs at least,
// besides the first of each block; localBlock, how many it runs in a row,
// the first after the other way's; localAllocRounds, how many more it runs
// to count allocations.
const (
	localMinRounds   = 30
	localBlock       = 4
	localAllocRounds = 16
)

func benchName(k int) contract.Name {
	var n contract.Name
	n[0], n[1], n[2], n[53] = 0xB7, byte(k), byte(k>>8), 0x5A
	return n
}

// redisUnits is how many rows one lease of the Redis figure moves
// (backend/redis's benchUnits).
const redisUnits = 16

// redisBench is two leases of redisUnits rows, stored in Redis, fetched
// alternately into the same staging rows: through a stack whose local tier
// holds one lease's rows, or through backend/redis alone.
type redisBench struct {
	slot  int
	rows  *memory
	store *kvredis.Backend
	local *mem.Backend
	stack *tiers.Backend
	// unpromoted is the same chain without promotion, over a local tier
	// that stays empty.
	empty      *mem.Backend
	unpromoted *tiers.Backend
	// copied is the stack without the tee: Redis seen only as a
	// contract.Fetcher, its rows promoted by a publication from the staging
	// rows after its proof, into a local tier of its own.
	copiedLocal *mem.Backend
	copied      *tiers.Backend
	extents     [2]contract.CacheExtent
	// next is, per fetcher, which lease it fetches next: each alternates
	// the two on its own, so that a stack's local tier always holds the
	// other lease's rows, whatever the other variants fetched between.
	next map[contract.Fetcher]int
}

// noTee is a fetcher without FetchTee: the stack promotes what it serves
// by a publication from the staging rows. It keeps TryQuiesce, as the
// stack asks it before promoting.
type noTee struct {
	contract.Fetcher
	contract.QuiesceProber
}

func newRedisBench(b *testing.B, srv *redistest.Server, slot int) *redisBench {
	r := &redisBench{slot: slot, rows: &memory{}, next: map[contract.Fetcher]int{}}
	for range redisUnits {
		r.rows.rows = append(r.rows.rows, make([]byte, slot))
	}
	ctx := context.Background()
	var err error
	r.store, err = kvredis.Open(ctx, srv.URL(), r.rows, kvredis.WithPrefix(fmt.Sprintf("bench:tiers:%d:", slot)),
		kvredis.WithAttemptTimeout(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	r.local, err = mem.New(r.rows, mem.WithCapacityBytes(int64(redisUnits*slot)))
	if err != nil {
		b.Fatal(err)
	}
	r.stack, err = tiers.New([]tiers.Tier{{Name: "local", Fetcher: r.local, Publisher: r.local}, {Name: "redis", Fetcher: r.store, Publisher: r.store}})
	if err != nil {
		b.Fatal(err)
	}
	if r.empty, err = mem.New(r.rows); err != nil {
		b.Fatal(err)
	}
	r.unpromoted, err = tiers.New([]tiers.Tier{{Name: "local", Fetcher: r.empty, Publisher: r.empty}, {Name: "redis", Fetcher: r.store, Publisher: r.store}},
		tiers.WithoutPromotion())
	if err != nil {
		b.Fatal(err)
	}
	if r.copiedLocal, err = mem.New(r.rows, mem.WithCapacityBytes(int64(redisUnits*slot))); err != nil {
		b.Fatal(err)
	}
	r.copied, err = tiers.New([]tiers.Tier{{Name: "local", Fetcher: r.copiedLocal, Publisher: r.copiedLocal},
		{Name: "redis", Fetcher: noTee{r.store, r.store}, Publisher: r.store}})
	if err != nil {
		b.Fatal(err)
	}
	var keys []string
	for e := range r.extents {
		units := make([]contract.Unit, redisUnits)
		for i := range units {
			n := benchName(e<<8 | i)
			units[i] = contract.Unit{Name: n, LocalGroup: 0, Local: i}
			keys = append(keys, r.store.Key(extName, n))
			if err := r.store.Put(ctx, extName, n, bytes.Repeat([]byte{byte(e<<4 | i)}, slot)); err != nil {
				b.Fatal(err)
			}
		}
		if r.extents[e], err = contract.NewCacheExtent([]byte(extName), units, true); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		_ = r.stack.Close()
		_ = r.unpromoted.Close()
		_ = r.copied.Close()
		_ = r.local.Close()
		_ = r.copiedLocal.Close()
		_ = r.empty.Close()
		if err := r.store.Client().Del(context.Background(), keys...).Err(); err != nil {
			b.Error(err)
		}
		_ = r.store.Close()
	})
	return r
}

// lease fetches the next of the two leases through f to its end: outcome
// (every row served) and proof.
func (r *redisBench) lease(b *testing.B, f contract.Fetcher) {
	ext := r.extents[r.next[f]]
	r.next[f] ^= 1
	a, err := f.Fetch(ext, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	list := []contract.Attempt{a}
	if err := f.Settle(ctx, list); err != nil {
		b.Fatal(err)
	}
	if d, ok := a.Poll().(contract.Delivered); !ok || d.Served.Len() != redisUnits {
		b.Fatalf("outcome %v; want %d rows served", a.Poll(), redisUnits)
	}
	if ok, err := f.Quiesce(ctx, list); !ok || err != nil {
		b.Fatalf("Quiesce: %v %v", ok, err)
	}
}

// redisWay is one way BenchmarkTiers/redis fetches a lease.
type redisWay struct {
	name string
	f    contract.Fetcher
}

// ways are the fetchers of the Redis figure, backend/redis alone first.
func (r *redisBench) ways() []redisWay {
	return []redisWay{{"alone", r.store}, {"promoted", r.stack}, {"unpromoted", r.unpromoted}, {"copied", r.copied}}
}

// sideBySide measures a lease each way a round and reports each way's MB/s
// at its median lease, and the others' against alone's.
func (r *redisBench) sideBySide(b *testing.B) {
	ways := r.ways()
	sbs := make([]sidebyside.Way, len(ways))
	for k, w := range ways {
		sbs[k] = sidebyside.Way{Name: w.name, Op: func(b *testing.B) { r.lease(b, w.f) }}
	}
	res := sidebyside.Run(b, sbs, sidebyside.Options{MinOps: redisMinLeases, Block: redisBlock})
	mbps := func(d time.Duration) float64 { return float64(redisUnits*r.slot) / d.Seconds() / 1e6 }
	for k, w := range ways {
		b.ReportMetric(mbps(res.Warm[k]), "MB/s-"+w.name)
		if k > 0 {
			b.ReportMetric(float64(res.Warm[0])/float64(res.Warm[k]), "x-"+w.name)
			b.ReportMetric(float64(res.Cold[0])/float64(res.Cold[k]), "x-"+w.name+"-cold")
		}
	}
}

// redisMinLeases is how many leases each way of BenchmarkTiers/redis moves
// at least, besides the first of each block (backend/redis's
// BenchmarkRedisLeases moves as many); redisBlock, how many it moves in a
// row a round, the first after another way's.
const (
	redisMinLeases = 30
	redisBlock     = 3
)

// check holds the stacks' figures to what they claim to measure: every row
// either stack fetched was a local miss served by Redis, promoted by the
// one that promotes.
func (r *redisBench) check(b *testing.B) {
	st := r.stack.Stats()
	if st[0].Hits != 0 || st[1].Hits != st[0].Handed || st[0].Promoted != st[1].Hits {
		b.Fatalf("local %+v, redis %+v; want every row a local miss, served by Redis and promoted", st[0], st[1])
	}
	st = r.copied.Stats()
	if st[0].Hits != 0 || st[1].Hits != st[0].Handed || st[0].Promoted != st[1].Hits {
		b.Fatalf("copied: local %+v, redis %+v; want every row a local miss, served by Redis and promoted", st[0], st[1])
	}
	st = r.unpromoted.Stats()
	if st[0].Hits != 0 || st[1].Hits != st[0].Handed || st[0].Promoted != 0 || r.empty.Len() != 0 {
		b.Fatalf("unpromoted: local %+v, redis %+v; want every row a local miss served by Redis, none promoted", st[0], st[1])
	}
}

// benchPromotion measures what a promotion of a redisBench lease does, alone:
// a publication of its redisUnits rows, from the staging rows, into a
// backend/mem tier bounded to one lease's rows and holding the other
// lease's (each publication evicts them and recycles their bytes), to its
// proof — the copy, the store's work and the hand-off to its goroutine,
// without Redis and without the stack.
func benchPromotion(b *testing.B, slot int) {
	rows := &memory{}
	for i := range redisUnits {
		rows.rows = append(rows.rows, bytes.Repeat([]byte{byte(i)}, slot))
	}
	local, err := mem.New(rows, mem.WithCapacityBytes(int64(redisUnits*slot)))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = local.Close() }()
	var exts [2]contract.CacheExtent
	for e := range exts {
		units := make([]contract.Unit, redisUnits)
		for i := range units {
			units[i] = contract.Unit{Name: benchName(e<<8 | i), LocalGroup: 0, Local: i}
		}
		if exts[e], err = contract.NewCacheExtent([]byte(extName), units, true); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	publish := func(e int) {
		a, err := local.Publish(exts[e])
		if err != nil {
			b.Fatal(err)
		}
		list := []contract.Attempt{a}
		if ok, err := local.Quiesce(ctx, list); !ok || err != nil {
			b.Fatalf("Quiesce: %v %v", ok, err)
		}
		if d, ok := a.Poll().(contract.Delivered); !ok || d.Served.Len() != redisUnits {
			b.Fatalf("outcome %v; want %d rows stored", a.Poll(), redisUnits)
		}
	}
	publish(0)
	publish(1) // at capacity from here on: each publication evicts the other lease's rows
	evicted := local.Evictions()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		publish(i & 1)
		i++
	}
	b.StopTimer()
	b.SetBytes(int64(redisUnits * slot))
	if got, want := local.Evictions()-evicted, uint64(i*redisUnits); got != want {
		b.Fatalf("%d rows evicted over %d publications; want %d: every publication at capacity", got, i, want)
	}
}
