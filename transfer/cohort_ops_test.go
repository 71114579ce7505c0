package transfer_test

import (
	"testing"

	"github.com/kvready/kvready/transfer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The deadlines are fixed at submission: no outcome by the deadline is
// Failed("timeout"); pages still unproven at the containment deadline are
// InDoubt for ever, whatever arrives later — activity in between moves
// neither.
func TestDeadlinesEndInContainment(t *testing.T) {
	c := cohort(t, config(t, false, kv0, aux0))
	require.NoError(t, c.Expose(at(1)))
	assert.Equal(t, at(100), c.NextDeadline())
	for ms := 10; ms < 100; ms += 10 {
		step(t, c, ms, ev(transfer.Report, kv0, int64(ms/10)))
	}
	assert.Nil(t, c.Outcome())
	c.Tick(at(100))
	f, ok := c.Outcome().(transfer.Failed)
	require.True(t, ok)
	assert.Contains(t, f.Reason, "timeout")
	assert.Equal(t, transfer.Quiescing, c.Physical())
	assert.Equal(t, at(200), c.NextDeadline())
	step(t, c, 150, ev(transfer.Done, kv0, 64))
	assert.IsType(t, transfer.Failed{}, c.Outcome(), "a DONE after the deadline does not revive the transfer")
	c.Tick(at(199))
	assert.Equal(t, transfer.Quiescing, c.Physical())
	c.Tick(at(200))
	assert.Equal(t, transfer.InDoubt, c.Physical())
	assert.True(t, c.NextDeadline().IsZero())
	before := c.Info()
	require.ErrorIs(t, c.Step(at(201), ev(transfer.Done, aux0, 64)), transfer.ErrContained)
	require.ErrorIs(t, c.Step(at(201), ev(transfer.Quiesced, aux0, 0)), transfer.ErrContained, "late proof cannot reverse containment")
	require.ErrorIs(t, c.Retire(at(202)), transfer.ErrNotReusable)
	require.ErrorIs(t, c.Expose(at(202)), transfer.ErrContained)
	r := c.Cancel(at(203), "operator")
	assert.Equal(t, transfer.CancelResult{Logical: transfer.AlreadyTerminal, Physical: transfer.InDoubt, Retryable: false, Reason: r.Reason}, r)
	assert.Contains(t, r.Reason, "prefill-a/0/aux")
	assert.Equal(t, before, c.Info())
}

// Evidence that arrives at the same time as a deadline sees the deadline
// first: the outcome is what the clock says it was at that time.
func TestDeadlineBeforeEvidenceAtTheSameTime(t *testing.T) {
	c := cohort(t, config(t, false, kv0))
	require.NoError(t, c.Expose(at(1)))
	step(t, c, 100, ev(transfer.Done, kv0, 64))
	assert.IsType(t, transfer.Failed{}, c.Outcome())
	assert.Equal(t, transfer.QuiescedFailure, c.Physical(), "the DONE still settles the writer")
}

// A session never exposed never holds anything: a cancel withdraws it (safe
// at once), its deadline passes without containment, and nothing can be
// exposed after.
func TestCancelBeforeExposureWithdraws(t *testing.T) {
	c := cohort(t, config(t, true, kv0))
	r := c.Cancel(at(1), "user")
	assert.Equal(t, transfer.Accepted, r.Logical)
	assert.Equal(t, transfer.NotExposed, r.Physical)
	assert.True(t, r.SafeToReuse())
	assert.False(t, r.Retryable)
	assert.Equal(t, transfer.Cancelled{ByPeer: false, ReportsPending: true}, c.Outcome())
	require.ErrorIs(t, c.Expose(at(2)), transfer.ErrFenced)
	c.Tick(at(500))
	assert.Equal(t, transfer.NotExposed, c.Physical())
	require.NoError(t, c.Retire(at(501)))
}

// B-OUTCOME: a cancel keeps its outcome when a writer later fails or
// finishes; the cancel's answer separates the logical result from the
// physical one, and the pages return only once every writer settled.
func TestCancelKeepsItsOutcome(t *testing.T) {
	c := cohort(t, config(t, false, kv0, aux0))
	require.NoError(t, c.Expose(at(1)))
	r := c.Cancel(at(2), "user")
	assert.Equal(t, transfer.Accepted, r.Logical)
	assert.Equal(t, transfer.Quiescing, r.Physical)
	assert.False(t, r.SafeToReuse())
	assert.True(t, r.Retryable)
	step(t, c, 3, ev(transfer.Failure, kv0, 0))
	step(t, c, 4, ev(transfer.PeerCancel, aux0, 0))
	step(t, c, 5, ev(transfer.Done, aux0, 64))
	assert.Equal(t, transfer.Cancelled{ByPeer: false, ReportsPending: false}, c.Outcome())
	assert.Equal(t, transfer.Quiescing, c.Physical(), "the failed writer is unproven")
	step(t, c, 6, ev(transfer.Quiesced, kv0, 0))
	r = c.Cancel(at(7), "again")
	assert.Equal(t, transfer.AlreadyTerminal, r.Logical)
	assert.Equal(t, transfer.QuiescedFailure, r.Physical)
	assert.True(t, r.SafeToReuse())
	assert.False(t, r.Retryable)
}

// A peer's cancel is a transfer error: Cancelled(by peer), which a local
// cancel after it does not change.
func TestPeerCancel(t *testing.T) {
	c := cohort(t, config(t, false, kv0))
	require.NoError(t, c.Expose(at(1)))
	step(t, c, 2, ev(transfer.PeerCancel, kv0, 0))
	assert.Equal(t, transfer.Cancelled{ByPeer: true, ReportsPending: true}, c.Outcome())
	assert.Equal(t, transfer.AlreadyTerminal, c.Cancel(at(3), "local").Logical)
	assert.Equal(t, transfer.Cancelled{ByPeer: true, ReportsPending: true}, c.Outcome())
}

// A leased session is reusable only once its lease is revoked. A
// revocation that fences settles every writer at once; one that refuses
// only new operations leaves each writer to settle on its own evidence.
func TestLeases(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fences   bool
		evidence []transfer.Evidence
		want     transfer.Physical
	}{
		{"fenced revocation, writers silent", true, nil, transfer.QuiescedFailure},
		{"new-only revocation, writers silent", false, nil, transfer.Quiescing},
		{"new-only revocation, the failed writer then proven quiesced", false, []transfer.Evidence{ev(transfer.Done, aux0, 64)}, transfer.QuiescedFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cohort(t, config(t, true, kv0, aux0))
			require.ErrorIs(t, c.Revoked(at(1), true), transfer.ErrNotExposed)
			require.NoError(t, c.Expose(at(1)))
			require.ErrorIs(t, c.Revoked(at(2), true), transfer.ErrOutcomePending)
			step(t, c, 3, ev(transfer.Done, kv0, 64))
			step(t, c, 4, ev(transfer.Failure, aux0, 0))
			for _, e := range tc.evidence {
				require.Error(t, c.Step(at(5), e), "aux already gave its final report")
				step(t, c, 5, ev(transfer.Quiesced, aux0, 0))
			}
			assert.Equal(t, transfer.Quiescing, c.Physical(), "not revoked yet")
			require.NoError(t, c.Revoked(at(6), tc.fences))
			require.ErrorIs(t, c.Revoked(at(7), tc.fences), transfer.ErrDuplicate)
			require.ErrorIs(t, c.Expose(at(7)), transfer.ErrFenced)
			assert.Equal(t, tc.want, c.Physical())
		})
	}
	c := cohort(t, config(t, false, kv0))
	require.NoError(t, c.Expose(at(1)))
	c.Cancel(at(2), "x")
	require.ErrorIs(t, c.Revoked(at(3), true), transfer.ErrNotLeased)
}

// A peer's death fails the session at once and settles nothing; a death
// reported for another incarnation, or twice, changes nothing.
func TestPeerLost(t *testing.T) {
	c := cohort(t, config(t, false, kv0, aux0, kv1))
	require.NoError(t, c.Expose(at(1)))
	_, err := c.PeerLost(at(2), "prefill-z", 1, "gone")
	require.ErrorIs(t, err, transfer.ErrUnknownAccessor)
	_, err = c.PeerLost(at(2), "prefill-a", 5, "gone")
	require.ErrorIs(t, err, transfer.ErrStaleIncarnation)
	assert.Nil(t, c.Outcome())
	n, err := c.PeerLost(at(3), "prefill-a", 1, "connection reset")
	require.NoError(t, err)
	assert.Equal(t, 2, n, "the KV and the aux writer of prefill-a")
	f, ok := c.Outcome().(transfer.Failed)
	require.True(t, ok)
	assert.Contains(t, f.Reason, "prefill-a#1 lost: connection reset")
	assert.True(t, f.ReportsPending, "prefill-b still owes its report")
	_, err = c.PeerLost(at(4), "prefill-a", 1, "again")
	require.ErrorIs(t, err, transfer.ErrDuplicate)
	step(t, c, 5, ev(transfer.Done, kv1, 64))
	assert.False(t, transfer.ReportsPending(c.Outcome()), "a lost peer owes nothing more")
	assert.Equal(t, transfer.Quiescing, c.Physical(), "a dead writer's posted writes may still land")
}

func TestFence(t *testing.T) {
	c := cohort(t, config(t, false, kv0))
	require.NoError(t, c.Expose(at(1)))
	require.NoError(t, c.Expose(at(2)), "a sender posts operation after operation")
	assert.Equal(t, transfer.Accepted, c.Fence(at(3)))
	assert.Equal(t, transfer.AlreadyTerminal, c.Fence(at(4)))
	require.ErrorIs(t, c.Expose(at(5)), transfer.ErrFenced, "vLLM #55470: nothing posted after the fence")
	assert.Nil(t, c.Outcome(), "a fence is not an outcome")
	step(t, c, 6, ev(transfer.Done, kv0, 64))
	assert.Equal(t, transfer.QuiescedSuccess, c.Physical())
}

// Time never runs backwards in the core: an earlier time counts as the
// latest one seen, so a deadline once passed stays passed.
func TestTimeNeverRunsBackwards(t *testing.T) {
	c := cohort(t, config(t, false, kv0))
	require.NoError(t, c.Expose(at(1)))
	c.Tick(at(100))
	require.IsType(t, transfer.Failed{}, c.Outcome())
	step(t, c, 50, ev(transfer.Done, kv0, 64))
	assert.IsType(t, transfer.Failed{}, c.Outcome())
	c2 := cohort(t, config(t, false, kv0))
	require.NoError(t, c2.Expose(at(1)))
	c2.Tick(at(150))
	c2.Tick(at(10))
	c2.Tick(at(199))
	assert.Equal(t, transfer.Quiescing, c2.Physical())
	c2.Tick(at(200))
	assert.Equal(t, transfer.InDoubt, c2.Physical())
}

// TestExposeTo: pages handed to some writers only wait for those. A writer
// whose offer was never made (its peer died before it, the session was
// cancelled between offers) owes no evidence, and its word is refused; the
// session still cannot be delivered without it.
func TestExposeTo(t *testing.T) {
	key := transfer.SessionKey{Request: 3, Attempt: 1}
	newCohort := func(t *testing.T) *transfer.Cohort {
		t.Helper()
		c, err := transfer.NewCohort(at(0), transfer.CohortConfig{Session: key, Tokens: transfer.TokenRange{End: 32},
			Accessors: []transfer.AccessorSpec{
				{ID: kv0, Agreement: agree(t, kv0.Peer, incOf(kv0.Peer), transfer.KnownCapabilities)},
				{ID: kv1, Agreement: agree(t, kv1.Peer, incOf(kv1.Peer), transfer.KnownCapabilities)},
			},
			Submitted: at(0), Deadline: at(100), Containment: at(200)})
		require.NoError(t, err)
		return c
	}
	done := func(id transfer.AccessorID) transfer.Evidence {
		return transfer.Evidence{Kind: transfer.Done, Session: key, Accessor: id, Incarnation: incOf(id.Peer), TokenEnd: 32}
	}
	t.Run("only the writers handed the pages are waited for", func(t *testing.T) {
		c := newCohort(t)
		require.NoError(t, c.ExposeTo(at(1), kv0))
		assert.Equal(t, transfer.Active, c.Physical())
		r := c.Cancel(at(2), "the second offer could not be made")
		assert.Equal(t, transfer.Quiescing, r.Physical, "kv0 holds the address and has not settled")
		require.NoError(t, c.Step(at(3), done(kv0)))
		assert.Equal(t, transfer.QuiescedFailure, c.Physical(), "kv1 never had the pages")
		require.NoError(t, c.Retire(at(4)))
	})
	t.Run("a writer never handed the pages is not heard", func(t *testing.T) {
		c := newCohort(t)
		require.NoError(t, c.ExposeTo(at(1), kv0))
		before := c.Info()
		assert.ErrorIs(t, c.Step(at(2), done(kv1)), transfer.ErrNotExposed)
		assert.Equal(t, before, c.Info())
	})
	t.Run("delivery needs every writer", func(t *testing.T) {
		c := newCohort(t)
		require.NoError(t, c.ExposeTo(at(1), kv0))
		require.NoError(t, c.Step(at(2), done(kv0)))
		assert.Nil(t, c.Outcome(), "kv1 never wrote: the transfer is not delivered")
		require.NoError(t, c.ExposeTo(at(3), kv1))
		require.NoError(t, c.ExposeTo(at(3), kv1), "handing the pages twice is one exposure")
		require.NoError(t, c.Step(at(4), done(kv1)))
		assert.Equal(t, transfer.Delivered{TokenEnd: 32}, c.Outcome())
		assert.Equal(t, transfer.QuiescedSuccess, c.Physical())
	})
	t.Run("refusals", func(t *testing.T) {
		c := newCohort(t)
		stranger := transfer.AccessorID{Peer: "prefill-z", Role: transfer.RoleKV}
		assert.ErrorIs(t, c.ExposeTo(at(1), stranger), transfer.ErrUnknownAccessor)
		assert.Equal(t, transfer.NotExposed, c.Physical(), "a refused exposure exposes nothing")
		c.Fence(at(2))
		assert.ErrorIs(t, c.ExposeTo(at(3), kv0), transfer.ErrFenced)
	})
}
