package staging

import (
	"fmt"
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

// readinessBench is one fetch's arrivals for the readiness benchmarks: every
// row of groups × blocks arrived, as a matrix and as a served view.
func readinessBench(b *testing.B, groups, blocks int, attention func(g int) Attention) (arrived [][]bool, view *View, masks [][]bool) {
	rows, err := NeededRows(nil, 32, benchGroups(groups, attention), 0, blocks*32)
	if err != nil {
		b.Fatal(err)
	}
	var runs []GroupRun
	for g, ords := range rows {
		arrived = append(arrived, make([]bool, blocks))
		for _, o := range ords {
			arrived[g][o] = true
		}
		m := make([]bool, len(ords))
		for i := range m {
			m[i] = true
		}
		runs = append(runs, GroupRun{LayerGroup: g, Ordinals: ords})
		masks = append(masks, m)
	}
	if view, err = NewView(runs...); err != nil {
		b.Fatal(err)
	}
	return arrived, view, masks
}

func benchGroups(n int, attention func(g int) Attention) []Attention {
	out := make([]Attention, n)
	for g := range out {
		out[g] = attention(g)
	}
	return out
}

// BenchmarkReadiness measures full-attention readiness of one whole fetch: the
// matrix form, and /view, the engine's path over a lease's view and masks.
func BenchmarkReadiness(b *testing.B) {
	benchReadiness(b, func(int) Attention { return Full })
}

// BenchmarkReadinessWindows is BenchmarkReadiness with every other layer group
// a window of 1024 tokens (32 blocks) and one sink block, as in models that
// interleave sliding-window and full-attention layers: the window groups stage
// only their sink and window rows.
func BenchmarkReadinessWindows(b *testing.B) {
	benchReadiness(b, func(g int) Attention {
		if g%2 == 1 {
			return Attention{Window: 1024, SinkBlocks: 1}
		}
		return Full
	})
}

func benchReadiness(b *testing.B, attention func(g int) Attention) {
	const groups, blocks = 4, 512
	arrived, view, masks := readinessBench(b, groups, blocks, attention)
	attn := benchGroups(groups, attention)
	want := Interval{UsableUntil: blocks * 32}
	if attn[1].Windowed() {
		want.RestartFloor = want.UsableUntil
	}
	name := fmt.Sprintf("groups=%d,blocks=%d", groups, blocks)
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if iv, _ := WindowedReadiness(32, 0, attn, arrived); iv != want {
				b.Fatalf("readiness %v, want %v", iv, want)
			}
		}
	})
	b.Run(name+"/view", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if iv, _ := WindowedReadinessOfView(32, 0, attn, view, masks); iv != want {
				b.Fatalf("readiness %v, want %v", iv, want)
			}
		}
	})
}
