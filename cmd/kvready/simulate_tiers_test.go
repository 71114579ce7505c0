package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/internal/redistest"
)

// tierJSON is what the tests read of one tier in the JSON summary.
type tierJSON struct {
	Name          string `json:"name"`
	Store         string `json:"store"`
	Handed        int    `json:"handed"`
	Hits          int    `json:"hits"`
	Misses        int    `json:"misses"`
	Promoted      int    `json:"promoted"`
	Published     int    `json:"published"`
	Evictions     int    `json:"evictions"`
	Bytes         *int   `json:"bytes"`
	CapacityBytes *int   `json:"capacity_bytes"`
}

// Two managers, each with its own local tier, over one Redis store, as a
// user writes it: the second is served by Redis at first, promotes what it
// served into its local tier, and is then served by its local tier; the
// table names each tier with its hits.
func TestSimulateTiersOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	backend := "mem?capacity=1MiB," + srv.URL()
	args := []string{"simulate", "--backend", backend, "--requests", "150", "--arrival", "1ms", "--deadline", "2s", "--share", "1", "--families", "8"}
	type summary struct {
		Clock string     `json:"clock"`
		Hit   float64    `json:"hit_token_ratio"`
		Tiers []tierJSON `json:"tiers"`
	}
	runs := make([]summary, 2)
	for i := range runs {
		status, out, stderr := runCLI(t, "", append(args, "--json")...)
		require.Equal(t, exitOK, status, stderr)
		require.NoError(t, json.Unmarshal([]byte(out), &runs[i]), out)
	}
	first, second := runs[0], runs[1]
	assert.Equal(t, "real", first.Clock)
	require.Len(t, first.Tiers, 2)
	require.Len(t, second.Tiers, 2)
	assert.Equal(t, "mem", first.Tiers[0].Name)
	assert.Equal(t, "redis", first.Tiers[1].Name)
	assert.Equal(t, first.Tiers[0].Published, first.Tiers[1].Published, "written through to both tiers")
	local, shared := second.Tiers[0], second.Tiers[1]
	assert.EqualValues(t, 1, second.Hit)
	assert.Positive(t, shared.Hits, "served by Redis at first")
	assert.Equal(t, shared.Hits, local.Promoted, "each row Redis served was promoted into the local tier")
	assert.Positive(t, local.Hits, "then served by its local tier")
	require.NotNil(t, local.CapacityBytes)
	assert.Equal(t, 1<<20, *local.CapacityBytes)
	assert.Nil(t, shared.Bytes, "a Redis tier does not report its bytes")

	status, out, stderr := runCLI(t, "", args...)
	require.Equal(t, exitOK, status, stderr)
	for _, want := range []string{"store: tiers mem?capacity=1MiB in front of " + srv.URL(), "tier 0 mem", "tier 1 redis",
		"store availability", "tier hits mem "} {
		assert.Contains(t, out, want)
	}
}

// A bad stack is a usage error naming the tier at fault and what is
// wanted, found before anything connects; so are the flags of the in-process
// store of a mem run.
func TestSimulateTiersRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msgs []string
	}{
		{[]string{"--backend", "mem?capacity=lots,redis://127.0.0.1:1/0"}, []string{`-backend: tier 0 "mem?capacity=lots": capacity="lots": want a whole number of bytes`}},
		{[]string{"--backend", "redis://127.0.0.1:1/0,mem"}, []string{"-backend: tier 0", "want it last"}},
		{[]string{"--backend", "mem?capacity=1MiB,memcached://h:1"}, []string{`-backend: tier 1 "memcached://h:1"`, "want mem or mem?capacity=BYTES"}},
		{[]string{"--backend", "mem,mem,mem,mem,mem"}, []string{"-backend: 5 stores given"}},
		{[]string{"--backend", "mem?capacity=1MiB,mem", "--store-capacity", "10"}, []string{"-store-capacity: describes the in-process store", "mem?capacity=BYTES"}},
		{[]string{"--backend", "mem?capacity=1MiB,mem", "--fail-rate", "0.1"}, []string{"-fail-rate: describes the in-process store"}},
		{[]string{"--backend", "mem?capacity=1MiB,mem", "--compare-naive"}, []string{"-compare-naive"}},
		{[]string{"--backend", "mem?capacity=1MiB,mem", "--layerwise"}, []string{"-layerwise: the pipeline is timed on the virtual clock"}},
	} {
		status, out, stderr := runCLI(t, "", append([]string{"simulate"}, tc.args...)...)
		assert.Equal(t, exitUsage, status, tc.args)
		for _, msg := range tc.msgs {
			assert.Contains(t, stderr, msg, tc.args)
		}
		assert.Empty(t, out, tc.args)
	}

	srv := redistest.Start(t)
	srv.Kill()
	status, out, stderr := runCLI(t, "", "simulate", "--backend", "mem?capacity=1MiB,"+srv.URL()+"?max_retries=-1")
	assert.Equal(t, exitFail, status)
	assert.Contains(t, stderr, "does not answer PING")
	assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	assert.Empty(t, out)
}

// A stack of in-process tiers runs without a server, on real time.
func TestSimulateTiersInProcess(t *testing.T) {
	status, out, stderr := runCLI(t, "", "simulate", "--backend", "mem?capacity=16KiB,mem", "--requests", "100", "--json")
	require.Equal(t, exitOK, status, stderr)
	var m struct {
		Clock string     `json:"clock"`
		Tiers []tierJSON `json:"tiers"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &m), out)
	assert.Equal(t, "real", m.Clock)
	require.Len(t, m.Tiers, 2)
	assert.Equal(t, []string{"mem0", "mem1"}, []string{m.Tiers[0].Name, m.Tiers[1].Name})
	assert.Equal(t, m.Tiers[0].Misses, m.Tiers[1].Handed, "the second tier is handed what the first missed")
	require.NotNil(t, m.Tiers[0].Bytes)
	assert.LessOrEqual(t, *m.Tiers[0].Bytes, 16<<10)
}
