package readiness

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/staging"
)

// pendingFetcher submits attempts that never answer: every lease stays in
// flight.
type pendingFetcher struct{}

type pendingAttempt struct{}

func (pendingAttempt) Poll() contract.Outcome { return nil }

var thePendingAttempt contract.Attempt = pendingAttempt{}

func (pendingFetcher) Fetch(contract.CacheExtent, contract.Route) (contract.Attempt, error) {
	return thePendingAttempt, nil
}
func (pendingFetcher) Quiesce(context.Context, []contract.Attempt) (bool, error) { return true, nil }
func (pendingFetcher) Settle(context.Context, []contract.Attempt) error          { return nil }
func (pendingFetcher) Probe(context.Context, []byte, []contract.Name) (contract.NameSet, bool, error) {
	return contract.NameSet{}, false, nil
}
func (pendingFetcher) OpenRoute(map[string]string) (contract.Route, error) { return nil, nil }

// descriptorBuilders are the functions that allocate a lease's row
// descriptors (its body, rows, names, placed addresses, view, extent units
// and served masks): what the engine keeps for the caller rather than for
// itself. Every lease in flight holds what the first two allocate; served
// masks are built only once an outcome is in (none in this benchmark).
var descriptorBuilders = []string{
	"github.com/kvready/kvready/readiness.(*Core).newBody",
	"github.com/kvready/kvready/staging.(*ExtentBuilder).Build",
	"github.com/kvready/kvready/staging.ServedMasksInto",
}

// descriptorBytes is the live heap allocated under a descriptor builder, read
// from the heap profile (runtime.MemProfileRate must have been 1 since the
// engine was made, so that every allocation is in it). It is the engine's own
// memory, attributed by where each byte was allocated: nothing is rebuilt to
// be measured.
func descriptorBytes() map[string]int64 {
	for range 3 { // the profile lags up to two collections
		runtime.GC()
	}
	var records []runtime.MemProfileRecord
	for {
		n, ok := runtime.MemProfile(records, false)
		if ok {
			records = records[:n]
			break
		}
		records = make([]runtime.MemProfileRecord, n+64)
	}
	by := map[string]int64{}
	for _, r := range records {
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			if slices.Contains(descriptorBuilders, f.Function) {
				by[f.Function] += r.InUseBytes()
				break
			}
			if !more {
				break
			}
		}
	}
	return by
}

func heapNow() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkSlotMemory reports, per staging slot, what the runner users embed
// holds with every slot lent to a lease in flight (submitted, outcome
// pending, its attempt watched):
//   - B/slot: the engine's own state — lease records, the lifecycle state,
//     the allocator, the timers and the runner's attempt table (which the
//     watcher polls from) — excluding the staging payload and the row descriptors (names,
//     view, extent units, masks) it keeps for the caller;
//   - B/slot-total: everything except the staging payload.
//
// The descriptors are the engine's live heap allocated by the functions that
// build them (descriptorBuilders), read from the heap profile with every
// allocation sampled. They include the lease's body struct, whose fields from
// first on (152 bytes) are engine state all the same: docs/performance.md
// says what B/slot would read with them counted in.
//
// Leases of 1 row and of 8 rows (4 blocks × 2 layer groups) are measured.
func BenchmarkSlotMemory(b *testing.B) {
	for _, shape := range []struct{ blocks, groups int }{{1, 1}, {4, 2}} {
		rows := shape.blocks * shape.groups
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			const leases = 1 << 15
			slots := leases * shape.blocks
			var engine, descriptors int64
			defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
			runtime.MemProfileRate = 1
			for b.Loop() {
				start := heapNow()
				dev, err := sim.New(0, 1<<12)
				if err != nil {
					b.Fatal(err)
				}
				stream, _ := dev.NewStream()
				ptr, _ := dev.Alloc(64)
				groups := make([]staging.Group, shape.groups)
				for g := range groups {
					groups[g] = staging.Group{Slots: slots, SlotBytes: 64}
				}
				m, err := staging.NewMemory(staging.GoHeap, groups...)
				if err != nil {
					b.Fatal(err)
				}
				payload := int64(shape.groups * slots * 64)
				e, err := New(Config{
					Memory:         m,
					TokensPerBlock: 32,
					RequestTimeout: time.Hour,
					Fetcher:        pendingFetcher{},
					Stream:         stream,
				})
				if err != nil {
					b.Fatal(err)
				}
				req := Request{Kind: Fetch}
				for g := range shape.groups {
					for blk := range shape.blocks {
						req.Rows = append(req.Rows, staging.Row{Group: g, Block: blk, Device: ptr})
					}
				}
				// Lent as a manager lends, a few per round: the round's own
				// buffers stay the size of a round, not of the whole pool.
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				for k := range leases {
					for i := range req.Rows {
						n := &req.Rows[i].Name
						n[0], n[1], n[2], n[3] = byte(k), byte(k>>8), byte(k>>16), byte(i)
					}
					if _, err := e.Lend(req); err != nil {
						b.Fatal(err)
					}
					if k%64 == 63 {
						e.Progress()
					}
				}
				if _, err := e.Sync(ctx); err != nil {
					b.Fatal(err)
				}
				cancel()
				if got := e.Count(State(StateRequested)); got != leases {
					b.Fatalf("%d leases in flight, want %d", got, leases)
				}
				total := heapNow() - start - payload
				by := descriptorBytes()
				descriptors = 0
				for _, f := range descriptorBuilders {
					descriptors += by[f]
				}
				for _, f := range descriptorBuilders[:2] {
					if by[f] <= 0 {
						b.Fatalf("the heap profile attributes nothing to %s, which builds every lease's descriptors: it was renamed or moved; update descriptorBuilders", f)
					}
				}
				engine = total - descriptors
				runtime.KeepAlive(e)
				// Bounded: an engine that never drains fails the benchmark,
				// naming what it still holds, instead of spinning.
				rep := e.Close()
				ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
				for !rep.Drained {
					if _, err := e.Sync(ctx); err != nil {
						b.Fatalf("the closed engine did not drain (%d slots held, leases by state %v): %v", rep.SlotsHeld, rep.Held, err)
					}
					rep = e.Report()
				}
				cancel()
			}
			b.ReportMetric(float64(engine)/float64(shape.groups*slots), "B/slot")
			b.ReportMetric(float64(engine+descriptors)/float64(shape.groups*slots), "B/slot-total")
		})
	}
}
