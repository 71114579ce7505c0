package staging

import (
	"strconv"
	"testing"

	"github.com/kvready/kvready/contract"
)

// BenchmarkServedMasks measures served masks per name against the bare map lookup
// of the served set that they cannot avoid, side by side (ns/op is per name).
func BenchmarkServedMasks(b *testing.B) {
	for _, n := range []int{4096} {
		v, _ := bigView(b, n)
		served := make([]contract.Name, 0, n/2)
		for i := 0; i < n; i += 2 {
			served = append(served, nameOf(i))
		}
		set := contract.NewNameSet(served...)
		names := v.Run(0).Names
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			masks, _ := ServedMasksInto(nil, v, set)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				masks, _ = ServedMasksInto(masks, v, set)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/name")
		})
		b.Run(strconv.Itoa(n)+"/maplookup", func(b *testing.B) {
			mask := make([]bool, n)
			b.ReportAllocs()
			for b.Loop() {
				for k, nm := range names {
					mask[k] = set.Has(nm)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/name")
		})
	}
}

// BenchmarkAllocator measures one lease's request, grant report and free, with
// the pool half full: "compact" has no holes below the first fit; "fragmented"
// has a one-slot hole every 64 slots, each of which a request for 4 must skip
// (first fit costs O(holes below the fit)).
func BenchmarkAllocator(b *testing.B) {
	for _, holes := range []bool{false, true} {
		name := "compact"
		if holes {
			name = "fragmented"
		}
		b.Run(name, func(b *testing.B) {
			const slots = 1 << 16
			a, err := NewAllocator([]int{slots, slots / 4})
			if err != nil {
				b.Fatal(err)
			}
			held := make([]Ticket, slots/2)
			for i := range held {
				held[i], _ = a.Request([]int{1, 0})
			}
			for i := 1; holes && i < len(held); i += 64 {
				_ = a.Free(held[i])
			}
			counts := []int{4, 1}
			var grants []Ticket
			b.ReportAllocs()
			for b.Loop() {
				tk, err := a.Request(counts)
				if err != nil {
					b.Fatal(err)
				}
				grants = a.TakeGrants(grants[:0])
				if err := a.Free(tk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
