package conformance

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// childBound bounds one child run: the check, rapid's shrinking (capped
// below) and the race detector's reports.
const childBound = 3 * time.Minute

// child runs this test binary as a child that runs one check (see runChild),
// and returns what it printed.
func child(t *testing.T, spec string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), childBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-rapid.shrinktime=5s"}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"="+spec, childFailDir+"="+t.TempDir())
	out, err := cmd.CombinedOutput()
	require.NoError(t, ctx.Err(), "the child did not finish within %v: %s", childBound, out)
	var exit *exec.ExitError
	if err != nil && !(raceEnabled && errors.As(err, &exit)) {
		// Only the race detector's exit status is expected: it reports the
		// late write as a data race and fails the process.
		require.NoError(t, err, "%s", out)
	}
	return string(out)
}

var seedFlag = regexp.MustCompile(`-rapid\.seed=(\d+)`)

// The late writer of issue #24: Quiesce answers true once the outcome is
// known, and the served rows are written again (with the bytes they already
// hold) 2 ms or 20 ms later. The kit catches it without -race, names the
// rule, prints the trial and the seed, and the seed replays it. Under -race
// the same write is also reported as a data race.
func TestKitCatchesALateWriter(t *testing.T) {
	for _, lateBy := range []time.Duration{2 * time.Millisecond, 20 * time.Millisecond} {
		t.Run(lateBy.String(), func(t *testing.T) {
			spec := "late-writer:" + lateBy.String()
			out := child(t, spec, "-rapid.checks=300")
			require.NotContains(t, out, "PASSED", "the late writer passed the kit")
			assert.Contains(t, out, "conformance: "+RuleNoLateWrite+": ")
			assert.Contains(t, out, "after Quiesce answered true")
			assert.Regexp(t, `in trial\{groups \d, `, out, "the violation names its trial")
			m := seedFlag.FindStringSubmatch(out)
			require.NotNil(t, m, "the report names the seed that replays it: %s", out)
			if raceEnabled {
				assert.Contains(t, out, "WARNING: DATA RACE", "under -race the late write is a data race too")
			}

			again := child(t, spec, "-rapid.seed="+m[1])
			assert.Contains(t, again, "conformance: "+RuleNoLateWrite+": ", "the seed replays it")
		})
	}
}

// The same backend without the late write passes, in-process.
func TestKitPassesTheWellBehavedThirdPartyBackend(t *testing.T) {
	CheckFetcher(t, thirdPartyFetcher(0, nil))
	CheckPublisher(t, thirdPartyPublisher(nil))
}

// The window is sized from the backend's latency, between the floor and
// Wait; a trial that is not watched looks briefly.
func TestWatchWindow(t *testing.T) {
	cfg := newConfig([]Option{WatchFloor(40 * time.Millisecond), Wait(time.Second)})
	for _, tc := range []struct {
		watched  bool
		observed time.Duration
		want     time.Duration
	}{
		{true, 0, 40 * time.Millisecond},
		{true, 5 * time.Millisecond, 40 * time.Millisecond},
		{true, 20 * time.Millisecond, watchLatencies * 20 * time.Millisecond},
		{true, time.Minute, time.Second},
		{false, 0, time.Millisecond},
		{false, 7 * time.Millisecond, 7 * time.Millisecond},
		{false, time.Minute, 40 * time.Millisecond},
	} {
		assert.Equal(t, tc.want, cfg.window(tc.watched, tc.observed), "watched %v, observed %v", tc.watched, tc.observed)
	}
	assert.Equal(t, DefaultWatchFloor, newConfig(nil).watchFloor)
	assert.Equal(t, time.Millisecond, newConfig([]Option{WatchFloor(0)}).watchFloor, "a floor is never under a millisecond")
	assert.Equal(t, 1, newConfig([]Option{WatchOneIn(0)}).watchOneIn)
	assert.GreaterOrEqual(t, DefaultWatchFloor, 20*time.Millisecond, "the floor is tens of milliseconds")
}

// One trial in WatchOneIn is watched, and WatchOneIn(1) watches every trial.
func TestWatchedTrialsAreDrawn(t *testing.T) {
	watched := 0
	for seed := range 400 {
		if exampleTrial(seed).Watched {
			watched++
		}
	}
	assert.InDelta(t, 400/DefaultWatchOneIn, watched, 400/DefaultWatchOneIn/2)
	every := trialGen(newConfig([]Option{WatchOneIn(1)}), 0)
	for seed := range 20 {
		assert.True(t, every.Example(seed).Watched)
	}
}
