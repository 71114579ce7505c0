package sim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
)

// twoStreams is a device with a copy stream and a compute stream.
func twoStreams(t *testing.T, opts ...sim.Option) (*sim.Device, *sim.Stream, *sim.Stream) {
	t.Helper()
	dev, err := sim.New(0, 1<<20, opts...)
	require.NoError(t, err)
	a, err := dev.NewStream()
	require.NoError(t, err)
	b, err := dev.NewStream()
	require.NoError(t, err)
	return dev, a.(*sim.Stream), b.(*sim.Stream)
}

func record(t *testing.T, s gpu.Stream) gpu.Event {
	t.Helper()
	ev, err := s.Record()
	require.NoError(t, err)
	return ev
}

func TestBandwidthRunsCopiesOneAfterAnother(t *testing.T) {
	clock := sim.NewManualClock(time.Unix(1000, 0))
	dev, copies, _ := twoStreams(t, sim.WithBandwidth(clock, 1000)) // 1 byte a millisecond
	p, err := dev.Alloc(300)
	require.NoError(t, err)
	require.NoError(t, copies.CopyHtoD(p, make([]byte, 100)))
	first := record(t, copies)
	require.NoError(t, copies.CopyHtoD(p+100, make([]byte, 200)))
	second := record(t, copies)

	clock.Advance(100*time.Millisecond - 1)
	assert.Equal(t, gpu.Pending, query(t, copies, first))
	clock.Advance(1)
	assert.Equal(t, gpu.Complete, query(t, copies, first), "100 bytes take 100ms")
	clock.Advance(200*time.Millisecond - 1)
	assert.Equal(t, gpu.Pending, query(t, copies, second), "the second copy starts when the first ended")
	clock.Advance(1)
	assert.Equal(t, gpu.Complete, query(t, copies, second))

	// An idle stream starts a copy when it is queued, not when the last ended.
	clock.Advance(time.Second)
	require.NoError(t, copies.CopyHtoD(p, make([]byte, 10)))
	third := record(t, copies)
	clock.Advance(10 * time.Millisecond)
	assert.Equal(t, gpu.Complete, query(t, copies, third))
}

// The pipeline a layer-by-layer load runs: layer l's copy (T) on the copy
// stream, then its compute (C) on the compute stream behind the copy's event.
// The last layer is computed at T + (L-1)·max(T, C) + C, exactly.
func TestPipelineOfCopiesAndCompute(t *testing.T) {
	const layers, bytesPerLayer = 8, 1000
	for _, tc := range []struct {
		name string
		T, C time.Duration
	}{
		{"copy shorter than compute", 10 * time.Millisecond, 25 * time.Millisecond},
		{"copy as long as compute", 20 * time.Millisecond, 20 * time.Millisecond},
		{"copy longer than compute", 30 * time.Millisecond, 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := sim.NewManualClock(time.Unix(1000, 0))
			bw := float64(bytesPerLayer) / tc.T.Seconds()
			dev, copies, compute := twoStreams(t, sim.WithBandwidth(clock, bw))
			p, err := dev.Alloc(layers * bytesPerLayer)
			require.NoError(t, err)
			src := make([]byte, bytesPerLayer)
			var last gpu.Event
			for l := range layers {
				require.NoError(t, copies.CopyHtoD(p+gpu.DevicePtr(l*bytesPerLayer), src))
				require.NoError(t, compute.Wait(record(t, copies)))
				require.NoError(t, compute.Compute(tc.C))
				last = record(t, compute)
			}
			bound := tc.T + (layers-1)*max(tc.T, tc.C) + tc.C
			clock.Advance(bound - 1)
			assert.Equal(t, gpu.Pending, query(t, compute, last))
			clock.Advance(1)
			assert.Equal(t, gpu.Complete, query(t, compute, last))
			assert.Less(t, bound, layers*(tc.T+tc.C), "the pipeline beats loading every layer first")
		})
	}
}

func TestWaitHoldsTheStreamUntilTheEvent(t *testing.T) {
	dev, copies, compute := twoStreams(t) // resolved by the test
	p, err := dev.Alloc(8)
	require.NoError(t, err)
	require.NoError(t, compute.Compute(time.Second))
	computed := record(t, compute)
	require.NoError(t, copies.Wait(computed))
	require.NoError(t, dev.Write(p, []byte("computed")))
	got := make([]byte, 8)
	require.NoError(t, copies.CopyDtoH(got, p))
	saved := record(t, copies)

	n, err := dev.CompleteNext(copies, 1)
	require.NoError(t, err)
	assert.Zero(t, n, "the copy waits for the compute stream's event")
	assert.Equal(t, gpu.Pending, query(t, copies, saved))
	assert.Equal(t, make([]byte, 8), got, "nothing was copied yet")

	n, err = dev.CompleteNext(compute, 1)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = dev.CompleteNext(copies, 1)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, gpu.Complete, query(t, copies, saved))
	assert.Equal(t, "computed", string(got))

	// Waiting for an event that already resolved queues nothing.
	require.NoError(t, copies.Wait(computed))
	assert.Zero(t, copies.Queued())
}

func TestCompleteAllResolvesWaitsAcrossStreams(t *testing.T) {
	dev, first, second := twoStreams(t)
	// The stream created first waits for the one created second.
	require.NoError(t, second.Compute(0))
	require.NoError(t, first.Wait(record(t, second)))
	ev := record(t, first)
	assert.Equal(t, 2, dev.CompleteAll())
	assert.Equal(t, gpu.Complete, query(t, first, ev))
}

func TestWaitForFailedWorkFails(t *testing.T) {
	for name, prepare := range map[string]func(t *testing.T, dev *sim.Device, copies, compute *sim.Stream, ev gpu.Event){
		"failed after the wait was queued": func(t *testing.T, dev *sim.Device, copies, compute *sim.Stream, ev gpu.Event) {
			require.NoError(t, copies.Wait(ev))
			_, err := dev.FailNext(compute, 1)
			require.NoError(t, err)
		},
		"failed before the wait": func(t *testing.T, dev *sim.Device, copies, compute *sim.Stream, ev gpu.Event) {
			_, err := dev.FailNext(compute, 1)
			require.NoError(t, err)
			require.NoError(t, copies.Wait(ev))
		},
	} {
		t.Run(name, func(t *testing.T) {
			dev, copies, compute := twoStreams(t)
			require.NoError(t, compute.Compute(time.Millisecond))
			ev := record(t, compute)
			prepare(t, dev, copies, compute, ev)
			after := record(t, copies)
			dev.CompleteAll()
			assert.Equal(t, gpu.Failed, query(t, copies, after))
		})
	}
}

func TestWaitRefusals(t *testing.T) {
	dev, copies, compute := twoStreams(t)
	other, _, _ := newDev(t)
	foreign, err := other.NewStream()
	require.NoError(t, err)
	own := record(t, copies)
	for _, tc := range []struct {
		name string
		ev   gpu.Event
		want error
		msg  string
	}{
		{"never recorded", gpu.Event{}, gpu.ErrNotRecorded, ""},
		{"another device's", record(t, foreign), gpu.ErrForeignEvent, ""},
		{"its own stream's", own, nil, "want an event of another stream"},
		{"never issued", gpu.MakeEvent(compute.ID(), 9), gpu.ErrUnknownEvent, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := copies.Queued()
			err := copies.Wait(tc.ev)
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
			} else {
				require.ErrorContains(t, err, tc.msg)
			}
			assert.Equal(t, before, copies.Queued(), "a refused wait queues nothing")
		})
	}
	require.ErrorContains(t, compute.Compute(-time.Second), "non-negative")
	dev.Lose("test")
	require.ErrorIs(t, copies.Wait(own), gpu.ErrDeviceLost)
	require.ErrorIs(t, compute.Compute(time.Second), gpu.ErrDeviceLost)
}

func TestBandwidthOptionRefusals(t *testing.T) {
	clock := sim.NewManualClock(time.Unix(1, 0))
	for _, opts := range [][]sim.Option{
		{sim.WithBandwidth(nil, 1)},
		{sim.WithBandwidth(clock, -1)},
		{sim.WithBandwidth(clock, 1), sim.WithLatency(clock, time.Second)},
	} {
		_, err := sim.New(0, 1, opts...)
		require.Error(t, err)
	}
}
