package simulate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/transfer/sim"
)

// congested is a run whose arrivals keep the network busy — puts stay in
// flight for a while, so the prefill side's incidents have a window — with
// every fault off and every writer honest: the rows below turn on one at a
// time.
func congested(seed uint64) DisaggConfig {
	cfg := DisaggDefaults()
	cfg.Requests, cfg.Seed, cfg.Arrival = 200, seed, 10*time.Microsecond
	cfg.NeverReportsRate, cfg.FailsMidwayRate, cfg.SubmitsLateRate, cfg.CancelRate = 0, 0, 0, 0
	cfg.Faults, cfg.Restarts = sim.Faults{}, 0
	return cfg
}

// assertPrefillClean: the checker found nothing, on either side, and every
// source slot lent was returned.
func assertPrefillClean(t *testing.T, s *DisaggSummary, what string) {
	t.Helper()
	assert.True(t, s.Safe(), "%s: %d violations (%d sources freed while read, %d freed sources read)", what, s.ViolationCount(), s.SourcesFreedWhileRead, s.FreedSourceReads)
	assert.True(t, s.Finished && s.Complete(), "%s: %s", what, s.UnfinishedReason)
	assert.Positive(t, s.Publishes, "%s: the Senders published", what)
	assert.Positive(t, s.SourceLends, "%s: the checker watched the source slots", what)
	assert.Equal(t, s.SourceLends, s.SourceFrees, "%s: every source slot lent came back", what)
	assert.Equal(t, s.SourceSlots, s.SourceSlotsFree, "%s: %s", what, s.SourceVerdict())
}

// assertWhole: assertPrefillClean, and the decode pool whole too.
func assertWhole(t *testing.T, s *DisaggSummary, what string) {
	t.Helper()
	assertPrefillClean(t, s, what)
	assert.False(t, s.CapacityLost(), "%s: %s", what, s.PoolVerdict())
}

// TestDisaggPrefillKvreadyIsSafe is the prefill side's claim: an engine per
// prefill host lending its staging slots to backend/peer's Sender, beside
// the decode side's engine, has no violation — over seeds of the defaults
// and of a congested network where prefill processes restart while their
// posted puts still land and deadlines fall while puts fly — and the runs
// met those cases: publications cancelled by a restart or failed by a
// deadline. It holds beside a decode side that does not fence too.
func TestDisaggPrefillKvreadyIsSafe(t *testing.T) {
	cancelled, failed := 0, 0
	for _, seed := range []uint64{1, 2, 3} {
		assertWhole(t, runDisaggWith(t, smallDisagg(seed), kvreadyDisaggManager), "defaults")
		for name, set := range map[string]func(*DisaggConfig){
			"restarts whose puts outlive them":    func(c *DisaggConfig) { c.Restarts, c.Faults.PutsOutliveSender = 12, true },
			"deadlines shorter than the transfer": func(c *DisaggConfig) { c.Deadline = 100 * time.Microsecond },
			"the defaults' faults": func(c *DisaggConfig) {
				d := DisaggDefaults()
				c.Faults, c.Restarts, c.CancelRate = d.Faults, d.Restarts, d.CancelRate
			},
		} {
			cfg := congested(seed)
			set(&cfg)
			s := runDisaggWith(t, cfg, kvreadyDisaggManager)
			assertWhole(t, s, name)
			cancelled += s.Publications["cancelled"]
			failed += s.Publications["failed"]
		}
		// Beside a decode side whose revocations fence, a prefill side that
		// returned its slots early would often go unseen: the decode side
		// drops the dead life's puts first. Beside one that does not fence
		// (no generation leases), nothing covers for it.
		cfg := congested(seed)
		cfg.Restarts, cfg.Faults.PutsOutliveSender = 12, true
		assertPrefillClean(t, runDisaggWith(t, cfg, func(d *disaggDriver) (disaggManager, error) { return newKvreadyDisaggLeased(d, false) }),
			"beside a decode side that does not fence")
	}
	assert.Positive(t, cancelled, "no publication was cancelled")
	assert.Positive(t, failed, "no publication failed")
}

// TestDisaggNaivePrefillCaught runs the naive prefill manager — it returns
// a publication's source slots on its outcome, and at once when its
// process restarts — beside the kvready decode manager, one fault at a
// time on a congested network: where the fault ends a publication with
// puts in flight, the checker catches it returning slots a put may still
// read; where it does not, it is clean, as the kvready prefill manager is
// everywhere.
func TestDisaggNaivePrefillCaught(t *testing.T) {
	for _, tc := range []struct {
		name   string
		set    func(*DisaggConfig)
		caught bool
	}{
		{"nothing goes wrong", func(*DisaggConfig) {}, false},
		{"a restart whose posted puts still land", func(c *DisaggConfig) { c.Restarts, c.Faults.PutsOutliveSender = 12, true }, true},
		{"a restart whose posted puts are dropped", func(c *DisaggConfig) { c.Restarts = 12 }, false},
		{"a deadline shorter than the transfer", func(c *DisaggConfig) { c.Deadline = 100 * time.Microsecond }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, seed := range []uint64{1, 2} {
				cfg := congested(seed)
				tc.set(&cfg)
				naive := runDisaggBoth(t, cfg, kvreadyDisaggManager, naivePrefillSide)
				assert.Equal(t, "naive", naive.PrefillManager)
				assert.Zero(t, naive.SourceDoubleLends, "seed %d: its allocator is sound; its frees are early", seed)
				assert.Equal(t, tc.caught, naive.SourcesFreedWhileRead > 0, "seed %d: %d source slots freed while a put may read them", seed, naive.SourcesFreedWhileRead)
				assertWhole(t, runDisaggWith(t, cfg, kvreadyDisaggManager), "kvready beside it")
			}
		})
	}
}

// TestDisaggNaivePrefillDamage: where the decode side does not fence the
// dead life's puts (a receiver without generation leases, relying on its
// writers' own fence), the naive prefill's early frees land — puts carry a
// returned slot's sentinel, or the next share's bytes, into the decode
// pages — while the same run with the kvready prefill is clean (its decode
// pages of dead writers are contained: no fence recalls what they posted).
func TestDisaggNaivePrefillDamage(t *testing.T) {
	unleased := func(d *disaggDriver) (disaggManager, error) { return newKvreadyDisaggLeased(d, false) }
	for _, seed := range []uint64{1, 2, 3} {
		cfg := congested(seed)
		cfg.Restarts, cfg.Faults.PutsOutliveSender = 12, true
		naive := runDisaggBoth(t, cfg, unleased, naivePrefillSide)
		assert.Positive(t, naive.SourcesFreedWhileRead, "seed %d", seed)
		assert.Positive(t, naive.FreedSourceReads, "seed %d: a freed slot's sentinel landed in a decode page", seed)
		assertPrefillClean(t, runDisaggBoth(t, cfg, unleased, kvreadyPrefillSide), "kvready prefill")
	}
}

// TestDisaggPrefillWithoutSenders: with SenderRate 0 every honest writer is
// scripted again: the prefill side publishes nothing and the checker
// watches no source slot, and the run is as safe as before.
func TestDisaggPrefillWithoutSenders(t *testing.T) {
	cfg := smallDisagg(1)
	cfg.SenderRate = 0
	s := runDisaggWith(t, cfg, kvreadyDisaggManager)
	assert.True(t, s.Safe())
	assert.Zero(t, s.Publishes)
	assert.Zero(t, s.SourceLends)
	assert.Zero(t, s.Writers[writerSender])
	assert.Positive(t, s.Writers[sim.Honest.String()])
	require.Equal(t, s.SourceSlots, s.SourceSlotsFree)
}
