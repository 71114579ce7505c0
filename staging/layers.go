package staging

import (
	"cmp"
	"slices"
)

// Span is a byte range of a staging slot: Size bytes at Offset.
type Span struct {
	Offset, Size int
}

// End returns the offset just past the span.
func (s Span) End() int { return s.Offset + s.Size }

// LayerSpans is where one layer's bytes lie in a slot of its layer group: the
// buffers of that layer, every role, as disjoint spans in offset order
// (buffers that touch or overlap are merged).
type LayerSpans struct {
	// Layer is the global layer id.
	Layer int
	Spans []Span
}

// Bytes returns how many bytes the layer's spans cover.
func (l LayerSpans) Bytes() int {
	n := 0
	for _, s := range l.Spans {
		n += s.Size
	}
	return n
}

// LayerSpans returns, for each layer group in the layout's order, its layers
// in ascending layer id, each with the spans its buffers occupy in one staging
// slot of the group's pool group. A slot is one slot of every pool of the pool
// group, back to back in pool order ([Layout.PageBytes]), so a buffer of pool
// (g, i) at Offset lies at the widths of pools 0..i−1 plus Offset — the offset
// the layout id's document gives it.
//
// Only the group's own layers count: layer groups that share a pool group
// have their buffers at the same offsets of other pages (the reference's
// layer_membership case), never in this group's rows. A layer with no buffer
// in the group's pool group has no spans: copying it moves nothing. This is
// how a lease's copies go layer by layer (SPEC §4 rule 16).
func (l Layout) LayerSpans() ([][]LayerSpans, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	out := make([][]LayerSpans, len(l.LayerGroups))
	for gi, g := range l.LayerGroups {
		layers := slices.Clone(g.Layers)
		slices.Sort(layers)
		layers = slices.Compact(layers) // a layer listed twice is still one layer
		widths := l.PoolGroups[g.PoolGroup]
		group := make([]LayerSpans, len(layers))
		for li, id := range layers {
			var spans []Span
			for _, b := range l.Buffers {
				if b.Layer != id || b.Pool[0] != g.PoolGroup {
					continue
				}
				off := b.Offset
				for _, w := range widths[:b.Pool[1]] {
					off += w
				}
				spans = append(spans, Span{Offset: off, Size: b.Size})
			}
			group[li] = LayerSpans{Layer: id, Spans: mergeSpans(spans)}
		}
		out[gi] = group
	}
	return out, nil
}

// mergeSpans sorts spans by offset and merges those that touch or overlap.
func mergeSpans(spans []Span) []Span {
	slices.SortFunc(spans, func(a, b Span) int { return cmp.Or(cmp.Compare(a.Offset, b.Offset), cmp.Compare(a.Size, b.Size)) })
	out := spans[:0]
	for _, s := range spans {
		if n := len(out); n > 0 && s.Offset <= out[n-1].End() {
			out[n-1].Size = max(out[n-1].End(), s.End()) - out[n-1].Offset
			continue
		}
		out = append(out, s)
	}
	return out
}
