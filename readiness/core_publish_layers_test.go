package readiness

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/staging"
)

// A layerwise publish (SPEC §4 rule 16): the owner reports each layer
// computed, its device→staging copies go behind the owner's event, and the
// publish is submitted only once every layer landed in staging.

// grantedPublish lends a two-row layerwise publish and takes the round that
// grants it; nothing is copied yet.
func (r *coreRig) grantedPublish() Handle {
	r.t.Helper()
	h, err := r.c.Lend(Request{Kind: Publish, Layerwise: true, Rows: []staging.Row{
		{Name: coreName(1), Block: 0, Device: 0x1000},
		{Name: coreName(2), Block: 1, Device: 0x2000},
	}})
	require.NoError(r.t, err)
	r.tick(0)
	require.Equal(r.t, StateGranted, r.state(h))
	return h
}

func (r *coreRig) state(h Handle) State {
	r.t.Helper()
	info, err := r.c.Lease(h)
	require.NoError(r.t, err)
	return info.State
}

func (r *coreRig) layerDone(h Handle, k int) {
	r.t.Helper()
	require.NoError(r.t, r.c.Step(Evidence{What: LayerDone, Lease: h, Layer: k}))
	r.c.Advance()
}

func TestLayerwisePublishCopiesEachLayerBehindItsEvent(t *testing.T) {
	r := layeredRig(t)
	h := r.grantedPublish()
	assert.Empty(t, r.c.Ready().Copies, "nothing is copied before a layer is computed")

	compute := gpu.MakeEvent(77, 1)
	require.NoError(t, r.c.Computed(h, 0, compute))
	rd := r.c.Ready()
	type cp struct {
		row, layer int
		dev        gpu.DevicePtr
		off, size  int
	}
	var got []cp
	for _, c := range rd.Copies {
		assert.False(t, c.ToDevice, "a publish copies device→staging")
		slot0, _ := r.c.mem.Row(0, int(r.c.body(h.id).slots[c.Row]))
		off := int(uintptrOf(c.Staging) - uintptrOf(slot0))
		got = append(got, cp{c.Row, c.Layer, c.Device, off, len(c.Staging)})
	}
	assert.Equal(t, []cp{{0, 0, 0x1000, 0, 4}, {1, 0, 0x2000, 0, 4}}, got, "layer 0's spans of every row")
	assert.Equal(t, []LayerMark{{Lease: h, Layer: 0, After: 2, Behind: compute}}, rd.Layers)
	r.c.Advance()

	// Layer 1, computed already (the zero event): its two spans per row.
	require.NoError(t, r.c.Computed(h, 1, gpu.Event{}))
	rd = r.c.Ready()
	require.Len(t, rd.Copies, 4)
	assert.Equal(t, []LayerMark{{Lease: h, Layer: 1, After: 4}}, rd.Layers)
	r.c.Advance()

	r.layerDone(h, 0)
	r.layerDone(h, 1)
	r.tick(0)
	assert.Equal(t, StateGranted, r.state(h), "two of three layers landed: nothing is submitted")
	assert.Empty(t, r.c.Ready().Submissions)

	require.NoError(t, r.c.Computed(h, 2, gpu.Event{}))
	require.Len(t, r.c.Ready().Copies, 2)
	r.c.Advance()
	require.NoError(t, r.c.Step(Evidence{What: LayerDone, Lease: h, Layer: 2}))
	assert.Equal(t, StateAdmitted, r.state(h), "every layer landed: the publish goes to its backend")
	require.Len(t, r.c.Ready().Submissions, 1)
	assert.Equal(t, h, r.c.Ready().Submissions[0].Lease)
}

func TestComputedRefusesBadInput(t *testing.T) {
	r := layeredRig(t)
	h := r.grantedPublish()
	require.NoError(t, r.c.Computed(h, 0, gpu.Event{}))
	r.c.Advance()

	whole, err := r.c.Lend(Request{Kind: Publish, Rows: []staging.Row{{Name: coreName(3), Device: 0x3000}}})
	require.NoError(t, err)
	waiting, err := r.c.Lend(Request{Kind: Publish, Layerwise: true, Rows: []staging.Row{{Name: coreName(4), Device: 0x4000}}})
	require.NoError(t, err)
	_, err = r.c.Lend(Request{Kind: Fetch, Layerwise: true, Rows: []staging.Row{{Name: coreName(5), Device: 0x5000}}})
	assert.ErrorIs(t, err, ErrInvalidRequest, "a fetch is not layerwise by request")
	assert.ErrorContains(t, err, "Layerwise on a fetch")

	tests := []struct {
		name  string
		h     Handle
		layer int
		want  error
		says  string
	}{
		{"a layer reported twice", h, 0, ErrInvalidRequest, "already reported"},
		{"a layer out of order", h, 2, ErrInvalidRequest, "the next layer is 1"},
		{"a layer the engine does not have", h, 3, ErrInvalidRequest, "layers are 0..2"},
		{"a negative layer", h, -1, ErrInvalidRequest, "layers are 0..2"},
		{"a whole publish", whole, 0, ErrInvalidRequest, "not a layerwise publish"},
		{"a stale handle", Handle{id: 99, gen: 1}, 0, ErrStaleHandle, "never issued"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, err := r.c.Lease(h)
			require.NoError(t, err)
			err = r.c.Computed(tt.h, tt.layer, gpu.Event{})
			assert.ErrorIs(t, err, tt.want)
			assert.ErrorContains(t, err, tt.says)
			after, err := r.c.Lease(h)
			require.NoError(t, err)
			assert.Equal(t, before, after, "a refused call changes nothing")
			assert.False(t, r.c.HasReady(), "and asks for nothing")
		})
	}
	t.Run("a lease still waiting for its slots", func(t *testing.T) {
		require.Equal(t, StateWaiting, r.state(waiting))
		var refused *fsm.RefusedError
		require.ErrorAs(t, r.c.Computed(waiting, 0, gpu.Event{}), &refused)
		assert.Contains(t, refused.Reason, "once granted")
	})
}

func TestLayerwisePublishWithdrawn(t *testing.T) {
	free := func(r *coreRig) int { return r.c.alloc.FreeSlots(0) }
	t.Run("released with nothing queued: one empty event lands it", func(t *testing.T) {
		r := layeredRig(t)
		h := r.grantedPublish()
		held := free(r)
		require.NoError(t, r.c.Release(h))
		rd := r.c.Ready()
		assert.Empty(t, rd.Copies)
		require.Equal(t, []LayerMark{{Lease: h, Layer: 0, After: 0}}, rd.Layers, "an event after nothing: the copies queued so far")
		r.c.Advance()
		assert.Equal(t, held, free(r), "the slots wait for that event")
		r.layerDone(h, 0)
		assert.Equal(t, StateReleased, r.state(h))
		assert.Equal(t, held+2, free(r))
		assert.Empty(t, r.c.Ready().Submissions, "nothing is submitted")
	})
	t.Run("released with a layer in flight: the slots wait for it", func(t *testing.T) {
		r := layeredRig(t)
		h := r.grantedPublish()
		require.NoError(t, r.c.Computed(h, 0, gpu.Event{}))
		r.c.Advance()
		held := free(r)
		require.NoError(t, r.c.Release(h))
		assert.Equal(t, []LayerMark{{Lease: h, Layer: 1, After: 0}}, r.c.Ready().Layers)
		r.c.Advance()
		err := r.c.Computed(h, 1, gpu.Event{})
		assert.ErrorIs(t, err, ErrInvalidRequest)
		assert.ErrorContains(t, err, "withdrawn")
		r.layerDone(h, 0)
		assert.Equal(t, StateGranted, r.state(h), "the end event has not landed")
		assert.Equal(t, held, free(r))
		r.layerDone(h, 1)
		assert.Equal(t, StateReleased, r.state(h))
		assert.Equal(t, held+2, free(r))
	})
	t.Run("a copy lost: contained, never submitted", func(t *testing.T) {
		r := layeredRig(t)
		h := r.grantedPublish()
		require.NoError(t, r.c.Computed(h, 0, gpu.Event{}))
		r.c.Advance()
		require.NoError(t, r.c.Step(Evidence{What: CopyLost, Lease: h, Layer: 0, Reason: "event failed"}))
		assert.Equal(t, StateCopyUnproven, r.state(h))
		assert.Empty(t, r.c.Ready().Submissions)
	})
	t.Run("cancelled: withdrawn once the queued copies landed", func(t *testing.T) {
		r := layeredRig(t)
		h := r.grantedPublish()
		require.NoError(t, r.c.Computed(h, 0, gpu.Event{}))
		r.c.Advance()
		require.NoError(t, cancelErr(r.c.Cancel(h)))
		r.c.Advance()
		r.layerDone(h, 0)
		assert.Equal(t, StateGranted, r.state(h))
		r.layerDone(h, 1)
		info, err := r.c.Lease(h)
		require.NoError(t, err)
		assert.Equal(t, StateReleased, info.State)
		assert.Equal(t, Cancelled, info.Outcome)
	})
}

func TestLayerwisePublishRefusedCopyFailsIt(t *testing.T) {
	r := layeredRig(t)
	h := r.grantedPublish()
	for k := range 3 {
		require.NoError(t, r.c.Computed(h, k, gpu.Event{}))
		r.c.Advance()
		if k == 1 {
			require.NoError(t, r.c.Step(Evidence{What: CopyRefusedByDevice, Lease: h, Row: 1, Reason: "no"}))
		}
		r.layerDone(h, k)
	}
	info, err := r.c.Lease(h)
	require.NoError(t, err)
	assert.Equal(t, StateLogicallyComplete, info.State, "never exposed: fenced at once, for the owner to release")
	assert.Equal(t, Failed, info.Outcome, "a unit with a layer missing is never submitted")
	assert.False(t, info.Exposed)
}

// CopiesDone, the caller that records one event after everything, is
// refused for a layerwise publish: its layers come in later Readys, and an
// event recorded after one Ready's copies proves nothing of a layer queued
// after it (the model suite found a lease complete with its last layer in
// flight when CopiesDone counted every layer queued by the time it came).
func TestCopiesDoneIsRefusedForALayerwisePublish(t *testing.T) {
	r := layeredRig(t)
	h := r.grantedPublish()
	require.NoError(t, r.c.Computed(h, 0, gpu.Event{}))
	r.c.Advance()
	require.NoError(t, r.c.Computed(h, 1, gpu.Event{}))
	r.c.Advance()
	for k := range 3 {
		if k == 2 {
			require.NoError(t, r.c.Computed(h, 2, gpu.Event{}))
			r.c.Advance()
		}
		err := r.c.Step(Evidence{What: CopiesDone, Lease: h})
		assert.ErrorIs(t, err, ErrInvalidEvidence)
		assert.ErrorContains(t, err, "LayerDone")
		assert.Equal(t, StateGranted, r.state(h), "nothing landed by it")
	}
	assert.ErrorIs(t, r.c.Step(Evidence{What: LayerDone, Lease: h, Layer: 3}), ErrInvalidEvidence, "layer 3 was never queued")
}

// TestLayerwisePublishNeverSubmitsALayerMissing drives layerwise publishes
// with random reports, landings, refusals, losses, releases and cancels,
// and checks against its own count of what was queued and what landed that
// a publish is exposed only once every layer's copies landed, and that its
// slots return only once every queued copy landed.
func TestLayerwisePublishNeverSubmitsALayerMissing(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		r := layeredRig(t)
		h := r.grantedPublish()
		queued, landed, lost := 0, 0, false
		freeBefore := r.c.alloc.FreeSlots(0)
		for range rapid.IntRange(1, 30).Draw(rt, "steps") {
			switch rapid.IntRange(0, 6).Draw(rt, "what") {
			case 0, 1:
				if r.c.Computed(h, queued, gpu.Event{}) == nil {
					queued++
				}
			case 2, 3:
				if !lost {
					// Up to queued: a withdrawn publish's end event is the
					// layer after its last queued one.
					k := rapid.IntRange(landed, queued).Draw(rt, "layer")
					if r.c.Step(Evidence{What: LayerDone, Lease: h, Layer: k}) == nil {
						landed = k + 1
					}
				}
			case 4:
				_ = r.c.Release(h)
			case 5:
				_, _ = r.c.Cancel(h)
			case 6:
				if queued > landed && r.c.Step(Evidence{What: CopyLost, Lease: h, Layer: landed, Reason: "lost"}) == nil {
					lost = true
				}
			}
			info, err := r.c.Lease(h)
			require.NoError(rt, err)
			submitting := info.Exposed || info.State == StateStaged || info.State == StateAdmitted
			for _, s := range r.c.Ready().Submissions {
				submitting = submitting || s.Lease == h
			}
			if submitting {
				require.Equal(rt, 3, queued, "submitted with layers missing")
				require.Equal(rt, 3, landed, "submitted before every layer landed")
			}
			if r.c.alloc.FreeSlots(0) > freeBefore {
				require.GreaterOrEqual(rt, landed, queued, "slots back with a queued copy in flight")
				require.False(rt, lost, "slots back after a lost copy")
			}
			r.c.Advance()
			if info.State == StateReleased {
				break
			}
		}
		require.NoError(rt, r.c.Err())
	})
}
