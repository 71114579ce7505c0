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

func kvreadyDisaggManager(d *disaggDriver) (disaggManager, error) { return newKvreadyDisagg(d) }

func sessionsManager(retireOnOutcome bool) func(*disaggDriver) (disaggManager, error) {
	return func(d *disaggDriver) (disaggManager, error) { return newSessionsDisagg(d, retireOnOutcome) }
}

// smallDisagg is a short run of the defaults' workload.
func smallDisagg(seed uint64) DisaggConfig {
	cfg := DisaggDefaults()
	cfg.Requests, cfg.Seed = 300, seed
	return cfg
}

// TestDisaggKvreadyIsSafe is the claim of kvready simulate --disagg: the
// shipped engine lending its staging slots through backend/peer's Receiver
// has no violation, over several seeds of the defaults' faults — and the
// runs met those faults (the counts say so), delivered, and gave every
// page back.
func TestDisaggKvreadyIsSafe(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		s, err := RunDisagg(context.Background(), smallDisagg(seed), nil)
		require.NoError(t, err, "seed %d", seed)
		assert.Equal(t, "kvready", s.Manager)
		assert.True(t, s.Safe(), "seed %d: %+v", seed, s)
		assert.True(t, s.Finished && s.Complete(), "seed %d: %s", seed, s.UnfinishedReason)
		assert.False(t, s.CapacityLost(), "seed %d: fencing revocations leave nothing in doubt: %s", seed, s.PoolVerdict())
		assert.Positive(t, s.Delivered, "seed %d", seed)
		assert.Equal(t, s.Config.PagesPerRequest*s.Delivered, s.Reads, "seed %d: every delivery's pages read", seed)
		assert.Equal(t, s.Reads, s.Copies, "seed %d: and the device rows they were copied into", seed)
		assert.Positive(t, s.Landings, "seed %d", seed)
		for kind, n := range map[string]int{"failed attempts": s.Attempts[outFailed], "timeouts": s.Attempts[outTimeout], "retries": s.Retries,
			"duplicated DONEs": s.Network.DuplicatedDone, "replayed DONEs": s.Network.ReplayedDone, "late submissions": s.Network.LateSubmits,
			"restarts": s.Restarts, "fails-midway writers": s.Writers[sim.FailsMidway.String()]} {
			assert.Positive(t, n, "seed %d: the run met no %s", seed, kind)
		}
	}
}

// TestDisaggKvreadyOverALeakingRevocation: where a revocation cannot recall
// what was posted, a writer that never settles keeps its pages in doubt —
// contained, never reused — and the checker still finds nothing; the run
// refuses what the lost room cannot hold, and says the loss was asked for.
func TestDisaggKvreadyOverALeakingRevocation(t *testing.T) {
	cfg := smallDisagg(1)
	cfg.Faults.RevocationLeaks, cfg.SubmitsLateRate = true, 0
	s, err := RunDisagg(context.Background(), cfg, nil)
	require.NoError(t, err)
	assert.True(t, s.Safe(), "%+v", s)
	assert.Positive(t, s.AttemptsContained)
	assert.Equal(t, s.Config.Pages, s.PagesFree+s.PagesContained, "every page free or in doubt")
	assert.True(t, s.CapacityLost())
	assert.Equal(t, "--revocation-leaks", s.LossExpected)
	assert.Contains(t, s.PoolVerdict(), "capacity lost, as the run asked")
	assert.Equal(t, cfg.Requests, s.Delivered+s.Failed+s.Cancelled+s.Refused, "every request ended")
}

// TestDisaggCheckerCatchesAnUnleasedReceiver runs the engine over a
// receiver without generation leases — each slot registered once, for the
// receiver's life, a session relying on its writers' own submission fence —
// against writers that break that fence (posting after their DONE, vLLM
// #55470): nothing local can stop them, and the checker, watching through
// the same engine path, counts their writes into pages lent again. The same
// run with leases is clean.
func TestDisaggCheckerCatchesAnUnleasedReceiver(t *testing.T) {
	cfg := smallDisagg(1)
	cfg.SubmitsLateRate = 0.3
	unleased := runDisaggWith(t, cfg, func(d *disaggDriver) (disaggManager, error) { return newKvreadyDisaggLeased(d, false) })
	assert.Positive(t, unleased.FreedWhileWritable, "%+v", unleased)
	assert.Positive(t, unleased.WritesIntoFree+unleased.LateWrites, "%+v", unleased)
	leased := runDisaggWith(t, cfg, kvreadyDisaggManager)
	assert.True(t, leased.Safe(), "%+v", leased)
}

// TestDisaggCheckerCatchesEarlyFrees plugs managers that keep the rule —
// kvready, and a test manager over the session core with the owner policy
// of transfer/sim's property (revoke once the outcome is latched, return
// the pages once every writer is proven settled) — and the same test
// manager with that one rule broken (pages returned on the outcome), and
// the naive foil, into the same workloads: the checker finds nothing in
// the first two and counts violations in the other two.
func TestDisaggCheckerCatchesEarlyFrees(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		for _, keeps := range []*DisaggSummary{
			runDisaggWith(t, smallDisagg(seed), kvreadyDisaggManager),
			runDisaggWith(t, smallDisagg(seed), sessionsManager(false)),
		} {
			assert.True(t, keeps.Safe(), "seed %d: %s keeps the rule: %+v", seed, keeps.Manager, keeps)
			assert.Positive(t, keeps.Reads, "seed %d: pages were read", seed)
			assert.Positive(t, keeps.Landings, "seed %d: writes were watched", seed)
			assert.False(t, keeps.CapacityLost(), "seed %d: fencing revocations leave nothing in doubt", seed)
		}

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
			keeps := runDisaggWith(t, cfg, kvreadyDisaggManager)
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

// TestDisaggDeterministic: one seed, one run — twice the same summary, for
// the engine (its goroutines caught up every round) as for the naive foil.
func TestDisaggDeterministic(t *testing.T) {
	for _, mk := range []func(*disaggDriver) (disaggManager, error){naiveDisaggManager, kvreadyDisaggManager} {
		a := runDisaggWith(t, smallDisagg(5), mk)
		b := runDisaggWith(t, smallDisagg(5), mk)
		a.Wall, b.Wall = 0, 0
		assert.Equal(t, a, b, a.Manager)
		c := runDisaggWith(t, smallDisagg(6), mk)
		assert.NotEqual(t, a.Network, c.Network, "%s: another seed, another run", a.Manager)
	}
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
	kv := runDisaggWith(t, smallDisagg(1), kvreadyDisaggManager)
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
	assert.Contains(t, string(page), "kvready manager: the checker found no page freed")
	assert.Contains(t, string(page), "naive manager: the checker found")
	info, err := os.Stat(filepath.Join(dir, PlotDisaggSafety))
	require.NoError(t, err)
	assert.Positive(t, info.Size())
	assert.Error(t, WriteDisaggReport(dir, kv, runDisaggWith(t, smallDisagg(2), naiveDisaggManager)), "two workloads are not one comparison")
}

// TestDisaggInterrupted: a cancelled context stops the run where it is,
// with the summary so far, which says so.
func TestDisaggInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := smallDisagg(1)
	s, err := RunDisagg(ctx, cfg, func(done, total int) {
		if done >= total/2 {
			cancel()
		}
	})
	require.ErrorIs(t, err, context.Canceled)
	require.NotNil(t, s)
	assert.True(t, s.Interrupted)
	assert.Positive(t, s.Unfinished)
	assert.Less(t, s.Unfinished, cfg.Requests)
	var b strings.Builder
	require.NoError(t, s.WriteTable(&b))
	assert.Contains(t, b.String(), "interrupted: the run was stopped before it finished")
}

// hoarder lends pages and never gives them back, nor says anything.
type hoarder struct {
	d    *disaggDriver
	used []bool
}

func (h *hoarder) name() string { return "hoarder" }
func (h *hoarder) close()       {}
func (h *hoarder) cancel(*dattempt) {
}
func (h *hoarder) round() error { h.d.decode.Progress(); return nil }
func (h *hoarder) submit(a *dattempt) (bool, error) {
	first := firstFit(h.used, a.r.pages)
	if first < 0 {
		return false, nil
	}
	pages := make([]int, a.r.pages)
	for j := range pages {
		pages[j], h.used[first+j] = first+j, true
	}
	h.d.lend(a, pages)
	return true, nil
}

// TestDisaggStallsAreBounded: a manager that holds pages for ever does not
// hold the run for ever — it stops, bounded, saying what is stuck.
func TestDisaggStallsAreBounded(t *testing.T) {
	cfg := smallDisagg(1)
	d, err := newDisaggDriver(cfg)
	require.NoError(t, err)
	s, err := d.run(context.Background(), &hoarder{d: d, used: make([]bool, cfg.Pages)}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the run stalled")
	assert.Contains(t, err.Error(), "attempts still holding pages")
	assert.Positive(t, s.Unfinished)
	assert.Positive(t, s.PagesLent)
	assert.False(t, s.Finished)
}
