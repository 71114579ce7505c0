package staging

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvready/kvready/contract"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestAttentionStale(t *testing.T) {
	// Values worked by hand from the reference runtime's get_stale_range:
	// blocks [min(⌈h/T⌉, S), max(that, ⌊(h+1−W)/T⌋)).
	for _, tc := range []struct {
		name    string
		a       Attention
		tpb, h  int
		want    BlockRange
		wantLen int
	}{
		{"full attention", Full, 32, 320, BlockRange{0, 0}, 0},
		{"full attention keeps its sinks too", Attention{SinkBlocks: 2}, 32, 320, BlockRange{2, 2}, 0},
		{"window of two blocks at ten", Attention{Window: 64}, 32, 320, BlockRange{0, 8}, 8},
		{"window of one token reads nothing cached", Attention{Window: 1}, 32, 320, BlockRange{0, 10}, 10},
		{"window smaller than a block", Attention{Window: 5}, 32, 320, BlockRange{0, 9}, 9},
		{"window wider than the history", Attention{Window: 1024}, 32, 320, BlockRange{0, 0}, 0},
		{"sinks stay", Attention{Window: 64, SinkBlocks: 1}, 32, 320, BlockRange{1, 8}, 7},
		{"sinks past the history", Attention{Window: 8, SinkBlocks: 4}, 16, 32, BlockRange{2, 2}, 0},
		{"mid-block history", Attention{Window: 40}, 32, 100, BlockRange{0, 1}, 1},
		{"history 0", Attention{Window: 3}, 16, 0, BlockRange{0, 0}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.a.Stale(tc.tpb, tc.h)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.wantLen, got.Len())
		})
	}
}

func TestNeededRows(t *testing.T) {
	groups := []Attention{Full, {Window: 64}, {Window: 64, SinkBlocks: 1}, {Window: 1000}, {Window: 1}}
	for _, tc := range []struct {
		name       string
		start, end int
		want       [][]int
	}{
		{"whole prompt", 0, 160, [][]int{{0, 1, 2, 3, 4}, {3, 4}, {0, 3, 4}, {0, 1, 2, 3, 4}, {}}},
		{"from a known prefix", 64, 160, [][]int{{2, 3, 4}, {3, 4}, {3, 4}, {2, 3, 4}, {}}},
		{"a partial last block", 0, 70, [][]int{{0, 1, 2}, {0, 1, 2}, {0, 1, 2}, {0, 1, 2}, {2}}},
		{"empty range", 96, 96, [][]int{{}, {}, {}, {}, {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NeededRows(nil, 32, groups, tc.start, tc.end)
			require.NoError(t, err)
			require.Len(t, got, len(tc.want))
			for g := range tc.want {
				assert.Equal(t, tc.want[g], append([]int{}, got[g]...), "layer group %d", g)
			}
		})
	}
	for _, tc := range []struct {
		name       string
		tpb        int
		groups     []Attention
		start, end int
		msg        string
	}{
		{"tokens per block", 0, nil, 0, 1, "tokens per block is 0"},
		{"reversed", 32, nil, 64, 32, "want 0 <= start <= end"},
		{"negative", 32, nil, -32, 32, "want 0 <= start <= end"},
		{"start inside a block", 32, nil, 40, 96, "inside block 1"},
		{"negative window", 32, []Attention{{Window: -1}}, 0, 32, "layer group 0: staging: window -1"},
		{"negative sinks", 32, []Attention{{Window: 4, SinkBlocks: -1}}, 0, 32, "-1 sink blocks"},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			got, err := NeededRows(nil, tc.tpb, tc.groups, tc.start, tc.end)
			assert.ErrorContains(t, err, tc.msg)
			assert.Nil(t, got)
		})
	}
}

func TestNeededRowsReusesStorage(t *testing.T) {
	groups := []Attention{Full, {Window: 64, SinkBlocks: 1}}
	dst, err := NeededRows(nil, 32, groups, 0, 32*64)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(100, func() {
		dst, _ = NeededRows(dst, 32, groups, 0, 32*64)
	})
	assert.Zero(t, allocs)
	assert.Len(t, dst[0], 64)
	assert.Equal(t, []int{0, 62, 63}, dst[1])
}

// TestNeededRowsAgainstModel: the rows a fetch stages are exactly the blocks of
// its range that a resume at its end reads.
func TestNeededRowsAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tpb := rapid.IntRange(1, 64).Draw(t, "tokens_per_block")
		a := drawAttention(t, tpb)
		first := rapid.IntRange(0, 20).Draw(t, "first block")
		end := rapid.IntRange(first*tpb, (first+30)*tpb).Draw(t, "end")
		got, err := NeededRows(nil, tpb, []Attention{a}, first*tpb, end)
		if err != nil {
			t.Fatal(err)
		}
		var want []int
		last := (end + tpb - 1) / tpb
		for b := first; b < last; b++ {
			// A partial last block is read by the token at end, in the
			// model: resuming at ⌈end/T⌉ blocks reads the same window, less
			// the positions at and past end, which that block holds anyway.
			if modelReadsAt(a, tpb, end, b) {
				want = append(want, b)
			}
		}
		if len(want) != len(got[0]) {
			t.Fatalf("%+v tpb %d [%d, %d): staged %v, model %v", a, tpb, first*tpb, end, got[0], want)
		}
		for i := range want {
			if want[i] != got[0][i] {
				t.Fatalf("%+v tpb %d [%d, %d): staged %v, model %v", a, tpb, first*tpb, end, got[0], want)
			}
		}
	})
}

// modelReadsAt is modelReads at a history of h tokens, not only on a block
// boundary.
func modelReadsAt(a Attention, tpb, h, b int) bool {
	if b*tpb >= h {
		return false
	}
	if a.Window == 0 || b < a.SinkBlocks {
		return true
	}
	return (b+1)*tpb > h-a.Window+1
}

func drawAttention(t *rapid.T, tpb int) Attention {
	if rapid.IntRange(0, 3).Draw(t, "full") == 0 {
		return Full
	}
	// Windows smaller than a block, around the range, and much wider.
	return Attention{
		Window:     rapid.IntRange(1, 40*tpb).Draw(t, "window"),
		SinkBlocks: rapid.IntRange(0, 3).Draw(t, "sinks"),
	}
}

// TestWindowedReadinessAgainstModel checks both forms, matrix and view, against
// the model, floor included: groups of different lengths, windows smaller than
// a block and wider than the range, sinks, holes, any first known block.
func TestWindowedReadinessAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tpb := rapid.IntRange(1, 48).Draw(t, "tokens_per_block")
		first := rapid.IntRange(0, 12).Draw(t, "first block")
		n := rapid.IntRange(0, 4).Draw(t, "groups")
		groups := make([]Attention, n)
		arrived := make([][]bool, n)
		var runs []GroupRun
		var masks [][]bool
		for g := range n {
			groups[g] = drawAttention(t, tpb)
			arrived[g] = rapid.SliceOfN(rapid.Bool(), 0, 24).Draw(t, "arrived")
			run := GroupRun{LayerGroup: g}
			var mask []bool
			// The view holds rows of the group at its ordinals, with an
			// occasional row left out (not staged) and rows below first.
			for i, ok := range arrived[g] {
				if !ok && rapid.IntRange(0, 3).Draw(t, "not staged") == 0 && i != len(arrived[g])-1 {
					continue
				}
				run.Ordinals = append(run.Ordinals, first+i)
				mask = append(mask, ok)
			}
			if first > 0 && rapid.Bool().Draw(t, "a known row in the view") {
				run.Ordinals = append([]int{first - 1}, run.Ordinals...)
				mask = append([]bool{true}, mask...)
			}
			runs = append(runs, run)
			masks = append(masks, mask)
		}
		want := modelInterval(tpb, first, groups, arrived)
		got, err := WindowedReadiness(tpb, first, groups, arrived)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("matrix: %v, model %v (groups %+v, arrived %v)", got, want, groups, arrived)
		}
		v, err := NewView(runs...)
		if err != nil {
			t.Fatal(err)
		}
		got, err = WindowedReadinessOfView(tpb, first, groups, v, masks)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("view: %v, model %v (groups %+v, runs %+v, masks %v)", got, want, groups, runs, masks)
		}
	})
}

// TestWindowedReadinessReferenceRandom ports the reference's
// test_usable_until_is_the_largest_start_every_layer_group_reads: its 3000 case
// shapes (tokens per block 16 or 32, one to three groups, a quarter full
// attention, windows of 1..200 tokens, sinks of 0..2 blocks, a first fetch
// start, rows with holes), drawn from Go's generator; each answer checked
// against the model. The reference also draws a computed prefix inside a
// block, which kvready cannot express: KnownBlocks counts whole blocks.
func TestWindowedReadinessReferenceRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(0, 15))
	between := func(lo, hi int) int { return lo + rng.IntN(hi-lo+1) }
	pick := func(xs ...int) int { return xs[rng.IntN(len(xs))] }
	for range 3000 {
		tpb := pick(16, 32)
		groups := make([]Attention, between(1, 3))
		for g := range groups {
			if rng.Float64() >= 0.25 {
				groups[g] = Attention{Window: between(1, 200), SinkBlocks: pick(0, 0, 1, 2)}
			}
		}
		known := pick(0, between(0, 12)*tpb)
		origin := pick(known/tpb*tpb, between(0, 14)*tpb)
		length := between(0, 20)
		first := known / tpb
		arrived := make([][]bool, len(groups))
		for g := range groups {
			row := make([]bool, max(0, length+pick(0, -1, 1)))
			for i := pick(0, origin/tpb, between(0, 20)); i < len(row); i++ {
				row[i] = true
			}
			for range pick(0, 0, 1, 2) {
				if len(row) > 0 {
					row[rng.IntN(len(row))] = false
				}
			}
			for i := 0; i < origin/tpb && i < len(row); i++ {
				row[i] = false // fetches start at origin or later
			}
			arrived[g] = row[min(first, len(row)):]
		}
		want := modelInterval(tpb, first, groups, arrived)
		got, err := WindowedReadiness(tpb, first, groups, arrived)
		require.NoError(t, err)
		require.Equal(t, want.UsableUntil, got.UsableUntil, "groups %+v, tpb %d, origin %d, known %d, arrived %v", groups, tpb, origin, known, arrived)
		require.Equal(t, want, got)
	}
}

// TestWindowedReadinessReferenceCases ports the reference's fixed cases: a whole
// fetch into two window groups is usable at its end, and a full-attention hole
// stops every end past it.
func TestWindowedReadinessReferenceCases(t *testing.T) {
	all := func(n int) []bool {
		b := make([]bool, n)
		for i := range b {
			b[i] = true
		}
		return b
	}
	// test_usable_until_after_a_whole_fetch_checks_its_end_alone
	iv, err := WindowedReadiness(32, 0, []Attention{{Window: 4096}, {Window: 8192}}, [][]bool{all(4096), all(4096)})
	require.NoError(t, err)
	assert.Equal(t, 4096*32, iv.UsableUntil)
	assert.Equal(t, 4096*32, iv.RestartFloor, "the windows have passed the first blocks: resume at the end only")

	// test_usable_until_checks_no_start_past_a_missing_full_attention_block
	for _, tc := range []struct{ hole, usable int }{{0, 0}, {4000, 4000 * 32}} {
		blocks := all(8192)
		blocks[tc.hole] = false
		iv, err := WindowedReadiness(32, 0, []Attention{Full}, [][]bool{blocks})
		require.NoError(t, err)
		assert.Equal(t, Interval{0, tc.usable}, iv, "block %d missing", tc.hole)
	}
}

func TestWindowedReadinessCases(t *testing.T) {
	w2 := Attention{Window: 64} // two blocks at 32 tokens per block
	for _, tc := range []struct {
		name    string
		first   int
		groups  []Attention
		arrived [][]bool
		want    Interval
	}{
		{"a hole the window has passed does not count", 0, []Attention{w2}, [][]bool{{false, true, false, true, true}}, Interval{160, 160}},
		{"a hole in the window does", 0, []Attention{w2}, [][]bool{{true, true, true, false, true}}, Interval{96, 96}},
		{"a window that has passed nothing floors at 0", 0, []Attention{w2}, [][]bool{{true, true, false}}, Interval{0, 64}},
		{"a missing sink stops every end past it", 0, []Attention{{Window: 64, SinkBlocks: 1}}, [][]bool{{false, true, true, true}}, Interval{0, 0}},
		{"a window beside a full group: the full group's hole caps the end", 0, []Attention{Full, w2}, [][]bool{{true, true, true, false}, {false, true, true, true}}, Interval{96, 96}},
		{"from a known prefix", 3, []Attention{w2}, [][]bool{{false, true, true}}, Interval{6 * 32, 6 * 32}},
		{"a miss answers what was known", 3, []Attention{w2, Full}, [][]bool{{false}, {false}}, Interval{96, 96}},
		{"a window of one token reads no cached block", 0, []Attention{{Window: 1}}, [][]bool{{false, false, false}}, Interval{96, 96}},
		{"a window wider than the range is full attention", 0, []Attention{{Window: 4096}}, [][]bool{{true, false, true}}, Interval{0, 32}},
		{"groups beyond the attention list are full", 0, []Attention{w2}, [][]bool{{true, true}, {true, false}}, Interval{0, 32}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iv, err := WindowedReadiness(32, tc.first, tc.groups, tc.arrived)
			require.NoError(t, err)
			assert.Equal(t, tc.want, iv)
			assert.Equal(t, modelInterval(32, tc.first, tc.groups, tc.arrived), iv, "the model disagrees with the case")
		})
	}
}

func TestWindowedReadinessRefusals(t *testing.T) {
	_, err := WindowedReadiness(32, 0, []Attention{{Window: -3}}, [][]bool{{true}})
	assert.ErrorContains(t, err, "layer group 0: staging: window -3")
	_, err = WindowedReadiness(0, 0, nil, nil)
	assert.ErrorContains(t, err, "tokens per block is 0")
	_, err = WindowedReadiness(1<<40, 1<<30, nil, [][]bool{{true}})
	assert.ErrorContains(t, err, "overflow")
	v, err := NewView(GroupRun{LayerGroup: 0, Ordinals: []int{math.MaxInt}})
	require.NoError(t, err)
	_, err = WindowedReadinessOfView(1, 0, nil, v, [][]bool{{true}})
	assert.ErrorContains(t, err, "overflow")
	_, err = WindowedReadinessOfView(1, 0, nil, v, nil)
	assert.ErrorContains(t, err, "want one per run")
}

func TestWindowedReadinessDoesNotAllocate(t *testing.T) {
	groups := []Attention{Full, {Window: 64, SinkBlocks: 1}}
	arrived := [][]bool{{true, true, true, true}, {true, false, true, true}}
	v, err := NewView(GroupRun{LayerGroup: 0, Ordinals: []int{0, 1, 2, 3}}, GroupRun{LayerGroup: 1, Ordinals: []int{0, 2, 3}})
	require.NoError(t, err)
	masks := [][]bool{{true, true, true, true}, {true, true, true}}
	var a, b Interval
	allocs := testing.AllocsPerRun(100, func() {
		a, _ = WindowedReadiness(32, 0, groups, arrived)
		b, _ = WindowedReadinessOfView(32, 0, groups, v, masks)
	})
	assert.Zero(t, allocs)
	assert.Equal(t, Interval{128, 128}, a)
	assert.Equal(t, Interval{128, 128}, b)
}

// TestWindowedReadinessOfServedView runs the path the engine takes: served
// names to masks to readiness, with rows before the window never staged.
func TestWindowedReadinessOfServedView(t *testing.T) {
	groups := []Attention{Full, {Window: 64, SinkBlocks: 1}}
	rows, err := NeededRows(nil, 32, groups, 0, 6*32)
	require.NoError(t, err)
	require.Equal(t, []int{0, 4, 5}, rows[1])
	var runs []GroupRun
	var served []contract.Name
	for g, ords := range rows {
		run := GroupRun{LayerGroup: g, Ordinals: ords}
		for k, o := range ords {
			n := nameOf(g*100 + o)
			run.Names = append(run.Names, n)
			run.Addresses = append(run.Addresses, g*100+k)
			served = append(served, n)
		}
		runs = append(runs, run)
	}
	v, err := NewView(runs...)
	require.NoError(t, err)
	masks, err := ServedMasks(v, contract.NewNameSet(served...))
	require.NoError(t, err)
	iv, err := WindowedReadinessOfView(32, 0, groups, v, masks)
	require.NoError(t, err)
	assert.Equal(t, Interval{192, 192}, iv)
	// Full attention over the same view would see holes at blocks 1..3.
	iv, err = ReadinessOfView(32, 0, v, masks)
	require.NoError(t, err)
	assert.Equal(t, Interval{0, 32}, iv)
}

// FuzzWindowedReadiness decodes arbitrary bytes into attentions (any window,
// negative ones included) and arrivals: the readiness never panics, refuses
// only an invalid attention, and agrees with the model otherwise.
func FuzzWindowedReadiness(f *testing.F) {
	f.Add(uint8(32), uint8(0), []byte{64, 1, 0xff, 0x0f})
	f.Add(uint8(1), uint8(3), []byte{0, 0, 1, 2, 3})
	f.Add(uint8(0), uint8(0), []byte{})
	f.Fuzz(func(t *testing.T, tpb, first uint8, data []byte) {
		var groups []Attention
		var arrived [][]bool
		for len(data) >= 3 && len(groups) < 4 {
			a := Attention{Window: int(int8(data[0])), SinkBlocks: int(data[1] % 4)}
			var row []bool
			for i := range int(data[2] % 16) {
				row = append(row, (data[2]>>(i%8))&1 == 1 || i%3 == 0)
			}
			groups, arrived, data = append(groups, a), append(arrived, row), data[3:]
		}
		got, err := WindowedReadiness(int(tpb), int(first), groups, arrived)
		invalid := tpb == 0
		for _, a := range groups {
			invalid = invalid || a.Validate() != nil
		}
		if invalid {
			if err == nil {
				t.Fatalf("accepted tpb %d, groups %+v", tpb, groups)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := modelInterval(int(tpb), int(first), groups, arrived); got != want {
			t.Fatalf("tpb %d first %d groups %+v arrived %v: %v, model %v", tpb, first, groups, arrived, got, want)
		}
	})
}
