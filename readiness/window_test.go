package readiness_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// TestEngineWindowedReadiness runs the shipped engine (its runner, backend/mem
// delivering on its own goroutines, the simulated device) over a layout of a
// full-attention group and a window of 64 tokens with one sink block, at 32
// tokens per block: the fetch of six blocks carries only the rows a resume at
// block 6 reads (staging.NeededRows), and readiness is computed per group.
func TestEngineWindowedReadiness(t *testing.T) {
	attn := []staging.Attention{staging.Full, {Window: 64, SinkBlocks: 1}}
	rows, err := staging.NeededRows(nil, 32, attn, 0, 6*32)
	require.NoError(t, err)
	require.Equal(t, []int{0, 4, 5}, rows[1], "the window group stages its sink and its window")
	for _, tc := range []struct {
		name      string
		attention []staging.Attention
		missing   map[[2]int]bool // (group, block) the store does not hold
		want      staging.Interval
	}{
		{"every needed row served: resume at the end", attn, nil, staging.Interval{RestartFloor: 192, UsableUntil: 192}},
		{"a window row missing: the window passes no end above its sink", attn, map[[2]int]bool{{1, 4}: true}, staging.Interval{RestartFloor: 0, UsableUntil: 32}},
		{"a full-attention row missing caps the end below it", attn, map[[2]int]bool{{0, 3}: true}, staging.Interval{RestartFloor: 0, UsableUntil: 32}},
		{"the same rows under full attention stop at the first unstaged block", nil, nil, staging.Interval{RestartFloor: 0, UsableUntil: 32}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iv := fetchWindowed(t, tc.attention, rows, tc.missing)
			assert.Equal(t, tc.want, iv)
		})
	}
}

func fetchWindowed(t *testing.T, attn []staging.Attention, rows [][]int, missing map[[2]int]bool) staging.Interval {
	t.Helper()
	dev, err := sim.New(0, 1<<16, sim.WithLatency(sim.WallClock{}, 0))
	require.NoError(t, err)
	stream, err := dev.NewStream()
	require.NoError(t, err)
	staged, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 8, SlotBytes: 16}, staging.Group{Slots: 8, SlotBytes: 16})
	require.NoError(t, err)
	store, err := mem.New(staged)
	require.NoError(t, err)
	defer store.Close()
	eng, err := readiness.New(readiness.Config{
		Memory:         staged,
		TokensPerBlock: 32,
		Attention:      attn,
		Fetcher:        store,
		Stream:         stream,
	})
	require.NoError(t, err)
	defer drain(eng)

	req := readiness.Request{Kind: readiness.Fetch}
	for g, blocks := range rows {
		for _, b := range blocks {
			var n contract.Name
			n[0], n[1] = byte(g+1), byte(b+1)
			if !missing[[2]int{g, b}] {
				store.Put(staging.ExtentName, n, bytes.Repeat([]byte{byte(16*g + b)}, 16))
			}
			p, err := dev.Alloc(16)
			require.NoError(t, err)
			req.Rows = append(req.Rows, staging.Row{Name: n, Group: g, Block: b, Device: p})
		}
	}
	h, err := eng.Lend(req)
	require.NoError(t, err)
	require.Equal(t, readiness.StateLogicallyComplete, settle(eng, h).State)
	iv, err := eng.Readiness(h)
	require.NoError(t, err)
	require.NoError(t, eng.Release(h))
	return iv
}

func TestEngineRefusesBadAttention(t *testing.T) {
	staged, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 8, SlotBytes: 16})
	require.NoError(t, err)
	dev, err := sim.New(0, 1<<10)
	require.NoError(t, err)
	stream, err := dev.NewStream()
	require.NoError(t, err)
	store, err := mem.New(staged)
	require.NoError(t, err)
	defer store.Close()
	for _, tc := range []struct {
		attn []staging.Attention
		msg  string
	}{
		{[]staging.Attention{{Window: -1}}, "layer group 0's Attention: staging: window -1"},
		{[]staging.Attention{staging.Full, staging.Full}, "the Attention list has 2 layer groups; want at most the memory's 1"},
	} {
		_, err := readiness.New(readiness.Config{
			Memory:         staged,
			TokensPerBlock: 32,
			Attention:      tc.attn,
			Fetcher:        store,
			Stream:         stream,
		})
		assert.ErrorContains(t, err, tc.msg)
	}
}
