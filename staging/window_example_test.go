package staging_test

import (
	"fmt"

	"github.com/kvready/kvready/staging"
)

// A full-attention layer group beside a window of 64 tokens with one sink
// block, at 32 tokens per block: a fetch of ten blocks stages the window
// group's sink and window only, and is usable at its end, and only there.
func ExampleWindowedReadiness() {
	groups := []staging.Attention{staging.Full, {Window: 64, SinkBlocks: 1}}
	rows, _ := staging.NeededRows(nil, 32, groups, 0, 320)
	fmt.Println("rows to stage:", rows[0], rows[1])

	// arrived[g][i]: block i of group g landed. Group 1 never staged 1..7.
	arrived := [][]bool{make([]bool, 10), make([]bool, 10)}
	for g, blocks := range rows {
		for _, b := range blocks {
			arrived[g][b] = true
		}
	}
	iv, _ := staging.WindowedReadiness(32, 0, groups, arrived)
	fmt.Println("all landed:", iv)

	arrived[1][8] = false // a hole in the window
	iv, _ = staging.WindowedReadiness(32, 0, groups, arrived)
	fmt.Println("block 8 of the window missing:", iv)
	// Output:
	// rows to stage: [0 1 2 3 4 5 6 7 8 9] [0 8 9]
	// all landed: [320, 320]
	// block 8 of the window missing: [0, 32]
}

// Sizing the staging of the same two groups for fetches of up to 320 tokens:
// one fetch stages ten 4096-byte rows and three 1024-byte rows.
func ExampleLayout_SlotCounts() {
	window := 64
	l := staging.Layout{
		TokensPerBlock: 32,
		PoolGroups:     map[int][]int{0: {4096}, 1: {1024}},
		LayerGroups: []staging.LayerGroup{
			{Kind: "attention", PoolGroup: 0, Layers: []int{0}, Shard: staging.Whole},
			{Kind: "attention", Window: &window, SinkBlocks: 1, PoolGroup: 1, Layers: []int{1}, Shard: staging.Whole},
		},
	}
	s, _ := l.SlotCounts(staging.SizingOptions{FetchTokens: 320, MaxFetches: 3})
	fmt.Println("one fetch:", s.OneFetch, "bytes; slots:", s.Counts())
	s, _ = l.SlotCounts(staging.SizingOptions{FetchTokens: 320, MaxBytes: 100000})
	fmt.Println("capped at 100000 bytes:", s.Counts())
	_, err := l.SlotCounts(staging.SizingOptions{FetchTokens: 320, MaxBytes: 44031})
	fmt.Println(err)
	// Output:
	// one fetch: 44032 bytes; slots: map[0:30 1:9]
	// capped at 100000 bytes: map[0:22 1:6]
	// staging: max_bytes is below one fetch: max_bytes is 44031; one fetch of 320 tokens needs 44032 bytes
}
