package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The lines internal/ucxfigure's BenchmarkUCXTransfer prints (go test
// -bench, -count=3): the report judges the median of the runs' own
// engine/perftest ratios (each pair measured back to back) against SPEC
// §5's 0.9×, per transport and page — not the ratio of the sides' medians,
// which would compare two moments of the machine's load; a page whose
// ratio is missing is not measured.
const ucxSample = `goos: linux
pkg: github.com/kvready/kvready/internal/ucxfigure
BenchmarkUCXTransfer/tls=tcp/page=64KiB-2         	   10000	     60000 ns/op	1000.00 MB/s	         0.50 engine/perftest	      2000.00 perftest-MB/s	   19680 B/op	     482 allocs/op
BenchmarkUCXTransfer/tls=tcp/page=64KiB-2         	   10000	     60000 ns/op	1400.00 MB/s	         0.70 engine/perftest	      2000.00 perftest-MB/s	   19680 B/op	     482 allocs/op
BenchmarkUCXTransfer/tls=tcp/page=64KiB-2         	   10000	     60000 ns/op	 100.00 MB/s	         0.60 engine/perftest	       166.67 perftest-MB/s	   19680 B/op	     482 allocs/op
BenchmarkUCXTransfer/tls=tcp/page=2MiB-2          	     397	   2000000 ns/op	1900.00 MB/s	         0.95 engine/perftest	      2000.00 perftest-MB/s	   17008 B/op	     194 allocs/op
BenchmarkUCXTransfer/tls=sm/page=2MiB-2           	     379	   3007365 ns/op	 697.34 MB/s	 0.20 engine/perftest-heap	 3486.70 perftest-heap-MB/s	   31999 B/op	     337 allocs/op
BenchmarkUCXTransfer/tls=sm/page=64KiB-2          	   30000	     24000 ns/op	2700.00 MB/s	 0.05 engine/perftest	 0.25 engine/perftest-am	 0.36 engine/perftest-heap	 50000.00 perftest-MB/s	 10800.00 perftest-am-MB/s	 7500.00 perftest-heap-MB/s	    3522 B/op	      23 allocs/op
BenchmarkUCXTransfer/tls=sm/page=64KiB-2          	   30000	     24000 ns/op	1300.00 MB/s	 0.03 engine/perftest	 0.10 engine/perftest-am	 0.20 engine/perftest-heap	 45000.00 perftest-MB/s	 13000.00 perftest-am-MB/s	 6500.00 perftest-heap-MB/s	    3522 B/op	      23 allocs/op
BenchmarkUCXTransfer/tls=sm/page=64KiB-2          	   30000	     24000 ns/op	2000.00 MB/s	 0.04 engine/perftest	 0.40 engine/perftest-am	 0.30 engine/perftest-heap	 40000.00 perftest-MB/s	  5000.00 perftest-am-MB/s	 6600.00 perftest-heap-MB/s	    3522 B/op	      23 allocs/op
BenchmarkUCXTransfer/instant/page=2MiB-2          	    1803	    500000 ns/op	3497.47 MB/s	   21263 B/op	     223 allocs/op
`

func TestUCXFigures(t *testing.T) {
	rep, err := parse(strings.NewReader(ucxSample))
	require.NoError(t, err)
	var out bytes.Buffer
	render(&out, rep, time.Unix(0, 0), "go", 2)
	doc := out.String()
	for _, want := range []string{
		// median of 0.50, 0.70, 0.60; the medians of the sides (1000 ÷ 2000) would say 0.50
		"| peer transfers over UCX (tcp), 64KiB pages: through the engine between two processes ÷ ucx_perftest ucp_put_bw (MB/s) | 0.60 × | ≥ 0.9× | no | `BenchmarkUCXTransfer/tls=tcp/page=64KiB` |",
		"| peer transfers over UCX (tcp), 2MiB pages: through the engine between two processes ÷ ucx_perftest ucp_put_bw (MB/s) | 0.95 × | ≥ 0.9× | yes |",
		"| peer transfers over UCX (tcp), 512KiB pages: through the engine between two processes ÷ ucx_perftest ucp_put_bw (MB/s) | not measured |",
		"| peer transfers over UCX (sm), 2MiB pages: through the engine between two processes ÷ ucx_perftest ucp_put_bw (MB/s) | not measured |",
		"| tcp | 64KiB | 2000 | 1000 | 0.60 | — | — | — | — | not measured | not measured |",
		// instant 500000 ns ÷ engine 2000000 ns
		"| tcp | 2MiB | 2000 | 1900 | 0.95 | — | — | — | — | 500000 | 0.25 |",
		// ucp_am_bw: the median of the runs' own ratios (0.25, 0.10, 0.40),
		// not 2000 ÷ 10800; a run without it leaves its cells not measured
		"| sm | 64KiB | 45000 | 2000 | 0.04 | 6600 | 0.30 | 10800 | 0.25 | not measured | not measured |",
		"| sm | 2MiB | not measured | 697 | not measured | 3487 | 0.20 | not measured | not measured | 500000 | 0.17 |",
		"| sm | 512KiB | not measured | not measured | not measured | not measured | not measured | not measured | not measured | not measured | not measured |",
		// the in-view rows, sm only, no goal
		"| peer transfers over UCX (sm), 64KiB pages: through the engine between two processes ÷ ucx_perftest ucp_am_bw, heap memory (MB/s), in view | 0.25 × | — | — | `BenchmarkUCXTransfer/tls=sm/page=64KiB` |",
		"| peer transfers over UCX (sm), 2MiB pages: through the engine between two processes ÷ ucx_perftest ucp_am_bw, heap memory (MB/s), in view | not measured | — | — | `BenchmarkUCXTransfer/tls=sm/page=2MiB` |",
	} {
		assert.Contains(t, doc, want)
	}
	assert.NotContains(t, doc, "(tcp), 64KiB pages: through the engine between two processes ÷ ucx_perftest ucp_am_bw",
		"the in-view anchor is measured over sm alone")
	assert.Equal(t, 3, strings.Count(doc, "ucp_am_bw, heap memory (MB/s), in view |"), "one in-view row per sm page")
}
