package readiness_test

import (
	"testing"
	"time"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/readiness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each outcome kind ends where the table says, with the slots back only after
// the fence, and a miss counted as a miss.
func TestOutcomeKinds(t *testing.T) {
	for _, tc := range []struct {
		mode        mem.Mode
		outcome     readiness.OutcomeKind
		final       fsm.State
		count       func(readiness.OutcomeCounts) uint64
		quarantined int
	}{
		{mem.Normal, readiness.Served, fsm.AccessFenced, func(c readiness.OutcomeCounts) uint64 { return c.Served }, 0},
		{mem.Miss, readiness.Missed, fsm.AccessFenced, func(c readiness.OutcomeCounts) uint64 { return c.Missed }, 0},
		{mem.Partial, readiness.Partial, fsm.AccessFenced, func(c readiness.OutcomeCounts) uint64 { return c.Partial }, 0},
		{mem.Fail, readiness.Failed, fsm.AccessFenced, func(c readiness.OutcomeCounts) uint64 { return c.Failed }, 0},
		{mem.CancelLocal, readiness.Failed, fsm.AccessFenced, func(c readiness.OutcomeCounts) uint64 { return c.Cancelled }, 0},
		{mem.CancelByPeer, readiness.Failed, fsm.AccessFenced, func(c readiness.OutcomeCounts) uint64 { return c.Cancelled }, 0},
		{mem.Reject, readiness.Failed, fsm.AccessFenced, func(c readiness.OutcomeCounts) uint64 { return c.Rejected }, 0},
		{mem.SlowQuiesce, readiness.Served, fsm.AccessFenced, func(c readiness.OutcomeCounts) uint64 { return c.Served }, 0},
		{mem.QuiesceFalse, readiness.Served, fsm.Quarantined, func(c readiness.OutcomeCounts) uint64 { return c.Served }, 2},
		{mem.QuiesceError, readiness.Served, fsm.Quarantined, func(c readiness.OutcomeCounts) uint64 { return c.Served }, 2},
		{mem.ServeUnasked, readiness.Failed, fsm.AccessFenced, func(c readiness.OutcomeCounts) uint64 { return c.Violations }, 0},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			r := newRig(t, 1, 4, []mem.Option{mem.WithMode(tc.mode), mem.WithSlowQuiesce(time.Millisecond)})
			r.store(0, 0, 1)
			h, err := r.eng.Lend(r.fetchRequest(1, 0, 1))
			require.NoError(t, err)
			r.until(h, tc.final)
			info, err := r.eng.Lease(h)
			require.NoError(t, err)
			assert.Equal(t, tc.outcome, info.Outcome, info.Reason)
			st := r.eng.Stats()
			assert.Equal(t, uint64(1), tc.count(st.Outcomes))
			if tc.mode == mem.Miss {
				assert.Zero(t, st.Outcomes.Failed+st.Outcomes.Violations, "misses never appear as failures")
			}
			assert.Equal(t, tc.quarantined, st.SlotsQuarantined)
			require.NoError(t, r.eng.Release(h))
			st = r.eng.Stats()
			assert.Equal(t, 4-tc.quarantined, st.SlotsFree, "fenced slots return; quarantined ones never do")
			assert.Equal(t, tc.quarantined, st.SlotsQuarantined)
		})
	}
}

// Rule 1: a release request before the fence is latched; the slots return only
// once the backend's access is proven over.
func TestReleaseWaitsForTheFence(t *testing.T) {
	gate := make(chan struct{})
	r := newRig(t, 1, 2, []mem.Option{mem.WithGate(func(mem.Call) <-chan struct{} { return gate })})
	r.store(0, 0)
	h, err := r.eng.Lend(r.fetchRequest(1, 0))
	require.NoError(t, err)
	r.until(h, fsm.Requested)
	require.NoError(t, r.eng.Release(h), "an early release is accepted and latched")
	for range 50 {
		r.eng.Progress()
	}
	info, err := r.eng.Lease(h)
	require.NoError(t, err, "the handle stays valid until the release happens")
	assert.Equal(t, fsm.Requested, info.State)
	assert.True(t, info.ReleaseRequested)
	assert.Equal(t, 1, r.eng.Stats().SlotsHeld, "no slot is recycled before its fence")

	close(gate)
	r.progress(func() bool { _, err := r.eng.Lease(h); return err != nil }, "release after the fence")
	assert.Equal(t, 2, r.eng.Stats().SlotsFree)
}

// Rule 7: a deadline turns a missing outcome into a timeout failure and starts
// the drain; it releases nothing.
func TestDeadlineNeverReleases(t *testing.T) {
	gate := make(chan struct{})
	r := newRig(t, 1, 2, []mem.Option{mem.WithGate(func(mem.Call) <-chan struct{} { return gate })})
	r.store(0, 0)
	req := r.fetchRequest(1, 0)
	req.Deadline = r.clock.Now().Add(time.Second)
	h, err := r.eng.Lend(req)
	require.NoError(t, err)
	r.until(h, fsm.Requested)
	require.NoError(t, r.eng.Release(h))
	r.clock.Advance(2 * time.Second)
	r.until(h, fsm.LogicallyComplete)
	info, err := r.eng.Lease(h)
	require.NoError(t, err)
	assert.Equal(t, readiness.Failed, info.Outcome)
	assert.Contains(t, info.Reason, "timeout")
	assert.Equal(t, uint64(1), r.eng.Stats().Outcomes.Timeouts)
	iv, err := r.eng.Readiness(h)
	require.NoError(t, err)
	assert.Zero(t, iv.UsableUntil, "a timed-out fetch has nothing usable")
	assert.Equal(t, 1, r.eng.Stats().SlotsHeld, "the deadline released nothing")

	close(gate) // the transfer ends; Quiesce can now prove it
	r.progress(func() bool { _, err := r.eng.Lease(h); return err != nil }, "release after the late proof")
	assert.Equal(t, 2, r.eng.Stats().SlotsFree)
	assert.Empty(t, r.contained)
}

// Rule 4: a drain grace period that expires with access unproven quarantines
// the slots for ever and raises the containment signal.
func TestDrainExpiryQuarantinesAndContains(t *testing.T) {
	gate := make(chan struct{})
	r := newRig(t, 1, 2, []mem.Option{mem.WithGate(func(mem.Call) <-chan struct{} { return gate })})
	defer close(gate)
	req := r.fetchRequest(1, 0)
	req.Deadline = r.clock.Now().Add(time.Second)
	h, err := r.eng.Lend(req)
	require.NoError(t, err)
	r.until(h, fsm.Requested)
	r.clock.Advance(2 * time.Second)
	r.until(h, fsm.LogicallyComplete)
	r.clock.Advance(2 * time.Hour) // past the drain grace
	r.until(h, fsm.Quarantined)
	require.Len(t, r.contained, 1)
	assert.Equal(t, h, r.contained[0].Lease)
	assert.Contains(t, r.contained[0].Reason, "drain grace period")
	st := r.eng.Stats()
	assert.Equal(t, 1, st.SlotsQuarantined)
	assert.Equal(t, uint64(1), st.Containments)

	require.NoError(t, r.eng.Release(h), "the manager may forget a quarantined lease")
	assert.Equal(t, 1, r.eng.Stats().SlotsQuarantined, "its slots never return")
	_, err = r.eng.Lend(r.fetchRequest(1, 0, 1))
	assert.ErrorIs(t, err, readiness.ErrInvalidRequest, "two slots can no longer be granted")
}

func TestPublishCopiesThenPublishes(t *testing.T) {
	r := newRig(t, 2, 4, nil)
	req := readiness.Request{Kind: readiness.Publish}
	for g := range 2 {
		for b := range 2 {
			p, err := r.dev.Alloc(slotBytes)
			require.NoError(t, err)
			n := name(g, b)
			require.NoError(t, r.dev.Write(p, content(n)))
			req.Rows = append(req.Rows, readiness.Row{Name: n, Group: g, Block: b, Device: p})
		}
	}
	r.autoCopy = false
	h, err := r.eng.Lend(req)
	require.NoError(t, err)
	r.until(h, fsm.Granted)
	for range 10 {
		r.eng.Progress()
	}
	assert.Equal(t, fsm.Granted, r.state(h), "nothing is submitted before the device-to-staging copy lands")
	r.autoCopy = true
	r.until(h, fsm.AccessFenced)
	for _, row := range req.Rows {
		got, ok := r.be.Get("trtllm:shared-kv:staging:1", row.Name)
		require.True(t, ok)
		assert.Equal(t, content(row.Name), got)
	}
	_, err = r.eng.Readiness(h)
	assert.ErrorIs(t, err, readiness.ErrNotReady, "readiness is a fetch's answer")
	require.NoError(t, r.eng.Release(h))
}

// A lost device makes its in-flight copies unproven and refuses new leases.
func TestDeviceLost(t *testing.T) {
	r := newRig(t, 1, 4, nil)
	r.store(0, 0)
	r.autoCopy = false
	h, err := r.eng.Lend(r.fetchRequest(1, 0))
	require.NoError(t, err)
	r.until(h, fsm.Served) // its copy to the device is queued, not completed
	later := r.fetchRequest(1, 1)
	r.dev.Lose("Xid 79: GPU has fallen off the bus")
	r.until(h, fsm.Quarantined)
	info, err := r.eng.Lease(h)
	require.NoError(t, err)
	assert.Contains(t, info.Reason, "fallen off the bus")
	_, err = r.eng.Lend(later)
	assert.ErrorIs(t, err, readiness.ErrDeviceLost)
}

// A backend that changes its answer is caught and reported, never trusted.
func TestFlippedOutcomeIsAViolation(t *testing.T) {
	r := newRig(t, 1, 4, []mem.Option{mem.WithMode(mem.FlipOutcome)})
	r.store(0, 0)
	r.autoCopy = false
	h, err := r.eng.Lend(r.fetchRequest(1, 0))
	require.NoError(t, err)
	r.progress(func() bool { return r.eng.Stats().Outcomes.Violations > 0 }, "the violation")
	info, err := r.eng.Lease(h)
	require.NoError(t, err)
	assert.Equal(t, readiness.Failed, info.Outcome)
	assert.Contains(t, info.Reason, "outcome changed")
}

func TestStaleHandles(t *testing.T) {
	r := newRig(t, 1, 1, []mem.Option{mem.WithMode(mem.Miss)})
	h1, err := r.eng.Lend(r.fetchRequest(1, 0))
	require.NoError(t, err)
	r.until(h1, fsm.AccessFenced)
	require.NoError(t, r.eng.Release(h1))
	h2, err := r.eng.Lend(r.fetchRequest(1, 0))
	require.NoError(t, err)
	assert.NotEqual(t, h1, h2, "a reused record carries a new generation")
	before := r.eng.Stats()
	for _, call := range []func() error{
		func() error { return r.eng.Release(h1) },
		func() error { _, err := r.eng.Lease(h1); return err },
		func() error { _, err := r.eng.Readiness(h1); return err },
		func() error { return r.eng.Release(readiness.Handle{}) },
	} {
		assert.ErrorIs(t, call(), readiness.ErrStaleHandle)
	}
	assert.Equal(t, before, r.eng.Stats(), "a stale handle changes nothing")
	r.until(h2, fsm.AccessFenced)
}

func TestBadRequestsChangeNothing(t *testing.T) {
	r := newRig(t, 2, 4, nil)
	good := r.fetchRequest(2, 0, 1)
	for _, tc := range []struct {
		desc string
		edit func(*readiness.Request)
		msg  string
	}{
		{"no rows", func(q *readiness.Request) { q.Rows = nil }, "no rows"},
		{"bad kind", func(q *readiness.Request) { q.Kind = 7 }, "want Fetch or Publish"},
		{"unknown group", func(q *readiness.Request) { q.Rows[0].Group = 5 }, "layer group 5"},
		{"negative group", func(q *readiness.Request) { q.Rows[0].Group = -1 }, "layer group -1"},
		{"negative block", func(q *readiness.Request) { q.Rows[0].Block = -1 }, "block ordinal -1"},
		{"negative known blocks", func(q *readiness.Request) { q.KnownBlocks = -2 }, "KnownBlocks"},
		{"blocks out of order", func(q *readiness.Request) { q.Rows[0].Block, q.Rows[1].Block = 1, 0 }, "must increase"},
		{"duplicate names", func(q *readiness.Request) { q.Rows[1].Name = q.Rows[0].Name }, "share a name"},
		{"more rows than slots", func(q *readiness.Request) {
			for b := 2; b < 7; b++ {
				q.Rows = append(q.Rows, readiness.Row{Name: name(0, b), Group: 0, Block: b})
			}
		}, "slots asked"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			req := good
			req.Rows = append([]readiness.Row(nil), good.Rows...)
			tc.edit(&req)
			before := r.eng.Stats()
			_, err := r.eng.Lend(req)
			require.ErrorIs(t, err, readiness.ErrInvalidRequest)
			assert.Contains(t, err.Error(), tc.msg)
			assert.Equal(t, before, r.eng.Stats(), "a refused lend changes nothing")
		})
	}
	h, err := r.eng.Lend(good)
	require.NoError(t, err, "the engine still lends after refusals")
	r.until(h, fsm.AccessFenced)
}

// Slots are granted in arrival order; a lease that does not fit waits at the
// head of the line and is granted when slots come back.
func TestWaitingLeasesAreGrantedInOrder(t *testing.T) {
	r := newRig(t, 1, 2, []mem.Option{mem.WithMode(mem.Miss)})
	a, err := r.eng.Lend(r.fetchRequest(1, 0, 1))
	require.NoError(t, err)
	b, err := r.eng.Lend(r.fetchRequest(1, 0))
	require.NoError(t, err)
	c, err := r.eng.Lend(r.fetchRequest(1, 1))
	require.NoError(t, err)
	r.until(a, fsm.AccessFenced)
	assert.Equal(t, fsm.Waiting, r.state(b))
	assert.Equal(t, fsm.Waiting, r.state(c))
	require.NoError(t, r.eng.Release(a))
	r.until(b, fsm.AccessFenced)
	r.until(c, fsm.AccessFenced)
	require.NoError(t, r.eng.Release(b))
	require.NoError(t, r.eng.Release(c))
	assert.Equal(t, 2, r.eng.Stats().SlotsFree)
}

func TestCloseCancelsWaitingAndDrains(t *testing.T) {
	gate := make(chan struct{})
	r := newRig(t, 1, 1, []mem.Option{mem.WithGate(func(mem.Call) <-chan struct{} { return gate })})
	a, err := r.eng.Lend(r.fetchRequest(1, 0))
	require.NoError(t, err)
	b, err := r.eng.Lend(r.fetchRequest(1, 1))
	require.NoError(t, err)
	r.until(a, fsm.Requested)
	rep := r.eng.Close()
	assert.False(t, rep.Drained, "a lease is still exposed")
	_, err = r.eng.Lease(b)
	assert.ErrorIs(t, err, readiness.ErrStaleHandle, "the waiting lease was cancelled")
	_, err = r.eng.Lend(r.fetchRequest(1, 2))
	assert.ErrorIs(t, err, readiness.ErrClosed)
	assert.Equal(t, 1, rep.SlotsHeld, "close frees nothing unproven")
	close(gate)
	r.progress(func() bool { return r.eng.Report().Drained }, "drain")
	assert.Equal(t, 1, r.eng.Stats().SlotsFree)
}

func TestNewRefusesBadConfig(t *testing.T) {
	_, err := readiness.New(readiness.Config{TokensPerBlock: -1, DrainGrace: -time.Second})
	require.Error(t, err)
	for _, want := range []string{"no Memory", "TokensPerBlock", "neither Fetcher nor Publisher", "no Stream", "DrainGrace"} {
		assert.Contains(t, err.Error(), want)
	}
	_, err = readiness.NewMemory()
	assert.Error(t, err)
	_, err = readiness.NewMemory(readiness.Group{Slots: 0, SlotBytes: 8})
	assert.ErrorContains(t, err, "pool group 0")
}

// A release requested before submission withdraws the lease: it is never
// exposed to the backend.
func TestReleaseBeforeSubmissionWithdraws(t *testing.T) {
	r := newRig(t, 1, 2, nil)
	req := readiness.Request{Kind: readiness.Publish}
	p, err := r.dev.Alloc(slotBytes)
	require.NoError(t, err)
	req.Rows = []readiness.Row{{Name: name(0, 0), Group: 0, Block: 0, Device: p}}
	r.autoCopy = false
	h, err := r.eng.Lend(req)
	require.NoError(t, err)
	r.until(h, fsm.Granted) // its device-to-staging copy is in flight
	require.NoError(t, r.eng.Release(h))
	assert.Equal(t, fsm.Granted, r.state(h), "the copy still touches the slot: the release waits")
	r.autoCopy = true
	r.progress(func() bool { _, err := r.eng.Lease(h); return err != nil }, "release")
	_, stored := r.be.Get("trtllm:shared-kv:staging:1", name(0, 0))
	assert.False(t, stored, "a lease released before submission is never exposed")
	assert.Equal(t, 2, r.eng.Stats().SlotsFree)
}

// Quarantine that leaves a waiting lease ungrantable takes it out of the line,
// so the leases behind it are not blocked for ever (liveness).
func TestHopelessWaitingLeaseDoesNotBlockTheLine(t *testing.T) {
	r := newRig(t, 1, 2, []mem.Option{mem.WithPolicy(func(c mem.Call) mem.Mode {
		if c.Seq == 1 {
			return mem.QuiesceFalse
		}
		return mem.Miss
	})})
	first, err := r.eng.Lend(r.fetchRequest(1, 0))
	require.NoError(t, err)
	whole, err := r.eng.Lend(r.fetchRequest(1, 0, 1)) // needs both slots
	require.NoError(t, err)
	small, err := r.eng.Lend(r.fetchRequest(1, 2))
	require.NoError(t, err)
	r.until(first, fsm.Quarantined) // one slot gone for ever
	r.until(small, fsm.AccessFenced)
	info, err := r.eng.Lease(whole)
	require.NoError(t, err)
	assert.Equal(t, fsm.Waiting, info.State)
	assert.Contains(t, info.Reason, "can never be granted")
	assert.True(t, info.Ungrantable)
	assert.Equal(t, uint64(1), r.eng.Stats().Hopeless)
	require.NoError(t, r.eng.Release(whole))
	require.NoError(t, r.eng.Release(small))
	require.NoError(t, r.eng.Release(first))
	st := r.eng.Stats()
	assert.Equal(t, 1, st.SlotsFree)
	assert.Equal(t, 1, st.SlotsQuarantined)
}

// A lease released while waiting, after the allocator granted it but before a
// round took the grant, gives its slots straight back (they were never
// exposed): none leaks.
func TestReleaseOfAGrantNotYetTaken(t *testing.T) {
	r := newRig(t, 1, 2, nil)
	h, err := r.eng.Lend(r.fetchRequest(1, 0, 1)) // granted inside Lend: the pool is empty
	require.NoError(t, err)
	assert.Equal(t, fsm.Waiting, r.state(h))
	require.NoError(t, r.eng.Release(h))
	st := r.eng.Stats()
	assert.Equal(t, 2, st.SlotsFree)
	assert.Zero(t, st.InvariantBreaches)
	r.eng.Progress()
	assert.Equal(t, 2, r.eng.Stats().SlotsFree)
}
