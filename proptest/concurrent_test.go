package proptest

import (
	"errors"
	"fmt"
	"sync"

	"pgregory.net/rapid"

	"github.com/kvready/kvready/readiness"
)

// SPEC §4 rule 18 in the model suite: on the runner, an action draws
// concurrent callers — 2 to 8 goroutines asking about live leases, reading
// the counters, asking for proofs again and running rounds, all at once. (A
// Retry from a concurrent caller on a lease still waiting for its outcome
// once quarantined it: its early Quiesce timed out and started a drain that
// pulled the containment deadline in — now declared in the table as no drain,
// readiness/testdata/transcripts/rule05-early-retry-starts-no-drain.txt.) The
// callers record what the engine answered; the model's checks after the
// action hold as after any other (the rounds they ran took in evidence like
// the model's own), and no caller may see a halt, a breach or an answer out
// of the vocabulary's range.
func (m *model) concurrent(t *rapid.T) {
	d, ok := m.d.(*runnerDriver)
	if !ok {
		return // a Core has one caller, its driver (raft's RawNode)
	}
	live := m.live()
	callers := rapid.IntRange(2, 8).Draw(t, "callers")
	plans := make([][]callerOp, callers)
	for c := range plans {
		for range rapid.IntRange(1, 12).Draw(t, "calls") {
			op := callerOp{what: rapid.IntRange(0, 6).Draw(t, "call")}
			if len(live) > 0 {
				op.h = pick(t, "about", live).h
			}
			plans[c] = append(plans[c], op)
		}
	}
	// The model's goroutine waits for them: the harness's device spy runs on
	// whichever caller runs a round, under the engine's lock, and the model
	// reads what it recorded only once they are done.
	var wg sync.WaitGroup
	found := make([]error, callers)
	for c, plan := range plans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			found[c] = call(d.eng, plan)
		}()
	}
	wg.Wait()
	// Their rounds may have contained a lease under the fatal policy: the
	// model learns of the halt as after a round of its own.
	m.checkHalt(false)
	for c, err := range found {
		if err != nil {
			m.fail(rule18, "concurrent caller %d: %v", c, err)
		}
	}
}

type callerOp struct {
	what int
	h    readiness.Handle
}

// call makes a caller's calls and says what was wrong with an answer: an
// error no caller of a running engine may see, or a value out of range.
func call(eng *readiness.Engine, plan []callerOp) error {
	expected := func(err error) bool {
		return err == nil || errors.Is(err, readiness.ErrStaleHandle) || errors.Is(err, readiness.ErrNotReady) ||
			errors.Is(err, readiness.ErrInvalidRequest) || errors.Is(err, readiness.ErrHalted)
	}
	for _, op := range plan {
		var err error
		switch op.what {
		case 0:
			var info readiness.LeaseInfo
			info, err = eng.Lease(op.h)
			if err == nil && (int(info.State) >= readiness.NumStates || int(info.Outcome) >= readiness.NumOutcomes) {
				return fmt.Errorf("%v read as %v/%v: out of range", op.h, info.State, info.Outcome)
			}
		case 1:
			_, err = eng.Readiness(op.h)
		case 2:
			_, _, err = eng.LayerReadiness(op.h, 0)
		case 3:
			if st := eng.Stats(); st.InvariantBreaches != 0 {
				return fmt.Errorf("an invariant breach under concurrent callers: %v", eng.Err())
			}
		case 4:
			eng.Progress()
		case 5:
			err = eng.Retry(op.h)
		default:
			_, err = eng.Runs(op.h, nil)
		}
		if !expected(err) {
			return fmt.Errorf("call %d about %v: %w", op.what, op.h, err)
		}
	}
	return nil
}
