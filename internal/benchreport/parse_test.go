package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/kvready/kvready/fsm
cpu: Intel(R) Xeon(R) Processor
BenchmarkTransition/table-2         	300000000	         4.000 ns/op	       0 B/op	       0 allocs/op
BenchmarkTransition/looplab-2       	  2000000	       400.0 ns/op	     289 B/op	       5 allocs/op
BenchmarkTransition/looplab-2       	  2000000	       600.0 ns/op	     289 B/op	       5 allocs/op
BenchmarkTransition/looplab-2       	  2000000	       500.0 ns/op	     289 B/op	       5 allocs/op
PASS
ok  	github.com/kvready/kvready/fsm	3.1s
BenchmarkSlotMemory/rows=8-2   1   440291027 ns/op   13.29 B/slot   344.3 B/slot-total
`

func TestParse(t *testing.T) {
	rep, err := parse(strings.NewReader(sample))
	require.NoError(t, err)
	assert.Equal(t, []string{"BenchmarkTransition/table", "BenchmarkTransition/looplab", "BenchmarkSlotMemory/rows=8"}, rep.order)
	v, ok := rep.metric("BenchmarkTransition/looplab", "ns/op")
	require.True(t, ok)
	assert.Equal(t, 500.0, v, "the median of the runs")
	v, ok = rep.metric("BenchmarkSlotMemory/rows=8", "B/slot")
	require.True(t, ok)
	assert.Equal(t, 13.29, v)
	assert.Equal(t, "linux", rep.env["goos"])
	_, ok = rep.metric("BenchmarkNope", "ns/op")
	assert.False(t, ok)
}

func TestParseRefusesMalformedLines(t *testing.T) {
	for _, line := range []string{
		"BenchmarkX-2 10 5",
		"BenchmarkX-2 ten 5 ns/op",
		"BenchmarkX-2 10 five ns/op",
	} {
		_, err := parse(strings.NewReader(line))
		assert.ErrorContains(t, err, "line 1", line)
	}
}

func TestRenderJudgesEachFigure(t *testing.T) {
	rep, err := parse(strings.NewReader(sample))
	require.NoError(t, err)
	var out bytes.Buffer
	render(&out, rep, time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), "go1.26", 2)
	doc := out.String()
	assert.Contains(t, doc, "| one transition: looplab Event ÷ compiled table | 125 × | ≥ 50× | yes |")
	assert.Contains(t, doc, "| engine state per staging slot, 8-row leases | 13.3 B/slot | ≤ 64 | yes |")
	assert.Contains(t, doc, "not measured", "figures whose benchmarks did not run say so")
	assert.Contains(t, doc, "2026-11-29")
}

func TestTrimProcs(t *testing.T) {
	assert.Equal(t, "BenchmarkA/x", trimProcs("BenchmarkA/x-16"))
	assert.Equal(t, "BenchmarkA/in-flight", trimProcs("BenchmarkA/in-flight"))
	assert.Equal(t, "BenchmarkA", trimProcs("BenchmarkA"))
}

// FuzzParse: the parser never panics, and whatever it accepts renders.
func FuzzParse(f *testing.F) {
	f.Add(sample)
	f.Add("BenchmarkX-2 1 2 ns/op")
	f.Add("goos: \nBenchmark")
	f.Fuzz(func(t *testing.T, in string) {
		rep, err := parse(strings.NewReader(in))
		if err != nil {
			return
		}
		var out bytes.Buffer
		render(&out, rep, time.Unix(0, 0), "go", 1)
		if !strings.HasPrefix(out.String(), "# Performance") {
			t.Fatal("render produced no document")
		}
	})
}
