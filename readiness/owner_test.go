package readiness

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
)

// Releasing a quarantined lease is the owner giving up its claim: it is
// accepted, its slots stay out, and waiting for the release (or for the lease
// to settle) returns the quarantined lease instead of a stale handle. A second
// release is refused and changes nothing.
func TestReleasingAQuarantinedLeaseGivesUpTheClaim(t *testing.T) {
	r := newRig(t, 4)
	r.be.setAnswer(false, nil)
	h, _, _ := r.fetch(1, 2)
	r.clk.Advance(11 * time.Second) // past the containment deadline (15 + 5... from t=10: 20)
	r.sync()
	require.Equal(t, State(StateQuarantined), r.state(h))

	require.NoError(t, r.eng.Release(h), "the owner may give up a quarantined lease")
	for _, until := range []Until{UntilReleased, UntilSettled} {
		info, err := r.eng.Wait(contextWithTimeout(t), h, until)
		require.NoError(t, err, "Wait(%d) after releasing a quarantined lease", until)
		assert.Equal(t, State(StateQuarantined), info.State)
		assert.True(t, info.ReleaseRequested)
		assert.True(t, info.Contained)
	}
	_, err := r.eng.Readiness(h)
	require.ErrorIs(t, err, ErrNotReady)
	assert.ErrorContains(t, err, "quarantined")

	before := r.eng.Stats()
	err = r.eng.Release(h)
	require.ErrorIs(t, err, ErrStaleHandle, "a second release is refused")
	assert.ErrorContains(t, err, "quarantined")
	after := r.eng.Stats()
	assert.Equal(t, before.SlotsQuarantined, after.SlotsQuarantined)
	assert.Equal(t, 2, after.SlotsQuarantined, "the slots stay out for ever")
	assert.Equal(t, 1, after.Leases[State(StateQuarantined)])
}

// A cancel before submission withdraws the lease (SPEC §2): Cancelled locally,
// no request and no submission (there is no attempt), its slots back at once
// without a release — a publish's once its device→staging copies landed. A
// cancel is refused only for a stale handle or an outcome already latched,
// and then changes nothing.
func TestCancelBeforeSubmissionWithdrawsTheLease(t *testing.T) {
	r := newRig(t, 4, func(c *Config) { c.MaxOutstanding = 1 })
	withdrawn := func(h Handle) {
		t.Helper()
		info := r.info(h)
		assert.Equal(t, State(StateReleased), info.State)
		assert.Equal(t, Cancelled, info.Outcome)
		assert.False(t, info.ByPeer)
		assert.False(t, info.Exposed)
		assert.Contains(t, info.Reason, "cancelled locally")
	}

	// Right after Lend: waiting, holding nothing.
	a := r.lend(Request{Kind: Fetch, Rows: r.rows(1, 2)})
	require.NoError(t, cancelErr(r.eng.Cancel(a)))
	withdrawn(a)
	require.ErrorIs(t, r.eng.Release(a), ErrStaleHandle, "a withdrawn lease is released already")
	info, err := r.eng.Wait(contextWithTimeout(t), a, UntilReleased)
	require.NoError(t, err)
	assert.Equal(t, State(StateReleased), info.State)

	// Staged behind the admission bound, which x holds.
	x, _, xa := r.fetch(2, 1)
	b := r.lend(Request{Kind: Fetch, Rows: r.rows(3, 2)})
	r.sync()
	require.Equal(t, State(StateStaged), r.state(b))
	require.Equal(t, 1, r.eng.Stats().SlotsFree)
	require.NoError(t, cancelErr(r.eng.Cancel(b)))
	withdrawn(b)
	assert.Equal(t, 3, r.eng.Stats().SlotsFree, "the withdrawn lease's slots are back at once")

	// A publish whose device→staging copies are in flight keeps its slots
	// until they land, then is withdrawn.
	p := r.lend(Request{Kind: Publish, Rows: r.rows(4, 2)})
	r.sync()
	require.Equal(t, State(StateGranted), r.state(p))
	require.NoError(t, cancelErr(r.eng.Cancel(p)))
	r.sync()
	require.Equal(t, State(StateGranted), r.state(p), "the copies touching its slots have not landed")
	assert.Equal(t, 1, r.eng.Stats().SlotsFree)
	r.dev.CompleteAll()
	r.sync()
	withdrawn(p)
	assert.Equal(t, 3, r.eng.Stats().SlotsFree)

	st := r.eng.Stats()
	assert.Zero(t, st.CancelRequests, "no request: none of them had an attempt")
	r.be.mu.Lock()
	assert.Len(t, r.be.attempts, 1, "only x was ever submitted")
	r.be.mu.Unlock()

	// Once an outcome is latched, a cancel is refused and changes nothing.
	r.deliver(xa, 2, 0)
	r.sync()
	before, beforeStats := r.info(x), r.eng.Stats()
	require.NotEqual(t, NoOutcome, before.Outcome)
	_, err = r.eng.Cancel(x)
	var refused *fsm.RefusedError
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, before, r.info(x))
	after := r.eng.Stats()
	after.Refused, beforeStats.Refused = 0, 0
	after.Handoffs, beforeStats.Handoffs = 0, 0 // the engine's goroutines hand off whenever they run
	assert.Equal(t, beforeStats, after)
}

// neverReturns is the rig's backend whose Quiesce never returns until the
// test lets it go, whatever its context says.
type neverReturns struct {
	*script
	release chan struct{}
}

func (n neverReturns) Quiesce(context.Context, []contract.Attempt) (bool, error) {
	<-n.release
	return false, nil
}

// A shutdown that times out because a Quiesce call never returns says what
// is held, what is quarantined, what is still unproven and what is still out —
// not "0 slots still held" while the slots are quarantined.
func TestShutdownTimeoutSaysWhatIsHeldQuarantinedAndUnproven(t *testing.T) {
	stuck := neverReturns{release: make(chan struct{})}
	r := newRig(t, 4, func(c *Config) {
		stuck.script = c.Fetcher.(*script)
		c.Fetcher, c.Publisher = stuck, stuck
	})
	t.Cleanup(func() { close(stuck.release) }) // before the rig's shutdown
	r.be.onSubmit = func(a *scriptAttempt) {
		a.outcome = contract.Delivered{Served: contract.NewNameSet(a.ext.Unit(0).Name, a.ext.Unit(1).Name)}
	}
	q := r.lend(Request{Kind: Fetch, Rows: r.rows(1, 2)})
	r.eng.Progress() // submitted, served at once; its Quiesce call never returns
	require.Equal(t, State(StateServed), r.state(q))
	r.clk.Advance(11 * time.Second) // past its containment deadline (t = 20)
	r.eng.Progress()
	require.Equal(t, State(StateQuarantined), r.state(q))
	u := r.lend(Request{Kind: Fetch, Rows: r.rows(2, 2)})
	r.eng.Progress()
	require.Equal(t, State(StateServed), r.state(u))

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	rep, err := r.eng.Shutdown(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 2, rep.SlotsHeld)
	assert.Equal(t, 2, rep.SlotsQuarantined)
	assert.ErrorContains(t, err, "2 slots still held (1 leases with access or a copy still unproven), 2 slots quarantined, 2 Quiesce calls still unanswered")
	assert.Equal(t, 2, rep.InDoubt, "the quarantined lease and the one whose proof never came")
	assert.ErrorContains(t, err, "2 leases left in doubt (memory IN_DOUBT: not safe to release)")
	assert.False(t, rep.SafeToRelease())
}
