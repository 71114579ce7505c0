package simulate

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// TestWindowRunIsSafe runs the engine end to end with a window group (the last
// of two layer groups: 64 tokens, one sink block, over prompts of 8 blocks):
// the checker finds nothing wrong, rows outside the window are never staged
// (fewer slot grants than the same workload under full attention) and still
// fetches become usable at the prompt's end.
func TestWindowRunIsSafe(t *testing.T) {
	c := small()
	c.Share, c.Families = 1, 3 // many whole prompts shared: fetches served to the end
	full := run(t, c)
	c.Window, c.SinkBlocks = 64, 1
	s := run(t, c)
	assert.True(t, s.Safe(), "recycled %d, corrupt %d, misses as failures %d, overclaims %d",
		s.RecycledBeforeFence, s.CorruptRows, s.MissesReportedAsFailures, s.ReadinessOverclaims)
	assert.Zero(t, s.ReadinessOverclaims)
	assert.Zero(t, s.OrphanSubmissions)
	assert.True(t, s.Complete())
	assert.Positive(t, s.Served)
	assert.Positive(t, s.HitTokenRatio, "some fetches are usable at the prompt's end")
	assert.Positive(t, s.RowsVerified)
	assert.Less(t, s.SlotGrants, full.SlotGrants, "the window group stages only its sink and its window")
	// A window wider than the prompt is full attention: the same run.
	c.Window, c.SinkBlocks = 1<<14, 0
	wide := run(t, c)
	assert.Equal(t, full.SlotGrants, wide.SlotGrants)
	assert.Equal(t, full.HitTokenRatio, wide.HitTokenRatio)
}

func TestWindowConfig(t *testing.T) {
	c := Defaults()
	c.Window, c.SinkBlocks = 64, 1
	require.NoError(t, c.Validate())
	assert.Equal(t, []staging.Attention{staging.Full, {Window: 64, SinkBlocks: 1}}, c.Attention())
	assert.Equal(t, [][]int{{0, 1, 2, 3, 4, 5, 6, 7}, {0, 6, 7}}, neededBlocks(c.Attention(), 0, 8))
	assert.Equal(t, [][]int{{5, 6, 7}, {6, 7}}, neededBlocks(c.Attention(), 5, 3))
	for _, tc := range []struct {
		window, sinks int
		field         string
	}{{-1, 0, "window"}, {0, 1, "sink-blocks"}, {64, -1, "sink-blocks"}, {64, maxBlocks + 1, "sink-blocks"}} {
		c.Window, c.SinkBlocks = tc.window, tc.sinks
		err := c.Validate()
		var fe *FieldError
		require.ErrorAs(t, err, &fe, "%+v", tc)
		assert.Equal(t, tc.field, fe.Field)
	}
}

// TestCheckerReadsWindows: the checker's own rule counts a readiness claim
// whose end reads a block the fetch did not bring, and does not count the
// window group's rows before its window, which were never staged.
func TestCheckerReadsWindows(t *testing.T) {
	c := &checker{window: 64, sinks: 1}
	r := &request{names: make([][]contract.Name, 2)}
	for g := range r.names {
		for b := range 8 {
			var n contract.Name
			n[0], n[1] = byte(g+1), byte(b+1)
			r.names[g] = append(r.names[g], n)
		}
	}
	l := &lease{req: r, kind: readiness.Fetch, first: 0, blocks: 8}
	servedOf := func(rows map[int][]int) contract.NameSet {
		var names []contract.Name
		for g, bs := range rows {
			for _, b := range bs {
				names = append(names, r.names[g][b])
			}
		}
		return contract.NewNameSet(names...)
	}
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	windowOnly := servedOf(map[int][]int{0: all, 1: {0, 6, 7}})
	assert.False(t, c.overclaimed(l, windowOnly, 256), "the window's rows are what a resume at the end reads")
	assert.False(t, c.overclaimed(l, windowOnly, 0))
	assert.True(t, c.overclaimed(l, windowOnly, 192), "a resume at block 6 reads blocks 4 and 5, never staged")
	assert.True(t, c.overclaimed(l, servedOf(map[int][]int{0: all, 1: {6, 7}}), 256), "the sink is read")
	assert.True(t, c.overclaimed(l, servedOf(map[int][]int{0: all[:7], 1: {0, 6, 7}}), 256), "full attention reads every block")
	assert.True(t, c.overclaimed(l, windowOnly, 250), "readiness answers whole blocks")
	full := &checker{}
	assert.True(t, full.overclaimed(l, windowOnly, 256), "without a window the group reads every block")
}
