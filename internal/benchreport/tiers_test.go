package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The lines backend/tiers' BenchmarkTiers prints (go test -bench, -count=2):
// the report takes the median of the runs and judges a local hit against
// backend/mem alone (≤ 1.1×) and Redis through the tiers against
// backend/redis alone (≥ 0.9×, the median of the runs' own ratios), with the
// unpromoted chain in view.
const tiersSample = `goos: linux
pkg: github.com/kvready/kvready/backend/tiers
BenchmarkTiers/local-2         	     486	   2282906 ns/op	        13.00 allocs/lease-alone	        16.00 allocs/lease-hit	         1.000 handoffs/lease-alone	         1.000 handoffs/lease-hit	      5000 ns/lease-alone	      5500 ns/lease-hit	         1.100 x-hit
BenchmarkTiers/local-2         	     486	   2282906 ns/op	        13.00 allocs/lease-alone	        16.00 allocs/lease-hit	         1.000 handoffs/lease-alone	         1.000 handoffs/lease-hit	      5000 ns/lease-alone	      6500 ns/lease-hit	         1.300 x-hit
BenchmarkTiers/local-2         	     486	   2282906 ns/op	        13.00 allocs/lease-alone	        16.00 allocs/lease-hit	         1.000 handoffs/lease-alone	         1.000 handoffs/lease-hit	      5000 ns/lease-alone	      6000 ns/lease-hit	         1.200 x-hit
BenchmarkTiers/local/row=64KiB-2         	     120	   9282906 ns/op	        13.00 allocs/lease-alone	        14.00 allocs/lease-hit	         1.000 handoffs/lease-alone	         1.000 handoffs/lease-hit	      7000 ns/lease-alone	      7350 ns/lease-hit	         1.050 x-hit
BenchmarkTiers/redis/row=64KiB-2         	     300	   4000000 ns/op	1600.00 MB/s-alone	 800.00 MB/s-promoted	0.50 x-promoted	0.45 x-promoted-cold	1520.00 MB/s-unpromoted	0.95 x-unpromoted	1200.00 MB/s-copied	0.75 x-copied	 1082198 B/op	     247 allocs/op
BenchmarkTiers/promotion/row=64KiB-2   	    9000	    131000 ns/op	6400.00 MB/s	   34000 B/op	      60 allocs/op
BenchmarkTeeCopy/row=64KiB-2         	  378014	      3156 ns/op	16000.00 MB/s
BenchmarkTiers/promotion/row=64KiB-2   	    9000	    131000 ns/op	9600.00 MB/s	   34000 B/op	      60 allocs/op
BenchmarkTiers/redis/row=2MiB-2         	     21	 1220917 ns/op	1000.00 MB/s-alone	 960.00 MB/s-promoted	0.96 x-promoted	 1082198 B/op	     247 allocs/op
BenchmarkTiers/redis/row=2MiB-2         	     21	 1220917 ns/op	1000.00 MB/s-alone	 900.00 MB/s-promoted	0.90 x-promoted	 1082198 B/op	     247 allocs/op
BenchmarkTiers/redis/row=2MiB-2         	     21	 1220917 ns/op	1000.00 MB/s-alone	 940.00 MB/s-promoted	0.94 x-promoted	 1082198 B/op	     247 allocs/op
`

func TestTierFigures(t *testing.T) {
	rep, err := parse(strings.NewReader(tiersSample))
	require.NoError(t, err)
	var out bytes.Buffer
	render(&out, rep, time.Unix(0, 0), "go", 2)
	doc := out.String()
	for _, want := range []string{
		// the median of the runs' 1.1, 1.3 and 1.2
		"| tiers: a fetch served by the local tier ÷ the same fetch through backend/mem alone (per lease, through the runner, round by round) | 1.20 × | ≤ 1.1× | no | `BenchmarkTiers/local` |",
		"| tiers: the same, the first lease of each way's three (right after another way's), 64KiB rows, in view | 0.45 × | — | — | `BenchmarkTiers/redis/row=64KiB` |",
		"| tiers: allocations of a local hit ÷ backend/mem alone, in view | 1.23 × | — | — |",
		// the 64 KiB rows' own sub-benchmark, never the 64-byte figure's
		"| tiers: the same with 64KiB rows (a KV block a lease, its copy into staging on both ways), in view | 1.05 × | — | — | `BenchmarkTiers/local/row=64KiB` |",
		"| tiers: a fetch served by Redis through the tiers (a local miss, promoted) ÷ backend/redis alone, 64KiB rows (MB/s, side by side) | 0.50 × | ≥ 0.9× | no | `BenchmarkTiers/redis/row=64KiB` |",
		"| tiers: the same without promotion ÷ backend/redis alone, 64KiB rows (MB/s, side by side), in view | 0.95 × | — | — |",
		// the median of 0.96, 0.90 and 0.94
		"| tiers: a fetch served by Redis through the tiers (a local miss, promoted) ÷ backend/redis alone, 2MiB rows (MB/s, side by side) | 0.94 × | ≥ 0.9× | yes |",
		"| tiers: a fetch served by Redis through the tiers (a local miss, promoted) ÷ backend/redis alone, 512KiB rows (MB/s, side by side) | not measured |",
		"| tiers: the same with the copy after the fetch (a lower tier that does not tee) ÷ backend/redis alone, 64KiB rows (MB/s, side by side), in view | 0.75 × | — | — | `BenchmarkTiers/redis/row=64KiB` |",
		"| tiers: the same with the copy after the fetch (a lower tier that does not tee) ÷ backend/redis alone, 2MiB rows (MB/s, side by side), in view | not measured |",
		// 1 ÷ (1 + 1600 ÷ 16000), the tee's copy from backend/redis's own benchmark
		"| tiers: the most the tee's copy lets it reach, in series with the fetch, 64KiB rows: 1 ÷ (1 + alone MB/s ÷ tee copy MB/s), in view | 0.91 × | — | — | `BenchmarkTeeCopy/row=64KiB` |",
		"| tiers: the most the tee's copy lets it reach, in series with the fetch, 2MiB rows: 1 ÷ (1 + alone MB/s ÷ tee copy MB/s), in view | not measured |",
		// 1 ÷ (1 + 1600 ÷ 8000), the promotion's median of 6400 and 9600
		"| tiers: the most a lower tier that does not tee can reach, the copy after the fetch in series, 64KiB rows: 1 ÷ (1 + alone MB/s ÷ promotion MB/s), in view | 0.83 × | — | — | `BenchmarkTiers/promotion/row=64KiB` |",
		"| tiers: the most a lower tier that does not tee can reach, the copy after the fetch in series, 2MiB rows: 1 ÷ (1 + alone MB/s ÷ promotion MB/s), in view | not measured |",
	} {
		assert.Contains(t, doc, want)
	}
}
