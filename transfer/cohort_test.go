package transfer_test

import (
	"errors"
	"testing"
	"time"

	"github.com/kvready/kvready/transfer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A cohort config is refused with every mistake at once; what a session
// needs from each peer is named.
func TestNewCohortRefuses(t *testing.T) {
	good := config(t, false, kv0, aux0)
	legacy := configCaps(t, false, transfer.Caps(transfer.AttemptIdentity), kv0, kv1)
	otherPeer := config(t, false, kv0)
	otherPeer.Accessors[0].Agreement = agree(t, "prefill-b", 2, transfer.KnownCapabilities)
	for _, tc := range []struct {
		name   string
		now    time.Time
		mutate func(*transfer.CohortConfig)
		fields []string
	}{
		{"valid", at(0), func(*transfer.CohortConfig) {}, nil},
		{"no accessors", at(0), func(c *transfer.CohortConfig) { c.Accessors = nil }, []string{"accessors"}},
		{"an accessor twice", at(0), func(c *transfer.CohortConfig) { c.Accessors[1] = c.Accessors[0] }, []string{"accessors[1]"}},
		{"no agreement", at(0), func(c *transfer.CohortConfig) { c.Accessors[0].Agreement = transfer.Agreement{} }, []string{"accessors[0].agreement"}},
		{"an agreement with another peer", at(0), func(c *transfer.CohortConfig) { c.Accessors = otherPeer.Accessors }, []string{"accessors[0].agreement"}},
		{"peers lacking what the session needs", at(0), func(c *transfer.CohortConfig) { c.Accessors = legacy.Accessors },
			[]string{"accessors[0].agreement", "accessors[1].agreement"}},
		{"no role, no attempt, bad tokens", at(0), func(c *transfer.CohortConfig) {
			c.Accessors[0].ID.Role = 0
			c.Session.Attempt = 0
			c.Tokens = transfer.TokenRange{Start: 9, End: 1}
		}, []string{"session.attempt", "tokens", "accessors[0].role"}},
		{"no times", at(0), func(c *transfer.CohortConfig) {
			c.Submitted, c.Deadline, c.Containment = time.Time{}, time.Time{}, time.Time{}
		},
			[]string{"submitted", "deadline", "containment"}},
		{"containment before the deadline", at(0), func(c *transfer.CohortConfig) { c.Containment = at(50) }, []string{"containment"}},
		{"a creation after its deadline", at(100), func(*transfer.CohortConfig) {}, []string{"deadline"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			cfg.Accessors = append([]transfer.AccessorSpec(nil), good.Accessors...)
			tc.mutate(&cfg)
			c, err := transfer.NewCohort(tc.now, cfg)
			if tc.fields == nil {
				require.NoError(t, err)
				assert.Equal(t, transfer.NotExposed, c.Physical())
				assert.Nil(t, c.Outcome())
				return
			}
			assert.Nil(t, c)
			var ie *transfer.InputError
			require.True(t, errors.As(err, &ie), "%v", err)
			var fields []string
			for _, m := range ie.Mistakes {
				fields = append(fields, m.Field)
			}
			assert.Equal(t, tc.fields, fields)
		})
	}
}

func TestRequires(t *testing.T) {
	base := transfer.Caps(transfer.AttemptIdentity, transfer.EndpointIncarnation, transfer.ExactWriterTracking)
	for _, tc := range []struct {
		name string
		cfg  transfer.CohortConfig
		want transfer.CapabilitySet
	}{
		{"one writer, no lease: the peer's own fence", config(t, false, kv0), base | transfer.Caps(transfer.SubmissionFence)},
		{"several writers", config(t, false, kv0, aux0), base | transfer.Caps(transfer.SubmissionFence, transfer.MultiWriter)},
		{"leased", config(t, true, kv0), base | transfer.Caps(transfer.AllocationGenerationLeases)},
	} {
		assert.Equal(t, tc.want, tc.cfg.Requires(), tc.name)
	}
}

// step feeds evidence at a time and fails the test on a refusal.
func step(t *testing.T, c *transfer.Cohort, ms int, e transfer.Evidence) {
	t.Helper()
	require.NoError(t, c.Step(at(ms), e), "%v", e)
}

// The whole cohort: Delivered once every writer is done, at the least
// token_end, and reusable only once every writer is settled — a DONE from a
// peer that promised to send it after its flush settles it.
func TestDeliveredWhenEveryWriterIsDone(t *testing.T) {
	c := cohort(t, config(t, false, kv0, aux0, kv1))
	require.NoError(t, c.Expose(at(1)))
	assert.Equal(t, transfer.Active, c.Physical())
	step(t, c, 2, ev(transfer.Report, kv0, 32))
	step(t, c, 3, ev(transfer.Done, kv0, 64))
	step(t, c, 4, ev(transfer.Done, aux0, 64))
	assert.Nil(t, c.Outcome(), "one writer is not done")
	assert.Equal(t, transfer.Active, c.Physical())
	step(t, c, 5, ev(transfer.Done, kv1, 48))
	assert.Equal(t, transfer.Delivered{TokenEnd: 48}, c.Outcome())
	assert.Equal(t, transfer.QuiescedSuccess, c.Physical())
	require.NoError(t, c.Retire(at(6)))
}

// vLLM PR #56104: one writer's failure latches the outcome at once; the
// pages stay lent while a sibling may still write, however often they are
// polled or cancelled, and the outcome stays the first one.
func TestOneFailureLatchesAndReleasesNothing(t *testing.T) {
	c := cohort(t, config(t, false, kv0, aux0, kv1))
	require.NoError(t, c.Expose(at(1)))
	step(t, c, 2, ev(transfer.Failure, aux0, 0))
	f, ok := c.Outcome().(transfer.Failed)
	require.True(t, ok, "%v", c.Outcome())
	assert.Contains(t, f.Reason, "prefill-a/0/aux failed")
	assert.True(t, f.ReportsPending)
	assert.Equal(t, transfer.Quiescing, c.Physical())
	for i := range 3 {
		r := c.Cancel(at(3+i), "user abort")
		assert.Equal(t, transfer.AlreadyTerminal, r.Logical)
		assert.False(t, r.SafeToReuse())
		assert.True(t, r.Retryable)
		assert.Contains(t, r.Reason, "prefill-a/0/aux", "the failed writer is not settled by its failure")
		require.ErrorIs(t, c.Retire(at(3+i)), transfer.ErrNotReusable)
	}
	step(t, c, 10, ev(transfer.Done, kv0, 64))
	step(t, c, 11, ev(transfer.Done, kv1, 64))
	assert.Equal(t, transfer.Quiescing, c.Physical(), "the failed writer is still unproven")
	assert.False(t, transfer.ReportsPending(c.Outcome()), "every writer gave its final report")
	step(t, c, 12, ev(transfer.Quiesced, aux0, 0))
	assert.Equal(t, transfer.QuiescedFailure, c.Physical())
	assert.IsType(t, transfer.Failed{}, c.Outcome(), "the later DONEs never turn a failure into a delivery")
}

// What settles an accessor: a Quiesced always; a DONE only from a peer that
// granted PER_OPERATION_QUIESCENCE; a report, a failure, a peer's cancel or
// its death never.
func TestWhatSettles(t *testing.T) {
	noPerOp := transfer.KnownCapabilities &^ transfer.Caps(transfer.PerOperationQuiescence)
	for _, tc := range []struct {
		name     string
		caps     transfer.CapabilitySet
		evidence []transfer.EvidenceKind
		lost     bool
		settled  bool
	}{
		{"done after a promised flush", transfer.KnownCapabilities, []transfer.EvidenceKind{transfer.Done}, false, true},
		{"done without the promise", noPerOp, []transfer.EvidenceKind{transfer.Done}, false, false},
		{"done, then the transport's proof", noPerOp, []transfer.EvidenceKind{transfer.Done, transfer.Quiesced}, false, true},
		{"reports only", transfer.KnownCapabilities, []transfer.EvidenceKind{transfer.Report}, false, false},
		{"a failure", transfer.KnownCapabilities, []transfer.EvidenceKind{transfer.Failure}, false, false},
		{"a peer cancel", transfer.KnownCapabilities, []transfer.EvidenceKind{transfer.PeerCancel}, false, false},
		{"a dead peer", transfer.KnownCapabilities, nil, true, false},
		{"a dead peer whose DONE was already in flight", transfer.KnownCapabilities, []transfer.EvidenceKind{transfer.Done}, true, true},
		{"the transport's proof alone", transfer.KnownCapabilities, []transfer.EvidenceKind{transfer.Quiesced}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cohort(t, configCaps(t, false, tc.caps, kv0))
			require.NoError(t, c.Expose(at(1)))
			if tc.lost {
				n, err := c.PeerLost(at(2), kv0.Peer, 1, "connection reset")
				require.NoError(t, err)
				assert.Equal(t, 1, n)
			}
			for i, k := range tc.evidence {
				step(t, c, 3+i, ev(k, kv0, 64))
			}
			info := c.Info()
			assert.Equal(t, tc.settled, info.Accessors[0].Settled)
			if c.Outcome() == nil {
				c.Cancel(at(9), "test")
			}
			assert.Equal(t, tc.settled, c.Physical().Reusable(), "%v", c.Physical())
		})
	}
}

// Identity (ledger row C): evidence from an older attempt, another session,
// an accessor not expected or another incarnation is refused and changes
// nothing; so are duplicates, progress after a final report, and anything
// after retirement.
func TestIdentityRefusals(t *testing.T) {
	other := func(f func(*transfer.Evidence)) transfer.Evidence {
		e := ev(transfer.Done, kv0, 64)
		f(&e)
		return e
	}
	for _, tc := range []struct {
		name  string
		setup []transfer.Evidence
		e     transfer.Evidence
		want  error
	}{
		{"attempt zero: malformed", nil, other(func(e *transfer.Evidence) { e.Session.Attempt = 0 }), &transfer.InputError{}},
		{"a retried request's first attempt", nil, other(func(e *transfer.Evidence) { e.Session = transfer.SessionKey{Request: 7, Attempt: 1} }), nil},
		{"another request", nil, other(func(e *transfer.Evidence) { e.Session.Request = 8 }), transfer.ErrWrongSession},
		{"a later attempt", nil, other(func(e *transfer.Evidence) { e.Session.Attempt = 3 }), transfer.ErrWrongSession},
		{"an accessor not expected", nil, other(func(e *transfer.Evidence) { e.Accessor.Rank = 5 }), transfer.ErrUnknownAccessor},
		{"the peer's next incarnation", nil, other(func(e *transfer.Evidence) { e.Incarnation = 2 }), transfer.ErrStaleIncarnation},
		{"the peer's dead incarnation", nil, other(func(e *transfer.Evidence) { e.Incarnation = 1 }), nil},
		{"a duplicate DONE", []transfer.Evidence{ev(transfer.Done, kv0, 64)}, ev(transfer.Done, kv0, 64), transfer.ErrDuplicate},
		{"a DONE after a failure", []transfer.Evidence{ev(transfer.Failure, kv0, 0)}, ev(transfer.Done, kv0, 64), transfer.ErrDuplicate},
		{"a replayed report", []transfer.Evidence{ev(transfer.Report, kv0, 32)}, ev(transfer.Report, kv0, 16), transfer.ErrDuplicate},
		{"progress after DONE", []transfer.Evidence{ev(transfer.Done, kv0, 64)}, ev(transfer.Report, kv0, 64), transfer.ErrLate},
		{"a second quiescence", []transfer.Evidence{ev(transfer.Quiesced, kv0, 0)}, ev(transfer.Quiesced, kv0, 0), transfer.ErrDuplicate},
		{"a second peer cancel", []transfer.Evidence{ev(transfer.PeerCancel, kv0, 0)}, ev(transfer.PeerCancel, kv0, 0), transfer.ErrDuplicate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(t, false, kv0, aux0)
			cfg.Session.Attempt = 2 // a retry: attempt 1 was this request's first
			for i := range cfg.Accessors {
				cfg.Accessors[i].Agreement = agree(t, "prefill-a", 1, transfer.KnownCapabilities)
			}
			c := cohort(t, cfg)
			require.NoError(t, c.Expose(at(1)))
			for _, e := range tc.setup {
				e.Session = cfg.Session
				step(t, c, 2, e)
			}
			e := tc.e
			if e.Session == key1 && tc.want != transfer.ErrWrongSession {
				e.Session = cfg.Session
			}
			if tc.want == nil { // the current attempt and incarnation: accepted, as a control
				require.NoError(t, c.Step(at(3), e))
				return
			}
			before := c.Info()
			err := c.Step(at(3), e)
			if ie, ok := tc.want.(*transfer.InputError); ok {
				require.ErrorAs(t, err, &ie)
			} else {
				require.ErrorIs(t, err, tc.want)
			}
			assert.Equal(t, before, c.Info(), "a refusal changes nothing")
		})
	}
	t.Run("an older attempt", func(t *testing.T) {
		cfg := config(t, false, kv0)
		cfg.Session.Attempt = 2
		c := cohort(t, cfg)
		before := c.Info()
		require.ErrorIs(t, c.Step(at(1), ev(transfer.Done, kv0, 64)), transfer.ErrStaleAttempt)
		assert.Equal(t, before, c.Info())
	})
	t.Run("before anything was exposed", func(t *testing.T) {
		c := cohort(t, config(t, false, kv0))
		before := c.Info()
		require.ErrorIs(t, c.Step(at(1), ev(transfer.Done, kv0, 64)), transfer.ErrNotExposed)
		assert.Equal(t, before, c.Info())
		assert.Nil(t, c.Outcome(), "a stray DONE concludes nothing")
	})
	t.Run("after retirement", func(t *testing.T) {
		c := cohort(t, config(t, false, kv0))
		require.NoError(t, c.Expose(at(1)))
		step(t, c, 2, ev(transfer.Done, kv0, 64))
		require.NoError(t, c.Retire(at(3)))
		before := c.Info()
		require.ErrorIs(t, c.Step(at(4), ev(transfer.Done, kv0, 64)), transfer.ErrRetired)
		require.ErrorIs(t, c.Expose(at(4)), transfer.ErrRetired)
		require.ErrorIs(t, c.Retire(at(4)), transfer.ErrRetired)
		assert.Equal(t, transfer.AlreadyTerminal, c.Cancel(at(4), "late").Logical)
		assert.Equal(t, before, c.Info())
	})
}

// A token_end outside what was asked is a contract violation: the session
// fails and the accessor is not settled by it.
func TestTokenEndViolation(t *testing.T) {
	for _, e := range []transfer.Evidence{ev(transfer.Done, kv0, 65), ev(transfer.Report, kv0, 99)} {
		c := cohort(t, config(t, false, kv0))
		require.NoError(t, c.Expose(at(1)))
		step(t, c, 2, e)
		f, ok := c.Outcome().(transfer.Failed)
		require.True(t, ok)
		assert.Contains(t, f.Reason, "contract violation")
		assert.False(t, c.Info().Accessors[0].Settled)
		require.ErrorIs(t, c.Step(at(3), ev(transfer.Done, kv0, 64)), transfer.ErrDuplicate, "its word is not taken again")
		assert.Equal(t, transfer.Quiescing, c.Physical())
	}
}
