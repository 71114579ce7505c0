package simulate

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"
)

// BenchmarkScale runs the main job with its defaults at 20,000 and 200,000
// requests, side by side: the runner users embed, the checker on. It reports
// leases per wall-clock second and the peak of live heap objects sampled
// during the run, so that a run ten times longer can be compared with the
// shorter one (SPEC §5: throughput and memory must not degrade with length).
func BenchmarkScale(b *testing.B) {
	for _, n := range []int{20_000, 200_000} {
		b.Run(fmt.Sprintf("requests=%d", n), func(b *testing.B) {
			c := Defaults()
			c.Requests = n
			leases := 0
			var peak uint64
			for b.Loop() {
				runtime.GC()
				stop := sampleHeapPeak(&peak)
				s, err := Run(context.Background(), c, nil)
				stop()
				if err != nil {
					b.Fatal(err)
				}
				if !s.Safe() || !s.Complete() {
					b.Fatalf("requests=%d: safe %v, complete %v (%d unfinished: %s)", n, s.Safe(), s.Complete(), s.UnfinishedRequests, s.UnfinishedReason)
				}
				leases += s.Leases
			}
			b.ReportMetric(float64(leases)/b.Elapsed().Seconds(), "leases/s")
			b.ReportMetric(float64(peak)/(1<<20), "MiB-peak")
		})
	}
}

// sampleHeapPeak raises *peak to the largest live-heap figure seen until the
// returned stop is called. runtime/metrics reads it without stopping the world.
func sampleHeapPeak(peak *uint64) (stop func()) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() {
		metrics.Read(sample)
		if v := sample[0].Value.Uint64(); v > *peak {
			*peak = v
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				read()
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		read()
	}
}
