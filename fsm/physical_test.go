package fsm_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kvready/kvready/fsm"
)

// The dispositions are written out here by hand from SPEC §4 rule 19 and the
// reference's words, not read from the table, so that a table that moved a
// state into the wrong group fails.
func TestPhysicalOfEveryState(t *testing.T) {
	tab := fsm.Lifecycle()
	exposed := fsm.Marks(1 << fsm.Exposed)
	for _, tc := range []struct {
		s    fsm.State
		m    fsm.Marks
		r    fsm.Result
		want fsm.Physical
	}{
		{fsm.Waiting, 0, fsm.NoResult, fsm.NotExposed},
		{fsm.Granted, 0, fsm.NoResult, fsm.Active}, // a publish's copies into staging
		{fsm.Staged, 0, fsm.NoResult, fsm.NotExposed},
		{fsm.Admitted, 0, fsm.NoResult, fsm.Active}, // the backend is being called
		{fsm.Requested, exposed, fsm.NoResult, fsm.Active},
		{fsm.Served, exposed, fsm.Delivered, fsm.Quiescing},
		{fsm.Partial, exposed, fsm.Partly, fsm.Quiescing},
		{fsm.Missed, exposed, fsm.Miss, fsm.Quiescing},
		{fsm.Failed, exposed, fsm.Failure, fsm.Quiescing},
		{fsm.Failed, exposed, fsm.Cancel, fsm.Quiescing},
		{fsm.AccessFenced, exposed, fsm.Delivered, fsm.Quiescing}, // the fetch's copies out
		{fsm.CopyUnproven, exposed, fsm.Delivered, fsm.InDoubt},
		{fsm.LogicallyComplete, exposed, fsm.Delivered, fsm.QuiescedSuccess},
		{fsm.LogicallyComplete, exposed, fsm.Miss, fsm.QuiescedSuccess},
		{fsm.LogicallyComplete, exposed, fsm.Timeout, fsm.QuiescedFailure},
		{fsm.LogicallyComplete, 0, fsm.Rejection, fsm.NotExposed},
		{fsm.LogicallyComplete, 0, fsm.Timeout, fsm.NotExposed}, // its deadline passed before its submission
		{fsm.Contained, exposed, fsm.Failure, fsm.InDoubt},
		{fsm.Quarantined, exposed, fsm.Delivered, fsm.InDoubt},
		{fsm.Released, exposed, fsm.Violation, fsm.QuiescedFailure},
		{fsm.Released, exposed, fsm.Partly, fsm.QuiescedSuccess},
		{fsm.Released, 0, fsm.Cancel, fsm.NotExposed}, // withdrawn before its submission
	} {
		assert.Equal(t, tc.want, tab.PhysicalOf(tc.s, tc.m, tc.r), "%v, exposed %v, %v", tc.s, tc.m.Has(fsm.Exposed), tc.r)
	}
}

// Memory is reusable only where nothing may touch it: never where the backend's
// proof is awaited, a local copy is in flight, or containment may still apply.
func TestReusableOnlyWhereNothingTouches(t *testing.T) {
	tab := fsm.Lifecycle()
	reusable := map[fsm.Physical]bool{fsm.NotExposed: true, fsm.QuiescedSuccess: true, fsm.QuiescedFailure: true}
	for p := range fsm.NumPhysical {
		assert.Equal(t, reusable[p], p.Reusable(), "%v", p)
		assert.NotEmpty(t, p.Meaning())
	}
	assert.False(t, fsm.NumPhysical.Reusable())
	for s := range fsm.NumStates {
		in := tab.PhysicalIn(s)
		assert.NotEmpty(t, in, "%v has a disposition", s)
		for _, p := range in {
			if p.Reusable() {
				assert.False(t, tab.Exposed(s) || tab.Copying(s) || tab.Containable(s), "%v reads %v", s, p)
			}
		}
	}
	names := []string{"NOT_EXPOSED", "ACTIVE", "QUIESCING", "QUIESCED_SUCCESS", "QUIESCED_FAILURE", "IN_DOUBT"}
	for p, name := range names {
		assert.Equal(t, name, fsm.Physical(p).String())
	}
}
