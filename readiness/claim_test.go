package readiness

import (
	"context"
	"time"

	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/staging"
)

// SPEC §4 rule 17: the engine owns the memory it lends. One live engine over
// a staging.Memory at a time; what an engine left out of circulation stays
// out for every later engine over the memory.

// assemble builds a second engine, or a core driven by hand, from a config.
var assemblers = []struct {
	name     string
	assemble func(Config) (func() int, error) // the hand-over of what it built
}{
	{"engine", func(c Config) (func() int, error) {
		e, err := New(c)
		if err != nil {
			return nil, err
		}
		return func() int { rep, _ := e.Shutdown(context.Background()); return rep.SlotsQuarantined }, nil
	}},
	{"core driven by hand", func(c Config) (func() int, error) {
		core, err := NewCore(c)
		if err != nil {
			return nil, err
		}
		return core.HandOver, nil
	}},
}

func TestSecondEngineOverHeldMemoryIsRefused(t *testing.T) {
	for _, tc := range assemblers {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 4)
			held, _, _ := r.fetch(1, 1) // the first engine is busy
			_, err := tc.assemble(r.cfg)
			require.ErrorIs(t, err, staging.ErrMemoryClaimed)
			assert.Regexp(t, `^engine#\d+ \(created \d{4}-`, r.eng.Name())
			assert.Contains(t, err.Error(), r.eng.Name(), "the refusal names the holder")
			assert.Equal(t, 0, r.mem.OutOfCirculation(), "the refused engine changed nothing on the memory")

			// The first engine goes on as if nothing happened.
			h, rows, a := r.fetch(2, 2)
			r.deliver(a, 2, 0, 1)
			r.sync()
			r.dev.CompleteAll()
			r.sync()
			require.Equal(t, State(StateLogicallyComplete), r.state(h))
			assert.Equal(t, pattern(0xC0, 2, 1), r.deviceRow(rows[1]))
			require.NoError(t, r.eng.Release(h))
			r.be.set(r.be.attempts[0], nil)
			require.NoError(t, cancelErr(r.eng.Cancel(held)))
			require.NoError(t, r.eng.Release(held))
			rep, err := r.eng.Shutdown(contextWithTimeout(t))
			require.NoError(t, err)
			require.True(t, rep.Drained)

			// Handed over, the memory is claimed at once, every slot free.
			handOver, err := tc.assemble(r.cfg)
			require.NoError(t, err, "the first engine's Shutdown returned: its claim ended")
			assert.Equal(t, 0, handOver())
		})
	}
}

func TestCoreDrivenByHandClaimsUntilHandOver(t *testing.T) {
	mem, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 2, SlotBytes: 8})
	require.NoError(t, err)
	cfg := Config{Memory: mem, TokensPerBlock: 1}
	first, err := NewCore(cfg)
	require.NoError(t, err)
	assert.Regexp(t, `^core#\d+ \(created `, first.Name())
	_, err = NewCore(cfg)
	require.ErrorIs(t, err, staging.ErrMemoryClaimed)
	assert.Contains(t, err.Error(), first.Name())
	_, err = New(Config{Memory: mem, TokensPerBlock: 1})
	require.Error(t, err, "an engine over the core's memory is refused too (or by its validation)")

	assert.False(t, first.HandedOver())
	assert.Equal(t, 0, first.HandOver())
	assert.True(t, first.HandedOver())
	_, err = first.Lend(Request{Kind: Fetch, Rows: []staging.Row{{Name: name(1, 0), Group: 0, Block: 0, Device: 1}}})
	require.ErrorIs(t, err, ErrClosed, "a core that handed its memory over lends nothing more")
	second, err := NewCore(cfg)
	require.NoError(t, err)
	assert.Equal(t, 0, second.Stats().SlotsInherited)
}

// quarantineOne lends a one-row fetch whose backend never proves its access
// over and runs the clock past its containment deadline.
func quarantineOne(t *testing.T, r *rig, serial int) (Handle, *scriptAttempt) {
	t.Helper()
	r.be.setAnswer(false, nil)
	h, _, a := r.fetch(serial, 1)
	r.clk.Advance(10 * time.Second) // deadline 5 s, grace 5 s
	r.sync()
	require.Equal(t, State(StateQuarantined), r.state(h))
	r.be.setAnswer(true, nil)
	return h, a
}

// restart assembles a new engine over the rig's memory, backend, device and
// clock; the rig's cleanup shuts the new one down.
func (r *rig) restart() *Engine {
	r.t.Helper()
	e, err := New(r.cfg)
	require.NoError(r.t, err)
	r.eng = e
	return e
}

// lendAll lends one-row fetches until the engine has no free slot, serves
// each with its own bytes and checks that none was given a slot in out.
func lendAll(t *testing.T, r *rig, out map[int]bool, late func()) {
	t.Helper()
	type lent struct {
		h    Handle
		row  staging.Row
		slot int
	}
	var all []lent
	for serial := 10; r.eng.Stats().SlotsFree > 0; serial++ {
		h, rows, a := r.fetch(serial, 1)
		runs, err := r.eng.Runs(h, nil)
		require.NoError(t, err)
		require.Len(t, runs, 1)
		slot := runs[0].First
		require.False(t, out[slot], "slot %d, out of circulation since an earlier engine, was lent again", slot)
		late()
		r.deliver(a, serial, 0)
		late()
		all = append(all, lent{h, rows[0], slot})
	}
	r.sync()
	late()
	r.dev.CompleteAll()
	r.sync()
	for i, l := range all {
		require.Equal(t, State(StateLogicallyComplete), r.state(l.h))
		assert.Equal(t, pattern(0xC0, 10+i, 0), r.deviceRow(l.row), "lease in slot %d reads its own bytes, never the late writer's", l.slot)
		require.NoError(t, r.eng.Release(l.h))
	}
	r.sync()
}

func TestRestartNeverRelendsWhatWasQuarantined(t *testing.T) {
	r := newRig(t, 4)
	_, a := quarantineOne(t, r, 1)
	// The old backend keeps the staging row it was handed.
	u := a.ext.Unit(0)
	kept, ok := r.mem.Row(u.LocalGroup, u.Local)
	require.True(t, ok)
	rep, err := r.eng.Shutdown(contextWithTimeout(t))
	require.NoError(t, err)
	require.Equal(t, 1, rep.SlotsQuarantined)

	e := r.restart()
	st := e.Stats()
	assert.Equal(t, 1, st.SlotsInherited, "the construction reports what it inherited")
	assert.Equal(t, 1, st.SlotsQuarantined, "inherited slots are out of circulation")
	assert.Equal(t, 3, st.SlotsFree)
	_, err = e.Lend(Request{Kind: Fetch, Rows: r.rows(9, 4)})
	require.ErrorIs(t, err, ErrUngrantable, "four slots in a row are never lendable again")

	writes := 0
	lendAll(t, r, map[int]bool{u.Local: true}, func() {
		writes++
		copy(kept, pattern(0xBB, 99, writes)) // the late writer
	})
	assert.Equal(t, pattern(0xBB, 99, writes), kept, "the late writer's bytes landed in the slot it kept, and only there")
	assert.Equal(t, 1, e.Stats().SlotsInherited)
}

func TestRestartAfterAHalt(t *testing.T) {
	r := newRig(t, 4, func(c *Config) { c.Containment = Fatal })
	r.be.setAnswer(false, nil)
	contained, _, _ := r.fetch(1, 1) // slot 0: deadline 15, contained at 20
	r.clk.Advance(5 * time.Second)
	unfinished, _, _ := r.fetch(2, 1) // slot 1: submitted at 15, never answered
	_, err := New(r.cfg)
	require.ErrorIs(t, err, staging.ErrMemoryClaimed, "the engine still runs")
	r.clk.Advance(5 * time.Second)
	r.sync()
	require.ErrorIs(t, r.eng.Err(), ErrHalted, "a containment under the fatal policy halts")
	old := r.eng
	_, err = old.Lease(contained)
	require.NoError(t, err)

	// Halted is abandoned: no Close is needed to restart.
	r.be.setAnswer(true, nil)
	e := r.restart()
	assert.Equal(t, 2, e.Stats().SlotsInherited, "the quarantined slot and the one the unfinished lease held")
	lendAll(t, r, map[int]bool{0: true, 1: true}, func() {})
	_, err = old.Shutdown(contextWithTimeout(t))
	require.ErrorIs(t, err, ErrHalted)
	info, err := old.Lease(unfinished)
	require.NoError(t, err)
	assert.True(t, info.State.Held(), "the halted engine released nothing: %v", info.State)
}

func TestRestartAfterShutdownInheritsNothing(t *testing.T) {
	r := newRig(t, 4)
	h, _, a := r.fetch(1, 2)
	r.deliver(a, 1, 0, 1)
	r.sync()
	r.dev.CompleteAll()
	r.sync()
	require.NoError(t, r.eng.Release(h))
	_, _, _ = r.fetch(2, 2) // still in flight at the shutdown: cancelled, proven, released
	rep, err := r.eng.Shutdown(contextWithTimeout(t))
	require.NoError(t, err)
	require.True(t, rep.Drained)

	e := r.restart()
	st := e.Stats()
	assert.Equal(t, 0, st.SlotsInherited)
	assert.Equal(t, 4, st.SlotsFree, "every slot is lendable again")
	h, _, _ = r.fetch(3, 4)
	runs, err := e.Runs(h, nil)
	require.NoError(t, err)
	assert.Equal(t, []staging.Run{{Group: 0, First: 0, Count: 4}}, runs)
}

// Close hands the memory over as it returns: what is still in flight then
// goes out of circulation with it (Shutdown hands every slot over).
func TestRestartAfterCloseInheritsWhatWasInFlight(t *testing.T) {
	r := newRig(t, 4)
	r.be.setAnswer(false, nil)
	_, _, _ = r.fetch(1, 1) // slot 0, its access unproven at Close
	old := r.eng
	rep := old.Close()
	require.Equal(t, 1, rep.SlotsHeld)
	e := r.restart()
	assert.Equal(t, 1, e.Stats().SlotsInherited)

	// The old engine drains later; the memory keeps the slot out all the same.
	r.be.setAnswer(true, nil)
	for i := 0; !old.Report().Drained && i < 100; i++ {
		r.clk.Advance(time.Second)
		_, err := old.Sync(contextWithTimeout(t))
		require.NoError(t, err)
	}
	require.True(t, old.Report().Drained)
	assert.Equal(t, 0, old.Stats().SlotsHeld)
	lendAll(t, r, map[int]bool{0: true}, func() {})
}
