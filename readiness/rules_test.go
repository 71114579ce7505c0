package readiness

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/staging"
)

// One deterministic regression test per rule of SPEC §4 (revision 2), most of
// them the reference's own lifetime tests (test_shared_resource_lifetime.py)
// replayed against the runner: the clock starts at 10s, the request timeout
// and the drain grace are 5s each, so the deadline is 15s and the containment
// deadline 20s.

// Rule 1 and 4: outcome and access end are independent evidence; in either
// order, nothing is copied and nothing is released until both are in.
func TestRule1OutcomeAndAccessEndAreIndependent(t *testing.T) {
	for _, kind := range []Kind{Fetch, Publish} {
		for _, outcomeFirst := range []bool{true, false} {
			name := kind.String() + "/access-first"
			if outcomeFirst {
				name = kind.String() + "/outcome-first"
			}
			t.Run(name, func(t *testing.T) {
				r := newRig(t, 4)
				gate := make(chan struct{})
				r.be.gate = gate
				rows := r.rows(1, 2)
				h := r.lend(Request{Kind: kind, Rows: rows})
				r.sync()
				r.dev.CompleteAll() // a publish's device→staging copies
				r.sync()
				a := r.be.last(t)
				if outcomeFirst {
					r.deliver(a, 1, 0, 1)
					r.sync()
					r.entered() // the proof is asked for once the outcome is in
				} else {
					r.eng.Retry(h) // ask before the outcome: the proof is latched
					r.sync()
					r.entered()
					close(gate)
					r.sync()
				}
				assert.NotEqual(t, State(StateReleased), r.state(h))
				if kind == Fetch {
					assert.Equal(t, pattern(0xDE, 1, 0), r.deviceRow(rows[0]), "rule 4: nothing copied before both are in")
				}
				if outcomeFirst {
					close(gate)
				} else {
					r.deliver(a, 1, 0, 1)
				}
				r.sync()
				r.dev.CompleteAll()
				r.sync()
				require.Equal(t, State(StateLogicallyComplete), r.state(h))
				if kind == Fetch {
					assert.Equal(t, pattern(0xC0, 1, 0), r.deviceRow(rows[0]))
					assert.Equal(t, pattern(0xC0, 1, 1), r.deviceRow(rows[1]))
				}
				require.NoError(t, r.eng.Release(h))
				assert.Equal(t, State(StateReleased), r.state(h))
				assert.Equal(t, 4, r.eng.Stats().SlotsFree)
			})
		}
	}
}

// Rule 4: only served whole rows are copied; a miss copies nothing and
// answers what was already known.
func TestRule4OnlyServedRowsAreCopied(t *testing.T) {
	for _, tc := range []struct {
		name   string
		served []int
		want   OutcomeKind
		until  int
	}{
		{"miss", nil, Missed, 0},
		{"partial", []int{0}, Partial, rigTPB},
		{"hole", []int{1}, Partial, 0},
		{"all", []int{0, 1}, Served, 2 * rigTPB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 4)
			h, rows, a := r.fetch(1, 2)
			r.deliver(a, 1, tc.served...)
			r.sync()
			r.dev.CompleteAll()
			r.sync()
			info := r.info(h)
			require.Equal(t, State(StateLogicallyComplete), info.State)
			assert.Equal(t, tc.want, info.Outcome)
			for i, row := range rows {
				want := pattern(0xDE, 1, i) // untouched
				for _, s := range tc.served {
					if s == i {
						want = pattern(0xC0, 1, i)
					}
				}
				assert.Equal(t, want, r.deviceRow(row), "device row %d", i)
			}
			iv, err := r.eng.Readiness(h)
			require.NoError(t, err)
			assert.Equal(t, staging.Interval{RestartFloor: 0, UsableUntil: tc.until}, iv)
		})
	}
}

// A miss answers the interval of what was already known: [0, K·T].
func TestMissAnswersWhatWasKnown(t *testing.T) {
	r := newRig(t, 4)
	rows := r.rows(1, 2)
	for i := range rows {
		rows[i].Block = 3 + i
	}
	h := r.lend(Request{Kind: Fetch, Rows: rows, KnownBlocks: 3})
	r.sync()
	r.be.set(r.be.last(t), contract.Delivered{})
	r.sync()
	iv, err := r.eng.Readiness(h)
	require.NoError(t, err)
	assert.Equal(t, staging.Interval{RestartFloor: 0, UsableUntil: 3 * rigTPB}, iv)
	assert.Equal(t, Missed, r.info(h).Outcome, "rule 2: a miss is a miss")
	require.NoError(t, r.eng.Release(h))
	iv2, err := r.eng.Readiness(h)
	require.NoError(t, err, "readiness stays readable after the release")
	assert.Equal(t, iv, iv2)
}

// Rule 1: the copy barrier outlives the request's exit, and shutdown waits for
// it.
func TestRule1CopyBarrierSurvivesRequestExit(t *testing.T) {
	r := newRig(t, 4)
	h, _, a := r.fetch(1, 2)
	r.deliver(a, 1, 0, 1)
	r.sync()
	require.Equal(t, State(StateAccessFenced), r.state(h), "proven, copies in flight")
	require.NoError(t, r.eng.Release(h))
	rep := r.eng.Close()
	r.sync()
	assert.False(t, rep.Drained)
	assert.Equal(t, State(StateAccessFenced), r.state(h), "the copies have not landed")
	assert.Equal(t, 2, r.eng.Stats().SlotsHeld)
	r.dev.CompleteAll()
	r.sync()
	assert.Equal(t, State(StateReleased), r.state(h))
	assert.True(t, r.eng.Report().Drained)
}

// Rule 3: a failure or a cancellation is not turned into a success by a late
// completion, and nothing is copied.
func TestRule3TerminalOutcomeIsStable(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind OutcomeKind
	}{{"failed", Failed}, {"cancelled", Cancelled}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 4)
			gate := make(chan struct{})
			r.be.gate = gate
			h, rows, a := r.fetch(1, 2)
			if tc.kind == Cancelled {
				require.NoError(t, cancelErr(r.eng.Cancel(h)))
			} else {
				r.be.set(a, contract.Failed{Reason: "failed"})
			}
			r.sync()
			r.deliver(a, 1, 0, 1)
			close(gate)
			r.sync()
			r.dev.CompleteAll()
			r.sync()
			info := r.info(h)
			assert.Equal(t, tc.kind, info.Outcome)
			assert.False(t, info.ByPeer)
			assert.Equal(t, State(StateLogicallyComplete), info.State)
			for i, row := range rows {
				assert.Equal(t, pattern(0xDE, 1, i), r.deviceRow(row), "nothing copied for row %d", i)
			}
		})
	}
}

// Rule 2: a peer's cancel stays a cancel, with by_peer; never a failure.
func TestRule2PeerCancelStaysCancelled(t *testing.T) {
	r := newRig(t, 4)
	h, _, a := r.fetch(1, 1)
	r.be.set(a, contract.Cancelled{ByPeer: true})
	r.sync()
	info := r.info(h)
	assert.Equal(t, Cancelled, info.Outcome)
	assert.True(t, info.ByPeer)
	assert.True(t, info.Outcome.Failure(), "a cancel is a failure of the request")
	assert.NotEqual(t, Failed, info.Outcome)
}

// Rule 9: the deadline latches Failed(timeout); a late success changes
// nothing, and nothing is copied.
func TestRule9TimeoutStaysFailedAfterLateSuccess(t *testing.T) {
	r := newRig(t, 4)
	gate := make(chan struct{})
	r.be.gate = gate
	h, rows, a := r.fetch(1, 2)
	r.clk.Advance(5 * time.Second) // t = 15: the deadline
	r.sync()
	r.entered()
	require.Equal(t, TimedOut, r.info(h).Outcome)
	r.deliver(a, 1, 0, 1)
	close(gate)
	r.sync()
	r.dev.CompleteAll()
	r.sync()
	info := r.info(h)
	assert.Equal(t, TimedOut, info.Outcome)
	assert.Equal(t, State(StateLogicallyComplete), info.State, "proven after the timeout: released normally")
	assert.Equal(t, pattern(0xDE, 1, 0), r.deviceRow(rows[0]))
	assert.Empty(t, r.contained)
}

// Rule 5: a blocked Quiesce cannot delay containment, which wins at the exact
// boundary fixed at submission; a proof arriving then releases nothing.
func TestRule5ContainmentAtTheFixedDeadline(t *testing.T) {
	r := newRig(t, 4)
	gate := make(chan struct{})
	r.be.gate = gate
	h, rows, a := r.fetch(1, 2)
	r.clk.Advance(10 * time.Second) // t = 20, straight past the deadline (15)
	r.sync()
	require.Equal(t, State(StateQuarantined), r.state(h), "containment at 15 + 5 = 20, not measured from when the deadline was noticed")
	require.Len(t, r.contained, 1)
	assert.Equal(t, time.Unix(20, 0), r.contained[0].Deadline)
	assert.Equal(t, 2, r.contained[0].Slots)
	r.deliver(a, 1, 0, 1)
	close(gate)
	r.sync()
	r.dev.CompleteAll()
	r.sync()
	assert.Equal(t, State(StateQuarantined), r.state(h), "late evidence never releases a contained lease")
	assert.Equal(t, pattern(0xDE, 1, 0), r.deviceRow(rows[0]))
	assert.Equal(t, 2, r.eng.Stats().SlotsQuarantined)
	assert.Len(t, r.contained, 1, "OnContainment fires once")
}

// Rule 5: one nanosecond before the containment deadline the lease is still
// held, and a proof then releases it.
func TestRule5ProofJustBeforeTheDeadlineReleases(t *testing.T) {
	r := newRig(t, 4)
	r.be.setAnswer(false, nil)
	h, _, a := r.fetch(1, 1)
	r.clk.Advance(10*time.Second - time.Nanosecond)
	r.sync() // timeout at 15; the drain started at 15
	require.Equal(t, State(StateFailed), r.state(h))
	r.be.setAnswer(true, nil)
	r.be.set(a, contract.Delivered{})
	require.NoError(t, r.eng.Retry(h))
	r.sync()
	assert.Equal(t, State(StateLogicallyComplete), r.state(h))
	assert.Empty(t, r.contained)
}

// Rule 5 and 11: SubmissionRejected proves nothing escaped (released at once,
// no Quiesce); any other submission error retains the slots, which are
// contained grace after the error, with OnContainment.
func TestRule5SubmissionFailurePreservesUncertainty(t *testing.T) {
	for _, rejected := range []bool{true, false} {
		name := "escaped"
		if rejected {
			name = "rejected"
		}
		t.Run(name, func(t *testing.T) {
			r := newRig(t, 4)
			if rejected {
				r.be.reject = errors.Join(contract.ErrSubmissionRejected, errors.New("full"))
			} else {
				r.be.reject = errors.New("escaped")
			}
			rows := r.rows(1, 1)
			h := r.lend(Request{Kind: Fetch, Rows: rows})
			r.sync()
			info := r.info(h)
			assert.Equal(t, 0, r.be.quiesceCalls())
			if rejected {
				assert.Equal(t, Rejected, info.Outcome)
				assert.Equal(t, State(StateLogicallyComplete), info.State)
				require.NoError(t, r.eng.Release(h))
				assert.Equal(t, 4, r.eng.Stats().SlotsFree)
				return
			}
			assert.Equal(t, Failed, info.Outcome)
			assert.Equal(t, State(StateFailed), info.State)
			r.clk.Advance(5 * time.Second) // t = 15: the drain started at 10
			r.sync()
			assert.Equal(t, State(StateQuarantined), r.state(h))
			require.Len(t, r.contained, 1)
			assert.Contains(t, r.contained[0].Reason, "escaped")
		})
	}
}

// Rule 5: Quiesce false, a truthy error or a timeout fails closed; the engine
// asks again (here explicitly) and a later true releases.
func TestRule5UnprovenAccessIsRetried(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
		err  error
	}{{"false", false, nil}, {"error", false, errors.New("proof failed")}, {"true-and-error", true, errors.New("both")}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 4)
			r.be.setAnswer(tc.ok, tc.err)
			h, rows, a := r.fetch(1, 1)
			r.deliver(a, 1, 0)
			r.sync()
			assert.Equal(t, State(StateServed), r.state(h), "unproven: not fenced")
			assert.Equal(t, pattern(0xDE, 1, 0), r.deviceRow(rows[0]))
			assert.Equal(t, 1, r.be.quiesceCalls())
			r.be.setAnswer(true, nil)
			require.NoError(t, r.eng.Retry(h))
			r.sync()
			r.dev.CompleteAll()
			r.sync()
			assert.Equal(t, State(StateLogicallyComplete), r.state(h))
			assert.Equal(t, 2, r.be.quiesceCalls())
			assert.Equal(t, pattern(0xC0, 1, 0), r.deviceRow(rows[0]))
		})
	}
}

// Rule 5: the engine retries by itself, with back-off measured on its clock.
func TestRule5RetryWithBackoff(t *testing.T) {
	r := newRig(t, 4, func(c *Config) { c.RetryBackoff = time.Millisecond })
	r.be.setAnswer(false, nil)
	h, _, a := r.fetch(1, 1)
	r.deliver(a, 1, 0)
	r.sync()
	require.Equal(t, 1, r.be.quiesceCalls())
	r.sync()
	assert.Equal(t, 1, r.be.quiesceCalls(), "no retry before the back-off passed on the clock")
	r.clk.Advance(time.Millisecond)
	r.sync()
	assert.Equal(t, 2, r.be.quiesceCalls())
	r.clk.Advance(time.Millisecond)
	r.sync()
	assert.Equal(t, 2, r.be.quiesceCalls(), "the back-off doubled")
	r.be.setAnswer(true, nil)
	r.clk.Advance(time.Millisecond)
	r.sync()
	assert.Equal(t, 3, r.be.quiesceCalls())
	assert.Equal(t, State(StateAccessFenced), r.state(h))
	assert.Equal(t, uint64(2), r.eng.Stats().QuiesceRetries)
}

// Rule 5: a copy that failed without a completion record retains the slots
// through containment, grace after the failure.
func TestRule5CopyFailureIsContained(t *testing.T) {
	r := newRig(t, 4)
	h, _, a := r.fetch(1, 2)
	r.deliver(a, 1, 0, 1)
	r.sync()
	require.Equal(t, State(StateAccessFenced), r.state(h))
	_, err := r.dev.FailNext(r.stream, 1)
	require.NoError(t, err)
	r.sync()
	assert.Equal(t, State(StateCopyUnproven), r.state(h))
	require.NoError(t, r.eng.Release(h))
	r.clk.Advance(5*time.Second - time.Nanosecond)
	r.sync()
	assert.Equal(t, State(StateCopyUnproven), r.state(h))
	r.clk.Advance(time.Nanosecond)
	r.sync()
	assert.Equal(t, State(StateQuarantined), r.state(h))
	require.Len(t, r.contained, 1)
	assert.Contains(t, r.contained[0].Reason, "local copy")
}

// Rule 3: served names that were never asked for are a violation; nothing
// untrusted reaches the device.
func TestRule3UnknownServedNameIsAViolation(t *testing.T) {
	r := newRig(t, 4)
	h, rows, a := r.fetch(1, 2)
	r.deliver(a, 1, 0, 1)
	r.be.set(a, contract.Delivered{Served: contract.NewNameSet(name(1, 0), name(9, 9))})
	r.sync()
	info := r.info(h)
	assert.Equal(t, Violation, info.Outcome)
	assert.Equal(t, State(StateLogicallyComplete), info.State)
	assert.Equal(t, pattern(0xDE, 1, 0), r.deviceRow(rows[0]))
}

// Rule 3: an answer changed before the proof — within its kind — is caught by
// the re-poll after Quiesce, before anything is copied.
func TestRule3ChangedAnswerWithinItsKind(t *testing.T) {
	r := newRig(t, 4)
	gate := make(chan struct{})
	r.be.gate = gate
	h, rows, a := r.fetch(1, 2)
	r.deliver(a, 1, 0, 1)
	r.sync()
	require.Equal(t, Served, r.info(h).Outcome)
	r.be.set(a, contract.Delivered{Served: contract.NewNameSet(name(1, 0))})
	close(gate)
	r.sync()
	r.dev.CompleteAll()
	r.sync()
	info := r.info(h)
	assert.Equal(t, Violation, info.Outcome)
	assert.Equal(t, pattern(0xDE, 1, 0), r.deviceRow(rows[0]), "the untrusted rows are not copied")
	assert.Equal(t, pattern(0xDE, 1, 1), r.deviceRow(rows[1]))
}

// Rule 4: once the owner released the lease, nothing more is copied into its
// device rows, which the manager may have given to another request.
func TestRule4NoCopyAfterRelease(t *testing.T) {
	r := newRig(t, 4)
	h, rows, a := r.fetch(1, 2)
	r.be.setAnswer(false, nil)
	r.deliver(a, 1, 0, 1)
	r.sync()
	require.NoError(t, r.eng.Release(h))
	require.NoError(t, r.dev.Write(rows[0].Device, pattern(0x77, 2, 0))) // the page is reused
	r.be.setAnswer(true, nil)
	require.NoError(t, r.eng.Retry(h))
	r.sync()
	assert.Equal(t, State(StateReleased), r.state(h))
	assert.Equal(t, pattern(0x77, 2, 0), r.deviceRow(rows[0]))
	assert.Equal(t, 4, r.eng.Stats().SlotsFree)
}

// Rule 10: Close gives a pending lease a local Cancelled outcome at once; it
// is released once proven, nothing copied.
func TestRule10CloseCancelsPendingLeases(t *testing.T) {
	r := newRig(t, 4)
	gate := make(chan struct{})
	r.be.gate = gate
	h, rows, _ := r.fetch(1, 2)
	rep := r.eng.Close()
	assert.False(t, rep.Drained)
	info := r.info(h)
	assert.Equal(t, Cancelled, info.Outcome)
	assert.False(t, info.ByPeer)
	_, err := r.eng.Lend(Request{Kind: Fetch, Rows: r.rows(2, 1)})
	assert.ErrorIs(t, err, ErrClosed)
	close(gate)
	r.sync()
	r.dev.CompleteAll()
	r.sync()
	assert.Equal(t, State(StateReleased), r.state(h))
	assert.True(t, r.eng.Report().Drained)
	assert.Equal(t, pattern(0xDE, 1, 0), r.deviceRow(rows[0]))
}

// Rule 8: with 4 slots and slot 1 quarantined, a 3-row lease can never be
// granted: it is reported at once and the 1-row lease behind it is granted.
func TestRule8UngrantableIsReportedAndTheLineMoves(t *testing.T) {
	r := newRig(t, 4)
	first, _, _ := r.fetch(1, 1) // slot 0
	q, _, _ := r.fetch(2, 1)     // slot 1, contained below
	_ = first
	three := r.lend(Request{Kind: Fetch, Rows: r.rows(3, 3)})
	one := r.lend(Request{Kind: Fetch, Rows: r.rows(4, 1)})
	r.sync()
	require.Equal(t, State(StateWaiting), r.state(three))
	// Release the first lease (miss, proven) and contain the second.
	r.be.set(r.be.attempts[0], contract.Delivered{})
	r.sync()
	require.NoError(t, r.eng.Release(first))
	r.be.setAnswer(false, nil)
	r.be.set(r.be.attempts[1], contract.Delivered{})
	r.clk.Advance(10 * time.Second)
	r.sync()
	require.Equal(t, State(StateQuarantined), r.state(q))
	info := r.info(three)
	assert.True(t, info.Ungrantable, "slots 0, 2, 3 are free but no three are contiguous")
	assert.Equal(t, State(StateWaiting), info.State)
	assert.NotEqual(t, State(StateWaiting), r.state(one), "the line moved on")
	assert.Equal(t, uint64(1), r.eng.Stats().Ungrantable)
	require.NoError(t, r.eng.Release(three))
	_, err := r.eng.Lend(Request{Kind: Fetch, Rows: r.rows(5, 3)})
	assert.ErrorIs(t, err, ErrUngrantable)
}

// Rule 11: a device row the stream cannot address is refused by Lend; a copy
// the device refuses before it starts quarantines nothing.
func TestRule11CallerMistakesAreRefusedAtTheDoor(t *testing.T) {
	r := newRig(t, 4)
	rows := r.rows(1, 1)
	rows[0].Device = 0xDEAD0000
	_, err := r.eng.Lend(Request{Kind: Fetch, Rows: rows})
	require.ErrorIs(t, err, ErrInvalidRequest)
	assert.Contains(t, err.Error(), "row 0")
	assert.Equal(t, 4, r.eng.Stats().SlotsFree, "bad input changes nothing")

	h, rows, a := r.fetch(2, 2)
	require.NoError(t, r.dev.Free(rows[1].Device)) // the caller frees a page it lent
	r.deliver(a, 2, 0, 1)
	r.sync()
	r.dev.CompleteAll()
	r.sync()
	info := r.info(h)
	assert.Equal(t, State(StateLogicallyComplete), info.State, "a refused copy is not unproven")
	assert.Contains(t, info.Reason, "refused")
	iv, err := r.eng.Readiness(h)
	require.NoError(t, err)
	assert.Equal(t, rigTPB, iv.UsableUntil, "the refused row did not arrive")
	require.NoError(t, r.eng.Release(h))
	assert.Equal(t, 0, r.eng.Stats().SlotsQuarantined)
}

// Rule 7: stale handles are refused and change nothing.
func TestRule7StaleHandlesAreRefused(t *testing.T) {
	r := newRig(t, 2, func(c *Config) { c.KeepReleased = 1 })
	h, _, a := r.fetch(1, 1)
	r.be.set(a, contract.Delivered{})
	r.sync()
	require.NoError(t, r.eng.Release(h))
	assert.ErrorIs(t, r.eng.Release(h), ErrStaleHandle, "released twice")
	for i := range 3 { // push the record out of KeepReleased and reuse it
		h2, _, a2 := r.fetch(2+i, 1)
		r.be.set(a2, contract.Delivered{})
		r.sync()
		require.NoError(t, r.eng.Release(h2))
	}
	_, err := r.eng.Lease(h)
	assert.ErrorIs(t, err, ErrStaleHandle)
	assert.ErrorIs(t, cancelErr(r.eng.Cancel(h)), ErrStaleHandle)
	assert.ErrorIs(t, r.eng.Release(Handle{}), ErrStaleHandle)
	// A live lease on the record h once named: the old handle never reaches it.
	live, _, _ := r.fetch(9, 1)
	require.Equal(t, h.Index(), live.Index(), "the record was reused")
	assert.ErrorIs(t, r.eng.Release(h), ErrStaleHandle)
	assert.ErrorIs(t, cancelErr(r.eng.Cancel(h)), ErrStaleHandle)
	assert.Equal(t, State(StateRequested), r.state(live), "the stale calls changed nothing")
	assert.False(t, r.info(live).ReleaseRequested)
}

// Rule 5: a Quiesce that does not answer within its timeout proves nothing.
func TestRule5QuiesceTimeoutIsNoProof(t *testing.T) {
	r := newRig(t, 2, func(c *Config) { c.QuiesceTimeout = 5 * time.Millisecond })
	r.be.gate = make(chan struct{}) // never opened while the test looks
	h, rows, a := r.fetch(1, 1)
	r.deliver(a, 1, 0)
	r.sync()
	r.entered()
	r.clk.Advance(5 * time.Millisecond) // the call's timeout, on the engine's clock
	r.sync()
	assert.Equal(t, State(StateServed), r.state(h), "a timed-out Quiesce is not a proof")
	assert.Equal(t, uint64(1), r.eng.Stats().QuiesceTimeouts)
	assert.Equal(t, pattern(0xDE, 1, 0), r.deviceRow(rows[0]))
	assert.Positive(t, r.eng.Stats().Unproven)
}

// Masks of views over 32 rows are found through the view's name index; a
// body reused for a lease of the same shape must not keep the old lease's
// arrivals: only the rows the new backend served are copied.
func TestRegressionMasksOfLargeViewsStartClear(t *testing.T) {
	const n = 40
	r := newRig(t, n)
	h, _, a := r.fetch(1, n)
	r.deliver(a, 1, func() []int {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return all
	}()...)
	r.sync()
	r.dev.CompleteAll()
	r.sync()
	require.NoError(t, r.eng.Release(h))
	// The next leases reuse the first's structures: its body, and the masks
	// the core swaps between a lease and its scratch. Each is served only
	// row 0, and none may inherit a served row of the first.
	for serial := 2; serial <= 4; serial++ {
		h2, rows2, a2 := r.fetch(serial, n)
		r.deliver(a2, serial, 0)
		r.sync()
		r.dev.CompleteAll()
		r.sync()
		assert.Equal(t, Partial, r.info(h2).Outcome)
		assert.Equal(t, pattern(0xC0, serial, 0), r.deviceRow(rows2[0]))
		for i := 1; i < n; i++ {
			assert.Equal(t, pattern(0xDE, serial, i), r.deviceRow(rows2[i]), "lease %d: row %d was never served", serial, i)
		}
		iv, err := r.eng.Readiness(h2)
		require.NoError(t, err)
		assert.Equal(t, rigTPB, iv.UsableUntil, "lease %d", serial)
		require.NoError(t, r.eng.Release(h2))
	}
}

// Rule 6: a quarantined lease keeps what its backend was handed for ever:
// after the owner releases it and later leases are lent, the extent the
// backend holds still names the same slot and name.
func TestRule6QuarantinedExtentIsNeverRebuilt(t *testing.T) {
	r := newRig(t, 4, func(c *Config) { c.KeepReleased = 1 })
	r.be.setAnswer(false, nil)
	h, _, a := r.fetch(1, 1)
	held := a.ext
	before := held.Unit(0)
	r.be.set(a, contract.Delivered{})
	r.clk.Advance(10 * time.Second)
	r.sync()
	require.Equal(t, State(StateQuarantined), r.state(h))
	require.NoError(t, r.eng.Release(h))
	// Parked: the attempt is kept for ever, and a sighting of it still out
	// would name a record that carries no handle any more: it is voided.
	id := uint32(h.Index())
	_, kept := r.eng.attempts.get(id)
	assert.True(t, kept, "a quarantined lease's attempt is kept")
	r.eng.attempts.mu.Lock()
	assert.True(t, bit(r.eng.attempts.changed, id), "the parked lease's sightings are void")
	r.eng.attempts.mu.Unlock()
	r.be.setAnswer(true, nil)
	for i := range 6 {
		h2, _, a2 := r.fetch(10+i, 1) // the same shape: a reused extent would be rebuilt in place
		r.be.set(a2, contract.Delivered{})
		r.sync()
		require.NoError(t, r.eng.Release(h2))
	}
	assert.Equal(t, before, held.Unit(0), "the held extent was rebuilt in place")
	assert.Equal(t, uint64(0), r.eng.Stats().InvariantBreaches)
}

// Rule 1: a lost device leaves its in-flight copies unproven; new leases are
// refused.
func TestRule1DeviceLossContainsInFlightCopies(t *testing.T) {
	r := newRig(t, 4)
	h, _, a := r.fetch(1, 1)
	r.deliver(a, 1, 0)
	r.sync()
	require.Equal(t, State(StateAccessFenced), r.state(h))
	r.dev.Lose("Xid 79")
	r.sync()
	assert.Equal(t, State(StateCopyUnproven), r.state(h))
	_, err := r.eng.Lend(Request{Kind: Fetch, Rows: []staging.Row{{Name: name(2, 0), Device: 1}}})
	assert.Error(t, err)
	r.clk.Advance(5 * time.Second)
	r.sync()
	assert.Equal(t, State(StateQuarantined), r.state(h))
}

// A publish's device→staging copies land before the backend is handed the
// slots, and the backend reads what the device held.
func TestPublishStagesBeforeSubmission(t *testing.T) {
	r := newRig(t, 4)
	rows := r.rows(1, 2)
	h := r.lend(Request{Kind: Publish, Rows: rows})
	r.sync()
	assert.Equal(t, State(StateGranted), r.state(h))
	r.be.mu.Lock()
	assert.Empty(t, r.be.attempts, "not submitted before its copies landed")
	r.be.mu.Unlock()
	r.dev.CompleteAll()
	r.sync()
	units := r.unitRows(r.be.last(t), len(rows))
	for i := range rows {
		assert.Equal(t, pattern(0xDE, 1, i), units[i])
	}
	assert.Equal(t, State(StateRequested), r.state(h))
}

// Bad input is refused and changes nothing.
func TestLendRefusesBadInput(t *testing.T) {
	r := newRig(t, 4)
	good := r.rows(1, 1)[0]
	for _, tc := range []struct {
		name string
		req  Request
		want string
	}{
		{"no rows", Request{Kind: Fetch}, "no rows"},
		{"bad kind", Request{Kind: 9, Rows: []staging.Row{good}}, "kind"},
		{"unknown group", Request{Kind: Fetch, Rows: []staging.Row{{Name: good.Name, Group: 3, Device: good.Device}}}, "layer group 3"},
		{"negative block", Request{Kind: Fetch, Rows: []staging.Row{{Name: good.Name, Block: -1, Device: good.Device}}}, "block ordinal -1"},
		{"no device", Request{Kind: Fetch, Rows: []staging.Row{{Name: good.Name}}}, "device address 0"},
		{"negative known", Request{Kind: Fetch, Rows: []staging.Row{good}, KnownBlocks: -1}, "KnownBlocks"},
		{"duplicate names", Request{Kind: Fetch, Rows: []staging.Row{good, {Name: good.Name, Block: 1, Device: good.Device}}}, "share a name"},
		{"blocks out of order", Request{Kind: Fetch, Rows: []staging.Row{{Name: name(1, 1), Block: 1, Device: good.Device}, {Name: name(1, 2), Block: 1, Device: good.Device}}}, "must increase"},
		{"too many rows", Request{Kind: Fetch, Rows: r.rows(2, 5)}, "slots"},
		{"deadline past int64", Request{Kind: Fetch, Rows: []staging.Row{good}, Deadline: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)}, "deadline 2300-01-01"},
		{"deadline before 1970", Request{Kind: Fetch, Rows: []staging.Row{good}, Deadline: time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)}, "want the zero Time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.eng.Lend(tc.req)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, 4, r.eng.Stats().SlotsFree)
			assert.Equal(t, uint64(0), r.eng.Stats().Lent)
		})
	}
}

// Found by the model suite: a release that frees slots must not stage the
// next lease on a stale clock. Here the waiting lease's explicit deadline
// passes (with its containment deadline) before the round that would submit
// it: it fails as timed out and is never exposed, never contained.
func TestRegressionGrantIsJudgedOnTheRoundsClock(t *testing.T) {
	r := newRig(t, 1)
	first, _, a := r.fetch(1, 1)
	late := r.lend(Request{Kind: Fetch, Rows: r.rows(2, 1), Deadline: r.clk.Now().Add(time.Second)})
	r.be.set(a, contract.Delivered{})
	r.sync()
	r.clk.Advance(time.Minute) // past the waiting lease's deadline and grace
	require.NoError(t, r.eng.Release(first))
	r.sync()
	info := r.info(late)
	assert.Equal(t, TimedOut, info.Outcome)
	assert.False(t, info.Exposed, "a lease whose deadline passed before its submission is never exposed")
	assert.Equal(t, State(StateLogicallyComplete), info.State)
	assert.Empty(t, r.contained)
	r.be.mu.Lock()
	assert.Len(t, r.be.attempts, 1, "the late lease never reached the backend")
	r.be.mu.Unlock()
}

// Found by the model suite: Close cancels a pending lease whose access proof
// and release were latched; the cancel completes and releases it at once, and
// Close must not then fire at the retired record.
func TestRegressionCloseAfterLatchedProofAndRelease(t *testing.T) {
	r := newRig(t, 2)
	h, _, _ := r.fetch(1, 1)
	require.NoError(t, r.eng.Retry(h)) // proof asked before the outcome: latched
	r.sync()
	require.NoError(t, r.eng.Release(h)) // release latched too
	require.Equal(t, State(StateRequested), r.state(h))
	rep := r.eng.Close()
	assert.Equal(t, State(StateReleased), r.state(h))
	assert.Equal(t, Cancelled, r.info(h).Outcome)
	assert.Equal(t, uint64(0), r.eng.Stats().InvariantBreaches)
	assert.True(t, rep.Drained)
}

// xid is NVML reporting an Xid for the device while the device itself keeps
// answering: the engine must not wait for its events to fail.
type xid struct{ lost bool }

func (x *xid) Lost(int) (bool, string) { return x.lost, "Xid 48: double-bit ECC error" }

// Rule 1 and 11: an Xid makes every copy in flight unproven — even if the
// device later reports it complete — and refuses new leases.
func TestRule1XidMakesInFlightCopiesUnproven(t *testing.T) {
	health := &xid{}
	r := newRig(t, 4, func(c *Config) { c.Health = health })
	h, _, a := r.fetch(1, 1)
	r.deliver(a, 1, 0)
	r.sync()
	require.Equal(t, State(StateAccessFenced), r.state(h), "proven; its copy is in flight")
	health.lost = true
	r.sync()
	assert.Equal(t, State(StateCopyUnproven), r.state(h))
	r.dev.CompleteAll() // the device says the copy completed: after an Xid it proves nothing
	r.sync()
	assert.Equal(t, State(StateCopyUnproven), r.state(h))
	_, err := r.eng.Lend(Request{Kind: Fetch, Rows: r.rows(2, 1)})
	assert.ErrorIs(t, err, ErrDeviceLost)
	r.clk.Advance(5 * time.Second)
	r.sync()
	assert.Equal(t, State(StateQuarantined), r.state(h))
	require.Len(t, r.contained, 1)
}

// An attempt answered before its submission returns (a backend serving from
// a local cache) is taken in by the round that submitted it, on the owner,
// and never handed to the watcher; the rest of the lifecycle is the usual
// one: the proof, then the copies of the served rows.
func TestAnswerAtSubmissionIsTakenInAtOnce(t *testing.T) {
	r := newRig(t, 4)
	rows := r.rows(1, 2)
	r.be.onSubmit = func(a *scriptAttempt) {
		var names []contract.Name
		for i := range a.ext.Len() {
			r.be.write(a, i, pattern(0xC0, 1, i))
			names = append(names, a.ext.Unit(i).Name)
		}
		a.outcome = contract.Delivered{Served: contract.NewNameSet(names...)}
	}
	// Quiesce waits at the gate, so that the worker's re-poll after a true
	// answer cannot race the count below.
	gate := make(chan struct{})
	r.be.gate = gate
	h := r.lend(Request{Kind: Fetch, Rows: rows})
	r.eng.Progress() // grant, submit and, at once, the answer
	a := r.be.last(t)
	require.Equal(t, 1, pollsOf(r.be, a), "polled once, by the round that submitted it")
	assert.NotEqual(t, State(StateRequested), r.state(h), "the answer was taken in by the submitting round")
	watched := r.eng.attempts.watching()
	assert.Zero(t, watched, "an answered attempt is not handed to the watcher")
	close(gate)
	r.sync() // the proof, then the copies
	r.dev.CompleteAll()
	r.sync()
	assert.Equal(t, State(StateLogicallyComplete), r.state(h))
	for i, row := range rows {
		assert.Equal(t, pattern(0xC0, 1, i), r.deviceRow(row), "row %d copied after the proof", i)
	}
	assert.Equal(t, 2, pollsOf(r.be, a), "then only the re-poll after the proof")
}

func pollsOf(s *script, a *scriptAttempt) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return a.polls
}

// Rule 11 and §7, through the runner users embed: a refused owner call of any
// kind leaves every lease's LeaseInfo and the engine's Stats exactly as they
// were.
func TestRefusedOwnerCallsChangeNothing(t *testing.T) {
	r := newRig(t, 4)
	served, _, a := r.fetch(1, 1)
	r.deliver(a, 1, 0)
	peer, _, b := r.fetch(2, 1)
	r.be.set(b, contract.Cancelled{ByPeer: true})
	r.be.gate = make(chan struct{}) // proofs stay outstanding: nothing is fenced while the test looks
	r.sync()
	done := r.lend(Request{Kind: Fetch, Rows: r.rows(3, 1)})
	r.sync()
	c := r.be.last(t)
	r.be.set(c, contract.Delivered{})
	r.sync()
	hs := []Handle{served, peer, done}
	snapshot := func() ([]LeaseInfo, Stats) {
		var infos []LeaseInfo
		for _, h := range hs {
			infos = append(infos, r.info(h))
		}
		return infos, r.eng.Stats()
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"cancel of a served lease", func() error { return cancelErr(r.eng.Cancel(served)) }},
		{"cancel of a lease the peer cancelled", func() error { return cancelErr(r.eng.Cancel(peer)) }},
		{"cancel of a stale handle", func() error { return cancelErr(r.eng.Cancel(HandleOf(served.Uint64() + 1<<32))) }},
		{"release of a stale handle", func() error { return r.eng.Release(Handle{}) }},
		{"retry of a stale handle", func() error { return r.eng.Retry(HandleOf(done.Uint64() + 1<<32)) }},
		{"a lend of no rows", func() error { _, err := r.eng.Lend(Request{Kind: Fetch}); return err }},
		{"a lend of an unknown kind", func() error { _, err := r.eng.Lend(Request{Rows: r.rows(4, 1)}); return err }},
		{"a fetch of blocks it knows", func() error {
			_, err := r.eng.Lend(Request{Kind: Fetch, Rows: r.rows(5, 1), KnownBlocks: 1})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			infos, stats := snapshot()
			require.Error(t, tc.call())
			gotInfos, gotStats := snapshot()
			assert.Equal(t, infos, gotInfos, "LeaseInfo changed")
			assert.Equal(t, stats, gotStats, "Stats changed")
		})
	}
	assert.True(t, r.info(peer).ByPeer, "the peer's cancel stays the peer's")
	close(r.be.gate)
}

// Both clocks the engine ships with can wake it: the system clock and
// gpu/sim's manual clock are TimerClocks.
var (
	_ TimerClock = systemClock{}
	_ TimerClock = (*sim.ManualClock)(nil) // gpu/sim
)

// Rules 2 and 3: the first answer the engine sees is the one the watcher's
// Poll saw. A backend that changes its answer right after a Poll returned it
// (a miss, then a failure) must not have its second answer taken for its
// first: the miss stays a miss.
func TestRegressionWatcherSightingIsTheFirstAnswer(t *testing.T) {
	r := newRig(t, 4)
	r.be.setAnswer(false, nil) // no proof: the outcome stays as first latched
	h, _, a := r.fetch(1, 1)
	r.be.setThen(a, contract.Delivered{}, contract.Failed{Reason: "changed its mind"})
	r.sync()
	info := r.info(h)
	assert.Equal(t, Missed, info.Outcome, "the backend answered a miss first")
	r.be.mu.Lock()
	polls := a.polls
	r.be.mu.Unlock()
	assert.GreaterOrEqual(t, polls, 1)
}

// Readiness latency counts only leases whose readiness the manager can use:
// a failure's time goes to its own histogram, so a store that fails fast
// never reads as fast readiness.
func TestFailuresHaveTheirOwnLatency(t *testing.T) {
	r := newRig(t, 4)
	h, _, a := r.fetch(1, 1)
	r.be.set(a, contract.Failed{Reason: "store down"})
	r.sync()
	r.dev.CompleteAll()
	r.sync()
	require.NoError(t, r.eng.Release(h))
	r.sync()
	served, _, a2 := r.fetch(2, 1)
	r.deliver(a2, 2, 0)
	r.sync()
	r.dev.CompleteAll()
	r.sync()
	require.Equal(t, StateLogicallyComplete, r.state(served))
	st := r.eng.Stats()
	assert.Equal(t, uint64(1), st.FailureLatency.Total, "the failed fetch")
	assert.Equal(t, uint64(1), st.ReadyLatency.Total, "the served fetch only")
}

// SPEC §4 rule 19: a lease reports its physical disposition apart from its
// outcome. A cancel latches Cancelled at once, yet the memory stays QUIESCING
// — not reusable — until the backend proves its access over; a served fetch
// is QUIESCED_SUCCESS once complete; a lease withdrawn before its submission
// was never exposed; one contained is IN_DOUBT for ever.
func TestRule19DispositionIsApartFromTheOutcome(t *testing.T) {
	r := newRig(t, 4)
	waiting := r.lend(Request{Kind: Fetch, Rows: r.rows(9, 1)})
	assert.Equal(t, DispositionNotExposed, r.info(waiting).Disposition)

	h, _, a := r.fetch(1, 1)
	assert.Equal(t, DispositionActive, r.info(h).Disposition, "submitted: the backend may write")
	r.be.setAnswer(false, nil)
	require.NoError(t, cancelErr(r.eng.Cancel(h)))
	r.sync()
	info := r.info(h)
	assert.Equal(t, Cancelled, info.Outcome, "the logical result latched at once")
	assert.Equal(t, DispositionQuiescing, info.Disposition, "the memory is not reusable: access is unproven")
	assert.False(t, info.Disposition.Reusable())
	r.be.setAnswer(true, nil)
	require.NoError(t, r.eng.Retry(h))
	r.sync()
	r.dev.CompleteAll()
	r.sync()
	info = r.info(h)
	assert.Equal(t, DispositionQuiescedFailure, info.Disposition, "proven over after a cancel")
	assert.True(t, info.Disposition.Reusable())
	_ = a

	served, _, a2 := r.fetch(2, 1)
	r.deliver(a2, 2, 0)
	r.sync()
	r.dev.CompleteAll()
	r.sync()
	assert.Equal(t, DispositionQuiescedSuccess, r.info(served).Disposition)

	withdrawn := r.lend(Request{Kind: Fetch, Rows: r.rows(3, 4)}) // more rows than free slots: it waits
	require.NoError(t, cancelErr(r.eng.Cancel(withdrawn)))
	assert.Equal(t, DispositionNotExposed, r.info(withdrawn).Disposition, "withdrawn before its submission")

	stuck, _, a3 := r.fetch(4, 1)
	r.be.setAnswer(false, nil)
	r.be.set(a3, contract.Failed{Reason: "store gone"})
	r.sync()
	r.clk.Advance(time.Minute) // past the containment deadline
	r.sync()
	assert.Equal(t, DispositionInDoubt, r.info(stuck).Disposition, "contained: its end can never be proven")
	assert.False(t, r.info(stuck).Disposition.Reusable())
}
