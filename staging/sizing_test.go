package staging

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	miB = 1 << 20
	giB = 1 << 30
)

// sizingGroup is one layer group as the reference's sizing tests describe it:
// (window, sink blocks, pool group, page bytes).
type sizingGroup struct {
	window    int // 0: full attention
	sinks     int
	poolGroup int
	pageBytes int
}

// sizingLayout builds a valid layout whose pool group g has one pool of
// pageBytes, and one one-byte buffer per layer group, so that PageBytes is the
// page; layer groups sharing a pool group get disjoint offsets in its slot
// (the page must have a byte for each).
func sizingLayout(t testing.TB, tpb int, groups ...sizingGroup) Layout {
	l := Layout{TokensPerBlock: tpb, PoolGroups: map[int][]int{}}
	used := map[int]int{} // bytes of each pool group's slot given out so far
	for i, g := range groups {
		l.PoolGroups[g.poolGroup] = []int{g.pageBytes}
		lg := LayerGroup{Kind: "attention", SinkBlocks: g.sinks, PoolGroup: g.poolGroup, Layers: []int{i}, Shard: Whole}
		if g.window > 0 {
			w := g.window
			lg.Window = &w
		}
		l.LayerGroups = append(l.LayerGroups, lg)
		l.Buffers = append(l.Buffers, Buffer{Layer: i, Role: "kv", Pool: [2]int{g.poolGroup, 0}, Offset: used[g.poolGroup], Size: 1, Mapper: Indexed, Expansion: 1})
		used[g.poolGroup]++
	}
	require.NoError(t, l.Validate())
	return l
}

// TinyLlama-1.1B, TP=1, 32 tokens per block: 22 layers of K and V, 4 heads of 64 bf16 each.
const tinyLlamaPage = 22 * 2 * 4 * 64 * 2 * 32

func tinyLlama(t testing.TB) Layout {
	return sizingLayout(t, 32, sizingGroup{0, 0, 0, tinyLlamaPage})
}

// DeepSeek-V4-Pro as its cache manager lays it out on every rank, 128 tokens per
// block: a 128-token window, compressed full attention, and the compressors'
// state with an 8-token window.
var dsv4Pages = map[int]int{1: 20250624, 0: 572672, 2: 39321600}

func dsv4Pro(t testing.TB) Layout {
	return sizingLayout(t, 128, sizingGroup{128, 0, 1, dsv4Pages[1]}, sizingGroup{0, 0, 0, dsv4Pages[0]}, sizingGroup{8, 0, 2, dsv4Pages[2]})
}

func fetchRows(t testing.TB, l Layout, tokens int) map[int]int {
	rows, err := l.FetchRows(tokens)
	require.NoError(t, err)
	return rows
}

func oneFetch(t testing.TB, l Layout, tokens int) int {
	sum, pages := 0, l.PageBytes()
	for g, n := range fetchRows(t, l, tokens) {
		sum += n * pages[g]
	}
	return sum
}

func slotCounts(t testing.TB, l Layout, o SizingOptions) map[int]int {
	s, err := l.SlotCounts(o)
	require.NoError(t, err)
	return s.Counts()
}

// The cases of the reference's test_slots.py, sizing section, expected values
// as its assertions state them.
func TestSizingReferenceCases(t *testing.T) {
	t.Run("tinyllama stages eight whole prompts", func(t *testing.T) {
		l := tinyLlama(t)
		assert.Equal(t, map[int]int{0: 64}, fetchRows(t, l, 2048))
		assert.Equal(t, 44*miB, oneFetch(t, l, 2048))
		assert.Equal(t, map[int]int{0: 8 * 64}, slotCounts(t, l, SizingOptions{FetchTokens: 2048, MaxFetches: 8}))
	})
	t.Run("deepseek v4 windows take their window and the full group the range", func(t *testing.T) {
		l := dsv4Pro(t)
		assert.Equal(t, map[int]int{1: 1, 0: 32, 2: 1}, fetchRows(t, l, 4096))
		one := oneFetch(t, l, 4096)
		assert.Greater(t, one, 74*miB)
		assert.Less(t, one, 75*miB)
		assert.Equal(t, map[int]int{1: 8, 0: 256, 2: 8}, slotCounts(t, l, SizingOptions{FetchTokens: 4096, MaxFetches: 8}))
	})
	t.Run("deepseek v4 long ranges capped at one fetch keep one fetch", func(t *testing.T) {
		l := dsv4Pro(t)
		one := oneFetch(t, l, 1<<20)
		assert.Equal(t, map[int]int{1: 1, 0: 8192, 2: 1}, fetchRows(t, l, 1<<20))
		assert.Greater(t, one, 4*giB)
		assert.Less(t, one, 5*giB)
		assert.Equal(t, map[int]int{1: 1, 0: 8192, 2: 1}, slotCounts(t, l, SizingOptions{FetchTokens: 1 << 20, MaxFetches: 8, MaxBytes: one}))
		// A cap between one and eight fetches: every group keeps its rows of one fetch and more.
		cap := 960 * giB / 8 / 4
		counts := slotCounts(t, l, SizingOptions{FetchTokens: 1 << 20, MaxFetches: 8, MaxBytes: cap})
		assert.GreaterOrEqual(t, counts[0], 8192)
		assert.GreaterOrEqual(t, counts[1], 1)
		assert.GreaterOrEqual(t, counts[2], 1)
		sum := 0
		for g, n := range counts {
			sum += n * dsv4Pages[g]
		}
		assert.LessOrEqual(t, sum, cap)
	})
	t.Run("short ranges take no more than their blocks even in a window", func(t *testing.T) {
		l := dsv4Pro(t)
		assert.Equal(t, map[int]int{1: 1, 0: 1, 2: 1}, fetchRows(t, l, 100))
		assert.Equal(t, map[int]int{1: 1, 0: 1, 2: 1}, slotCounts(t, l, SizingOptions{FetchTokens: 100, MaxFetches: 1}))
	})
	t.Run("a window wider than the range takes the range blocks", func(t *testing.T) {
		l := sizingLayout(t, 32, sizingGroup{1024, 0, 0, 100}) // a window of 32 blocks over a range of 8
		assert.Equal(t, map[int]int{0: 8}, fetchRows(t, l, 256))
		assert.Equal(t, map[int]int{0: 16}, slotCounts(t, l, SizingOptions{FetchTokens: 256, MaxFetches: 2}))
	})
	t.Run("sink blocks count with the window", func(t *testing.T) {
		l := sizingLayout(t, 32, sizingGroup{64, 1, 0, 100}, sizingGroup{0, 0, 1, 10})
		assert.Equal(t, map[int]int{0: 1 + 2, 1: 10}, fetchRows(t, l, 320))
		assert.Equal(t, 3*100+10*10, oneFetch(t, l, 320))
		assert.Equal(t, map[int]int{0: 9, 1: 30}, slotCounts(t, l, SizingOptions{FetchTokens: 320, MaxFetches: 3}))
	})
	t.Run("layer groups sharing a pool group add up", func(t *testing.T) {
		l := sizingLayout(t, 16, sizingGroup{0, 0, 0, 8}, sizingGroup{32, 0, 0, 8})
		assert.Equal(t, map[int]int{0: 10 + 2}, fetchRows(t, l, 160))
	})
	t.Run("a partial block counts as a whole one", func(t *testing.T) {
		assert.Equal(t, map[int]int{0: 2}, fetchRows(t, tinyLlama(t), 33))
		assert.Equal(t, map[int]int{0: 1}, fetchRows(t, tinyLlama(t), 1))
	})
	for _, tokens := range []int{0, -32} {
		t.Run("fetch tokens must be positive", func(t *testing.T) {
			_, err := tinyLlama(t).FetchRows(tokens)
			assert.ErrorContains(t, err, "want at least 1")
			_, err = tinyLlama(t).SlotCounts(SizingOptions{FetchTokens: tokens, MaxFetches: 1})
			assert.ErrorContains(t, err, "fetch_tokens")
		})
	}
	t.Run("max bytes below one fetch is rejected", func(t *testing.T) {
		l := dsv4Pro(t)
		one := oneFetch(t, l, 4096)
		_, err := l.SlotCounts(SizingOptions{FetchTokens: 4096, MaxFetches: 1, MaxBytes: one - 1})
		assert.ErrorIs(t, err, ErrBelowOneFetch)
		assert.ErrorContains(t, err, "one fetch")
		assert.ErrorContains(t, err, "needs 77897728 bytes")
		assert.Equal(t, fetchRows(t, l, 4096), slotCounts(t, l, SizingOptions{FetchTokens: 4096, MaxFetches: 1, MaxBytes: one}))
	})
	t.Run("max bytes above max fetches changes nothing", func(t *testing.T) {
		l := dsv4Pro(t)
		o := SizingOptions{FetchTokens: 4096, MaxFetches: 2, MaxBytes: 100 * oneFetch(t, l, 4096)}
		assert.Equal(t, map[int]int{1: 2, 0: 64, 2: 2}, slotCounts(t, l, o))
	})
}

func TestSizingRefusals(t *testing.T) {
	empty := Layout{TokensPerBlock: 32, PoolGroups: map[int][]int{0: {64}}}
	_, err := empty.SlotCounts(SizingOptions{FetchTokens: 32, MaxFetches: 1})
	assert.ErrorIs(t, err, ErrNothingToStage)
	l := tinyLlama(t)
	for _, tc := range []struct {
		o   SizingOptions
		msg string
	}{
		{SizingOptions{FetchTokens: 32}, "neither max_fetches nor max_bytes"},
		{SizingOptions{FetchTokens: 32, MaxFetches: -1}, "max_fetches is -1"},
		{SizingOptions{FetchTokens: 32, MaxBytes: -1}, "max_bytes is -1"},
		{SizingOptions{FetchTokens: 1 << 62, MaxFetches: 1 << 40}, "overflow"},
	} {
		_, err := l.SlotCounts(tc.o)
		assert.ErrorContains(t, err, tc.msg, "%+v", tc.o)
	}
	// Sizes past an int are the options out of range, told apart from a
	// layout that breaks a rule (the CLI answers them as a usage error).
	for _, o := range []SizingOptions{
		{FetchTokens: math.MaxInt, MaxFetches: 1},
		{FetchTokens: 32, MaxFetches: math.MaxInt},
	} {
		_, err := l.SlotCounts(o)
		assert.ErrorIs(t, err, ErrSizeOverflow, "%+v", o)
	}
	_, err = l.SlotCounts(SizingOptions{FetchTokens: 32, MaxFetches: 1, MaxBytes: -1})
	assert.NotErrorIs(t, err, ErrSizeOverflow)
	bad := l
	bad.TokensPerBlock = 0
	_, err = bad.FetchRows(32)
	assert.ErrorContains(t, err, "tokens_per_block is 0")
}

func TestSizingByBytesAlone(t *testing.T) {
	// No fetch count: the cap alone, split by each group's share of one fetch.
	l := sizingLayout(t, 32, sizingGroup{64, 1, 0, 100}, sizingGroup{0, 0, 1, 10}) // one fetch of 320: 300 + 100 bytes
	s, err := l.SlotCounts(SizingOptions{FetchTokens: 320, MaxBytes: 1000})
	require.NoError(t, err)
	assert.Equal(t, 400, s.OneFetch)
	// Group 0 gets 1000 × 300/400 = 750 bytes: 7 slots; group 1 250 bytes: 25 slots.
	assert.Equal(t, []GroupSizing{{0, 3, 100, 7}, {1, 10, 10, 25}}, s.Groups)
	assert.Equal(t, 700, s.Groups[0].Bytes())
}

// randomSizingLayout is the reference's random_layout: up to four layer groups
// over up to three pool groups, a window or none, sinks from sink tokens.
func randomSizingLayout(t testing.TB, rng *rand.Rand) (Layout, []Attention) {
	between := func(lo, hi int) int { return lo + rng.IntN(hi-lo+1) }
	tpb := []int{4, 8, 16, 32}[rng.IntN(4)]
	pages := make([]int, between(1, 3))
	for g := range pages {
		// The reference draws 1..1000; from 4, so that the up to four layer
		// groups sharing a pool group have a byte each (sizingLayout).
		pages[g] = between(4, 1000)
	}
	var groups []sizingGroup
	var attn []Attention
	for range between(1, 4) {
		window, sinks := 0, 0
		if rng.IntN(2) == 1 {
			window = between(1, 6*tpb)
			if sinkTokens := []int{0, 0, between(1, 3*tpb)}[rng.IntN(3)]; sinkTokens > 0 {
				sinks = (sinkTokens + tpb - 1) / tpb
			}
		}
		g := rng.IntN(len(pages))
		groups = append(groups, sizingGroup{window, sinks, g, pages[g]})
		attn = append(attn, Attention{Window: window, SinkBlocks: sinks})
	}
	return sizingLayout(t, tpb, groups...), attn
}

// TestAnyWholeBlockRangeFitsOneFetch ports the reference's
// test_any_whole_block_range_of_at_most_fetch_tokens_fits_one_fetch: the rows a
// range [start, end) needs — its blocks that a history of end still reads, by
// the independent model — never exceed FetchRows.
func TestAnyWholeBlockRangeFitsOneFetch(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 15))
		l, attn := randomSizingLayout(t, rng)
		tpb := l.TokensPerBlock
		fetchTokens := 1 + rng.IntN(12*tpb)
		bound := fetchRows(t, l, fetchTokens)
		span := fetchTokens / tpb
		for endBlock := 1; endBlock < 40; endBlock++ {
			need := map[int]int{}
			for lg, a := range attn {
				for b := max(0, endBlock-span); b < endBlock; b++ {
					if modelReads(a, tpb, endBlock, b) {
						need[l.LayerGroups[lg].PoolGroup]++
					}
				}
			}
			for g, n := range need {
				require.LessOrEqual(t, n, bound[g], "seed %d, end block %d, pool group %d: need %v, bound %v", seed, endBlock, g, need, bound)
			}
		}
	}
}

// TestCountsAreFetchesOrTheCapRoundedDown ports the reference's
// test_counts_are_max_fetches_fetches_or_the_cap_rounded_down.
func TestCountsAreFetchesOrTheCapRoundedDown(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 16))
		l, _ := randomSizingLayout(t, rng)
		fetchTokens := 1 + rng.IntN(12*l.TokensPerBlock)
		rows := fetchRows(t, l, fetchTokens)
		one := oneFetch(t, l, fetchTokens)
		maxFetches := 1 + rng.IntN(9)
		counts := slotCounts(t, l, SizingOptions{FetchTokens: fetchTokens, MaxFetches: maxFetches})
		for g, n := range rows {
			require.Equal(t, maxFetches*n, counts[g], "seed %d: pool group %d", seed, g)
		}
		require.Len(t, counts, len(rows))
		cap := one + rng.IntN(maxFetches*one-one+1)
		counts = slotCounts(t, l, SizingOptions{FetchTokens: fetchTokens, MaxFetches: maxFetches, MaxBytes: cap})
		pages := l.PageBytes()
		sum := 0
		for g, n := range counts {
			sum += n * pages[g]
		}
		require.LessOrEqual(t, sum, cap, "seed %d", seed)
		// As many whole fetches as the cap holds hold slots at once.
		whole := cap / one
		for g, n := range rows {
			require.GreaterOrEqual(t, counts[g], whole*n, "seed %d: pool group %d", seed, g)
			require.LessOrEqual(t, counts[g], maxFetches*n, "seed %d: pool group %d", seed, g)
		}
	}
}

// TestMaxFetchesRangesHoldSlotsAtOnce ports the reference's
// test_max_fetches_ranges_hold_slots_at_once_and_one_more_waits over the
// allocator: slots sized for 3 fetches (or a cap of 1 or 2.5 fetches) hold
// that many whole fetches at once, and one more waits.
func TestMaxFetchesRangesHoldSlotsAtOnce(t *testing.T) {
	l := dsv4Pro(t)
	rows := fetchRows(t, l, 4096)
	one := oneFetch(t, l, 4096)
	for _, tc := range []struct {
		name     string
		maxBytes int
		atOnce   int
	}{{"no cap", 0, 3}, {"a cap of one fetch", one, 1}, {"a cap of 2.5 fetches", one * 5 / 2, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			counts := slotCounts(t, l, SizingOptions{FetchTokens: 4096, MaxFetches: 3, MaxBytes: tc.maxBytes})
			a, err := NewAllocator([]int{counts[0], counts[1], counts[2]})
			require.NoError(t, err)
			want := []int{rows[0], rows[1], rows[2]}
			for range tc.atOnce {
				tk, err := a.Request(want)
				require.NoError(t, err)
				assert.True(t, a.Granted(tk))
			}
			tk, err := a.Request(want)
			require.NoError(t, err)
			assert.False(t, a.Granted(tk))
			assert.Equal(t, 1, a.Waiting())
		})
	}
}
