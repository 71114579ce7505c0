package readiness

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/fsm"
)

// Releasing a quarantined lease is the owner giving up its claim: it is
// accepted, its slots stay out, and waiting for the release (or for the lease
// to settle) returns the quarantined lease instead of a stale handle. A second
// release is refused and changes nothing.
func TestReleasingAQuarantinedLeaseGivesUpTheClaim(t *testing.T) {
	r := newRig(t, 4)
	r.be.setAnswer(false, nil)
	h, _, _ := r.fetch(1, 2)
	r.clk.Advance(11 * time.Second) // past the containment deadline (15 + 5... from t=10: 20)
	r.sync()
	require.Equal(t, fsm.Quarantined, r.state(h))

	require.NoError(t, r.eng.Release(h), "the owner may give up a quarantined lease")
	for _, until := range []Until{UntilReleased, UntilSettled} {
		info, err := r.eng.Wait(contextWithTimeout(t), h, until)
		require.NoError(t, err, "Wait(%d) after releasing a quarantined lease", until)
		assert.Equal(t, fsm.Quarantined, info.State)
		assert.True(t, info.ReleaseRequested)
		assert.True(t, info.Contained)
	}
	_, err := r.eng.Readiness(h)
	require.ErrorIs(t, err, ErrNotReady)
	assert.ErrorContains(t, err, "quarantined")

	before := r.eng.Stats()
	err = r.eng.Release(h)
	require.ErrorIs(t, err, ErrStaleHandle, "a second release is refused")
	assert.ErrorContains(t, err, "quarantined")
	after := r.eng.Stats()
	assert.Equal(t, before.SlotsQuarantined, after.SlotsQuarantined)
	assert.Equal(t, 2, after.SlotsQuarantined, "the slots stay out for ever")
	assert.Equal(t, 1, after.Leases[fsm.Quarantined])
}
