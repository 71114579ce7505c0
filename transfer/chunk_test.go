package transfer_test

import (
	"errors"
	"testing"

	"github.com/kvready/kvready/transfer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCacheKind(t *testing.T) {
	for _, tc := range []struct {
		k     transfer.CacheKind
		name  string
		valid bool
	}{
		{transfer.Paged, "PAGED", true},
		{transfer.State, "STATE", true},
		{0, "kind(0)", false},
		{3, "kind(3)", false},
	} {
		assert.Equal(t, tc.name, tc.k.String())
		assert.Equal(t, tc.valid, tc.k.Valid(), "%v", tc.k)
	}
}

// NewChunk refuses every mistake at once, each naming its field, what was
// given and what is wanted; valid chunks, the empty ones included, pass.
func TestNewChunk(t *testing.T) {
	paged := func(ids ...int) transfer.Group { return transfer.Group{Kind: transfer.Paged, Blocks: ids} }
	for _, tc := range []struct {
		name   string
		groups []transfer.Group
		tokens transfer.TokenRange
		fields []string // the mistakes' fields, in order; none for a valid chunk
	}{
		{"paged and state", []transfer.Group{paged(3, 4, 5), {Kind: transfer.State, Blocks: []int{9}}}, transfer.TokenRange{Start: 0, End: 48}, nil},
		{"no groups, empty range", nil, transfer.TokenRange{Start: 5, End: 5}, nil},
		{"an empty group of each kind", []transfer.Group{paged(), {Kind: transfer.State}}, transfer.TokenRange{End: 16}, nil},
		{"the same id in two groups", []transfer.Group{paged(1), paged(1)}, transfer.TokenRange{End: 16}, nil},
		{"negative start", []transfer.Group{paged(1)}, transfer.TokenRange{Start: -1, End: 4}, []string{"tokens.start"}},
		{"negative both", nil, transfer.TokenRange{Start: -2, End: -1}, []string{"tokens.start", "tokens.end"}},
		{"inverted", nil, transfer.TokenRange{Start: 9, End: 4}, []string{"tokens"}},
		{"no kind", []transfer.Group{{Blocks: []int{1}}}, transfer.TokenRange{End: 4}, []string{"groups[0].kind"}},
		{"negative id", []transfer.Group{paged(1, -3)}, transfer.TokenRange{End: 4}, []string{"groups[0].blocks[1]"}},
		{"an id twice", []transfer.Group{paged(2, 7, 2)}, transfer.TokenRange{End: 4}, []string{"groups[0].blocks[2]"}},
		{"state with two slots", []transfer.Group{{Kind: transfer.State, Blocks: []int{1, 2}}}, transfer.TokenRange{End: 4}, []string{"groups[0].blocks"}},
		{"everything at once", []transfer.Group{paged(-1, 4, 4), {Kind: 7}, {Kind: transfer.State, Blocks: []int{0, 1}}},
			transfer.TokenRange{Start: 8, End: 2},
			[]string{"tokens", "groups[0].blocks[0]", "groups[0].blocks[2]", "groups[1].kind", "groups[2].blocks"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := transfer.NewChunk(tc.groups, tc.tokens, true)
			if tc.fields == nil {
				require.NoError(t, err)
				assert.Equal(t, len(tc.groups), c.Groups())
				assert.Equal(t, tc.tokens, c.Tokens())
				assert.True(t, c.IsLast())
				return
			}
			var ie *transfer.InputError
			require.True(t, errors.As(err, &ie), "error %v", err)
			var fields []string
			for _, m := range ie.Mistakes {
				fields = append(fields, m.Field)
				assert.NotEmpty(t, m.Given, "%s names what was given", m.Field)
				assert.NotEmpty(t, m.Want, "%s names what is wanted", m.Field)
				assert.Contains(t, err.Error(), m.Field)
			}
			assert.Equal(t, tc.fields, fields)
			assert.Zero(t, c.Groups(), "a refused chunk is the zero chunk")
		})
	}
}

// A chunk is a snapshot: changing the caller's slices afterwards changes
// nothing lent, and what Blocks returns is a copy.
func TestChunkIsASnapshot(t *testing.T) {
	ids := []int{1, 2, 3}
	groups := []transfer.Group{{Kind: transfer.Paged, Blocks: ids}}
	c, err := transfer.NewChunk(groups, transfer.TokenRange{End: 48}, false)
	require.NoError(t, err)
	ids[0] = 99
	groups[0].Kind = transfer.State
	got := c.Blocks(0)
	assert.Equal(t, []int{1, 2, 3}, got)
	assert.Equal(t, transfer.Paged, c.Kind(0))
	got[1] = 77
	assert.Equal(t, []int{1, 2, 3}, c.Blocks(0))
	assert.False(t, c.IsLast())
}

// NumBlocks and Block read the same snapshot Blocks copies, group by group.
func TestChunkBlockReadsTheSnapshot(t *testing.T) {
	ids := []int{4, 0, 9}
	c, err := transfer.NewChunk([]transfer.Group{{Kind: transfer.Paged, Blocks: ids}, {Kind: transfer.State}, {Kind: transfer.State, Blocks: []int{5}}},
		transfer.TokenRange{End: 48}, true)
	require.NoError(t, err)
	ids[1] = 99
	for g := range c.Groups() {
		var read []int
		for i := range c.NumBlocks(g) {
			read = append(read, c.Block(g, i))
		}
		assert.Equal(t, c.Blocks(g), read, "group %d", g)
	}
	assert.Equal(t, 0, c.NumBlocks(1))
	assert.Equal(t, 9, c.Block(0, 2))
}

// Readiness per kind: a PAGED group is a bound (any prefix up to
// token_end), a STATE group an exact checkpoint (token_end only), and a
// STATE group with no slot in this chunk gives nothing. The chunk as a whole
// allows what every group allows.
func TestUsable(t *testing.T) {
	mk := func(groups ...transfer.Group) transfer.Chunk {
		c, err := transfer.NewChunk(groups, transfer.TokenRange{Start: 16, End: 64}, true)
		require.NoError(t, err)
		return c
	}
	paged := transfer.Group{Kind: transfer.Paged, Blocks: []int{1, 2, 3}}
	state := transfer.Group{Kind: transfer.State, Blocks: []int{5}}
	noSlot := transfer.Group{Kind: transfer.State}
	for _, tc := range []struct {
		name     string
		chunk    transfer.Chunk
		tokenEnd int64
		group    []transfer.Usable // per group
		whole    transfer.Usable
		yes, no  []int64 // positions the whole chunk allows, and does not
	}{
		{"paged full", mk(paged), 64, []transfer.Usable{{From: 16, To: 64}}, transfer.Usable{From: 16, To: 64}, []int64{16, 40, 64}, []int64{15, 65}},
		{"paged partial", mk(paged), 40, []transfer.Usable{{From: 16, To: 40}}, transfer.Usable{From: 16, To: 40}, []int64{16, 40}, []int64{41, 64}},
		{"paged at its start", mk(paged), 16, []transfer.Usable{{From: 16, To: 16}}, transfer.Usable{From: 16, To: 16}, []int64{16}, []int64{17}},
		{"state only at its checkpoint", mk(state), 64, []transfer.Usable{{From: 64, To: 64}}, transfer.Usable{From: 64, To: 64}, []int64{64}, []int64{16, 63}},
		{"state checkpoint mid-span", mk(state), 40, []transfer.Usable{{From: 40, To: 40}}, transfer.Usable{From: 40, To: 40}, []int64{40}, []int64{39, 41, 64}},
		{"state with no slot", mk(noSlot), 64, []transfer.Usable{{None: true}}, transfer.Usable{None: true}, nil, []int64{16, 64}},
		{"paged and state pin the chunk to the checkpoint", mk(paged, state), 48,
			[]transfer.Usable{{From: 16, To: 48}, {From: 48, To: 48}}, transfer.Usable{From: 48, To: 48}, []int64{48}, []int64{16, 47, 49}},
		{"no groups", mk(), 30, nil, transfer.Usable{From: 16, To: 30}, []int64{16, 30}, []int64{31}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for g, want := range tc.group {
				got, err := tc.chunk.UsableGroup(g, tc.tokenEnd)
				require.NoError(t, err)
				assert.Equal(t, want, got, "group %d", g)
			}
			whole, err := tc.chunk.Usable(tc.tokenEnd)
			require.NoError(t, err)
			assert.Equal(t, tc.whole, whole)
			for _, p := range tc.yes {
				assert.True(t, whole.At(p), "resume at %d", p)
			}
			for _, p := range tc.no {
				assert.False(t, whole.At(p), "resume at %d", p)
			}
		})
	}
}

// A token_end outside the chunk's range, or a group it does not have, is an
// error that names them.
func TestUsableRefuses(t *testing.T) {
	c, err := transfer.NewChunk([]transfer.Group{{Kind: transfer.Paged, Blocks: []int{1}}}, transfer.TokenRange{Start: 16, End: 64}, true)
	require.NoError(t, err)
	for _, end := range []int64{15, 65, -1} {
		_, err := c.Usable(end)
		require.Error(t, err, "token_end %d", end)
		assert.Contains(t, err.Error(), "[16,64]")
		_, err = c.UsableGroup(0, end)
		require.Error(t, err)
	}
	for _, g := range []int{-1, 1} {
		_, err := c.UsableGroup(g, 20)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "groups 0..0")
	}
	assert.Equal(t, "none", transfer.Usable{None: true}.String())
	assert.Equal(t, "[3,9]", transfer.Usable{From: 3, To: 9}.String())
}

func TestOutcomes(t *testing.T) {
	for _, tc := range []struct {
		o       transfer.Outcome
		pending bool
		text    string
	}{
		{nil, false, ""},
		{transfer.Delivered{TokenEnd: 64}, false, "delivered(token_end 64)"},
		{transfer.Failed{Reason: "timeout", ReportsPending: true}, true, "failed(timeout, reports pending)"},
		{transfer.Failed{Reason: "x"}, false, "failed(x)"},
		{transfer.Cancelled{ByPeer: true, ReportsPending: true}, true, "cancelled(by peer, reports pending)"},
		{transfer.Cancelled{}, false, "cancelled(local)"},
	} {
		assert.Equal(t, tc.pending, transfer.ReportsPending(tc.o), "%v", tc.o)
		if tc.o != nil {
			assert.Equal(t, tc.text, tc.o.String())
		}
	}
}
