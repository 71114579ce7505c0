package transfer_test

import (
	"testing"
	"time"

	"github.com/kvready/kvready/transfer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var limits = transfer.Limits{Sessions: 4, Tombstones: 2, Window: 1000 * time.Millisecond}

func table(t *testing.T) *transfer.Sessions {
	t.Helper()
	s, err := transfer.NewSessions(limits)
	require.NoError(t, err)
	return s
}

func TestNewSessionsRefusesLimitsThatBoundNothing(t *testing.T) {
	_, err := transfer.NewSessions(transfer.Limits{})
	require.Error(t, err)
	for _, f := range []string{"sessions", "tombstones", "window"} {
		assert.Contains(t, err.Error(), f)
	}
}

// A cancel that overtakes a session's creation leaves a tombstone: the late
// creation is refused, evidence for it too; the tombstone is forgotten only
// once a creation it must refuse would be refused as late anyway.
func TestCancelBeforeCreateTombstone(t *testing.T) {
	s := table(t)
	r := s.Cancel(at(1), key1, "user")
	assert.Equal(t, transfer.Accepted, r.Logical)
	assert.Equal(t, transfer.NotExposed, r.Physical)
	assert.True(t, r.SafeToReuse())
	assert.Contains(t, r.Reason, "tombstoned")
	assert.Equal(t, transfer.NotExposed, s.Poll(at(2), key1))
	assert.Equal(t, transfer.AlreadyTerminal, s.Cancel(at(3), key1, "again").Logical)
	assert.Equal(t, transfer.AlreadyTerminal, s.Fence(at(3), key1))

	cfg := config(t, false, kv0) // submitted at 0
	require.ErrorIs(t, s.Create(at(5), cfg), transfer.ErrTombstoned)
	require.ErrorIs(t, s.Step(at(6), ev(transfer.Done, kv0, 64)), transfer.ErrTombstoned)
	_, held := s.Info(key1)
	assert.False(t, held)

	late := cfg
	late.Deadline, late.Containment = at(5000), at(6000)
	require.ErrorIs(t, s.Create(at(1000), late), transfer.ErrTooLate, "the window from submission has passed")
	s.Tick(at(1001))
	assert.Equal(t, transfer.InDoubt, s.Poll(at(1001), key1), "the tombstone is forgotten; nothing is known")
	require.ErrorIs(t, s.Create(at(1001), late), transfer.ErrTooLate, "and the late creation is still refused")
}

// The tombstone table is bounded: when full, a cancel for a session not yet
// created is Rejected, retryable and in doubt — never silently dropped.
func TestTombstonesAreBounded(t *testing.T) {
	s := table(t)
	for r := range 2 {
		assert.Equal(t, transfer.Accepted, s.Cancel(at(1), transfer.SessionKey{Request: transfer.RequestID(r), Attempt: 1}, "x").Logical)
	}
	r := s.Cancel(at(2), key1, "user")
	assert.Equal(t, transfer.CancelResult{Logical: transfer.Rejected, Physical: transfer.InDoubt, Retryable: true, Reason: r.Reason}, r)
	require.NoError(t, s.Create(at(3), config(t, false, kv0)), "nothing was recorded")
	assert.Equal(t, transfer.Accepted, s.Cancel(at(1001), transfer.SessionKey{Request: 9, Attempt: 1}, "x").Logical, "expired tombstones make room")
}

// A replayed creation is refused, a retired session's included, for the
// window; a full table refuses; after Shutdown nothing is created.
func TestCreateRefusals(t *testing.T) {
	s := table(t)
	cfg := config(t, false, kv0)
	require.NoError(t, s.Create(at(1), cfg))
	require.ErrorIs(t, s.Create(at(2), cfg), transfer.ErrExists)
	require.NoError(t, s.Expose(at(3), key1))
	require.NoError(t, s.Step(at(4), ev(transfer.Done, kv0, 64)))
	require.NoError(t, s.Retire(at(5), key1))
	err := s.Create(at(6), cfg)
	require.ErrorIs(t, err, transfer.ErrExists)
	assert.Contains(t, err.Error(), "retired")
	require.ErrorIs(t, s.Step(at(7), ev(transfer.Done, kv0, 64)), transfer.ErrRetired, "a DONE replayed after reuse")

	for r := range 3 {
		c := config(t, false, kv0)
		c.Session.Request = transfer.RequestID(100 + r)
		require.NoError(t, s.Create(at(8), c))
	}
	c := config(t, false, kv0)
	c.Session.Request = 200
	require.ErrorIs(t, s.Create(at(9), c), transfer.ErrFull)

	res := s.Shutdown(at(10))
	assert.Equal(t, 0, res.InDoubt, "nothing was exposed")
	assert.Equal(t, transfer.QuiescedSuccess, res.Physical, "the retired session delivered")
	c.Session.Request = 300
	require.ErrorIs(t, s.Create(at(11), c), transfer.ErrShutdown)
	assert.Equal(t, transfer.NotFound, s.Cancel(at(12), c.Session, "x").Logical)
}

// Evidence is routed by key: an older attempt of a live request is named as
// such, an unknown session refused, and a malformed piece refused before
// routing.
func TestRouting(t *testing.T) {
	s := table(t)
	cfg := config(t, false, kv0)
	cfg.Session.Attempt = 2
	require.NoError(t, s.Create(at(1), cfg))
	require.ErrorIs(t, s.Step(at(2), ev(transfer.Done, kv0, 64)), transfer.ErrStaleAttempt)
	e := ev(transfer.Done, kv0, 64)
	e.Session.Request = 99
	require.ErrorIs(t, s.Step(at(2), e), transfer.ErrUnknownSession)
	require.ErrorIs(t, s.Expose(at(2), e.Session), transfer.ErrUnknownSession)
	require.ErrorIs(t, s.Retire(at(2), e.Session), transfer.ErrUnknownSession)
	require.ErrorIs(t, s.Revoked(at(2), e.Session, true), transfer.ErrUnknownSession)
	assert.Equal(t, transfer.NotFound, s.Fence(at(2), e.Session))
	assert.Equal(t, transfer.InDoubt, s.Poll(at(2), e.Session), "an unknown session is never reported reusable")
	e.Incarnation = 0
	require.ErrorAs(t, s.Step(at(2), e), new(*transfer.InputError))
	_, ok := s.Outcome(e.Session)
	assert.False(t, ok)
}

// A peer's loss reaches every session with an accessor of that
// incarnation, and no other.
func TestPeerLostReachesEverySession(t *testing.T) {
	s := table(t)
	a := config(t, false, kv0, kv1)
	b := config(t, false, kv1)
	b.Session.Request = 8
	c := config(t, false, kv0)
	c.Session.Request = 9
	for _, cfg := range []transfer.CohortConfig{a, b, c} {
		require.NoError(t, s.Create(at(1), cfg))
		require.NoError(t, s.Expose(at(1), cfg.Session))
	}
	assert.Equal(t, 2, s.PeerLost(at(2), "prefill-b", 2, "reset"))
	assert.Equal(t, 0, s.PeerLost(at(2), "prefill-b", 1, "an old life"))
	for key, failed := range map[transfer.SessionKey]bool{a.Session: true, b.Session: true, c.Session: false} {
		o, ok := s.Outcome(key)
		require.True(t, ok)
		assert.Equal(t, failed, o != nil, "%v", key)
	}
}

// Shutdown cancels every session and reports those left in doubt: it stops
// admission but releases nothing.
func TestShutdownReportsInDoubt(t *testing.T) {
	s := table(t)
	a := config(t, false, kv0)
	b := config(t, false, kv1)
	b.Session.Request = 8
	for _, cfg := range []transfer.CohortConfig{a, b} {
		require.NoError(t, s.Create(at(1), cfg))
		require.NoError(t, s.Expose(at(1), cfg.Session))
	}
	require.NoError(t, s.Step(at(2), ev(transfer.Done, kv0, 64)))
	r := s.Shutdown(at(3))
	assert.Equal(t, transfer.InDoubt, r.Physical)
	assert.Equal(t, 1, r.InDoubt)
	assert.False(t, r.Fatal)
	assert.Contains(t, r.Reason, "8/1 QUIESCING")
	assert.False(t, r.SafeToReleaseManagers())
	o, _ := s.Outcome(b.Session)
	assert.Equal(t, transfer.Cancelled{ReportsPending: true}, o)
	r = s.Report(at(200))
	assert.True(t, r.Fatal, "contained at its deadline")
	assert.Equal(t, 1, r.InDoubt)
	assert.True(t, s.NextDeadline().IsZero(), "one session reusable, one contained: no deadline ahead")
	require.NoError(t, s.Retire(at(201), a.Session))
	assert.Equal(t, at(1000), s.NextDeadline(), "the retired key is forgotten a window after its submission")
}
