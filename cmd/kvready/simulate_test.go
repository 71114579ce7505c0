package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSimulateJSON(t *testing.T) {
	status, out, stderr := runCLI(t, "", "simulate", "--requests", "200", "--json")
	require.Equal(t, exitOK, status, stderr)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &m), out)
	for _, k := range []string{"leases", "served", "partial", "missed", "failed", "quarantined", "released",
		"recycled_before_fence", "misses_reported_as_failures", "hit_token_ratio",
		"readiness_p50_us", "readiness_p99_us", "throughput_leases_per_s"} {
		assert.Contains(t, m, k)
	}
	assert.EqualValues(t, 0, m["recycled_before_fence"])
	assert.EqualValues(t, 0, m["misses_reported_as_failures"])
	assert.Contains(t, stderr, "simulate: 200/200 requests", "plain progress lines when not on a terminal")
}

func TestSimulateNaiveShowsCorruption(t *testing.T) {
	status, out, stderr := runCLI(t, "", "simulate", "--naive", "--json")
	require.Equal(t, exitOK, status, "the naive run is a demonstration, not a failure: %s", stderr)
	var m struct {
		Manager  string `json:"manager"`
		Recycled int    `json:"recycled_before_fence"`
		Late     int    `json:"late_writes"`
		Corrupt  int    `json:"corrupt_rows"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &m), out)
	assert.Equal(t, "naive", m.Manager)
	assert.Positive(t, m.Recycled)
	assert.Positive(t, m.Late)
	assert.Positive(t, m.Corrupt)
}

func TestSimulateTableAndReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r")
	status, out, stderr := runCLI(t, "", "simulate", "--requests", "100", "--report", dir)
	require.Equal(t, exitOK, status, stderr)
	for _, want := range []string{"leases by final state", "outcomes by kind", "slots quarantined", "hit ratio (tokens)",
		"readiness p50 / p99", "throughput", "recycled before fence", "misses reported as failures", "report: " + dir} {
		assert.Contains(t, out, want)
	}
	for _, f := range []string{"index.html", "leases-by-state.svg", "fence-latency.svg", "readiness-latency.svg"} {
		info, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err, f)
		assert.Positive(t, info.Size(), f)
	}
}

func TestSimulateBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--requests", "0"}, "-requests: 0"},
		{[]string{"--share", "1.5"}, "-share: 1.5"},
		{[]string{"--miss-rate", "-1"}, "-miss-rate"},
		{[]string{"--fail-rate", "0.9", "--miss-rate", "0.9"}, "add up to"},
		{[]string{"--slots", "2"}, "-slots: 2 slots per group"},
		{[]string{"--deadline", "0s"}, "-deadline"},
		{[]string{"--latency-sigma", "NaN"}, "-latency-sigma"},
		{[]string{"--gpu-latency", "-1ms"}, "-gpu-latency"},
		{[]string{"--blocks", "x"}, "invalid value \"x\" for flag -blocks"},
		{[]string{"--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"extra"}, "takes no arguments"},
	} {
		status, out, stderr := runCLI(t, "", append([]string{"simulate"}, tc.args...)...)
		assert.Equal(t, exitUsage, status, tc.args)
		assert.Contains(t, stderr, tc.msg, tc.args)
		assert.Empty(t, out, "a refused run prints no summary")
	}
}
