package simulate

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An interrupted run drains as SPEC §4 rule 10 says: the leases still waiting
// for an outcome are cancelled locally, the retained ones are released once
// proven, and only what is still unproven at its containment deadline is
// contained. With the defaults (a healthy backend: every attempt is proven in
// the end) an interrupted run loses no capacity at all.
func TestInterruptedHealthyRunLosesNothing(t *testing.T) {
	c := Defaults()
	c.Requests = 20000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := Run(ctx, c, func(done, _ int) {
		if done >= 300 {
			cancel() // Ctrl-C, with many requests in flight
		}
	})
	require.Error(t, err, "an interrupted run reports its unfinished requests")
	assert.Positive(t, s.UnfinishedRequests)
	assert.True(t, s.Safe())
	assert.Zero(t, s.Containments, "nothing unproven: nothing is contained (%v)", s.ContainmentReasons)
	assert.Zero(t, s.SlotsQuarantined)
	assert.Zero(t, s.Quarantined)
	assert.Equal(t, s.Leases, s.Released, "every lease lent was released")
}
