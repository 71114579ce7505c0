package cuda_test

import (
	"testing"

	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/cuda"
	"github.com/kvready/kvready/gpu/cuda/fakecuda"
	"github.com/kvready/kvready/gpu/sim"
)

// benchBatch is how many copy+record+query cycles run before the device
// completes them all, in one call on the benchmark's goroutine.
const benchBatch = 64

// BenchmarkCUDACopyEvent measures what the binding costs per asynchronous
// copy + event record + query, beside the simulated device doing the same:
// both complete their queued work in batches on the calling goroutine (the
// fake driver held, then stepped), so the figure is the purego calls, the
// context switch-in and the driver's bookkeeping, not a worker thread's
// latency. SPEC figure: cuda ÷ sim ≤ 3×.
func BenchmarkCUDACopyEvent(b *testing.B) {
	b.Run("sim", func(b *testing.B) {
		dev, err := sim.New(0, 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		st, _ := dev.NewStream()
		p, _ := dev.Alloc(4096)
		host := make([]byte, 256)
		cycles(b, st, p, host, func() { dev.CompleteAll() })
	})
	b.Run("cuda", func(b *testing.B) {
		lib, ctl := benchDriver(b)
		defer ctl.Reset()
		ctl.Hold(true)
		dev, err := cuda.Open(0, cuda.WithLibrary(lib))
		if err != nil {
			b.Fatal(err)
		}
		defer dev.Close()
		s, _ := dev.NewStream()
		st := s.(*cuda.Stream)
		defer st.Close()
		p, _ := dev.Alloc(4096)
		defer dev.Free(p)
		host, err := dev.HostAlloc(256)
		if err != nil {
			b.Fatal(err)
		}
		defer dev.FreeHost(host)
		cycles(b, st, p, host, func() {
			if _, err := ctl.Step(st.Handle(), benchBatch, 0, 0); err != nil {
				b.Fatal(err)
			}
		})
	})
	// One call into the library through purego (a counter read), for
	// comparison: where cgo is built a cycle crosses three times through C
	// trampolines (hotpath_cgo.go) — the context switch and the copy, the
	// switch and the record, the query — each about a third of this.
	b.Run("crossing", func(b *testing.B) {
		_, ctl := benchDriver(b)
		b.ReportAllocs()
		for b.Loop() {
			if ctl.Counter(fakecuda.Queries) < 0 {
				b.Fatal("counter read failed")
			}
		}
	})
}

// benchDriver loads the fake driver, reset.
func benchDriver(b *testing.B) (string, *fakecuda.Control) {
	lib, ctl, err := fakecuda.Load()
	if err != nil {
		b.Fatal(err)
	}
	return lib, ctl
}

// cycles runs b.N copy + record + query cycles on st, completing the queued
// work every benchBatch cycles with complete, and checks the last event of
// each batch completed.
func cycles(b *testing.B, st gpu.Stream, p gpu.DevicePtr, host []byte, complete func()) {
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if err := st.CopyHtoD(p, host); err != nil {
			b.Fatal(err)
		}
		ev, err := st.Record()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.Query(ev); err != nil {
			b.Fatal(err)
		}
		if i++; i%benchBatch == 0 {
			complete()
			if s, err := st.Query(ev); err != nil || s != gpu.Complete {
				b.Fatalf("the batch's last event reads %v, %v; want complete", s, err)
			}
		}
	}
}
