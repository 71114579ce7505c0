package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The lines backend/redis's benchmarks print (go test -bench, -count=2):
// the report reads their MB/s, takes the median of the runs, and judges each
// backend figure against the fastest of its bare references, against SPEC
// §5's 0.9×. A size with a reference missing is not measured: a figure
// against the best of fewer references would overstate it.
const redisSample = `goos: linux
pkg: github.com/kvready/kvready/backend/redis
BenchmarkRedisFetch/row=64KiB-2         	    3842	    558272 ns/op	1800.00 MB/s	      1791 leases/s	   15915 B/op	     123 allocs/op
BenchmarkRedisFetch/row=64KiB/bare-2    	    1334	   1757231 ns/op	 600.00 MB/s	       569.1 leases/s	 1181221 B/op	      61 allocs/op
BenchmarkRedisFetch/row=64KiB/bare-zerocopy-2   3519	    707925 ns/op	1400.00 MB/s	      1413 leases/s	    3812 B/op	      62 allocs/op
BenchmarkRedisFetch/row=64KiB/bare-rueidis-2    3519	    707925 ns/op	1000.00 MB/s	      1413 leases/s	    3812 B/op	      62 allocs/op
BenchmarkRedisFetch/row=64KiB-2         	    3842	    558272 ns/op	2000.00 MB/s	      1791 leases/s	   15915 B/op	     123 allocs/op
BenchmarkRedisFetch/row=64KiB/bare-2    	    1334	   1757231 ns/op	 800.00 MB/s	       569.1 leases/s	 1181221 B/op	      61 allocs/op
BenchmarkRedisFetch/row=64KiB/bare-zerocopy-2   3519	    707925 ns/op	1600.00 MB/s	      1413 leases/s	    3812 B/op	      62 allocs/op
BenchmarkRedisFetch/row=64KiB/bare-rueidis-2    3519	    707925 ns/op	1200.00 MB/s	      1413 leases/s	    3812 B/op	      62 allocs/op
BenchmarkRedisFetch/row=512KiB-2        	     200	   5000000 ns/op	1800.00 MB/s	       200 leases/s	   15915 B/op	     123 allocs/op
BenchmarkRedisFetch/row=512KiB/bare-2   	     200	   5000000 ns/op	 900.00 MB/s	       200 leases/s	   15915 B/op	     123 allocs/op
BenchmarkRedisFetch/row=512KiB/bare-zerocopy-2  200	   5000000 ns/op	1700.00 MB/s	       200 leases/s	   15915 B/op	     123 allocs/op
BenchmarkRedisPublish/row=2MiB-2        	      72	  30121039 ns/op	1000.00 MB/s	        33.20 leases/s	  518346 B/op	     158 allocs/op
BenchmarkRedisPublish/row=2MiB/bare-2   	     224	  10345397 ns/op	1250.00 MB/s	        96.66 leases/s	    2111 B/op	      13 allocs/op
BenchmarkRedisPublish/row=2MiB/bare-setnx-2   	     224	  10345397 ns/op	1100.00 MB/s	        96.66 leases/s	    2111 B/op	      13 allocs/op
BenchmarkRedisPublish/row=2MiB/bare-rueidis-2 	     224	  10345397 ns/op	 900.00 MB/s	        96.66 leases/s	    2111 B/op	      13 allocs/op
`

func TestRedisFigures(t *testing.T) {
	rep, err := parse(strings.NewReader(redisSample))
	require.NoError(t, err)
	var out bytes.Buffer
	render(&out, rep, time.Unix(0, 0), "go", 2)
	doc := out.String()
	for _, want := range []string{
		// medians 1900 ÷ the best reference, zero-copy's 1500 (MGET 700, rueidis 1100)
		"| a real store, 64KiB rows: backend/redis Fetch ÷ the best bare client (MGET, zero-copy GET, rueidis streamed GET; MB/s) | 1.27 × | ≥ 0.9× | yes | `BenchmarkRedisFetch/row=64KiB` |",
		// 1000 ÷ MSET's 1250 (SET NX 1100, rueidis 900)
		"| a real store, 2MiB rows: backend/redis Publish ÷ the best bare client (MSET, SET NX, rueidis MSET; MB/s) | 0.80 × | ≥ 0.9× | no | `BenchmarkRedisPublish/row=2MiB` |",
		"| a real store, 2MiB rows: backend/redis Publish ÷ bare pipelined SET NX of the same keys (MB/s), in view | 0.91 × | — | — | `BenchmarkRedisPublish/row=2MiB` |",
		// no rueidis reference at 512KiB
		"| a real store, 512KiB rows: backend/redis Fetch ÷ the best bare client (MGET, zero-copy GET, rueidis streamed GET; MB/s) | not measured |",
	} {
		assert.Contains(t, doc, want)
	}
}
