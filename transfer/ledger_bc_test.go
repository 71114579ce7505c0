package transfer_test

// The reference's acceptance ledger, milestones B (bounded retirement) and C
// (identity and coordinated cancellation); see ledger_test.go.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/kvready/kvready/transfer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// B-OUTCOME: the logical outcome is the event's, not the first observer's
// (test_receive_outcome_does_not_depend_on_polling_before_late_completion,
// test_receive_cancel_keeps_its_outcome_when_a_writer_later_fails,
// test_sender_cancel_survives_late_kv_and_aux_exceptions). Each ending is
// followed by the writers' late completions, with and without a poll in
// between, and the outcome is the one latched at the ending — a poll that
// moves the clock past the deadline changes nothing either, because evidence
// is judged at its own time.
func TestLedgerBOutcomeIsTheEventsNotTheObservers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ids    []transfer.AccessorID
		ending func(*testing.T, *transfer.Sessions)
		late   []transfer.Evidence // at 150
		pollAt int
		want   transfer.Outcome // Failed's reason is compared by kind and by reason text below
		reason string
	}{
		{"a sibling's failure, then the writer's success", []transfer.AccessorID{kv0, kv1},
			func(t *testing.T, s *transfer.Sessions) { give(t, s, 10, ev(transfer.Failure, kv1, 0)) },
			[]transfer.Evidence{ev(transfer.Done, kv0, 64)}, 120, transfer.Failed{}, "prefill-b/1/kv failed"},
		{"a local cancel, then the writers fail", []transfer.AccessorID{kv0, kv1},
			func(t *testing.T, s *transfer.Sessions) { s.Cancel(at(10), key1, "user") },
			[]transfer.Evidence{ev(transfer.Failure, kv0, 0), ev(transfer.Failure, kv1, 0)}, 120, transfer.Cancelled{}, ""},
		{"the peer's cancel, then the writers finish", []transfer.AccessorID{kv0, kv1},
			func(t *testing.T, s *transfer.Sessions) { give(t, s, 10, ev(transfer.PeerCancel, kv1, 0)) },
			[]transfer.Evidence{ev(transfer.Done, kv0, 64), ev(transfer.Done, kv1, 64)}, 120, transfer.Cancelled{ByPeer: true}, ""},
		{"the deadline, then the writers finish", []transfer.AccessorID{kv0, kv1},
			func(*testing.T, *transfer.Sessions) {},
			[]transfer.Evidence{ev(transfer.Done, kv0, 64), ev(transfer.Done, kv1, 64)}, 120, transfer.Failed{}, "timeout"},
		{"every writer done before the deadline, then a peer's cancel", []transfer.AccessorID{kv0, kv1},
			func(t *testing.T, s *transfer.Sessions) {
				give(t, s, 10, ev(transfer.Done, kv0, 64), ev(transfer.Done, kv1, 48))
			},
			[]transfer.Evidence{ev(transfer.PeerCancel, kv1, 0)}, 120, transfer.Delivered{TokenEnd: 48}, ""},
		{"a peer lost, then its sibling finishes", []transfer.AccessorID{kv0, kv1},
			func(t *testing.T, s *transfer.Sessions) { s.PeerLost(at(10), "prefill-b", 2, "connection reset") },
			[]transfer.Evidence{ev(transfer.Done, kv0, 64)}, 120, transfer.Failed{}, "prefill-b#2 lost"},
		{"a failure, then a local cancel", []transfer.AccessorID{kv0, kv1},
			func(t *testing.T, s *transfer.Sessions) {
				give(t, s, 10, ev(transfer.Failure, kv0, 0))
				assert.Equal(t, transfer.AlreadyTerminal, s.Cancel(at(11), key1, "user").Logical)
			},
			[]transfer.Evidence{ev(transfer.Done, kv1, 64)}, 120, transfer.Failed{}, "prefill-a/0/kv failed"},
		{"the sender cancels, then its KV and aux puts fail", []transfer.AccessorID{put0, put0x},
			func(t *testing.T, s *transfer.Sessions) { s.Cancel(at(10), key1, "user") },
			[]transfer.Evidence{ev(transfer.Failure, put0, 0), ev(transfer.Failure, put0x, 0)}, 120, transfer.Cancelled{}, ""},
	} {
		for _, poll := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: "", true: ", polled before"}[poll], func(t *testing.T) {
				s := exposedTable(t, config(t, false, tc.ids...))
				tc.ending(t, s)
				if poll {
					s.Poll(at(tc.pollAt), key1)
					o, _ := s.Outcome(key1)
					require.NotNil(t, o)
				}
				for _, e := range tc.late {
					_ = s.Step(at(150), e) // the writer's late word; a refusal is no failure of this test
				}
				o, _ := s.Outcome(key1)
				if f, ok := tc.want.(transfer.Failed); ok {
					got, isFailed := o.(transfer.Failed)
					require.True(t, isFailed, "%v", o)
					assert.Contains(t, got.Reason, tc.reason)
					assert.Equal(t, f.ReportsPending, got.ReportsPending, "every writer gave its final word")
					return
				}
				assert.Equal(t, tc.want, o)
			})
		}
	}
}

// B-LATE-DONE, positive evidence: a writer in doubt (it reported a failure;
// its posted writes may still land) is settled only by positive proof of
// its own access ending — not by progress, a contradictory success, another
// failure, its peer's cancel, a sibling's proof, its next life's or another
// session's word (test_late_settlement_requires_positive_retained_status,
// test_reordered_or_foreign_settlement_stays_invalid,
// test_settlement_does_not_clear_contradictory_evidence). Whatever arrives,
// the failure stays the outcome.
func TestLedgerBLateDoneRequiresPositiveEvidence(t *testing.T) {
	nextLife := ev(transfer.Quiesced, kv0, 0)
	nextLife.Incarnation = 2
	otherSession := ev(transfer.Quiesced, kv0, 0)
	otherSession.Session.Request = 8
	for _, tc := range []struct {
		name    string
		late    transfer.Evidence
		refused error // nil: accepted
		settles bool
	}{
		{"its progress report", ev(transfer.Report, kv0, 32), transfer.ErrLate, false},
		{"a success after its failure", ev(transfer.Done, kv0, 64), transfer.ErrDuplicate, false},
		{"a second failure", ev(transfer.Failure, kv0, 0), transfer.ErrDuplicate, false},
		{"its peer's cancel", ev(transfer.PeerCancel, kv0, 0), nil, false},
		{"a settled sibling's proof", ev(transfer.Quiesced, kv1, 0), nil, false},
		{"its peer's next incarnation's proof", nextLife, transfer.ErrStaleIncarnation, false},
		{"another session's proof", otherSession, transfer.ErrWrongSession, false},
		{"the transport's proof of its own access", ev(transfer.Quiesced, kv0, 0), nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cohort(t, config(t, false, kv0, kv1))
			require.NoError(t, c.Expose(at(1)))
			step(t, c, 2, ev(transfer.Failure, kv0, 0))
			step(t, c, 3, ev(transfer.Done, kv1, 64))
			latched := c.Outcome()
			err := c.Step(at(4), tc.late)
			if tc.refused != nil {
				require.ErrorIs(t, err, tc.refused)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, latched, c.Outcome(), "the failure stays the outcome")
			if tc.settles {
				assert.Equal(t, transfer.QuiescedFailure, c.Physical())
				return
			}
			assert.Equal(t, transfer.Quiescing, c.Physical())
			require.ErrorIs(t, c.Retire(at(5)), transfer.ErrNotReusable)
		})
	}
}

// B-LATE-DONE, idempotence (test_concurrent_late_done_retires_once_without_changing_failure):
// the same late settlement delivered by many callers at once is taken once;
// the pages are retired once; the failure stays the outcome.
func TestLedgerBLateDoneSettlesAndRetiresOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		before  []transfer.Evidence
		late    transfer.Evidence
		failure string
	}{
		{"the transport's proof for the failed writer", []transfer.Evidence{ev(transfer.Failure, kv0, 0), ev(transfer.Done, kv1, 64)},
			ev(transfer.Quiesced, kv0, 0), "prefill-a/0/kv failed"},
		{"a late DONE after a sibling's failure", []transfer.Evidence{ev(transfer.Failure, kv1, 0), ev(transfer.Quiesced, kv1, 0)},
			ev(transfer.Done, kv0, 64), "prefill-b/1/kv failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := transceiver(t, (&fakeClock{now: at(5)}).Now)
			require.NoError(t, tr.Create(config(t, false, kv0, kv1)))
			require.NoError(t, tr.Expose(key1))
			for _, e := range tc.before {
				require.NoError(t, tr.Deliver(e))
			}
			latched, _ := tr.Outcome(key1)
			const callers = 8
			settles := race(callers, func() error { return tr.Deliver(tc.late) })
			assert.Equal(t, 1, count(settles, nil), "the late settlement is taken once: %v", settles)
			assert.Equal(t, callers-1, count(settles, transfer.ErrDuplicate))
			o, _ := tr.Outcome(key1)
			require.IsType(t, transfer.Failed{}, o)
			assert.Equal(t, latched.(transfer.Failed).Reason, o.(transfer.Failed).Reason, "the failure stays the outcome")
			assert.Contains(t, o.(transfer.Failed).Reason, tc.failure)
			retires := race(callers, func() error { return tr.Retire(key1) })
			assert.Equal(t, 1, count(retires, nil), "retired once: %v", retires)
			assert.Equal(t, callers-1, count(retires, transfer.ErrRetired))
		})
	}
}

// race runs f from n goroutines released together and returns their errors.
func race(n int, f func() error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = f()
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// count is how many of errs are target (nil counts nils).
func count(errs []error, target error) int {
	n := 0
	for _, err := range errs {
		if (target == nil && err == nil) || (target != nil && err != nil && errors.Is(err, target)) {
			n++
		}
	}
	return n
}

// B-LATE-DONE, exactness (test_late_done_does_not_retire_active_sibling):
// the late proof settles the writer it names and no other; a sibling still
// out keeps the pages lent, and is the one a refused retirement names.
func TestLedgerBLateDoneDoesNotRetireAnActiveSibling(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sibling []transfer.Evidence
	}{
		{"the sibling is silent", nil},
		{"the sibling reported progress", []transfer.Evidence{ev(transfer.Report, kv1, 32)}},
		{"the sibling failed too", []transfer.Evidence{ev(transfer.Failure, kv1, 0)}},
		{"the sibling's peer cancelled", []transfer.Evidence{ev(transfer.PeerCancel, kv1, 0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := exposedTable(t, config(t, false, kv0, kv1))
			give(t, s, 2, ev(transfer.Failure, kv0, 0))
			give(t, s, 3, tc.sibling...)
			give(t, s, 4, ev(transfer.Quiesced, kv0, 0))
			info, _ := s.Info(key1)
			assert.True(t, info.Accessors[0].Settled)
			assert.False(t, info.Accessors[1].Settled)
			assert.Equal(t, transfer.Quiescing, info.Physical)
			err := s.Retire(at(5), key1)
			require.ErrorIs(t, err, transfer.ErrNotReusable)
			assert.Contains(t, err.Error(), "unsettled: "+kv1.String())
		})
	}
}

// B-DEADLINE: the quiescence clock cannot be reset
// (test_first_drain_trigger_cannot_be_extended,
// test_settlement_and_deadline_share_one_boundary,
// test_receiver_deadline_retains_kv_aux_and_registration). kvready is
// stricter than the reference, whose grace period starts at the first drain
// trigger: both deadlines are fixed at submission, so no trigger, early or
// late, and no second trigger moves containment; proof that arrives at the
// containment instant or after is refused; a contained session keeps its KV
// and aux pages and its registration, and stays contained.
func TestLedgerBDeadlineCannotBeExtended(t *testing.T) {
	triggers := map[string]func(*transfer.Sessions, int){
		"a cancel":           func(s *transfer.Sessions, ms int) { s.Cancel(at(ms), key1, "user") },
		"a writer's failure": func(s *transfer.Sessions, ms int) { _ = s.Step(at(ms), ev(transfer.Failure, aux0, 0)) },
		"a shutdown":         func(s *transfer.Sessions, ms int) { s.Shutdown(at(ms)) },
		"a peer lost":        func(s *transfer.Sessions, ms int) { s.PeerLost(at(ms), "prefill-a", 1, "reset") },
		"only the deadline":  func(*transfer.Sessions, int) {},
	}
	for name, trigger := range triggers {
		for _, ms := range []int{10, 150} {
			t.Run(name+" at "+time.Duration(ms*int(time.Millisecond)).String(), func(t *testing.T) {
				s := exposedTable(t, config(t, true, kv0, aux0))
				trigger(s, ms)
				s.Cancel(at(ms+20), key1, "a second trigger")
				assert.Equal(t, at(200), s.NextDeadline(), "containment is where submission put it")
				assert.Equal(t, transfer.Quiescing, s.Poll(at(200).Add(-time.Nanosecond), key1))
				assert.Equal(t, transfer.InDoubt, s.Poll(at(200), key1))
				require.ErrorIs(t, s.Step(at(201), ev(transfer.Quiesced, kv0, 0)), transfer.ErrContained)
				require.ErrorIs(t, s.Revoked(at(201), key1, true), transfer.ErrContained, "the registration is kept")
				require.ErrorIs(t, s.Retire(at(201), key1), transfer.ErrNotReusable, "the pages are kept")
				assert.Equal(t, transfer.InDoubt, s.Poll(at(10_000), key1))
				assert.True(t, s.Report(at(10_000)).Fatal)
			})
		}
	}
}

// B-DEADLINE, one boundary (test_settlement_and_deadline_share_one_boundary):
// proof arriving before the containment instant returns the pages; at it or
// after, containment came first.
func TestLedgerBDeadlineSharesOneBoundaryWithSettlement(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   time.Time
		want transfer.Physical
	}{
		{"a nanosecond before", at(200).Add(-time.Nanosecond), transfer.QuiescedFailure},
		{"at the instant", at(200), transfer.InDoubt},
		{"after", at(200).Add(time.Nanosecond), transfer.InDoubt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cohort(t, config(t, false, kv0))
			require.NoError(t, c.Expose(at(1)))
			step(t, c, 10, ev(transfer.Failure, kv0, 0))
			err := c.Step(tc.at, ev(transfer.Quiesced, kv0, 0))
			assert.Equal(t, tc.want, c.Physical())
			if tc.want == transfer.InDoubt {
				require.ErrorIs(t, err, transfer.ErrContained)
				return
			}
			require.NoError(t, err)
			require.NoError(t, c.Retire(tc.at))
		})
	}
}

// B-DEADLINE, independent progress (test_blocked_backend_cannot_delay_fatal_deadline):
// a caller blocked waiting for a backend holds nothing of the transceiver's,
// so a waiter reaches containment on its own at the deadline, on a real
// clock, while that caller is still blocked.
func TestLedgerBDeadlineNotHeldHostageByABlockedCaller(t *testing.T) {
	tr := transceiver(t, nil)
	now := time.Now()
	cfg := config(t, false, kv0)
	cfg.Submitted, cfg.Deadline, cfg.Containment = now, now.Add(20*time.Millisecond), now.Add(40*time.Millisecond)
	require.NoError(t, tr.Create(cfg))
	require.NoError(t, tr.Expose(key1))
	blocked, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // the backend call that never returns until the test says
		close(blocked)
		<-release
		_ = tr.Deliver(ev(transfer.Quiesced, kv0, 0))
	})
	<-blocked
	ctx, stop := context.WithTimeout(context.Background(), bound)
	defer stop()
	assert.Equal(t, transfer.InDoubt, tr.Quiesce(ctx, key1))
	require.NoError(t, ctx.Err(), "reached by the deadline, not by the test's bound")
	close(release)
	wg.Wait()
	assert.Equal(t, transfer.InDoubt, tr.Poll(key1), "the blocked caller's late proof reverses nothing")
}
