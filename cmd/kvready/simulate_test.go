package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/internal/redistest"
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
	assert.Contains(t, stderr, "simulate kvready: 200/200 requests", "plain progress lines when not on a terminal, naming the run")
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
		{[]string{"--compare-naive", "--device", "cuda"}, "drop --naive, --backend, --device cuda and --layerwise"},
		{[]string{"--compare-naive", "--naive"}, "drop --naive, --backend, --device cuda and --layerwise"},
		{[]string{"--containment", "bogus"}, `invalid value "bogus" for flag -containment: want quarantine, fatal or recover`},
		{[]string{"--containment", ""}, "want quarantine, fatal or recover"},
		{[]string{"--max-outstanding", "-1"}, "-max-outstanding: -1"},
		{[]string{"--naive", "--containment", "fatal"}, "-containment: fatal: the naive manager never contains"},
		{[]string{"--naive", "--max-outstanding", "4"}, "-max-outstanding: 4: the naive manager"},
	} {
		status, out, stderr := runCLI(t, "", append([]string{"simulate"}, tc.args...)...)
		assert.Equal(t, exitUsage, status, tc.args)
		assert.Contains(t, stderr, tc.msg, tc.args)
		assert.Empty(t, out, "a refused run prints no summary")
	}
}

// The naive half of --compare-naive has no engine: serving the engine's
// metrics beside it must not refuse the comparison.
func TestSimulateCompareNaiveWithMetrics(t *testing.T) {
	status, out, stderr := runCLI(t, "", "simulate", "--compare-naive", "--metrics-addr", "127.0.0.1:0", "--requests", "200")
	require.Equal(t, exitOK, status, stderr)
	assert.Contains(t, stderr, "serving metrics on http://127.0.0.1:")
	assert.Contains(t, out, "naive manager: the checker caught it recycling slots before their fence")
}

// killOnLine is a stderr that kills the server when a line containing at is
// written: the progress lines say how far the run is, so the kill lands
// mid-run whatever the machine's speed.
type killOnLine struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	at     string
	kill   func()
	killed bool
}

func (k *killOnLine) Write(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n, err := k.buf.Write(p)
	if !k.killed && strings.Contains(k.buf.String(), k.at) {
		k.killed = true
		k.kill()
	}
	return n, err
}

func (k *killOnLine) String() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.buf.String()
}

// The engine survives the store: the Redis server is killed (SIGKILL) a
// third of the way through. The run finishes, every request ends, the JSON
// summary is printed, and the checker is clean.
func TestSimulateRedisServerKilledMidRun(t *testing.T) {
	srv := redistest.Start(t)
	stderr := &killOnLine{at: "simulate kvready: 120/400 requests", kill: srv.Kill}
	var out bytes.Buffer
	status := run(&env{stdin: strings.NewReader(""), stdout: &out, stderr: stderr}, []string{"simulate",
		"--backend", srv.URL(), "--redis-prefix", "killed:", "--requests", "400", "--slots", "256",
		"--arrival", "200us", "--drain-grace", "500ms", "--json"})
	require.True(t, stderr.killed, "the server was killed mid-run: %s", stderr.String())
	require.Equal(t, exitOK, status, "complete and safe: %s", stderr.String())
	var m map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &m), out.String())
	for _, k := range []string{"recycled_before_fence", "misses_reported_as_failures", "corrupt_rows",
		"unfinished", "unfinished_requests"} {
		assert.EqualValues(t, 0, m[k], k)
	}
	for _, k := range []string{"late_writes", "recycled_by_late_write_only"} {
		v, present := m[k]
		assert.True(t, present, k)
		assert.Nil(t, v, "%s is not watched over a real store: null, never 0", k)
	}
	assert.Positive(t, m["failed"], "submissions fail once the server is gone")
	assert.Equal(t, m["leases"], m["released"].(float64)+m["quarantined"].(float64), "every lease ended")
	assert.Equal(t, m["leases"], m["served"].(float64)+m["partial"].(float64)+m["missed"].(float64)+m["failed"].(float64),
		"every lease reports one outcome")
	assert.EqualValues(t, "real", m["clock"])
	assert.Contains(t, m["store"], srv.Addr)
	assert.Contains(t, stderr.String(), "simulate kvready: 400/400 requests")
}

// Two processes, one store: the second run of the workload is served what the
// first published.
func TestSimulateRedisSecondRunHits(t *testing.T) {
	srv := redistest.Start(t)
	args := []string{"simulate", "--backend", srv.URL(), "--requests", "100", "--arrival", "200us", "--deadline", "2s", "--json"}
	var runs []map[string]any
	for range 2 {
		status, out, stderr := runCLI(t, "", args...)
		require.Equal(t, exitOK, status, stderr)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &m), out)
		runs = append(runs, m)
	}
	assert.Positive(t, runs[0]["missed"], "the store starts empty")
	assert.EqualValues(t, 100, runs[1]["served"], "the second run is served every fetch")
	assert.EqualValues(t, 1, runs[1]["hit_token_ratio"])
	assert.EqualValues(t, 0, runs[1]["recycled_before_fence"])
}

func TestSimulateRedisFlagRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msgs []string
	}{
		{[]string{"--miss-rate", "0.1", "--latency-median", "2ms"}, []string{"-miss-rate: describes the in-process store", "-latency-median: describes"}},
		{[]string{"--store-capacity", "10", "--naive"}, []string{"-store-capacity", "-naive: the naive manager runs over the in-process store only"}},
		{[]string{"--redis-prefix", "a{b}"}, []string{"-redis-prefix"}},
	} {
		args := append([]string{"simulate", "--backend", "redis://127.0.0.1:1/0"}, tc.args...)
		status, out, stderr := runCLI(t, "", args...)
		assert.Equal(t, exitUsage, status, tc.args)
		for _, msg := range tc.msgs {
			assert.Contains(t, stderr, msg, tc.args)
		}
		assert.Empty(t, out)
	}
	status, _, stderr := runCLI(t, "", "simulate", "--backend", "memcached://127.0.0.1:1")
	assert.Equal(t, exitUsage, status)
	assert.Contains(t, stderr, "-backend: ")
	// Every bad value in the URL's query is a usage error too, found before
	// anything connects (nothing listens on port 1).
	for _, tc := range []struct{ query, msg string }{
		{"breaker_failures=-1", "WithBreaker(-1): want 0"},
		{"breaker_failures=many", `breaker_failures="many"; want a number`},
		{"breaker_failures=3&breaker_failures=5", "breaker_failures given 2 times"},
		{"breaker_probe_max=50ms", "breaker_probe 100ms (not in the URL: the option's or the default), breaker_probe_max=50ms"},
		{"breaker_probe=soon", `breaker_probe="soon"; want a duration`},
		{"pool_size=many", "pool_size"},
		{"read_timeout=soon", "read_timeout"},
		{"bogus=1", "bogus"},
	} {
		status, out, stderr := runCLI(t, "", "simulate", "--backend", "redis://127.0.0.1:1/0?"+tc.query)
		assert.Equal(t, exitUsage, status, tc.query)
		assert.Contains(t, stderr, "-backend: ", tc.query)
		assert.Contains(t, stderr, tc.msg, tc.query)
		assert.Empty(t, out, tc.query)
	}

	srv := redistest.Start(t)
	srv.Kill()
	for _, url := range []string{srv.URL() + "?max_retries=-1", srv.URL()} {
		status, out, stderr := runCLI(t, "", "simulate", "--backend", url)
		assert.Equal(t, exitFail, status)
		assert.Contains(t, stderr, "does not answer PING")
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line, none from the Redis client: %q", stderr)
		assert.Empty(t, out, "no run, no summary")
	}
}

// --compare-naive --json prints one JSON object, as -h says: both summaries
// in it, under their managers' names; the progress lines say which run they
// belong to.
func TestSimulateCompareNaiveJSONIsOneObject(t *testing.T) {
	status, out, stderr := runCLI(t, "", "simulate", "--requests", "150", "--compare-naive", "--json")
	require.Equal(t, exitOK, status, stderr)
	dec := json.NewDecoder(strings.NewReader(out))
	var both map[string]map[string]any
	require.NoError(t, dec.Decode(&both), out)
	assert.False(t, dec.More(), "exactly one JSON value: %s", out)
	require.Contains(t, both, "kvready")
	require.Contains(t, both, "naive")
	assert.Equal(t, "kvready", both["kvready"]["manager"])
	assert.Equal(t, "naive", both["naive"]["manager"])
	assert.EqualValues(t, 0, both["kvready"]["recycled_before_fence"])
	assert.Positive(t, both["naive"]["recycled_before_fence"])
	assert.Contains(t, stderr, "simulate kvready: 150/150 requests")
	assert.Contains(t, stderr, "simulate naive: 150/150 requests")
	assert.NotContains(t, stderr, "simulate: ", "every progress line names its run")

	// A single run is one object too, with the device, the clock and the
	// slot grants the checker watched.
	status, out, stderr = runCLI(t, "", "simulate", "--requests", "60", "--json")
	require.Equal(t, exitOK, status, stderr)
	var one map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &one), out)
	assert.Equal(t, "sim", one["device"])
	assert.Equal(t, "virtual", one["clock"])
	assert.Positive(t, one["slot_grants_watched"])
	assert.EqualValues(t, 0, one["late_writes"], "watched over the in-process store: a count")
}

// simulateJSON runs simulate with --json and returns its status, the summary
// and stderr.
func simulateJSON(t *testing.T, args ...string) (int, map[string]any, string) {
	t.Helper()
	status, out, stderr := runCLI(t, "", append(append([]string{"simulate"}, args...), "--json")...)
	var m map[string]any
	if status == exitOK || status == exitCapacity {
		require.NoError(t, json.Unmarshal([]byte(out), &m), "status %d: %s\n%s", status, out, stderr)
	}
	return status, m, stderr
}

// Over a Redis store the deadline and grace default to real-time values (a
// healthy server then loses nothing: no containment, no refusal), and a flag
// given on the command line wins over them.
func TestSimulateRedisDefaults(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		args            []string
		deadline, grace float64 // µs
	}{
		{nil, 500e3, 2e6},
		{[]string{"--deadline", "1.5s"}, 1.5e6, 2e6},
		{[]string{"--drain-grace", "3s"}, 500e3, 3e6},
	} {
		args := append([]string{"--backend", srv.URL(), "--redis-prefix", "defaults:", "--requests", "300"}, tc.args...)
		status, m, stderr := simulateJSON(t, args...)
		require.Equal(t, exitOK, status, "%v: %s", tc.args, stderr)
		assert.EqualValues(t, tc.deadline, m["deadline_us"], tc.args)
		assert.EqualValues(t, tc.grace, m["drain_grace_us"], tc.args)
		for _, k := range []string{"containments", "slots_quarantined", "quarantined", "refused", "refused_for_capacity",
			"recycled_before_fence", "unfinished_requests"} {
			assert.EqualValues(t, 0, m[k], "%v: %s", tc.args, k)
		}
		assert.Equal(t, false, m["capacity_lost"], tc.args)
		assert.Positive(t, m["max_outstanding"], "the backend's AdmissionLimit bounds the submissions")
	}
	status, out, _ := runCLI(t, "", "simulate", "-h")
	require.Equal(t, exitOK, status)
	assert.Contains(t, out, "--deadline 10ms and --drain-grace 20ms", "-h says the in-process defaults")
	assert.Contains(t, out, "--deadline defaults to 500ms", "and the real-time ones")
	assert.Contains(t, out, "--drain-grace to 2s")
	assert.Contains(t, out, "  3    capacity lost", "and the exit statuses")
}

// tooShortGrace is a store slower than the drain grace allows: deliveries
// land one tick of the virtual clock after the deadline, the very round the
// grace of one tick runs out, so every one of them is contained. No fault is
// injected that never proves: nothing in the run asks for lost capacity.
var tooShortGrace = []string{"--requests", "200", "--deadline", "1ms", "--drain-grace", "50us", "--latency-median", "5ms"}

// Lost capacity is an exit status of its own (3) unless the run asked for
// it; a halt under --containment fatal is 3 too, and the summary says why.
// Every run here is on the virtual clock: deterministic for its seed.
func TestSimulateExitStatusWhenCapacityIsLost(t *testing.T) {
	status, out, stderr := runCLI(t, "", append([]string{"simulate"}, tooShortGrace...)...)
	require.Equal(t, exitCapacity, status, stderr)
	assert.Contains(t, out, "CAPACITY LOST: ")
	assert.Regexp(t, `containment deadline passed in \w+ with backend access unproven`, out, "the containments, by reason")
	assert.Contains(t, stderr, "kvready: capacity lost: ")
	assert.Contains(t, stderr, "nothing in the run asked for it (exit status 3)")
	assert.Contains(t, out, "recycled before fence                  0 slot grants  ok", "safe all the same")

	status, m, stderr := simulateJSON(t, tooShortGrace...)
	require.Equal(t, exitCapacity, status, stderr)
	assert.Equal(t, true, m["capacity_lost"])
	assert.Positive(t, m["containments"])
	assert.NotEmpty(t, m["containments_by_reason"])
	assert.Nil(t, m["halted"])

	// Asked for: a backend that never proves, a lost device.
	for _, asked := range [][]string{{"--never-proves-rate", "0.05"}, {"--device-loss-at", "5.00ms"}} {
		status, out, stderr := runCLI(t, "", append([]string{"simulate", "--requests", "300"}, asked...)...)
		require.Equal(t, exitOK, status, "%v: %s", asked, stderr)
		assert.Contains(t, out, "capacity lost, as the run asked ("+strings.Join(asked, " ")+")", asked)
		assert.NotContains(t, stderr, "capacity lost", asked)
	}

	// Under fatal the engine halts at the first containment; the run stops.
	status, out, stderr = runCLI(t, "", "simulate", "--requests", "300", "--never-proves-rate", "0.05", "--containment", "fatal")
	require.Equal(t, exitCapacity, status, stderr)
	assert.Contains(t, out, "ENGINE HALTED")
	assert.Contains(t, out, "contained under the fatal policy")
	assert.Contains(t, out, "containment policy fatal")
	assert.Contains(t, stderr, "the engine halted under --containment fatal")

	// Under recover the contained leases come back: counted, and still a loss.
	status, m, stderr = simulateJSON(t, append([]string{"--containment", "recover"}, tooShortGrace...)...)
	require.Equal(t, exitCapacity, status, stderr)
	assert.Equal(t, "recover", m["containment_policy"])
	assert.Positive(t, m["recovered"])
	assert.Positive(t, m["recovered_slots"])
	assert.EqualValues(t, m["containments"], m["recovered"], "every contained lease proven over after all")
	assert.EqualValues(t, 0, m["slots_quarantined"], "the pool is whole at the end")
}

// A store killed mid-run and never restarted: one line on stderr says it
// went down and why, requests fail fast from then on, and the JSON summary
// gives the time it was unavailable and the requests failed fast and after
// waiting; the pool is whole. The kill is set off by the server's own count
// of commands, never by a timer.
func TestSimulateStoreDownSaysSo(t *testing.T) {
	srv := redistest.Start(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer admin.Close()
	killed := make(chan error, 1)
	go func() {
		killed <- func() error {
			give := time.Now().Add(time.Minute)
			for time.Now().Before(give) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				info, err := admin.Info(ctx, "stats").Result()
				cancel()
				if err != nil {
					return err
				}
				if m := regexp.MustCompile(`total_commands_processed:(\d+)`).FindStringSubmatch(info); m != nil {
					if n, _ := strconv.Atoi(m[1]); n >= 2000 {
						srv.Kill()
						return nil
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
			return errors.New("the run sent too few commands in a minute")
		}()
	}()
	status, m, stderr := simulateJSON(t, "--backend", srv.URL(), "--requests", "3000", "--arrival", "1ms")
	require.NoError(t, <-killed)
	require.Equal(t, exitOK, status, stderr)
	lines := regexp.MustCompile(`(?m)^simulate: store redis://\S+ unavailable at \S+ \(3 calls in a row failed, the last with .+\): new requests fail fast until a PING answers$`).FindAllString(stderr, -1)
	assert.Len(t, lines, 1, "one line when the store went down: %s", stderr)
	assert.NotContains(t, stderr, " back at ", "it never came back")
	assert.EqualValues(t, 1, m["store_outages"])
	assert.Positive(t, m["store_unavailable_us"])
	assert.Positive(t, m["failed_fast"])
	assert.Contains(t, m, "failed_waiting")
	assert.Positive(t, m["failed_fast_p50_us"])
	assert.Equal(t, false, m["capacity_lost"])
}

// The store's health lines name the store with its password redacted, and
// say how long an outage lasted.
func TestStoreHealthLines(t *testing.T) {
	var b bytes.Buffer
	say := storeHealthLine(&b, "redis://user:hunter2@10.0.0.5:6379/0")
	at := time.Date(2026, 12, 1, 18, 5, 32, 838e6, time.UTC)
	say(kvredis.HealthChange{At: at, Reason: "3 calls in a row failed, the last with EOF"})
	say(kvredis.HealthChange{Reachable: true, At: at.Add(2 * time.Second), Down: 2 * time.Second})
	assert.Equal(t, "simulate: store redis://user:xxxxx@10.0.0.5:6379/0 unavailable at 18:05:32.838 (3 calls in a row failed, the last with EOF): new requests fail fast until a PING answers\n"+
		"simulate: store redis://user:xxxxx@10.0.0.5:6379/0 back at 18:05:34.838, after 2000.00ms unavailable (a PING answered)\n", b.String())
	assert.NotContains(t, b.String(), "hunter2")
}
