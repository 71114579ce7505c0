package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// disaggJSON is what the tests read of a --disagg summary.
type disaggJSON struct {
	Manager            string `json:"manager"`
	Requests           int    `json:"requests"`
	Pages              int    `json:"pages"`
	PagesPerRequest    int    `json:"pages_per_request"`
	Seed               uint64 `json:"seed"`
	Delivered          int    `json:"delivered"`
	Reads              int    `json:"reads"`
	FreedWhileWritable int    `json:"freed_while_writable"`
	Violations         int    `json:"violations"`
	Safe               bool   `json:"safe"`
	PagesFree          int    `json:"pages_free"`
}

func TestSimulateDisaggNaive(t *testing.T) {
	status, out, stderr := runCLI(t, "", "simulate", "--disagg", "--naive", "--requests", "150", "--slots", "64", "--blocks", "4", "--seed", "9", "--json")
	require.Equal(t, exitOK, status, "the naive run is a demonstration, not a failure: %s", stderr)
	var s disaggJSON
	require.NoError(t, json.Unmarshal([]byte(out), &s), out)
	assert.Equal(t, "naive", s.Manager)
	assert.Equal(t, 150, s.Requests, "--requests")
	assert.Equal(t, 64, s.Pages, "--slots is the decode pages")
	assert.Equal(t, 4, s.PagesPerRequest, "--blocks is a request's pages")
	assert.EqualValues(t, 9, s.Seed)
	assert.Positive(t, s.Delivered)
	assert.Positive(t, s.FreedWhileWritable)
	assert.False(t, s.Safe)
	assert.Equal(t, 64, s.PagesFree, "the naive manager frees everything, early")
	assert.Contains(t, stderr, "simulate naive --disagg: 150/150 requests")
}

func TestSimulateDisaggTableAndReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r")
	status, out, stderr := runCLI(t, "", "simulate", "--disagg", "--naive", "--requests", "100", "--report", dir)
	require.Equal(t, exitOK, status, stderr)
	for _, want := range []string{"kvready simulate --disagg — manager: naive", "attempts by outcome", "writers by behaviour",
		"independent page checker", "freed while a writer may write", "report: " + dir,
		"naive manager: the checker caught it freeing pages a writer could still write"} {
		assert.Contains(t, out, want)
	}
	for _, f := range []string{"index.html", "disagg-safety.svg"} {
		info, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err, f)
		assert.Positive(t, info.Size(), f)
	}
}

func TestSimulateDisaggBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--lose-done", "0.1"}, "--lose-done: describes a disaggregated run's writers and network; want --disagg too"},
		{[]string{"--peer-restarts", "2"}, "--peer-restarts: describes a disaggregated run"},
		{[]string{"--disagg", "--groups", "2"}, "--groups: describes the store, the engine or the device of the main run"},
		{[]string{"--disagg", "--backend", "redis://localhost:6379"}, "--backend: describes the store"},
		{[]string{"--disagg", "--layerwise"}, "--layerwise: describes the store"},
		{[]string{"--disagg", "--lose-done", "2"}, "--lose-done: 2; want a probability"},
		{[]string{"--disagg", "--never-reports-rate", "0.6", "--fails-midway-rate", "0.6"}, "--fails-midway-rate, --never-reports-rate: never-reports-rate 0.6 + fails-midway-rate 0.6 + submits-late-rate 0.03 add up to 1.230"},
		{[]string{"--disagg", "--revocation-leaks"}, "--submits-late-rate: 0.03 with --revocation-leaks"},
		{[]string{"--disagg", "--slots", "4", "--blocks", "8"}, "--slots: 4 pages cannot hold one request's 8"},
		{[]string{"--disagg", "--naive", "--compare-naive"}, "--compare-naive: runs the kvready manager, then the naive one"},
		{[]string{"--disagg", "--deadline", "0s"}, "--deadline: 0s; want at least 1µs"},
	} {
		t.Run(tc.msg, func(t *testing.T) {
			status, _, stderr := runCLI(t, "", append([]string{"simulate"}, tc.args...)...)
			assert.Equal(t, exitUsage, status, stderr)
			assert.Contains(t, stderr, tc.msg)
		})
	}
}

// TestSimulateDisaggCompare is make demo-disagg's claim from the command
// line: on one workload kvready's run is clean and the naive one's is not,
// and the status is 0 — the naive run's violations are the demonstration.
func TestSimulateDisaggCompare(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r")
	status, out, stderr := runCLI(t, "", "simulate", "--disagg", "--compare-naive", "--requests", "200", "--json", "--report", dir)
	require.Equal(t, exitOK, status, stderr)
	var runs map[string]disaggJSON
	require.NoError(t, json.Unmarshal([]byte(out), &runs), out)
	require.Contains(t, runs, "kvready")
	require.Contains(t, runs, "naive")
	assert.True(t, runs["kvready"].Safe)
	assert.Zero(t, runs["kvready"].Violations)
	assert.Positive(t, runs["kvready"].Delivered)
	assert.Equal(t, runs["kvready"].Pages, runs["kvready"].PagesFree, "the pool whole")
	assert.False(t, runs["naive"].Safe)
	assert.Positive(t, runs["naive"].Violations)
	assert.Equal(t, runs["kvready"].Seed, runs["naive"].Seed)
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err)
	assert.Contains(t, string(page), "kvready manager: the checker found no page freed")
	assert.Contains(t, string(page), "naive manager: the checker found")
}

// TestSimulateDisaggLeakingRevocation: pages in doubt are capacity lost as
// the run asked (exit 0), and the table says so.
func TestSimulateDisaggLeakingRevocation(t *testing.T) {
	status, out, stderr := runCLI(t, "", "simulate", "--disagg", "--revocation-leaks", "--submits-late-rate", "0", "--requests", "300")
	require.Equal(t, exitOK, status, stderr)
	assert.Contains(t, out, "capacity lost, as the run asked (--revocation-leaks)")
	assert.Contains(t, out, "freed while a writer may write   0  ok")
}
