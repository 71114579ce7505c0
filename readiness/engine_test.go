package readiness_test

import (
	"testing"

	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFetchReadinessAndRelease(t *testing.T) {
	for _, tc := range []struct {
		desc    string
		stored  []int
		outcome readiness.OutcomeKind
		until   int
	}{
		{"all served", []int{0, 1, 2}, readiness.Served, 96},
		{"prefix served", []int{0, 1}, readiness.Partial, 64},
		{"hole", []int{0, 2}, readiness.Partial, 32},
		{"miss", nil, readiness.Missed, 0},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			r := newRig(t, 2, 8, nil)
			r.store(0, tc.stored...)
			r.store(1, tc.stored...)
			req := r.fetchRequest(2, 0, 1, 2)
			h, err := r.eng.Lend(req)
			require.NoError(t, err)
			r.until(h, fsm.AccessFenced)

			info, err := r.eng.Lease(h)
			require.NoError(t, err)
			assert.Equal(t, tc.outcome, info.Outcome)
			iv, err := r.eng.Readiness(h)
			require.NoError(t, err)
			assert.Equal(t, staging.Interval{RestartFloor: 0, UsableUntil: tc.until}, iv)
			for _, row := range req.Rows {
				stored := false
				for _, b := range tc.stored {
					stored = stored || b == row.Block
				}
				if stored {
					assert.Equal(t, content(row.Name), r.deviceBytes(row.Device), "served row copied to the device")
				} else {
					assert.Equal(t, make([]byte, slotBytes), r.deviceBytes(row.Device), "unserved row's device memory untouched")
				}
			}
			st := r.eng.Stats()
			assert.Equal(t, 6, st.SlotsHeld, "slots stay held until release")
			assert.Zero(t, st.Outcomes.Failed, "a miss is never a failure")

			require.NoError(t, r.eng.Release(h))
			st = r.eng.Stats()
			assert.Equal(t, 16, st.SlotsFree)
			assert.Equal(t, uint64(1), st.Released)
			_, err = r.eng.Lease(h)
			assert.ErrorIs(t, err, readiness.ErrStaleHandle)
			assert.ErrorIs(t, r.eng.Release(h), readiness.ErrStaleHandle, "releasing twice is refused")
		})
	}
}

// Inline mode gives the same answers with no engine goroutines (backend/mem
// still delivers on its own).
func TestInlineMode(t *testing.T) {
	r := newRig(t, 1, 4, nil, func(c *readiness.Config) { c.Inline = true })
	r.store(0, 0, 1)
	h, err := r.eng.Lend(r.fetchRequest(1, 0, 1, 2))
	require.NoError(t, err)
	r.until(h, fsm.AccessFenced)
	iv, err := r.eng.Readiness(h)
	require.NoError(t, err)
	assert.Equal(t, 64, iv.UsableUntil)
	runs, err := r.eng.Runs(h, nil)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	assert.Equal(t, 3, runs[0].Count)
	require.NoError(t, r.eng.Release(h))
}
