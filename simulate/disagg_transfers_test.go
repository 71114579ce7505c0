package simulate

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDisaggTimelineCountsTransfers: the report's transfer data is the
// driver's own record. Over a run that contains attempts (a revocation that
// cannot recall what was posted) and over the naive manager's, every sample's
// in-flight count fits the pool, its in-doubt count never falls and ends at
// the attempts contained, and the submit-to-settled sample holds exactly the
// attempts whose pages came back after their submission, each within the
// run, sorted.
func TestDisaggTimelineCountsTransfers(t *testing.T) {
	leaky := smallDisagg(1)
	leaky.Faults.RevocationLeaks, leaky.SubmitsLateRate = true, 0
	tests := []struct {
		name        string
		cfg         DisaggConfig
		mk          func(*disaggDriver) (disaggManager, error)
		wantInDoubt bool
	}{
		{"kvready over a leaking revocation: some in doubt", leaky, kvreadyDisaggManager, true},
		{"kvready, the defaults' faults", smallDisagg(2), kvreadyDisaggManager, false},
		{"naive: frees on the outcome, never in doubt", smallDisagg(1), naiveDisaggManager, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, tt.cfg.Validate())
			d, err := newDisaggDriver(tt.cfg)
			require.NoError(t, err)
			m, err := tt.mk(d)
			require.NoError(t, err)
			pre, err := newKvreadyPrefill(d)
			require.NoError(t, err)
			s, err := d.run(context.Background(), m, pre, nil)
			require.NoError(t, err)
			require.NotEmpty(t, s.Timeline)
			most := tt.cfg.Pages / tt.cfg.PagesPerRequest
			inDoubt := 0
			for i, smp := range s.Timeline {
				assert.True(t, smp.InFlight >= 0 && smp.InFlight <= most, "sample %d: %d in flight; the pool fits %d", i, smp.InFlight, most)
				assert.GreaterOrEqual(t, smp.InDoubt, inDoubt, "sample %d: in doubt never falls", i)
				inDoubt = smp.InDoubt
			}
			last := s.Timeline[len(s.Timeline)-1]
			assert.Equal(t, s.AttemptsContained, last.InDoubt, "the last sample, at the last request's end, counts every attempt contained")
			assert.Equal(t, tt.wantInDoubt, last.InDoubt > 0)

			settled := 0
			for _, r := range d.reqs {
				for _, a := range r.attempts {
					if a.settled && a.submitted >= 0 {
						settled++
					}
				}
			}
			assert.Equal(t, settled, s.Settled)
			assert.Len(t, s.SettleLatencies, min(settled, maxLatencySamples))
			assert.True(t, slices.IsSorted(s.SettleLatencies))
			if n := len(s.SettleLatencies); n > 0 {
				assert.GreaterOrEqual(t, s.SettleLatencies[0], time.Duration(0))
				assert.LessOrEqual(t, s.SettleLatencies[n-1], s.Virtual, "no attempt settled after the run")
			}
		})
	}
}

// The report of a comparison has the transfer plots beside the safety one,
// and a run where nothing settled says so instead of drawing an empty plot.
func TestDisaggReportTransferPlots(t *testing.T) {
	kv := runDisaggWith(t, smallDisagg(1), kvreadyDisaggManager)
	naive := runDisaggWith(t, smallDisagg(1), naiveDisaggManager)
	require.NotEmpty(t, kv.SettleLatencies)
	dir := filepath.Join(t.TempDir(), "report")
	require.NoError(t, WriteDisaggReport(dir, kv, naive))
	page, err := os.ReadFile(filepath.Join(dir, ReportIndex))
	require.NoError(t, err)
	for _, name := range []string{PlotDisaggSafety, PlotDisaggTransfers, PlotDisaggSettle} {
		info, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err, name)
		assert.Positive(t, info.Size(), name)
		assert.Contains(t, string(page), `src="`+name+`"`, "the page shows %s", name)
	}
	svg, err := os.ReadFile(filepath.Join(dir, PlotDisaggSettle))
	require.NoError(t, err)
	assert.Contains(t, string(svg), "kvready manager: p99", "the legend names each run's quantiles")
	assert.Contains(t, string(svg), "naive manager: p99")

	none := *kv
	none.SettleLatencies, none.Settled = nil, 0
	dir = filepath.Join(t.TempDir(), "none")
	require.NoError(t, WriteDisaggReport(dir, &none))
	page, err = os.ReadFile(filepath.Join(dir, ReportIndex))
	require.NoError(t, err)
	assert.Contains(t, string(page), "No attempt settled after its submission")
	assert.NotContains(t, string(page), PlotDisaggSettle)
	_, err = os.Stat(filepath.Join(dir, PlotDisaggSettle))
	assert.True(t, os.IsNotExist(err), "no plot file for nothing")
}
