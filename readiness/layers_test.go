package readiness

import (
	"time"

	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/staging"
)

// rigLayers splits the rig's 16-byte slot in three layers; layer 1's bytes
// lie in two spans, around layer 2's.
var rigLayers = [][]staging.LayerSpans{{
	{Layer: 0, Spans: []staging.Span{{Offset: 0, Size: 4}}},
	{Layer: 1, Spans: []staging.Span{{Offset: 4, Size: 4}, {Offset: 12, Size: 4}}},
	{Layer: 2, Spans: []staging.Span{{Offset: 8, Size: 4}}},
}}

func withLayers(c *Config) { c.Layers = rigLayers }

// layerBytes is what a device row holds once the given layers landed: the
// served content in their spans, the row's old content elsewhere.
func layerBytes(old, served []byte, landed ...int) []byte {
	out := append([]byte(nil), old...)
	for _, k := range landed {
		for _, sp := range rigLayers[0][k].Spans {
			copy(out[sp.Offset:sp.End()], served[sp.Offset:sp.End()])
		}
	}
	return out
}

func (r *rig) layerStatuses(h Handle) []LayerStatus {
	r.t.Helper()
	var out []LayerStatus
	for k := range r.eng.Layers() {
		_, st, err := r.eng.LayerReadiness(h, k)
		require.NoError(r.t, err)
		out = append(out, st)
	}
	return out
}

// Rule 16: each layer's copies are followed by an event of their own, so a
// layer is ready — with its bytes on the device — as soon as its event
// completed, before the next layer's.
func TestRule16LayerByLayer(t *testing.T) {
	r := newRig(t, 4, withLayers)
	require.Equal(t, 3, r.eng.Layers())
	h, rows, a := r.fetch(1, 2)
	old := [][]byte{r.deviceRow(rows[0]), r.deviceRow(rows[1])}
	r.deliver(a, 1, 0, 1)
	r.sync()
	const P, R = LayerPending, LayerReady
	assert.Equal(t, []LayerStatus{P, P, P}, r.layerStatuses(h))
	for k, want := range [][]LayerStatus{{R, P, P}, {R, R, P}, {R, R, R}} {
		n, err := r.dev.CompleteNext(r.stream, 1)
		require.NoError(t, err)
		require.Equal(t, 1, n, "layer %d has an event of its own", k)
		r.sync()
		assert.Equal(t, want, r.layerStatuses(h), "after layer %d's event", k)
		landed := make([]int, k+1)
		for i := range landed {
			landed[i] = i
		}
		for i, row := range rows {
			assert.Equal(t, layerBytes(old[i], pattern(0xC0, 1, i), landed...), r.deviceRow(row), "row %d after layer %d", i, k)
		}
		iv, err := r.eng.WaitLayer(contextWithTimeout(t), h, k)
		require.NoError(t, err)
		assert.Equal(t, staging.Interval{RestartFloor: 0, UsableUntil: 2 * rigTPB}, iv)
	}
	assert.Equal(t, State(StateLogicallyComplete), r.state(h))
	whole, err := r.eng.Readiness(h)
	require.NoError(t, err)
	assert.Equal(t, staging.Interval{RestartFloor: 0, UsableUntil: 2 * rigTPB}, whole)
}

// Without Layers the whole slot is one layer: one event for the lease.
func TestWholeSlotCopiesAreOneLayer(t *testing.T) {
	r := newRig(t, 4)
	require.Equal(t, 1, r.eng.Layers())
	h, _, a := r.fetch(1, 2)
	r.deliver(a, 1, 0, 1)
	r.sync()
	assert.Equal(t, []LayerStatus{LayerPending}, r.layerStatuses(h))
	n, err := r.dev.CompleteNext(r.stream, 1)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	r.sync()
	assert.Equal(t, State(StateLogicallyComplete), r.state(h))
	assert.Equal(t, []LayerStatus{LayerReady}, r.layerStatuses(h))
}

// A failed layer ends the waits for it and every later layer at once; the
// layer before it stays ready, the lease's readiness is never answered and
// nothing is freed: the slots wait for containment.
func TestRule16FailedLayer(t *testing.T) {
	r := newRig(t, 4, withLayers)
	h, _, a := r.fetch(1, 2)
	r.deliver(a, 1, 0, 1)
	r.sync()
	_, err := r.dev.CompleteNext(r.stream, 1)
	require.NoError(t, err)
	_, err = r.dev.FailNext(r.stream, 1)
	require.NoError(t, err)
	r.sync()
	assert.Equal(t, []LayerStatus{LayerReady, LayerFailed, LayerFailed}, r.layerStatuses(h))
	for _, k := range []int{1, 2} {
		_, err := r.eng.WaitLayer(contextWithTimeout(t), h, k)
		require.ErrorIs(t, err, ErrLayerFailed, "layer %d", k)
		assert.Contains(t, err.Error(), "layer 1 failed")
	}
	_, err = r.eng.WaitLayer(contextWithTimeout(t), h, 0)
	require.NoError(t, err)
	assert.Equal(t, State(StateCopyUnproven), r.state(h))
	_, err = r.eng.Readiness(h)
	require.ErrorIs(t, err, ErrNotReady)
	require.NoError(t, r.eng.Release(h))
	r.dev.CompleteAll()
	r.sync()
	assert.Equal(t, State(StateCopyUnproven), r.state(h), "a failed copy frees nothing")
	assert.Equal(t, []LayerStatus{LayerReady, LayerFailed, LayerFailed}, r.layerStatuses(h), "the late event of a later layer changes nothing")
}

// WaitLayer sleeps on Wake, and a layer's event landing wakes it: no sleep
// loop. The events complete only once the wait is asleep, so the round that
// takes their completion is the woken wait's own — a round that lands a layer
// but moves no lease (the lease is fenced already), after which the wait must
// look again rather than sleep with its layer ready.
func TestWaitLayerIsWokenByItsEvent(t *testing.T) {
	r := newRig(t, 4, withLayers)
	h, _, a := r.fetch(1, 2)
	r.deliver(a, 1, 0, 1)
	r.sync()
	type result struct {
		err error
		st  []LayerStatus
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithCancel(contextWithTimeout(t))
	defer cancel()
	go func() {
		_, err := r.eng.WaitLayer(ctx, h, 1)
		var st []LayerStatus
		for k := range 3 {
			_, s, _ := r.eng.LayerReadiness(h, k)
			st = append(st, s)
		}
		done <- result{err, st}
	}()
	require.Eventually(t, func() bool {
		r.eng.mu.Lock()
		defer r.eng.mu.Unlock()
		return r.eng.wait.sleepers > 0
	}, 20*time.Second, 100*time.Microsecond, "the wait never went to sleep")
	_, err := r.dev.CompleteNext(r.stream, 2)
	require.NoError(t, err)
	res := <-done
	require.NoError(t, res.err)
	assert.Equal(t, []LayerStatus{LayerReady, LayerReady, LayerPending}, res.st)
}

func TestWaitLayerRefusesBadInput(t *testing.T) {
	r := newRig(t, 4, withLayers)
	h, _, _ := r.fetch(1, 1)
	_, err := r.eng.WaitLayer(contextWithTimeout(t), h, 3)
	require.ErrorIs(t, err, ErrInvalidRequest)
	_, err = r.eng.WaitLayer(contextWithTimeout(t), Handle{}, 0)
	require.ErrorIs(t, err, ErrStaleHandle)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = r.eng.WaitLayer(ctx, h, 0)
	require.ErrorIs(t, err, context.Canceled, "the outcome is pending: only ctx ends the wait")
}

// computeLayer stands for "compute layer k": it writes the layer's bytes of
// every row on the device, and into want, the rows' expected content.
func (r *rig) computeLayer(t require.TestingT, rows []staging.Row, want [][]byte, k int) {
	for i, row := range rows {
		for _, sp := range rigLayers[0][k].Spans {
			for j := sp.Offset; j < sp.End(); j++ {
				want[i][j] = byte(0x70 + 16*k + i)
			}
			require.NoError(t, r.dev.Write(row.Device+gpu.DevicePtr(sp.Offset), want[i][sp.Offset:sp.End()]))
		}
	}
}

// unitRows returns the staging rows of the units the backend was handed.
func (r *rig) unitRows(a *scriptAttempt, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		u := a.ext.Unit(i)
		out[i], _ = r.mem.Row(u.LocalGroup, u.Local)
	}
	return out
}

// Rule 16, publish: each layer's device→staging copies wait behind the
// owner's compute event for that layer; the publish goes to its backend
// only once every layer landed in staging, holding what each layer's
// compute wrote.
func TestRule16LayerwisePublish(t *testing.T) {
	r := newRig(t, 4, withLayers)
	rows := r.rows(1, 2)
	h := r.lend(Request{Kind: Publish, Layerwise: true, Rows: rows})
	r.sync()
	require.Equal(t, State(StateGranted), r.state(h))
	cs, err := r.dev.NewStream()
	require.NoError(t, err)
	computed := make([][]byte, len(rows)) // what the device rows hold once computed
	for i, row := range rows {
		computed[i] = r.deviceRow(row)
	}
	for k := range 3 {
		// "Compute layer k", and its stream records the event the copies
		// wait for.
		r.computeLayer(t, rows, computed, k)
		require.NoError(t, cs.(*sim.Stream).Compute(0))
		ev, err := cs.Record()
		require.NoError(t, err)
		require.NoError(t, r.eng.Computed(h, k, ev))
		r.sync()
		n, err := r.dev.CompleteNext(r.stream, 1)
		require.NoError(t, err)
		assert.Zero(t, n, "layer %d's copies wait for its compute", k)
		n, err = r.dev.CompleteNext(cs, 1)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		if k < 2 {
			n, err = r.dev.CompleteNext(r.stream, 1)
			require.NoError(t, err)
			assert.Equal(t, 1, n, "layer %d's own event", k)
			r.sync()
			assert.Equal(t, State(StateGranted), r.state(h), "layer %d of 3 landed: not submitted", k)
			r.be.mu.Lock()
			assert.Empty(t, r.be.attempts)
			r.be.mu.Unlock()
		}
	}
	r.dev.CompleteAll()
	r.sync()
	assert.Equal(t, computed, r.unitRows(r.be.last(t), len(rows)), "every unit holds every layer as computed")
	assert.Equal(t, State(StateRequested), r.state(h))
}

// A layer reported computed behind an event the stream cannot wait for
// copies nothing: the publish fails unsubmitted, its slots back once
// released.
func TestRule16LayerwisePublishBadEvent(t *testing.T) {
	r := newRig(t, 4, withLayers)
	h := r.lend(Request{Kind: Publish, Layerwise: true, Rows: r.rows(1, 1)})
	r.sync()
	for k := range 3 {
		ev := gpu.Event{}
		if k == 1 {
			ev = gpu.MakeEvent(1<<62, 1) // no stream of the device issued it
		}
		require.NoError(t, r.eng.Computed(h, k, ev))
		r.sync()
		r.dev.CompleteAll()
		r.sync()
	}
	info := r.info(h)
	assert.Equal(t, State(StateLogicallyComplete), info.State)
	assert.Equal(t, OutcomeKind(fsm.Failure), info.Outcome)
	assert.Contains(t, info.Reason, "refused")
	assert.False(t, info.Exposed, "a unit with a layer missing is never submitted")
	require.NoError(t, r.eng.Release(h))
	r.sync()
	assert.Equal(t, 4, r.eng.Stats().SlotsFree)
}

// A stream that cannot wait at all refuses an event at the door.
func TestComputedNeedsAWaiter(t *testing.T) {
	r := newRig(t, 4, withLayers)
	h := r.lend(Request{Kind: Publish, Layerwise: true, Rows: r.rows(1, 1)})
	r.sync()
	r.eng.stream = noWait{r.eng.stream}
	err := r.eng.Computed(h, 0, gpu.MakeEvent(5, 1))
	assert.ErrorIs(t, err, ErrInvalidRequest)
	assert.ErrorContains(t, err, "gpu.Waiter")
	require.NoError(t, r.eng.Computed(h, 0, gpu.Event{}), "computed already: nothing to wait for")
}

type noWait struct{ gpu.Stream }

// TestLayerwisePublishWaitsForCompute: whatever order the manager's compute
// events and the engine's copy events resolve in, a layerwise publish hands
// its backend every layer as computed — a layer's copy never ran before the
// compute it was reported behind. "Compute" here writes a layer's bytes on
// the device at the moment its event resolves, so a copy that did not wait
// stages the bytes from before.
func TestLayerwisePublishWaitsForCompute(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		r := newRig(t, 4, withLayers)
		rows := r.rows(1, 2)
		h := r.lend(Request{Kind: Publish, Layerwise: true, Rows: rows})
		r.sync()
		cs, err := r.dev.NewStream()
		require.NoError(rt, err)
		want := make([][]byte, len(rows))
		for i, row := range rows {
			want[i] = r.deviceRow(row)
		}
		var pending []int // computed layers whose compute event has not resolved, oldest first
		resolveCompute := func() {
			r.computeLayer(rt, rows, want, pending[0])
			pending = pending[1:]
			n, err := r.dev.CompleteNext(cs, 1)
			require.NoError(rt, err)
			require.Equal(rt, 1, n)
		}
		reported := 0
		for range rapid.IntRange(0, 12).Draw(rt, "steps") {
			switch rapid.IntRange(0, 2).Draw(rt, "what") {
			case 0:
				if reported < 3 {
					require.NoError(rt, cs.(*sim.Stream).Compute(0))
					ev, err := cs.Record()
					require.NoError(rt, err)
					require.NoError(rt, r.eng.Computed(h, reported, ev))
					pending = append(pending, reported)
					reported++
				}
			case 1:
				if len(pending) > 0 {
					resolveCompute()
				}
			case 2:
				_, err := r.dev.CompleteNext(r.stream, rapid.IntRange(1, 3).Draw(rt, "copy events"))
				require.NoError(rt, err)
			}
			r.sync()
		}
		for ; reported < 3; reported++ {
			r.computeLayer(rt, rows, want, reported) // computed and synchronised already
			require.NoError(rt, r.eng.Computed(h, reported, gpu.Event{}))
			r.sync()
		}
		for len(pending) > 0 {
			resolveCompute()
		}
		r.dev.CompleteAll()
		r.sync()
		require.Equal(rt, want, r.unitRows(r.be.last(t), len(rows)), "every unit: every layer as computed")
	})
}
