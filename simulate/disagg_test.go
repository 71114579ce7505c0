package simulate

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/transfer/sim"
)

// runDisaggWith runs cfg with the manager mk makes.
func runDisaggWith(t *testing.T, cfg DisaggConfig, mk func(*disaggDriver) (disaggManager, error)) *DisaggSummary {
	t.Helper()
	require.NoError(t, cfg.Validate())
	d, err := newDisaggDriver(cfg)
	require.NoError(t, err)
	m, err := mk(d)
	require.NoError(t, err)
	s, err := d.run(context.Background(), m, nil)
	require.NoError(t, err)
	return s
}

func naiveDisaggManager(d *disaggDriver) (disaggManager, error) { return newNaiveDisagg(d), nil }

func sessionsManager(retireOnOutcome bool) func(*disaggDriver) (disaggManager, error) {
	return func(d *disaggDriver) (disaggManager, error) { return newSessionsDisagg(d, retireOnOutcome) }
}

// smallDisagg is a short run of the defaults' workload.
func smallDisagg(seed uint64) DisaggConfig {
	cfg := DisaggDefaults()
	cfg.Requests, cfg.Seed = 300, seed
	return cfg
}

// TestDisaggCheckerCatchesEarlyFrees plugs a manager that keeps the rule —
// the session core's owner policy: revoke once the outcome is latched,
// return the pages once every writer is proven settled — and the same
// manager with that one rule broken (pages returned on the outcome), and the
// naive foil, into the same workloads: the checker finds nothing in the
// first and counts violations in the other two.
func TestDisaggCheckerCatchesEarlyFrees(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		keeps := runDisaggWith(t, smallDisagg(seed), sessionsManager(false))
		assert.True(t, keeps.Safe(), "seed %d: a manager that keeps the rule: %+v", seed, keeps)
		assert.Positive(t, keeps.Reads, "seed %d: pages were read", seed)
		assert.Positive(t, keeps.Landings, "seed %d: writes were watched", seed)
		assert.False(t, keeps.CapacityLost(), "seed %d: fencing revocations leave nothing in doubt", seed)

		breaks := runDisaggWith(t, smallDisagg(seed), sessionsManager(true))
		assert.Positive(t, breaks.FreedWhileWritable, "seed %d: pages returned on the outcome", seed)
		assert.Positive(t, breaks.WritesIntoFree+breaks.LateWrites, "seed %d: and writes landed in them", seed)

		naive := runDisaggWith(t, smallDisagg(seed), naiveDisaggManager)
		assert.Positive(t, naive.FreedWhileWritable, "seed %d", seed)
		assert.Positive(t, naive.WritesIntoFree+naive.LateWrites, "seed %d", seed)
		assert.Positive(t, naive.CorruptReads, "seed %d: the naive manager read pages a sibling still wrote", seed)
		assert.Zero(t, naive.DoubleLends, "seed %d: the naive manager's allocator is sound; its frees are early", seed)
	}
}

// TestDisaggNaiveFaultByFault runs the naive manager against one fault at a
// time (the rest of the network well behaved, every writer honest unless
// the row says otherwise): each incident's fault alone makes it free pages a
// writer may still write, and the manager that keeps the rule stays clean
// against the same fault.
func TestDisaggNaiveFaultByFault(t *testing.T) {
	quiet := func() DisaggConfig {
		cfg := DisaggDefaults()
		cfg.Requests = 200
		cfg.NeverReportsRate, cfg.FailsMidwayRate, cfg.SubmitsLateRate, cfg.CancelRate = 0, 0, 0, 0
		cfg.Faults, cfg.Restarts = sim.Faults{}, 0
		return cfg
	}
	for _, tc := range []struct {
		name string
		set  func(*DisaggConfig)
	}{
		{"a writer fails and writes on (vLLM PR #56104)", func(c *DisaggConfig) { c.FailsMidwayRate = 0.2 }},
		{"a duplicated DONE", func(c *DisaggConfig) { c.Faults.DuplicateDone = 0.3 }},
		{"a writer submits after its DONE (vLLM #55470)", func(c *DisaggConfig) { c.SubmitsLateRate = 0.3 }},
		{"a restarted peer's puts still land", func(c *DisaggConfig) { c.Restarts, c.Faults.PutsOutliveSender = 20, true }},
		{"an abort while writers write (SGLang PR #36707)", func(c *DisaggConfig) { c.CancelRate = 0.5 }},
		{"a deadline shorter than the transfer (Mooncake PR #3508)", func(c *DisaggConfig) {
			// Arrivals spaced out: every attempt times out and is retried,
			// and the network keeps up with twice the writers.
			c.Deadline, c.Arrival = 20*time.Microsecond, 100*time.Microsecond
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := quiet()
			tc.set(&cfg)
			naive := runDisaggWith(t, cfg, naiveDisaggManager)
			assert.Positive(t, naive.FreedWhileWritable, "%+v", naive)
			keeps := runDisaggWith(t, cfg, sessionsManager(false))
			assert.True(t, keeps.Safe(), "%+v", keeps)
		})
	}
}

// TestDisaggWellBehavedNetwork: with no fault at all the naive manager is
// safe too — the violations it shows elsewhere are the faults', which is
// what the demonstration claims.
func TestDisaggWellBehavedNetwork(t *testing.T) {
	cfg := DisaggDefaults()
	cfg.Requests = 300
	cfg.NeverReportsRate, cfg.FailsMidwayRate, cfg.SubmitsLateRate, cfg.CancelRate = 0, 0, 0, 0
	cfg.Faults, cfg.Restarts = sim.Faults{}, 0
	naive := runDisaggWith(t, cfg, naiveDisaggManager)
	assert.True(t, naive.Safe(), "%+v", naive)
	assert.Equal(t, cfg.Requests, naive.Delivered)
	assert.Equal(t, cfg.Requests*cfg.PagesPerRequest, naive.Reads)
}

// TestDisaggDeterministic: one seed, one run — twice the same summary.
func TestDisaggDeterministic(t *testing.T) {
	a := runDisaggWith(t, smallDisagg(5), naiveDisaggManager)
	b := runDisaggWith(t, smallDisagg(5), naiveDisaggManager)
	a.Wall, b.Wall = 0, 0
	assert.Equal(t, a, b)
	c := runDisaggWith(t, smallDisagg(6), naiveDisaggManager)
	assert.NotEqual(t, a.Network, c.Network, "another seed, another run")
}

func TestDisaggConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*DisaggConfig)
		msg  string
	}{
		{"no requests", func(c *DisaggConfig) { c.Requests = 0 }, "requests: 0; want 1.."},
		{"a pool smaller than a request", func(c *DisaggConfig) { c.Pages, c.PagesPerRequest = 4, 8 }, "slots: 4 pages cannot hold one request's 8"},
		{"a deadline under one step", func(c *DisaggConfig) { c.Deadline = time.Nanosecond }, "deadline: 1ns; want at least 1µs"},
		{"a chance above 1", func(c *DisaggConfig) { c.Faults.LoseDone = 1.5 }, "lose-done: 1.5; want a probability"},
		{"writer rates above 1", func(c *DisaggConfig) { c.NeverReportsRate, c.FailsMidwayRate = 0.6, 0.6 }, "writer-rates: never-reports-rate 0.6 + fails-midway-rate 0.6"},
		{"late submitters over a leaking revocation", func(c *DisaggConfig) { c.Faults.RevocationLeaks = true }, "submits-late-rate: 0.03 with --revocation-leaks"},
		{"no attempt", func(c *DisaggConfig) { c.MaxAttempts = 0 }, "max-attempts: 0"},
		{"negative restarts", func(c *DisaggConfig) { c.Restarts = -1 }, "peer-restarts: -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DisaggDefaults()
			tc.set(&cfg)
			err := cfg.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.msg)
			var fe *FieldError
			assert.True(t, errors.As(err, &fe))
			_, err = RunDisagg(context.Background(), cfg, nil)
			assert.Error(t, err, "a run refuses what Validate refuses")
		})
	}
	require.NoError(t, DisaggDefaults().Validate())
}

func TestDisaggSummaryTableJSONAndReport(t *testing.T) {
	kv := runDisaggWith(t, smallDisagg(1), sessionsManager(false))
	naive := runDisaggWith(t, smallDisagg(1), naiveDisaggManager)
	var b strings.Builder
	require.NoError(t, naive.WriteTable(&b))
	for _, want := range []string{"manager: naive", "requests", "attempts by outcome", "writers by behaviour", "network",
		"pool", "independent page checker", "freed while a writer may write", "VIOLATION"} {
		assert.Contains(t, b.String(), want)
	}
	out, err := json.Marshal(naive)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(out, &m))
	for _, k := range []string{"manager", "seed", "requests", "delivered", "failed", "cancelled", "attempts", "writers", "network",
		"pages_free", "freed_while_writable", "writes_into_free_pages", "late_writes_into_relent_pages", "corrupt_reads", "violations", "safe"} {
		assert.Contains(t, m, k)
	}
	assert.EqualValues(t, naive.ViolationCount(), m["violations"])
	assert.Equal(t, false, m["safe"])

	dir := filepath.Join(t.TempDir(), "report")
	require.NoError(t, WriteDisaggReport(dir, kv, naive))
	page, err := os.ReadFile(filepath.Join(dir, ReportIndex))
	require.NoError(t, err)
	assert.Contains(t, string(page), "sessions manager: the checker found no page freed")
	assert.Contains(t, string(page), "naive manager: the checker found")
	info, err := os.Stat(filepath.Join(dir, PlotDisaggSafety))
	require.NoError(t, err)
	assert.Positive(t, info.Size())
	assert.Error(t, WriteDisaggReport(dir, kv, runDisaggWith(t, smallDisagg(2), naiveDisaggManager)), "two workloads are not one comparison")
}
