package readiness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
)

// cancelErr is a cancel's error alone, for the tests that check only that.
func cancelErr(_ CancelResult, err error) error { return err }

// cancelCase is one lease, driven through the runner to where it is
// cancelled, and what the cancel must answer. safe is the oracle, written by
// hand from what may still touch the memory (never from Disposition's table).
type cancelCase struct {
	name    string
	opts    []rigOption
	setup   func(r *rig) Handle
	err     error // the refusal errors.Is finds; nil: accepted
	logical Logical
	phys    Disposition
	safe    bool
}

// SPEC §4 rule 19: a cancel answers the logical and the physical result
// apart, as the reference's CancelResult does — each logical answer with the
// dispositions it can meet, and SafeToReuse true exactly where nothing can
// still touch the memory, whatever the logical answer was.
func TestCancelAnswersLogicalAndPhysicalApart(t *testing.T) {
	for _, tc := range cancelCases() {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 4, tc.opts...)
			h := tc.setup(r)
			before, beforeErr := r.eng.Lease(h)
			res, err := r.eng.Cancel(h)
			if tc.err == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.err)
				after, afterErr := r.eng.Lease(h)
				assert.Equal(t, beforeErr == nil, afterErr == nil)
				assert.Equal(t, before, after, "a refused cancel changes nothing")
			}
			assert.Equal(t, tc.logical, res.Logical, "logical: %v", res)
			assert.Equal(t, tc.phys, res.Physical, "physical: %v", res)
			assert.Equal(t, tc.safe, res.SafeToReuse(), "safe_to_reuse of %v", res)
			assert.False(t, res.Retryable, "no refusal of the engine is ever lifted")
			assert.NotEmpty(t, res.Reason)
			if info, err := r.eng.Lease(h); err == nil {
				assert.Equal(t, info.Disposition, res.Physical, "the result is the lease's disposition right after the cancel")
			}
			if errors.Is(tc.err, ErrHalted) {
				// The halted engine never drains: its goroutines stop once its
				// cancelled Quiesce calls answered; the rig's cleanup shuts a
				// new engine down.
				old := r.eng
				r.restart()
				_, err := old.Shutdown(contextWithTimeout(t))
				require.ErrorIs(t, err, ErrHalted)
			}
		})
	}
}

func cancelCases() []cancelCase {
	fatal := func(c *Config) { c.Containment = Fatal }
	return []cancelCase{
		{name: "waiting for slots: withdrawn", setup: func(r *rig) Handle {
			r.fetch(1, 1)
			return r.lend(Request{Kind: Fetch, Rows: r.rows(2, 4)}) // more rows than free slots: it waits
		}, logical: LogicalAccepted, phys: DispositionNotExposed, safe: true},
		{name: "staged behind the admission bound: withdrawn", opts: []rigOption{func(c *Config) { c.MaxOutstanding = 1 }},
			setup: func(r *rig) Handle {
				r.fetch(1, 1)
				h := r.lend(Request{Kind: Fetch, Rows: r.rows(2, 1)})
				r.sync()
				require.Equal(r.t, State(StateStaged), r.state(h))
				return h
			}, logical: LogicalAccepted, phys: DispositionNotExposed, safe: true},
		{name: "a publish whose device-to-staging copies are in flight", setup: func(r *rig) Handle {
			h := r.lend(Request{Kind: Publish, Rows: r.rows(1, 1)})
			r.sync()
			require.Equal(r.t, State(StateGranted), r.state(h))
			return h
		}, logical: LogicalAccepted, phys: DispositionActive, safe: false},
		{name: "submitted: the backend may still write", setup: func(r *rig) Handle {
			r.be.setAnswer(false, nil)
			h, _, _ := r.fetch(1, 1)
			return h
		}, logical: LogicalAccepted, phys: DispositionQuiescing, safe: false},
		{name: "served, its access proof awaited", err: ErrRefused, setup: func(r *rig) Handle {
			r.be.setAnswer(false, nil)
			h, _, a := r.fetch(1, 1)
			r.deliver(a, 1, 0)
			r.sync()
			require.Equal(r.t, State(StateServed), r.state(h))
			return h
		}, logical: LogicalAlreadyTerminal, phys: DispositionQuiescing, safe: false},
		{name: "served and complete", err: ErrRefused, setup: func(r *rig) Handle {
			return completed(r, 1, func(a *scriptAttempt) { r.deliver(a, 1, 0) })
		}, logical: LogicalAlreadyTerminal, phys: DispositionQuiescedSuccess, safe: true},
		{name: "failed and complete", err: ErrRefused, setup: func(r *rig) Handle {
			return completed(r, 1, func(a *scriptAttempt) { r.be.set(a, contract.Failed{Reason: "store gone"}) })
		}, logical: LogicalAlreadyTerminal, phys: DispositionQuiescedFailure, safe: true},
		{name: "quarantined", err: ErrRefused, setup: quarantined, logical: LogicalAlreadyTerminal, phys: DispositionInDoubt, safe: false},
		{name: "released and kept", err: ErrStaleHandle, setup: func(r *rig) Handle {
			h := completed(r, 1, func(a *scriptAttempt) { r.deliver(a, 1, 0) })
			require.NoError(r.t, r.eng.Release(h))
			require.Equal(r.t, State(StateReleased), r.state(h))
			return h
		}, logical: LogicalAlreadyTerminal, phys: DispositionQuiescedSuccess, safe: true},
		{name: "quarantined and released: the owner gave up its claim", err: ErrStaleHandle, setup: func(r *rig) Handle {
			h := quarantined(r)
			require.NoError(r.t, r.eng.Release(h))
			return h
		}, logical: LogicalAlreadyTerminal, phys: DispositionInDoubt, safe: false},
		{name: "never issued", err: ErrStaleHandle, setup: func(*rig) Handle { return Handle{} },
			logical: LogicalNotFound, phys: DispositionInDoubt, safe: false},
		{name: "retired and no longer kept", err: ErrStaleHandle, opts: []rigOption{func(c *Config) { c.KeepReleased = 1 }},
			setup: func(r *rig) Handle {
				h := completed(r, 1, func(a *scriptAttempt) { r.deliver(a, 1, 0) })
				require.NoError(r.t, r.eng.Release(h))
				later := completed(r, 2, func(a *scriptAttempt) { r.deliver(a, 2, 0) })
				require.NoError(r.t, r.eng.Release(later)) // pushes h out of the one kept
				_, err := r.eng.Lease(h)
				require.ErrorIs(r.t, err, ErrStaleHandle)
				return h
			}, logical: LogicalNotFound, phys: DispositionInDoubt, safe: false},
		{name: "halted: a lease still submitted", err: ErrHalted, opts: []rigOption{fatal}, setup: func(r *rig) Handle {
			r.be.setAnswer(false, nil)
			h, _, _ := r.fetch(1, 1)
			halt(r)
			require.Equal(r.t, State(StateRequested), r.state(h))
			return h
		}, logical: LogicalRejected, phys: DispositionActive, safe: false},
		{name: "halted: a lease withdrawn before", err: ErrHalted, opts: []rigOption{fatal}, setup: func(r *rig) Handle {
			r.fetch(1, 1)
			h := r.lend(Request{Kind: Fetch, Rows: r.rows(2, 4)})
			require.NoError(r.t, cancelErr(r.eng.Cancel(h)))
			halt(r)
			return h
		}, logical: LogicalRejected, phys: DispositionNotExposed, safe: true},
		{name: "halted: a handle it cannot name", err: ErrHalted, opts: []rigOption{fatal}, setup: func(r *rig) Handle {
			halt(r)
			return Handle{}
		}, logical: LogicalRejected, phys: DispositionInDoubt, safe: false},
	}
}

// completed runs a one-row fetch to logically_complete, its outcome set by
// answer and its access proven.
func completed(r *rig, serial int, answer func(*scriptAttempt)) Handle {
	r.t.Helper()
	h, _, a := r.fetch(serial, 1)
	answer(a)
	r.sync()
	r.dev.CompleteAll()
	r.sync()
	require.Equal(r.t, State(StateLogicallyComplete), r.state(h))
	return h
}

// quarantined runs a one-row fetch that fails and whose access is never
// proven past its containment deadline.
func quarantined(r *rig) Handle {
	r.t.Helper()
	r.be.setAnswer(false, nil)
	h, _, a := r.fetch(1, 1)
	r.be.set(a, contract.Failed{Reason: "store gone"})
	r.sync()
	r.clk.Advance(time.Minute)
	r.sync()
	require.Equal(r.t, State(StateQuarantined), r.state(h))
	return h
}

// halt halts a fatal-policy rig's engine with a lease of its own contained.
func halt(r *rig) {
	r.t.Helper()
	r.be.setAnswer(false, nil)
	_, _, a := r.fetch(9, 1)
	r.be.set(a, contract.Failed{Reason: "store gone"})
	r.sync()
	r.clk.Advance(time.Minute)
	r.sync()
	require.ErrorIs(r.t, r.eng.Err(), ErrHalted)
}

// Rule 19 through the runner, with a backend that keeps writing into the
// lease's staging slot after the cancel and whose Quiesce says false before
// it says true: the cancel is accepted but not safe; while Quiesce says
// false the memory stays unreusable and no other lease is given the slot,
// though the owner released the lease; once it says true LeaseInfo says
// QUIESCED_FAILURE and the slot is lent again, holding the new lease's
// bytes, not the late writer's.
func TestCancelIsNotSafeUntilTheLateWriterIsProvenOver(t *testing.T) {
	r := newRig(t, 1)
	r.be.setAnswer(false, nil)
	h, _, a := r.fetch(1, 1)
	res, err := r.eng.Cancel(h)
	require.NoError(t, err)
	assert.Equal(t, LogicalAccepted, res.Logical)
	assert.False(t, res.SafeToReuse(), "the backend may still write: %v", res)
	require.NoError(t, r.eng.Release(h), "the owner is done with it at once, as a manager that cancels is")

	next := r.lend(Request{Kind: Fetch, Rows: r.rows(2, 1)})
	for i := range 3 {
		r.be.write(a, 0, pattern(0xBB, 1, i)) // the late writer
		require.NoError(t, r.eng.Retry(h))
		r.sync()
		info := r.info(h)
		require.Equal(t, Cancelled, info.Outcome)
		assert.Equal(t, DispositionQuiescing, info.Disposition, "Quiesce said false (%d)", i)
		assert.Equal(t, State(StateWaiting), r.state(next), "the slot is not lent while the writer may write")
	}
	r.be.setAnswer(true, nil)
	require.NoError(t, r.eng.Retry(h))
	r.sync()
	info, err := r.eng.Lease(h)
	require.NoError(t, err)
	assert.Equal(t, State(StateReleased), info.State)
	assert.Equal(t, DispositionQuiescedFailure, info.Disposition, "proven over after a cancel")
	assert.True(t, info.Disposition.Reusable())

	late := r.be.last(t)
	require.NotSame(t, a, late, "the waiting lease was submitted once the slot came back")
	r.deliver(late, 2, 0)
	r.sync()
	r.dev.CompleteAll()
	r.sync()
	runs, err := r.eng.Runs(next, nil)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	slot, _ := r.mem.Row(0, runs[0].First)
	assert.True(t, bytes.Equal(pattern(0xC0, 2, 0), slot), "the new lease's bytes, never the late writer's")
}

// Retryable is false in every answer because no refusal can be lifted: from
// every state that refuses a cancel, no state the table can reach takes one.
// Walked over the table's moves and completions, not over what the engine
// happens to do.
func TestNoRefusedCancelIsAcceptedLater(t *testing.T) {
	tab := fsm.Lifecycle()
	refusing := 0
	for s := range fsm.NumStates {
		if tab.Lookup(s, fsm.CancelRequested).Action != fsm.Refuse {
			continue
		}
		refusing++
		for _, n := range reachable(tab, s) {
			assert.Equal(t, fsm.Refuse, tab.Lookup(n, fsm.CancelRequested).Action,
				"%v refuses a cancel, yet %v, reachable from it, takes one: a refused cancel would be retryable", s, n)
		}
	}
	require.Greater(t, refusing, 0, "the table refuses some cancels")
}

// A report counts the leases in doubt by state (Core.inDoubt): exact only
// while every disposition a lease can have in a state is reusable, or none
// is.
func TestInDoubtIsAFunctionOfTheState(t *testing.T) {
	tab := fsm.Lifecycle()
	for s := range fsm.NumStates {
		ps := tab.PhysicalIn(s)
		require.NotEmpty(t, ps, "%v: no disposition", s)
		for _, p := range ps {
			assert.Equal(t, ps[0].Reusable(), p.Reusable(), "%v can be %v and %v: count its leases one by one", s, ps[0], p)
		}
		assert.Equal(t, !ps[0].Reusable(), doubtIn[s], "%v", s)
	}
}

// reachable lists every state the table can move a lease to from s.
func reachable(tab *fsm.Table, s fsm.State) []fsm.State {
	var seen [fsm.NumStates]bool
	queue, out := []fsm.State{s}, []fsm.State(nil)
	seen[s] = true
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		next := func(n fsm.State) {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
				queue = append(queue, n)
			}
		}
		for e := range fsm.NumEvents {
			if en := tab.Lookup(cur, e); en.Action == fsm.Move {
				next(en.Next)
			}
		}
		for _, c := range tab.Completions(cur) {
			next(c.Next)
		}
	}
	return out
}

// The zero CancelResult — no answer — never claims the memory reusable,
// though the zero Disposition is NOT_EXPOSED; each logical answer prints as
// the reference spells it.
func TestLogicalNamesAndTheZeroResult(t *testing.T) {
	assert.False(t, CancelResult{}.SafeToReuse())
	for _, tc := range []struct {
		l    Logical
		want string
	}{
		{LogicalAccepted, "ACCEPTED"}, {LogicalAlreadyTerminal, "ALREADY_TERMINAL"},
		{LogicalNotFound, "NOT_FOUND"}, {LogicalRejected, "REJECTED"}, {0, "logical(0)"}, {9, "logical(9)"},
	} {
		assert.Equal(t, tc.want, tc.l.String())
		if tc.l != 0 {
			assert.True(t, CancelResult{Logical: tc.l, Physical: DispositionQuiescedFailure}.SafeToReuse(), "%v", tc.l)
			assert.False(t, CancelResult{Logical: tc.l, Physical: DispositionQuiescing}.SafeToReuse(), "%v", tc.l)
		}
	}
}

// reportCase is an engine brought to a shutdown, and what its report must say.
type reportCase struct {
	name    string
	setup   func(r *rig)
	bound   time.Duration // how long Shutdown may wait; 0: Close, and run rounds until drained
	err     error
	inDoubt int
	phys    Disposition
	drained bool
	safe    bool // the oracle, by hand: nothing lent is left unproven, nothing quarantined
}

// SPEC §4 rule 19: a shutdown says how many leases it leaves in doubt, and
// whether the memory may be handed back (the reference's ShutdownResult).
func TestShutdownSaysHowManyLeasesItLeavesInDoubt(t *testing.T) {
	for _, tc := range reportCases() {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 4)
			tc.setup(r)
			var rep Report
			var err error
			if tc.bound > 0 {
				ctx, cancel := context.WithTimeout(context.Background(), tc.bound)
				defer cancel()
				rep, err = r.eng.Shutdown(ctx)
			} else {
				rep = r.eng.Close()
				for i := 0; !rep.Drained && i < 10; i++ {
					r.clk.Advance(time.Minute)
					r.dev.CompleteAll()
					r.sync()
					rep = r.eng.Report()
				}
			}
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				assert.ErrorContains(t, err, fmt.Sprintf("%d leases left in doubt", tc.inDoubt))
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.inDoubt, rep.InDoubt)
			assert.Equal(t, tc.phys, rep.Physical)
			assert.Equal(t, tc.drained, rep.Drained)
			assert.Equal(t, tc.safe, rep.SafeToRelease(), "%+v", rep)
			r.be.setAnswer(true, nil) // the rig's cleanup drains what is left
		})
	}
}

func reportCases() []reportCase {
	served := func(r *rig, serial int) {
		h, _, a := r.fetch(serial, 1)
		r.deliver(a, serial, 0)
		r.sync()
		r.dev.CompleteAll()
		r.sync()
		require.NoError(r.t, r.eng.Release(h))
	}
	return []reportCase{
		{name: "a Quiesce that never says true, a bounded shutdown", bound: 50 * time.Millisecond, err: context.DeadlineExceeded,
			setup: func(r *rig) {
				served(r, 1) // done before: not in doubt
				r.be.setAnswer(false, nil)
				for i := range 3 {
					r.fetch(10+i, 1)
				}
				r.lend(Request{Kind: Fetch, Rows: r.rows(20, 2)}) // waiting: never exposed, released by the close
			}, inDoubt: 3, phys: DispositionInDoubt},
		{name: "a clean drain", bound: time.Minute, setup: func(r *rig) {
			served(r, 1)
			r.fetch(2, 1) // in flight at the shutdown: cancelled, proven over, released
		}, phys: DispositionQuiescedSuccess, drained: true, safe: true},
		{name: "nothing ever lent", bound: time.Minute, setup: func(*rig) {}, phys: DispositionNotExposed, drained: true, safe: true},
		{name: "only withdrawn leases", bound: time.Minute, setup: func(r *rig) {
			h := r.lend(Request{Kind: Fetch, Rows: r.rows(1, 1)})
			require.NoError(r.t, cancelErr(r.eng.Cancel(h)))
		}, phys: DispositionNotExposed, drained: true, safe: true},
		{name: "drained with a lease quarantined", setup: func(r *rig) { quarantined(r) },
			inDoubt: 1, phys: DispositionInDoubt, drained: true},
		{name: "drained, the slots an earlier engine quarantined inherited", setup: func(r *rig) {
			quarantined(r)
			rep, err := r.eng.Shutdown(contextWithTimeout(r.t))
			require.NoError(r.t, err)
			require.Equal(r.t, 1, rep.InDoubt)
			r.restart()
		}, phys: DispositionInDoubt, drained: true},
	}
}
