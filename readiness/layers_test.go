package readiness

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/fsm"
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
	assert.Equal(t, State(fsm.LogicallyComplete), r.state(h))
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
	assert.Equal(t, State(fsm.LogicallyComplete), r.state(h))
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
	assert.Equal(t, State(fsm.CopyUnproven), r.state(h))
	_, err = r.eng.Readiness(h)
	require.ErrorIs(t, err, ErrNotReady)
	require.NoError(t, r.eng.Release(h))
	r.dev.CompleteAll()
	r.sync()
	assert.Equal(t, State(fsm.CopyUnproven), r.state(h), "a failed copy frees nothing")
	assert.Equal(t, []LayerStatus{LayerReady, LayerFailed, LayerFailed}, r.layerStatuses(h), "the late event of a later layer changes nothing")
}

// WaitLayer sleeps on Wake, and a layer's event landing wakes it: no sleep
// loop.
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
