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
	PrefillManager     string `json:"prefill_manager"`
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
	Writers            map[string]int
	Publishes          int `json:"publishes"`
	SourceSlots        int `json:"source_slots"`
	SourceSlotsFree    int `json:"source_slots_free"`
	SourceLends        int `json:"source_lends"`
	SourcesFreed       int `json:"sources_freed_while_read"`
	FreedSourceReads   int `json:"freed_source_reads"`
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
		{[]string{"--transport", "ucx"}, "--transport: describes a disaggregated run"},
		{[]string{"--disagg", "--transport", "tcp"}, `--transport: "tcp"; want sim or ucx`},
		{[]string{"--disagg", "--peer-pauses", "1"}, "--peer-pauses: 1; pausing the prefill process needs one: want --transport ucx"},
		{[]string{"--disagg", "--ucx-tls", "sm"}, `--ucx-tls: "sm"; want --transport ucx`},
		{[]string{"--disagg", "--transport", "ucx", "--ucx-tls", "rc"}, `--ucx-tls: "rc"; want tcp or sm`},
		{[]string{"--disagg", "--transport", "ucx", "--lose-done", "0.1"}, "--lose-done: 0.1 with --transport ucx"},
		{[]string{"--disagg", "--transport", "ucx", "--puts-outlive-sender"}, "--puts-outlive-sender: set with --transport ucx"},
		{[]string{"--disagg", "--transport", "ucx", "--pause-for", "0s"}, "--pause-for: 0s; want 1µs"},
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
	for name, r := range runs {
		assert.Equal(t, name, r.PrefillManager, "both sides are %s's", name)
		assert.Positive(t, r.Publishes, "%s: the prefill side published through its Senders", name)
		assert.Positive(t, r.SourceLends, "%s: the checker watched the source slots", name)
		assert.Positive(t, r.Writers["sender"], "%s: honest writers are Senders", name)
		assert.Zero(t, r.Writers["honest"], "%s: every honest writer is a Sender", name)
		assert.LessOrEqual(t, r.Writers["sender"], r.Publishes, "%s: a Sender offered its addresses had its share published", name)
	}
	assert.Zero(t, runs["kvready"].SourcesFreed+runs["kvready"].FreedSourceReads)
	assert.Equal(t, runs["kvready"].SourceSlots, runs["kvready"].SourceSlotsFree, "the source slots whole")
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
	assert.Regexp(t, `freed while a writer may write\s+0  ok`, out)
	assert.Regexp(t, `source slots\s+whole: all 512 free at the end`, out)
}

// TestSimulateDisaggSenderRate: --sender-rate 0 makes every honest writer a
// scripted one again — no share is published, no source slot watched — and
// a rate that is no probability is a usage error.
func TestSimulateDisaggSenderRate(t *testing.T) {
	status, out, stderr := runCLI(t, "", "simulate", "--disagg", "--sender-rate", "0", "--requests", "100", "--json")
	require.Equal(t, exitOK, status, stderr)
	var s disaggJSON
	require.NoError(t, json.Unmarshal([]byte(out), &s), out)
	assert.True(t, s.Safe)
	assert.Zero(t, s.Publishes)
	assert.Zero(t, s.SourceLends)
	assert.Zero(t, s.Writers["sender"])
	assert.Positive(t, s.Writers["honest"])

	status, _, stderr = runCLI(t, "", "simulate", "--disagg", "--sender-rate", "1.5")
	assert.Equal(t, exitUsage, status)
	assert.Contains(t, stderr, "--sender-rate: 1.5; want a probability")
}

// ucxJSON is what the tests read of a --disagg --transport ucx summary.
type ucxJSON struct {
	disaggJSON
	Transport  string `json:"transport"`
	Delivered  int    `json:"delivered"`
	Failed     int    `json:"failed"`
	Cancelled  int    `json:"cancelled"`
	Unfinished int    `json:"unfinished"`
	LateWrites int    `json:"late_writes_into_relent_pages"`
	IntoFree   int    `json:"writes_into_free_pages"`
	UCX        struct {
		TLS            string `json:"tls"`
		Lives          int    `json:"lives"`
		Kills          int    `json:"kills"`
		Pauses         int    `json:"pauses"`
		EndpointErrors int    `json:"endpoint_errors"`
		Replays        int    `json:"replays"`
		ReplayLanded   int    `json:"replay_puts_landed"`
		ReplayRefused  int    `json:"replay_puts_refused"`
	} `json:"ucx"`
}

// TestSimulateDisaggOverUCX is make demo-disagg-ucx's claim from the
// command line: the decode manager here, the prefill process a second
// process (this test binary again: TestMain makes it one), the prefill
// killed mid-transfer and restarted, and paused; kvready's run is clean with
// every request ended and the pools whole, the naive one's is not, and the
// status is 0. The run bounds its own waits (each wait on the prefill
// process, and a stall of the run) and ends its prefill process on every
// path.
func TestSimulateDisaggOverUCX(t *testing.T) {
	status, out, stderr := runCLI(t, "", "simulate", "--disagg", "--transport", "ucx", "--compare-naive", "--requests", "60", "--json")
	require.Equal(t, exitOK, status, stderr)
	var runs map[string]ucxJSON
	require.NoError(t, json.Unmarshal([]byte(out), &runs), out)
	k, n := runs["kvready"], runs["naive"]
	for name, r := range map[string]ucxJSON{"kvready": k, "naive": n} {
		assert.Equal(t, "ucx", r.Transport, name)
		assert.Equal(t, "tcp", r.UCX.TLS, "%s: tcp unless --ucx-tls", name)
		assert.Equal(t, []int{2, 1, 1}, []int{r.UCX.Lives, r.UCX.Kills, r.UCX.Pauses}, "%s: the defaults kill (and restart) and pause the prefill once", name)
		assert.Positive(t, r.UCX.EndpointErrors, "%s: over tcp the kill is reported", name)
		assert.Equal(t, 60, r.Requests, "%s: --requests", name)
	}
	assert.True(t, k.Safe, "kvready: %d violations", k.Violations)
	assert.Zero(t, k.Unfinished)
	assert.Equal(t, 60, k.Delivered+k.Failed+k.Cancelled, "every request ends")
	assert.Equal(t, k.Pages, k.PagesFree, "the decode pool whole")
	assert.Equal(t, k.SourceSlots, k.SourceSlotsFree, "the prefill process's slots whole")
	assert.Zero(t, k.UCX.ReplayLanded, "no byte from the dead life lands")
	assert.Equal(t, k.UCX.Replays*4, k.UCX.ReplayRefused, "every replayed put refused as revoked")
	assert.False(t, n.Safe)
	assert.Equal(t, n.UCX.Replays*4, n.UCX.ReplayLanded, "the naive manager never revokes")
	assert.Positive(t, n.LateWrites+n.IntoFree, "the landed bytes are seen where they must not land")
}

// TestSimulateDisaggOverUCXTable: over shared memory, the table says how the
// pages travelled and what was done to the prefill process.
func TestSimulateDisaggOverUCXTable(t *testing.T) {
	status, out, stderr := runCLI(t, "", "simulate", "--disagg", "--transport", "ucx", "--ucx-tls", "sm", "--requests", "40", "--peer-pauses", "0")
	require.Equal(t, exitOK, status, stderr)
	for _, want := range []string{"network: UCX over sm between two processes, Checked mode, the prefill process killed mid-transfer (SIGKILL) and restarted 1 time",
		"two processes over UCX", "over sm, Checked mode; the prefill process: 2 lives, 1 killed mid-transfer, 0 paused",
		"endpoint errors heard        0", "independent page checker"} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "VIOLATION")
}
