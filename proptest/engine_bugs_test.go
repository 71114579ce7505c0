package proptest

import (
	"testing"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newBareEngine is an inline engine over a scripted backend with one pool
// group of slots slots.
func newBareEngine(t *testing.T, slots int) (*readiness.Engine, *scripted, *readiness.Memory) {
	t.Helper()
	dev, err := sim.New(0, 1<<16)
	require.NoError(t, err)
	stream, err := dev.NewStream()
	require.NoError(t, err)
	mem, err := readiness.NewMemory(readiness.Group{Slots: slots, SlotBytes: slotBytes})
	require.NoError(t, err)
	round := 0
	be := newScripted(mem, &round)
	eng, err := readiness.New(readiness.Config{Memory: mem, TokensPerBlock: tpb, Fetcher: be, Stream: stream,
		Clock: newClock(), Inline: true, RequestTimeout: time.Minute, Logger: discardLogger()})
	require.NoError(t, err)
	return eng, be, mem
}

// Found by TestModel: the allocator grants inside Lend (and inside the Free of
// another lease), before the engine takes the grant in its next round. A lease
// released (or withdrawn by Close) in that window is still waiting for the
// engine, but its ticket is granted, so cancelling the ticket is refused and
// its slots leaked for ever. Nothing was ever exposed, so they must return.
func TestReleaseOfAWaitingLeaseWhoseGrantIsPending(t *testing.T) {
	for _, tc := range []struct {
		desc string
		end  func(*readiness.Engine, readiness.Handle) error
	}{
		{"release", func(e *readiness.Engine, h readiness.Handle) error { return e.Release(h) }},
		{"close", func(e *readiness.Engine, h readiness.Handle) error { e.Close(); return nil }},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			eng, _, _ := newBareEngine(t, 2)
			h, err := eng.Lend(readiness.Request{Kind: readiness.Fetch, Rows: []readiness.Row{{Name: nameOf(1, 0, 0), Block: 0}}})
			require.NoError(t, err)
			info, err := eng.Lease(h)
			require.NoError(t, err)
			require.Equal(t, fsm.Waiting, info.State, "the engine takes grants in Progress")
			require.NoError(t, tc.end(eng, h))
			eng.Progress()
			st := eng.Stats()
			assert.Zero(t, st.InvariantBreaches, "the allocator refused to take the slots back")
			assert.Equal(t, 2, st.SlotsFree, "a lease that never left waiting exposed nothing: its slots return")
		})
	}
}

// Found by TestModel: a deadline that passed while the lease was not yet
// submitted (waiting for slots, or a publish whose device->staging copy was
// still in flight) was dropped, so once submitted the lease never timed out.
// Rule 7: a deadline turns a missing outcome into Failed("timeout").
func TestDeadlineThatPassedBeforeSubmission(t *testing.T) {
	clk := newClock()
	dev, err := sim.New(0, 1<<16)
	require.NoError(t, err)
	stream, err := dev.NewStream()
	require.NoError(t, err)
	mem, err := readiness.NewMemory(readiness.Group{Slots: 2, SlotBytes: slotBytes})
	require.NoError(t, err)
	round := 0
	be := newScripted(mem, &round)
	eng, err := readiness.New(readiness.Config{Memory: mem, TokensPerBlock: tpb, Publisher: be, Stream: stream,
		Clock: clk, Inline: true, RequestTimeout: time.Minute, Logger: discardLogger()})
	require.NoError(t, err)
	p, err := dev.Alloc(slotBytes)
	require.NoError(t, err)
	h, err := eng.Lend(readiness.Request{Kind: readiness.Publish, Deadline: clk.Now().Add(time.Second),
		Rows: []readiness.Row{{Name: nameOf(1, 0, 0), Device: p}}})
	require.NoError(t, err)
	eng.Progress() // granted; the device->staging copy is in flight
	clk.Advance(2 * time.Second)
	eng.Progress() // the deadline passes before submission
	dev.CompleteAll()
	eng.Progress() // the copy landed: submitted, and the backend never answers
	eng.Progress()
	info, err := eng.Lease(h)
	require.NoError(t, err)
	assert.Equal(t, readiness.Failed, info.Outcome, "state %v", info.State)
	assert.Contains(t, info.Reason, "timeout")
}

// Found while writing the test above: needQuiesce took the Fetcher's Quiesce
// method value before looking at the lease's kind, so an engine with a
// Publisher and no Fetcher panicked on its first Quiesce.
func TestPublishOnlyEngineQuiesces(t *testing.T) {
	dev, err := sim.New(0, 1<<16)
	require.NoError(t, err)
	stream, err := dev.NewStream()
	require.NoError(t, err)
	mem, err := readiness.NewMemory(readiness.Group{Slots: 1, SlotBytes: slotBytes})
	require.NoError(t, err)
	round := 0
	be := newScripted(mem, &round)
	eng, err := readiness.New(readiness.Config{Memory: mem, TokensPerBlock: tpb, Publisher: be, Stream: stream,
		Clock: newClock(), Inline: true, Logger: discardLogger()})
	require.NoError(t, err)
	p, err := dev.Alloc(slotBytes)
	require.NoError(t, err)
	h, err := eng.Lend(readiness.Request{Kind: readiness.Publish, Rows: []readiness.Row{{Name: nameOf(1, 0, 0), Device: p}}})
	require.NoError(t, err)
	eng.Progress()
	dev.CompleteAll()
	eng.Progress() // submitted
	be.byID[1].outcome = contract.Delivered{Served: be.byID[1].asked}
	require.NotPanics(t, func() { eng.Progress(); eng.Progress() })
	info, err := eng.Lease(h)
	require.NoError(t, err)
	assert.Equal(t, fsm.AccessFenced, info.State)
}
