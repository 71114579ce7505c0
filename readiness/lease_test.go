package readiness

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/fsm"
)

// A State's groups are the table's, for every state and one past them.
func TestStateGroupsAreTheTables(t *testing.T) {
	tab := fsm.Lifecycle()
	for s := range fsm.NumStates + 1 {
		st := State(s)
		assert.Equal(t, s.String(), st.String())
		assert.Equal(t, tab.Holding(s), st.Held(), "%v held", s)
		assert.Equal(t, tab.Exposed(s), st.Exposed(), "%v exposed", s)
		assert.Equal(t, tab.Answerable(s), st.Answerable(), "%v answerable", s)
		assert.Equal(t, tab.Pending(s), st.Pending(), "%v pending", s)
		assert.Equal(t, s.Terminal(), st.Terminal(), "%v terminal", s)
	}
	assert.True(t, State(StateQuarantined).Terminal() && State(StateReleased).Terminal())
	assert.True(t, State(StateLogicallyComplete).Answerable())
	assert.False(t, State(StateQuarantined).Answerable(), "a quarantined lease's rows are not usable")
	assert.Equal(t, NumStates, int(fsm.NumStates))
	assert.Equal(t, NumOutcomes, int(fsm.NumResults))
	for r := range fsm.NumResults {
		assert.Equal(t, r.String(), OutcomeKind(r).String())
		assert.Equal(t, r.Failure(), OutcomeKind(r).Failure())
	}
	assert.False(t, Missed.Failure(), "a miss is never a failure")
}

// The vocabulary prints as docs/states.md and the C header spell it; the
// names are written out here, not read from the table, so that a constant
// bound to the wrong state fails.
func TestVocabularyNames(t *testing.T) {
	states := map[State]string{
		StateWaiting: "waiting", StateGranted: "granted", StateStaged: "staged", StateAdmitted: "admitted",
		StateRequested: "requested", StateServed: "served", StatePartial: "partial", StateMissed: "missed",
		StateFailed: "failed", StateAccessFenced: "access_fenced", StateCopyUnproven: "copy_unproven",
		StateLogicallyComplete: "logically_complete", StateContained: "contained",
		StateQuarantined: "quarantined", StateReleased: "released",
	}
	require.Len(t, states, NumStates, "every state is named once")
	for s, name := range states {
		assert.Equal(t, name, s.String())
	}
	outcomes := map[OutcomeKind]string{
		NoOutcome: "none", Served: "served", Partial: "partial", Missed: "missed", Failed: "failed",
		Cancelled: "cancelled", Rejected: "rejected", TimedOut: "timeout", Violation: "violation",
	}
	require.Len(t, outcomes, NumOutcomes, "every outcome is named once")
	for o, name := range outcomes {
		assert.Equal(t, name, o.String())
	}
	for k, name := range map[Kind]string{Fetch: "fetch", Publish: "publish", 0: "kind(0)", 9: "kind(9)"} {
		assert.Equal(t, name, k.String())
	}
	for p, name := range map[Policy]string{Quarantine: "quarantine", Fatal: "fatal", Recover: "recover", 7: "policy(7)"} {
		assert.Equal(t, name, p.String())
	}
	for _, name := range []string{"quarantine", "fatal", "recover"} {
		p, err := ParsePolicy(name)
		require.NoError(t, err)
		assert.Equal(t, name, p.String())
	}
	_, err := ParsePolicy("lenient")
	assert.ErrorContains(t, err, `"lenient"; want quarantine, fatal or recover`)
	h := HandleOf(3<<32 | 9)
	assert.Equal(t, uint64(3<<32|9), h.Uint64())
	assert.Equal(t, 9, h.Index())
	assert.Equal(t, "lease#9.3", h.String())
	assert.False(t, h.IsZero())
	assert.True(t, Handle{}.IsZero())
	assert.Equal(t, uint64(0), Handle{}.Uint64())
}

// A traced move names its lease, its states, what caused it and what it
// latched, in the engine's own terms.
func TestTransitionNamesTheMove(t *testing.T) {
	var moved []Transition
	r := newCoreRig(t, func(c *Config) { c.OnTransition = func(tr Transition) { moved = append(moved, tr) } })
	h, _ := r.served()
	require.NotEmpty(t, moved)
	var last Transition
	for _, tr := range moved {
		if tr.Lease == h && tr.To == StateServed {
			last = tr
		}
	}
	assert.Equal(t, StateRequested, last.From)
	assert.Equal(t, Served, last.Outcome)
	assert.Equal(t, "outcome_served", CauseName(last.Cause))
}
