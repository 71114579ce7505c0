package peer_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
)

// A plan's pages, per kind: a PAGED page at its block, served once its span
// is in; a STATE slot at the chunk's last block, served only at the chunk's
// end, its exact checkpoint.
func TestPlanPages(t *testing.T) {
	c, err := transfer.NewChunk([]transfer.Group{
		{Kind: transfer.Paged, Blocks: []int{40, 41, 42}},
		{Kind: transfer.State, Blocks: []int{9}},
		{Kind: transfer.Paged}, // a group with nothing in this piece
	}, transfer.TokenRange{Start: 32, End: 72}, true)
	require.NoError(t, err)
	p := peer.Plan{Request: 5, Attempt: 2, Writers: []transfer.AccessorID{kvA, auxA}, Chunk: c, BlockTokens: 16}
	pages, err := p.Pages()
	require.NoError(t, err)
	type row struct {
		group, index, id, block int
		kind                    transfer.CacheKind
		end                     int64
	}
	var got []row
	for _, pg := range pages {
		got = append(got, row{pg.Group, pg.Index, pg.ID, pg.Block, pg.Kind, pg.End})
		assert.Equal(t, peer.PageName(5, 2, pg.Group, pg.Index), pg.Name)
	}
	assert.Equal(t, []row{
		{0, 0, 40, 2, transfer.Paged, 48},
		{0, 1, 41, 3, transfer.Paged, 64},
		{0, 2, 42, 4, transfer.Paged, 72}, // the last page is cut at the chunk's end
		{1, 0, 9, 4, transfer.State, 72},
	}, got)
	assert.NotEqual(t, peer.PageName(5, 1, 0, 0), peer.PageName(5, 2, 0, 0), "a retry's pages are named apart")
	assert.NotEqual(t, peer.SourceName(5, 2, kvA, 0, 0), peer.SourceName(5, 2, auxA, 0, 0))
	assert.NotEqual(t, peer.PageName(5, 2, 0, 0), peer.SourceName(5, 2, kvA, 0, 0))

	tests := []struct {
		tokenEnd int64
		served   []int // page indices in pages
		usable   transfer.Usable
	}{
		{32, nil, transfer.Usable{None: true}}, // the STATE slot is not served below its checkpoint
		{47, nil, transfer.Usable{None: true}},
		{48, []int{0}, transfer.Usable{None: true}},
		{71, []int{0, 1}, transfer.Usable{None: true}},
		{72, []int{0, 1, 2, 3}, transfer.Usable{From: 72, To: 72}}, // STATE pins it to the checkpoint
	}
	for _, tt := range tests {
		served := peer.Served(pages, tt.tokenEnd)
		var want []contract.Name
		for _, i := range tt.served {
			want = append(want, pages[i].Name)
		}
		assert.True(t, served.Equal(contract.NewNameSet(want...)), "token_end %d: served %d pages, want %v", tt.tokenEnd, served.Len(), tt.served)
		u, err := p.Usable(tt.tokenEnd)
		require.NoError(t, err)
		assert.Equal(t, tt.usable, u, "token_end %d", tt.tokenEnd)
	}
	_, err = p.Usable(80)
	assert.Error(t, err, "a token_end past the chunk is refused")

	paged := peer.Plan{Request: 5, Attempt: 2, Writers: []transfer.AccessorID{kvA}, Chunk: chunk(t, 3, false), BlockTokens: 16}
	for _, tt := range []struct {
		tokenEnd int64
		usable   transfer.Usable
	}{{0, transfer.Usable{From: 0, To: 0}}, {20, transfer.Usable{From: 0, To: 16}}, {48, transfer.Usable{From: 0, To: 48}}} {
		u, err := paged.Usable(tt.tokenEnd)
		require.NoError(t, err)
		assert.Equal(t, tt.usable, u, "PAGED only, token_end %d: a bound, cut at the last whole page", tt.tokenEnd)
	}
}

// Pages names every mistake of a plan at once.
func TestPlanRefusals(t *testing.T) {
	unaligned, err := transfer.NewChunk([]transfer.Group{{Kind: transfer.Paged, Blocks: []int{1, 2}}}, transfer.TokenRange{Start: 8, End: 40}, true)
	require.NoError(t, err)
	empty, err := transfer.NewChunk(nil, transfer.TokenRange{End: 16}, true)
	require.NoError(t, err)
	tests := []struct {
		name   string
		plan   peer.Plan
		fields []string
	}{
		{"attempt 0, no writers", peer.Plan{Chunk: chunk(t, 1, false), BlockTokens: 16}, []string{"attempt", "writers"}},
		{"a writer twice, one with no role", peer.Plan{Attempt: 1, Writers: []transfer.AccessorID{kvA, kvA, {Peer: "x"}}, Chunk: chunk(t, 1, false), BlockTokens: 16},
			[]string{"writers[1]", "writers[2].role"}},
		{"no block size", peer.Plan{Attempt: 1, Writers: []transfer.AccessorID{kvA}, Chunk: chunk(t, 1, false)}, []string{"block_tokens"}},
		{"a chunk starting mid-block", peer.Plan{Attempt: 1, Writers: []transfer.AccessorID{kvA}, Chunk: unaligned, BlockTokens: 16}, []string{"chunk.tokens.start"}},
		{"a PAGED group short of its span", peer.Plan{Attempt: 1, Writers: []transfer.AccessorID{kvA}, Chunk: chunk(t, 3, false), BlockTokens: 32}, []string{"chunk.groups[0].blocks"}},
		{"no page", peer.Plan{Attempt: 1, Writers: []transfer.AccessorID{kvA}, Chunk: empty, BlockTokens: 16}, []string{"chunk"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.plan.Pages()
			var in *transfer.InputError
			require.ErrorAs(t, err, &in)
			var fields []string
			for _, m := range in.Mistakes {
				fields = append(fields, m.Field)
			}
			assert.Equal(t, tt.fields, fields)
		})
	}
}
