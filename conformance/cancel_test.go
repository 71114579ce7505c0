package conformance

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cancelSeeds is how many of the kit's trials a cancellation test runs: a
// quarter of them ask to cancel at each of the three points.
const cancelSeeds = 120

// rulesReported runs the kit's trials (the generator the checks draw from)
// and counts the rules reported, until want is (never, for "").
func rulesReported(t *testing.T, want string, run func(trial) error) map[string]int {
	t.Helper()
	got := map[string]int{}
	for seed := range cancelSeeds {
		if want != "" && got[want] > 0 {
			break
		}
		err := run(exampleTrial(seed))
		var v *Violation
		switch {
		case errors.As(err, &v):
			got[v.Rule]++
		case err != nil:
			t.Fatalf("trial %d: %v", seed, err)
		}
	}
	return got
}

// Each deliberately broken RequestCancel is caught under its rule; the
// correct one passes every trial, fetch and publish.
func TestKitCancellation(t *testing.T) {
	// A blocked RequestCancel returns when the backend is closed: the
	// bound only decides how soon the kit stops waiting for it.
	cfg := newConfig([]Option{CallBound(20 * time.Millisecond)})
	for _, tc := range []struct {
		name    string
		cancel  cancelBehaviour
		rule    string
		publish bool // caught on publications too
	}{
		{"request blocks", cancelBehaviour{blocks: true}, RuleCancelNeverBlocks, true},
		{"request answers no disposition", cancelBehaviour{invalid: true}, RuleCancelAnswer, true},
		{"second request writes", cancelBehaviour{secondWrites: true}, RuleCancelIdempotent, true},
		{"second request answers otherwise", cancelBehaviour{secondDiffer: true}, RuleCancelIdempotent, true},
		{"request clears the rows", cancelBehaviour{writes: true}, RuleCancelNoNewAccess, true},
		{"request revokes the proof", cancelBehaviour{revokesProof: true}, RuleCancelKeepsProof, true},
		{"request taken as the end of access", cancelBehaviour{endsAccess: true}, RuleCancelNotEnd, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fetch := rulesReported(t, tc.rule, func(tr trial) error { return fetchTrial(thirdPartyFetcher(0, &tc.cancel), tr, cfg) })
			assert.Positive(t, fetch[tc.rule], "fetch: %q never reported: %v", tc.rule, fetch)
			if tc.publish {
				publish := rulesReported(t, tc.rule, func(tr trial) error { return publishTrial(thirdPartyPublisher(&tc.cancel), tr, cfg) })
				assert.Positive(t, publish[tc.rule], "publish: %q never reported: %v", tc.rule, publish)
			}
		})
	}
	t.Run("correct", func(t *testing.T) {
		correct := &cancelBehaviour{}
		assert.Empty(t, rulesReported(t, "", func(tr trial) error { return fetchTrial(thirdPartyFetcher(0, correct), tr, cfg) }))
		assert.Empty(t, rulesReported(t, "", func(tr trial) error { return publishTrial(thirdPartyPublisher(correct), tr, cfg) }))
		CheckFetcher(t, thirdPartyFetcher(0, correct))
		CheckPublisher(t, thirdPartyPublisher(correct))
	})
}

// A cancel the kit asked for may end a fetch of absent names as Cancelled;
// a Failed answer to it is still a known miss reported as a failure.
func TestKitAcceptsACancelledMissAfterARequest(t *testing.T) {
	correct := &cancelBehaviour{}
	for seed := range cancelSeeds {
		tr := exampleTrial(seed)
		for i := range tr.Units {
			tr.Units[i].Stored = false
		}
		require.NoError(t, fetchTrial(thirdPartyFetcher(0, correct), tr, newConfig(nil)), "%#v", tr)
	}
}

// Through the public entry point, a blocking RequestCancel fails the check
// with its rule and the trial.
func TestKitReportsABlockingCancelThroughCheckFetcher(t *testing.T) {
	err := Run("blocking-cancel", func(tb TB) {
		CheckFetcher(tb, thirdPartyFetcher(0, &cancelBehaviour{blocks: true}), FailFiles(t.TempDir()), CallBound(20*time.Millisecond))
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "conformance: "+RuleCancelNeverBlocks+": RequestCancel had not returned after")
	assert.Regexp(t, `in trial\{.*cancel after_`, err.Error())
}
