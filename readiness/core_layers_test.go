package readiness

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/staging"
)

// threeLayers is a 16-byte slot holding layers 0, 1 and 2: layer 1's bytes
// are split in two spans, around layer 2's.
var threeLayers = [][]staging.LayerSpans{{
	{Layer: 0, Spans: []staging.Span{{Offset: 0, Size: 4}}},
	{Layer: 1, Spans: []staging.Span{{Offset: 4, Size: 4}, {Offset: 12, Size: 4}}},
	{Layer: 2, Spans: []staging.Span{{Offset: 8, Size: 4}}},
}}

func layeredRig(t *testing.T) *coreRig {
	return newCoreRig(t, func(c *Config) { c.Layers = threeLayers })
}

// fenced drives a two-row fetch, both rows served, through the fence and
// returns the Ready that asks for its copies (before Advance).
func (r *coreRig) fenced() (Handle, *Ready) {
	h, err := r.c.Lend(Request{Kind: Fetch, Rows: []staging.Row{
		{Name: coreName(1), Block: 0, Device: 0x1000},
		{Name: coreName(2), Block: 1, Device: 0x2000},
	}})
	require.NoError(r.t, err)
	r.tick(0)
	r.step(h, SubmitAccepted, nil)
	r.step(h, PollAnswered, contract.Delivered{Served: contract.NewNameSet(coreName(1), coreName(2))})
	require.NoError(r.t, r.c.Step(Evidence{What: QuiesceTrue, Lease: h}))
	return h, r.c.Ready()
}

func (r *coreRig) statuses(h Handle) []LayerStatus {
	var out []LayerStatus
	for k := range r.c.Layers() {
		_, st, err := r.c.LayerReadiness(h, k)
		require.NoError(r.t, err)
		out = append(out, st)
	}
	return out
}

func TestCopiesGoLayerByLayer(t *testing.T) {
	r := layeredRig(t)
	h, rd := r.fenced()
	require.Equal(t, 3, r.c.Layers())
	type cp struct {
		row, layer int
		dev        gpu.DevicePtr
		off, size  int
	}
	slot0, _ := r.c.mem.Row(0, int(r.c.body(h.id).slots[0]))
	var got []cp
	for _, c := range rd.Copies {
		require.True(t, c.ToDevice)
		row, _ := r.c.mem.Row(0, int(r.c.body(h.id).slots[c.Row]))
		off := int(uintptrOf(c.Staging) - uintptrOf(row))
		got = append(got, cp{c.Row, c.Layer, c.Device, off, len(c.Staging)})
	}
	require.NotNil(t, slot0)
	// Each layer's spans of every served row, then that layer's mark; the
	// device address is offset as the staging bytes are.
	assert.Equal(t, []cp{
		{0, 0, 0x1000, 0, 4}, {1, 0, 0x2000, 0, 4},
		{0, 1, 0x1004, 4, 4}, {0, 1, 0x100c, 12, 4}, {1, 1, 0x2004, 4, 4}, {1, 1, 0x200c, 12, 4},
		{0, 2, 0x1008, 8, 4}, {1, 2, 0x2008, 8, 4},
	}, got)
	assert.Equal(t, []LayerMark{{Lease: h, Layer: 0, After: 2}, {Lease: h, Layer: 1, After: 6}, {Lease: h, Layer: 2, After: 8}}, rd.Layers)
	assert.Equal(t, []Handle{h}, rd.CopyLeases)
}

func TestWholeSlotIsOneLayer(t *testing.T) {
	r := newCoreRig(t, nil)
	h, rd := r.fenced()
	require.Equal(t, 1, r.c.Layers())
	require.Len(t, rd.Copies, 2)
	for i, c := range rd.Copies {
		row, _ := r.c.mem.Row(0, int(r.c.body(h.id).slots[i]))
		assert.Equal(t, uintptrOf(row), uintptrOf(c.Staging), "copy %d", i)
		assert.Len(t, c.Staging, 16, "copy %d moves the whole slot", i)
		assert.Zero(t, c.Layer)
	}
	assert.Equal(t, []LayerMark{{Lease: h, Layer: 0, After: 2}}, rd.Layers)
	r.c.Advance()
	require.NoError(t, r.c.Step(Evidence{What: LayerDone, Lease: h, Layer: 0}))
	assert.Equal(t, StateLogicallyComplete, State(r.c.leases[h.id].m.State), "the one layer's event is the lease's")
}

func TestLayerReadiness(t *testing.T) {
	done := func(k int) Evidence { return Evidence{What: LayerDone, Layer: k} }
	lost := func(k int) Evidence { return Evidence{What: CopyLost, Layer: k, Reason: "copy error"} }
	const P, R, F, N = LayerPending, LayerReady, LayerFailed, LayerNever
	type step struct {
		ev    Evidence
		err   error // errors.Is; nil: accepted (or known already)
		want  []LayerStatus
		state State
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"in order", []step{
			{done(0), nil, []LayerStatus{R, P, P}, StateAccessFenced},
			{done(1), nil, []LayerStatus{R, R, P}, StateAccessFenced},
			{done(2), nil, []LayerStatus{R, R, R}, StateLogicallyComplete},
		}},
		{"a later event proves the earlier layers", []step{
			{done(1), nil, []LayerStatus{R, R, P}, StateAccessFenced},
			{done(0), nil, []LayerStatus{R, R, P}, StateAccessFenced},
			{Evidence{What: CopiesDone}, nil, []LayerStatus{R, R, R}, StateLogicallyComplete},
		}},
		{"a layer out of range changes nothing", []step{
			{done(3), ErrInvalidEvidence, []LayerStatus{P, P, P}, StateAccessFenced},
			{done(-1), ErrInvalidEvidence, []LayerStatus{P, P, P}, StateAccessFenced},
			{lost(3), ErrInvalidEvidence, []LayerStatus{P, P, P}, StateAccessFenced},
		}},
		{"a failed layer ends it and every later one", []step{
			{done(0), nil, []LayerStatus{R, P, P}, StateAccessFenced},
			{lost(1), nil, []LayerStatus{R, F, F}, StateCopyUnproven},
			// The failed layer's own event, late: never ready.
			{done(1), nil, []LayerStatus{R, F, F}, StateCopyUnproven},
			{done(2), &fsm.RefusedError{}, []LayerStatus{R, F, F}, StateCopyUnproven},
		}},
		{"an earlier layer still lands after a later one failed", []step{
			{lost(2), nil, []LayerStatus{P, P, F}, StateCopyUnproven},
			{done(1), nil, []LayerStatus{R, R, F}, StateCopyUnproven},
			{lost(0), &fsm.RefusedError{}, []LayerStatus{R, R, F}, StateCopyUnproven},
		}},
		{"a lost copy without a layer fails them all", []step{
			{Evidence{What: CopyLost, Reason: "event failed"}, nil, []LayerStatus{F, F, F}, StateCopyUnproven},
		}},
		{"device loss fails every layer not landed", []step{
			{done(0), nil, []LayerStatus{R, P, P}, StateAccessFenced},
			{Evidence{What: DeviceGone, Reason: "Xid 79"}, nil, []LayerStatus{R, F, F}, StateCopyUnproven},
		}},
		{"a refused row narrows the layers' interval", []step{
			{done(0), nil, []LayerStatus{R, P, P}, StateAccessFenced},
			{Evidence{What: CopyRefusedByDevice, Row: 0, Reason: "bad address"}, nil, []LayerStatus{R, P, P}, StateAccessFenced},
		}},
		{"released before the last layer: the release waits", []step{
			{done(0), nil, []LayerStatus{R, P, P}, StateAccessFenced},
			{Evidence{What: ownerReleased}, nil, []LayerStatus{R, P, P}, StateAccessFenced},
			{done(2), nil, []LayerStatus{R, R, R}, StateReleased},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := layeredRig(t)
			h, _ := r.fenced()
			r.c.Advance()
			for i, s := range tc.steps {
				before := r.c.leases[h.id]
				beforeBody := *r.c.body(h.id)
				s.ev.Lease = h
				var err error
				if s.ev.What == ownerReleased {
					err = r.c.Release(h)
				} else {
					err = r.c.Step(s.ev)
				}
				r.c.Advance()
				if s.err != nil {
					var refused *fsm.RefusedError
					if errors.As(s.err, &refused) {
						require.ErrorAs(t, err, &refused, "step %d", i)
					} else {
						require.ErrorIs(t, err, s.err, "step %d", i)
					}
					assert.Equal(t, before.m, r.c.leases[h.id].m, "step %d: a refusal changes nothing", i)
					assert.Equal(t, beforeBody.landed, r.c.body(h.id).landed, "step %d", i)
					assert.Equal(t, beforeBody.failed, r.c.body(h.id).failed, "step %d", i)
				} else {
					require.NoError(t, err, "step %d", i)
				}
				info, err := r.c.Lease(h)
				require.NoError(t, err)
				assert.Equal(t, s.state, info.State, "step %d", i)
				assert.Equal(t, s.want, r.statuses(h), "step %d", i)
			}
		})
	}
}

func TestLayerIntervals(t *testing.T) {
	r := layeredRig(t)
	h, _ := r.fenced()
	r.c.Advance()
	require.NoError(t, r.c.Step(Evidence{What: LayerDone, Lease: h, Layer: 0}))
	iv, st, err := r.c.LayerReadiness(h, 0)
	require.NoError(t, err)
	assert.Equal(t, LayerReady, st)
	assert.Equal(t, staging.Interval{RestartFloor: 0, UsableUntil: 64}, iv, "both blocks served: 2 × 32 tokens")
	_, err = r.c.Readiness(h)
	require.ErrorIs(t, err, ErrNotReady, "the lease waits for its last layer")

	// The device refused row 1's copy: it no longer counts, in any layer.
	require.NoError(t, r.c.Step(Evidence{What: CopyRefusedByDevice, Lease: h, Row: 1, Reason: "bad address"}))
	iv, _, _ = r.c.LayerReadiness(h, 0)
	assert.Equal(t, staging.Interval{RestartFloor: 0, UsableUntil: 32}, iv)

	require.NoError(t, r.c.Step(Evidence{What: LayerDone, Lease: h, Layer: 2}))
	whole, err := r.c.Readiness(h)
	require.NoError(t, err)
	for k := range 3 {
		iv, st, err := r.c.LayerReadiness(h, k)
		require.NoError(t, err)
		assert.Equal(t, LayerReady, st)
		assert.Equal(t, whole, iv, "layer %d: the lease's interval is the minimum over its layers", k)
	}
	require.NoError(t, r.c.Release(h))
	iv, st, err = r.c.LayerReadiness(h, 1)
	require.NoError(t, err, "readable after the release, as Readiness is")
	assert.Equal(t, LayerReady, st)
	assert.Equal(t, whole, iv)
}

func TestLayerReadinessRefusesBadInput(t *testing.T) {
	r := layeredRig(t)
	h, _ := r.fenced()
	r.c.Advance()
	for _, k := range []int{-1, 3} {
		_, _, err := r.c.LayerReadiness(h, k)
		require.ErrorIs(t, err, ErrInvalidRequest, "layer %d", k)
		assert.Contains(t, err.Error(), "0..2")
	}
	_, _, err := r.c.LayerReadiness(Handle{}, 0)
	require.ErrorIs(t, err, ErrStaleHandle)
	p, err := r.c.Lend(Request{Kind: Publish, Rows: []staging.Row{{Name: coreName(9), Device: 0x9000}}})
	require.NoError(t, err)
	_, _, err = r.c.LayerReadiness(p, 0)
	require.ErrorIs(t, err, ErrNotReady)
}

func TestLayerReadinessAllocatesNothing(t *testing.T) {
	r := layeredRig(t)
	h, _ := r.fenced()
	r.c.Advance()
	require.NoError(t, r.c.Step(Evidence{What: LayerDone, Lease: h, Layer: 1}))
	var st LayerStatus
	allocs := testing.AllocsPerRun(100, func() {
		for k := range 3 {
			_, st, _ = r.c.LayerReadiness(h, k)
		}
	})
	assert.Zero(t, allocs)
	assert.Equal(t, LayerPending, st)
}

func TestLayersConfig(t *testing.T) {
	mem, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 4, SlotBytes: 16}, staging.Group{Slots: 4, SlotBytes: 8})
	require.NoError(t, err)
	one := func(id int, spans ...staging.Span) staging.LayerSpans {
		return staging.LayerSpans{Layer: id, Spans: spans}
	}
	cases := []struct {
		name   string
		layers [][]staging.LayerSpans
		want   []string // each named in the error; none: accepted
	}{
		{"none: whole slots", nil, nil},
		{"two groups, interleaved ids", [][]staging.LayerSpans{
			{one(0, staging.Span{Offset: 0, Size: 16}), one(2, staging.Span{Offset: 0, Size: 8})},
			{one(1, staging.Span{Offset: 0, Size: 8})},
		}, nil},
		{"one group short", [][]staging.LayerSpans{{one(0, staging.Span{Size: 4})}}, []string{"Layers has 1 layer groups; want one per memory group (2)"}},
		{"no layer at all", [][]staging.LayerSpans{{}, {}}, []string{"Layers names no layer"}},
		{"ids not ascending, span outside, negative id", [][]staging.LayerSpans{
			{one(1, staging.Span{Size: 4}), one(1, staging.Span{Size: 4})},
			{one(-1, staging.Span{Offset: 4, Size: 8})},
		}, []string{"layer 1 after layer 1", "layer id -1", "span of 8 bytes at 4; want a non-empty span inside the group's 8-byte slot"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewCore(Config{Memory: mem, TokensPerBlock: 1, Layers: tc.layers})
			if len(tc.want) == 0 {
				require.NoError(t, err)
				c.HandOver() // the cores below share the memory: one holds it at a time
				return
			}
			require.Error(t, err)
			assert.Nil(t, c)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	c, err := NewCore(Config{Memory: mem, TokensPerBlock: 1, Layers: cases[1].layers})
	require.NoError(t, err)
	assert.Equal(t, 3, c.Layers(), "layer ids 0, 1, 2 across the groups")
	assert.Equal(t, [][]staging.Span{{{Offset: 0, Size: 16}}, nil, {{Offset: 0, Size: 8}}}, c.spans[0])
	assert.Equal(t, [][]staging.Span{nil, {{Offset: 0, Size: 8}}, nil}, c.spans[1])
}

func TestLayersOf(t *testing.T) {
	l := staging.Layout{}
	_, err := LayersOf(l)
	require.Error(t, err, "an invalid layout is refused by its own validation")

	// Two layer groups sharing pool group 0, their buffers at the same
	// offsets of its slot (the reference's layer_membership test has such a
	// layout): each group gets its own layers' spans, for its own memory
	// group.
	l = staging.Layout{
		TokensPerBlock: 32,
		PoolGroups:     map[int][]int{0: {16}},
		LayerGroups: []staging.LayerGroup{
			{Kind: "attention", PoolGroup: 0, Layers: []int{0, 2}, Shard: staging.Whole},
			{Kind: "attention", PoolGroup: 0, Layers: []int{1}, Shard: staging.Whole},
		},
		Buffers: []staging.Buffer{
			{Layer: 0, Role: "key", Offset: 0, Size: 4, Expansion: 1}, {Layer: 0, Role: "value", Offset: 4, Size: 4, Expansion: 1},
			{Layer: 1, Role: "key", Offset: 0, Size: 8, Expansion: 1}, {Layer: 1, Role: "value", Offset: 8, Size: 8, Expansion: 1},
			{Layer: 2, Role: "key", Offset: 8, Size: 4, Expansion: 1}, {Layer: 2, Role: "value", Offset: 12, Size: 4, Expansion: 1},
		},
	}
	layers, err := LayersOf(l)
	require.NoError(t, err)
	assert.Equal(t, [][]staging.LayerSpans{
		{{Layer: 0, Spans: []staging.Span{{Offset: 0, Size: 8}}}, {Layer: 2, Spans: []staging.Span{{Offset: 8, Size: 8}}}},
		{{Layer: 1, Spans: []staging.Span{{Offset: 0, Size: 16}}}},
	}, layers)
	mem, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 2, SlotBytes: 16}, staging.Group{Slots: 2, SlotBytes: 16})
	require.NoError(t, err)
	c, err := NewCore(Config{Memory: mem, TokensPerBlock: 32, Layers: layers})
	require.NoError(t, err)
	assert.Equal(t, 3, c.Layers(), "layers 0, 1, 2 across the two groups, in id order")
}

// TestLayerNeverReadyEarlyOrAfterItFailed is rule 16's property: whatever
// the order in which a fenced lease's layer events complete, fail or the
// device is lost, a layer reads ready only once an event at or after it
// completed, and never once a copy of it (or of an earlier layer) failed.
func TestLayerNeverReadyEarlyOrAfterItFailed(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		r := layeredRig(t)
		h, _ := r.fenced()
		r.c.Advance()
		const layers = 3
		completed := -1 // the latest layer an accepted event proved
		failedAt := layers
		n := rapid.IntRange(1, 8).Draw(rt, "steps")
		for i := range n {
			var ev Evidence
			switch rapid.IntRange(0, 5).Draw(rt, "kind") {
			case 0, 1, 2:
				ev = Evidence{What: LayerDone, Layer: rapid.IntRange(0, layers-1).Draw(rt, "layer")}
			case 3:
				ev = Evidence{What: CopyLost, Layer: rapid.IntRange(0, layers-1).Draw(rt, "layer"), Reason: "x"}
			case 4:
				ev = Evidence{What: DeviceGone, Reason: "x"}
			case 5:
				ev = Evidence{What: CopiesDone}
			}
			ev.Lease = h
			state := State(r.c.leases[h.id].m.State)
			err := r.c.Step(ev)
			r.c.Advance()
			if err == nil {
				switch {
				case ev.What == LayerDone:
					completed = max(completed, ev.Layer)
				case ev.What == CopiesDone:
					completed = layers - 1
				case ev.What == CopyLost && state == StateAccessFenced:
					failedAt = min(failedAt, ev.Layer)
				case ev.What == DeviceGone && state == StateAccessFenced:
					failedAt = min(failedAt, completed+1)
				}
			}
			for k := range layers {
				_, st, err := r.c.LayerReadiness(h, k)
				if err != nil {
					rt.Fatalf("step %d: layer %d: %v", i, k, err)
				}
				if st == LayerReady && k > completed {
					rt.Fatalf("step %d (%v layer %d): layer %d ready before an event at or after it completed (latest %d)", i, ev.What, ev.Layer, k, completed)
				}
				if st == LayerReady && k >= failedAt {
					rt.Fatalf("step %d (%v layer %d): layer %d ready after layer %d failed", i, ev.What, ev.Layer, k, failedAt)
				}
				if k >= failedAt && st != LayerFailed {
					rt.Fatalf("step %d: layer %d reads %v after layer %d failed; want failed", i, k, st, failedAt)
				}
			}
		}
	})
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// BenchmarkLayerReadiness is rule 16's cost of asking (SPEC §5): O(1), no
// allocation, whichever layer and however many layers landed.
func BenchmarkLayerReadiness(b *testing.B) {
	mem, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 4, SlotBytes: 64 * 4})
	require.NoError(b, err)
	var layers []staging.LayerSpans
	for k := range 64 {
		layers = append(layers, staging.LayerSpans{Layer: k, Spans: []staging.Span{{Offset: 4 * k, Size: 4}}})
	}
	c, err := NewCore(Config{Memory: mem, TokensPerBlock: 32, Layers: [][]staging.LayerSpans{layers}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(b, err)
	h, err := c.Lend(Request{Kind: Fetch, Rows: []staging.Row{{Name: coreName(1), Device: 0x1000}}})
	require.NoError(b, err)
	c.Tick(time.Unix(100, 0))
	c.Advance()
	for _, ev := range []Evidence{{What: SubmitAccepted}, {What: PollAnswered, Outcome: contract.Delivered{Served: contract.NewNameSet(coreName(1))}}, {What: QuiesceTrue}, {What: LayerDone, Layer: 31}} {
		ev.Lease = h
		require.NoError(b, c.Step(ev))
		c.Advance()
	}
	b.ReportAllocs()
	b.ResetTimer()
	ready := 0
	for i := 0; b.Loop(); i++ {
		if _, st, _ := c.LayerReadiness(h, i&63); st == LayerReady {
			ready++
		}
	}
	if ready == 0 {
		b.Fatal("no layer read ready")
	}
}
