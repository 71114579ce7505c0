package readiness

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
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
// Leases of 1 row and of 8 rows (4 blocks × 2 layer groups) are measured.
func BenchmarkSlotMemory(b *testing.B) {
	for _, shape := range []struct{ blocks, groups int }{{1, 1}, {4, 2}} {
		rows := shape.blocks * shape.groups
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			const leases = 1 << 15
			slots := leases * shape.blocks
			var engine, descriptors int64
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
				if got := e.Count(State(fsm.Requested)); got != leases {
					b.Fatalf("%d leases in flight, want %d", got, leases)
				}
				total := heapNow() - start - payload
				// The row descriptors, measured alone: the same bodies built
				// the same way, placed, with their extents and masks.
				before := heapNow()
				bodies, err := e.core.Descriptors(req.core(), leases, func(k, i int) contract.Name {
					var n contract.Name
					n[0], n[1], n[2], n[3] = byte(k), byte(k>>8), byte(k>>16), byte(i)
					return n
				})
				if err != nil {
					b.Fatal(err)
				}
				descriptors = heapNow() - before
				engine = total - descriptors
				runtime.KeepAlive(bodies)
				runtime.KeepAlive(e)
				rep := e.Close()
				for !rep.Drained {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					_, _ = e.Sync(ctx)
					cancel()
					rep = e.Report()
				}
			}
			b.ReportMetric(float64(engine)/float64(shape.groups*slots), "B/slot")
			b.ReportMetric(float64(engine+descriptors)/float64(shape.groups*slots), "B/slot-total")
		})
	}
}
