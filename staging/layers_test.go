package staging

import (
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestLayerSpans(t *testing.T) {
	spans, err := simpleLayout(t).LayerSpans()
	require.NoError(t, err)
	assert.Equal(t, [][]LayerSpans{{
		{Layer: 0, Spans: []Span{{0, 32768}}},     // key and value, back to back
		{Layer: 1, Spans: []Span{{32768, 32768}}}, // the same
	}}, spans)

	l := Layout{
		TokensPerBlock: 4,
		PoolGroups:     map[int][]int{0: {64, 32}, 7: {16}},
		LayerGroups: []LayerGroup{
			{Kind: "state", PoolGroup: 7, Layers: []int{9, 3, 3}, Shard: Whole},
			{Kind: "attention", PoolGroup: 0, Layers: []int{2, 0}, Shard: Whole},
			{Kind: "attention", PoolGroup: 0, Layers: []int{5}, Shard: Whole},
		},
		Buffers: []Buffer{
			{Layer: 3, Role: "conv", Pool: [2]int{7, 0}, Offset: 4, Size: 8, Expansion: 1},
			{Layer: 0, Role: "key", Pool: [2]int{0, 1}, Offset: 0, Size: 16, Expansion: 1},
			{Layer: 0, Role: "value", Pool: [2]int{0, 0}, Offset: 0, Size: 16, Expansion: 1},
			{Layer: 2, Role: "key", Pool: [2]int{0, 0}, Offset: 16, Size: 16, Expansion: 1},
			{Layer: 2, Role: "value", Pool: [2]int{0, 0}, Offset: 24, Size: 16, Expansion: 1},
			// Layer 5's group shares pool group 0: its buffer sits at layer
			// 0's offset, in other pages.
			{Layer: 5, Role: "key", Pool: [2]int{0, 0}, Offset: 0, Size: 16, Expansion: 1},
		},
	}
	spans, err = l.LayerSpans()
	require.NoError(t, err)
	assert.Equal(t, [][]LayerSpans{
		{{Layer: 3, Spans: []Span{{4, 8}}}, {Layer: 9}},
		{
			{Layer: 0, Spans: []Span{{0, 16}, {64, 16}}}, // pool 1 starts after pool 0's 64 bytes
			{Layer: 2, Spans: []Span{{16, 24}}},          // overlapping buffers merge
		},
		{{Layer: 5, Spans: []Span{{0, 16}}}},
	}, spans)
	assert.Equal(t, 32, spans[1][0].Bytes())

	_, err = Layout{TokensPerBlock: 0}.LayerSpans()
	require.ErrorContains(t, err, "tokens_per_block", "an invalid layout is refused as Validate refuses it")
}

// The spans of a layer are exactly the runs of slot bytes that some buffer of
// that layer covers, found byte by byte.
func TestLayerSpansCoverTheLayersBytes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := randomLayout(t)
		got, err := l.LayerSpans()
		require.NoError(t, err)
		require.Len(t, got, len(l.LayerGroups))
		for gi, g := range l.LayerGroups {
			slot := 0
			for _, w := range l.PoolGroups[g.PoolGroup] {
				slot += w
			}
			ids := map[int]bool{}
			for _, id := range g.Layers {
				ids[id] = true
			}
			var want []LayerSpans
			for id := range ids {
				covered := make([]bool, slot)
				for _, b := range l.Buffers {
					if b.Layer != id || b.Pool[0] != g.PoolGroup {
						continue
					}
					start := b.Offset
					for p := range b.Pool[1] {
						start += l.PoolGroups[g.PoolGroup][p]
					}
					for i := start; i < start+b.Size; i++ {
						covered[i] = true
					}
				}
				ls := LayerSpans{Layer: id}
				for i := 0; i < slot; i++ {
					if covered[i] && (i == 0 || !covered[i-1]) {
						ls.Spans = append(ls.Spans, Span{Offset: i})
					}
					if covered[i] {
						ls.Spans[len(ls.Spans)-1].Size++
					}
				}
				want = append(want, ls)
			}
			sort.Slice(want, func(i, j int) bool { return want[i].Layer < want[j].Layer })
			if len(want) == 0 {
				want = []LayerSpans{}
			}
			require.Equal(t, want, got[gi], "layer group %d", gi)
		}
	})
}
