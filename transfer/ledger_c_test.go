package transfer_test

// The reference's acceptance ledger: B-CONTAINMENT and milestone C
// (coordinated cancellation); see ledger_test.go.

import (
	"testing"

	"github.com/kvready/kvready/transfer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// B-CONTAINMENT: fail closed, and fence before reuse
// (test_session_ack_cannot_bypass_existing_unsettled_access,
// test_missing_candidate_still_expires_and_late_ack_cannot_reverse_fatal).
// A peer's word that it is done cannot stand in for proof about a writer in
// doubt; a writer that never answers is contained at the deadline and its
// late word cannot reverse that; only a revocation that fences is a fence
// before reuse; and a peer's replacement serves new sessions while what its
// old life held stays contained. Killing processes is not this package's: the
// owner is told (Report's Fatal, SafeToReleaseManagers false).
func TestLedgerBContainmentFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		leased bool
		play   func(*testing.T, *transfer.Sessions)
		want   transfer.Physical // at 900 ms: past containment, within the window a retired key is remembered
		fatal  bool
	}{
		{"a peer's DONE cannot bypass its writer's failure", false, func(t *testing.T, s *transfer.Sessions) {
			give(t, s, 2, ev(transfer.Failure, kv0, 0))
			require.ErrorIs(t, s.Step(at(3), ev(transfer.Done, kv0, 64)), transfer.ErrDuplicate)
			give(t, s, 4, ev(transfer.Done, aux0, 64), ev(transfer.Done, kv1, 64))
			assert.Equal(t, transfer.Quiescing, s.Poll(at(5), key1))
			give(t, s, 6, ev(transfer.Quiesced, kv0, 0)) // the explicit settlement
		}, transfer.QuiescedFailure, false},
		{"a writer that never answers expires; its late word reverses nothing", false, func(t *testing.T, s *transfer.Sessions) {
			give(t, s, 2, ev(transfer.Done, kv0, 64), ev(transfer.Done, aux0, 64))
			assert.Equal(t, transfer.Failed{Reason: "timeout: no outcome by the deadline fixed at submission", ReportsPending: true},
				outcome(s, 150))
			assert.Equal(t, transfer.InDoubt, s.Poll(at(200), key1))
			require.ErrorIs(t, s.Step(at(201), ev(transfer.Done, kv1, 64)), transfer.ErrContained)
			require.ErrorIs(t, s.Step(at(201), ev(transfer.Quiesced, kv1, 0)), transfer.ErrContained)
		}, transfer.InDoubt, true},
		{"a revocation that fences is a fence before reuse", true, func(t *testing.T, s *transfer.Sessions) {
			s.Cancel(at(2), key1, "user")
			require.NoError(t, s.Revoked(at(3), key1, true))
			require.NoError(t, s.Retire(at(4), key1))
		}, transfer.QuiescedFailure, false},
		{"a revocation that cannot recall what was posted is no fence", true, func(t *testing.T, s *transfer.Sessions) {
			s.Cancel(at(2), key1, "user")
			require.NoError(t, s.Revoked(at(3), key1, false))
			assert.Equal(t, transfer.Quiescing, s.Poll(at(199), key1))
		}, transfer.InDoubt, true},
		{"a replacement serves while its old life's pages stay contained", false, func(t *testing.T, s *transfer.Sessions) {
			assert.Equal(t, 2, s.PeerLost(at(2), "prefill-a", 1, "process died"))
			fresh := transfer.CohortConfig{Session: transfer.SessionKey{Request: 8, Attempt: 1},
				Tokens: transfer.TokenRange{End: 64}, Submitted: at(3), Deadline: at(103), Containment: at(203),
				Accessors: []transfer.AccessorSpec{{ID: kv0, Agreement: agree(t, "prefill-a", 2, transfer.KnownCapabilities)}}}
			require.NoError(t, s.Create(at(3), fresh))
			require.NoError(t, s.Expose(at(3), fresh.Session))
			old := ev(transfer.Done, kv0, 64)
			old.Incarnation = 2 // the replacement answering for its old life's session
			require.ErrorIs(t, s.Step(at(4), old), transfer.ErrStaleIncarnation)
			old.Session = fresh.Session
			give(t, s, 5, old) // its own session
			require.NoError(t, s.Retire(at(6), fresh.Session))
		}, transfer.InDoubt, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := exposedTable(t, config(t, tc.leased, kv0, aux0, kv1))
			tc.play(t, s)
			r := s.Report(at(900))
			assert.Equal(t, tc.want, s.Poll(at(900), key1))
			assert.Equal(t, tc.fatal, r.Fatal)
			assert.Equal(t, !tc.fatal, r.SafeToReleaseManagers())
		})
	}
}

// outcome is key1's outcome read at ms.
func outcome(s *transfer.Sessions, ms int) transfer.Outcome {
	s.Tick(at(ms))
	o, _ := s.Outcome(key1)
	return o
}

// C-CANCELLATION, pending in the reference: replay-safe, coordinated
// cancellation of a transfer in flight — a participant's cancel, partial
// completion, replays of the cancel and of the evidence, a cancel of an
// attempt a retry replaced, and B's bounded containment for a writer that
// never answers. Every session here is a retry (attempt 2). Telling the
// peers to stop is not played: this package sends nothing to a peer on a
// cancel (docs/testing.md says so).
func TestLedgerCCancellationIsReplaySafe(t *testing.T) {
	for _, tc := range []struct {
		name string
		play func(*testing.T, *transfer.Sessions, transfer.SessionKey)
		want transfer.Outcome
		end  transfer.Physical // at 900 ms
	}{
		{"a cancel after partial completion", func(t *testing.T, s *transfer.Sessions, key transfer.SessionKey) {
			give(t, s, 2, about(key, transfer.Done, kv0, 64))
			r := s.Cancel(at(3), key, "user")
			assert.Equal(t, transfer.CancelResult{Logical: transfer.Accepted, Physical: transfer.Quiescing, Retryable: true, Reason: r.Reason}, r)
			assert.Contains(t, r.Reason, "unsettled: "+aux0.String(), "the finished writer is settled")
			give(t, s, 4, about(key, transfer.Done, aux0, 64)) // every writer done: still cancelled
		}, transfer.Cancelled{}, transfer.QuiescedFailure},
		{"a participant cancels, the owner's cancel and the replays change nothing", func(t *testing.T, s *transfer.Sessions, key transfer.SessionKey) {
			give(t, s, 2, about(key, transfer.PeerCancel, aux0, 0))
			before, _ := s.Info(key)
			assert.Equal(t, transfer.AlreadyTerminal, s.Cancel(at(3), key, "user").Logical)
			require.ErrorIs(t, s.Step(at(4), about(key, transfer.PeerCancel, aux0, 0)), transfer.ErrDuplicate)
			after, _ := s.Info(key)
			assert.Equal(t, before, after)
			give(t, s, 5, about(key, transfer.Done, kv0, 64), about(key, transfer.Done, aux0, 64))
		}, transfer.Cancelled{ByPeer: true}, transfer.QuiescedFailure},
		{"a cancel replayed, before and after the pages return", func(t *testing.T, s *transfer.Sessions, key transfer.SessionKey) {
			assert.Equal(t, transfer.Accepted, s.Cancel(at(2), key, "user").Logical)
			for range 3 {
				assert.Equal(t, transfer.AlreadyTerminal, s.Cancel(at(3), key, "replayed").Logical)
			}
			give(t, s, 4, about(key, transfer.Done, kv0, 64), about(key, transfer.Done, aux0, 64))
			require.NoError(t, s.Retire(at(5), key))
			r := s.Cancel(at(6), key, "replayed after reuse")
			assert.Equal(t, transfer.AlreadyTerminal, r.Logical)
			require.ErrorIs(t, s.Step(at(7), about(key, transfer.Done, kv0, 64)), transfer.ErrRetired)
		}, transfer.Cancelled{}, transfer.QuiescedFailure},
		{"a cancel of an attempt that a retry replaced", func(t *testing.T, s *transfer.Sessions, key transfer.SessionKey) {
			before, _ := s.Info(key)
			older := transfer.SessionKey{Request: key.Request, Attempt: key.Attempt - 1}
			assert.Equal(t, transfer.NotExposed, s.Cancel(at(2), older, "the first attempt's cancel, late").Physical)
			after, _ := s.Info(key)
			assert.Equal(t, before, after, "the retry is untouched")
			give(t, s, 3, about(key, transfer.Done, kv0, 64), about(key, transfer.Done, aux0, 64))
		}, transfer.Delivered{TokenEnd: 64}, transfer.QuiescedSuccess},
		{"a writer never answers the cancel: contained, and replays stay so", func(t *testing.T, s *transfer.Sessions, key transfer.SessionKey) {
			s.Cancel(at(2), key, "user")
			give(t, s, 3, about(key, transfer.Done, kv0, 64))
			assert.Equal(t, transfer.InDoubt, s.Poll(at(200), key))
			r := s.Cancel(at(201), key, "replayed")
			assert.Equal(t, transfer.CancelResult{Logical: transfer.AlreadyTerminal, Physical: transfer.InDoubt, Reason: r.Reason}, r,
				"not retryable: nothing can prove it now")
			require.ErrorIs(t, s.Step(at(202), about(key, transfer.Done, aux0, 64)), transfer.ErrContained)
		}, transfer.Cancelled{}, transfer.InDoubt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(t, false, kv0, aux0)
			cfg.Session.Attempt = 2 // a retry: attempt 1 was this request's first
			s := exposedTable(t, cfg)
			tc.play(t, s, cfg.Session)
			o, _ := s.Outcome(cfg.Session)
			switch want := tc.want.(type) {
			case transfer.Cancelled:
				got, ok := o.(transfer.Cancelled)
				require.True(t, ok, "%v", o)
				assert.Equal(t, want.ByPeer, got.ByPeer)
			default:
				assert.Equal(t, tc.want, o)
			}
			assert.Equal(t, tc.end, s.Poll(at(900), cfg.Session))
		})
	}
}

// about is evidence of kind from id about key's session.
func about(key transfer.SessionKey, kind transfer.EvidenceKind, id transfer.AccessorID, tokenEnd int64) transfer.Evidence {
	e := ev(kind, id, tokenEnd)
	e.Session = key
	return e
}

// C-CANCELLATION, a cancel that overtakes the creation
// (CANCEL_BEFORE_CREATE_TOMBSTONES): the late creation, its evidence and a
// replayed cancel are refused or change nothing, for as long as a creation
// could still arrive.
func TestLedgerCCancellationOvertakesCreation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		replay func(*transfer.Sessions) error
		want   error
	}{
		{"the late creation", func(s *transfer.Sessions) error { return s.Create(at(5), config(t, false, kv0)) }, transfer.ErrTombstoned},
		{"the creation replayed at the end of the window", func(s *transfer.Sessions) error {
			late := config(t, false, kv0)
			late.Deadline, late.Containment = at(5000), at(6000)
			return s.Create(at(1000), late)
		}, transfer.ErrTooLate},
		{"its writer's DONE", func(s *transfer.Sessions) error { return s.Step(at(5), ev(transfer.Done, kv0, 64)) }, transfer.ErrTombstoned},
		{"its exposure", func(s *transfer.Sessions) error { return s.Expose(at(5), key1) }, transfer.ErrTombstoned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := table(t)
			r := s.Cancel(at(1), key1, "user")
			require.Equal(t, transfer.Accepted, r.Logical)
			require.True(t, r.SafeToReuse(), "nothing was, or will be, exposed")
			assert.Equal(t, transfer.AlreadyTerminal, s.Cancel(at(2), key1, "replayed").Logical)
			require.ErrorIs(t, tc.replay(s), tc.want)
			_, held := s.Info(key1)
			assert.False(t, held)
		})
	}
}
