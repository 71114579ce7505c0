//go:build cudadevice

package cuda

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/gpu"
)

// TestDevice runs on a real GPU: go test -tags cudadevice ./gpu/cuda/
func TestDevice(t *testing.T) {
	d, err := Open(0)
	require.NoError(t, err, "the device check needs a CUDA driver and GPU 0")
	defer func() { assert.NoError(t, d.Close()) }()
	s, err := d.NewStream()
	require.NoError(t, err)
	st := s.(*Stream)
	defer func() { assert.NoError(t, st.Close()) }()

	const n = 1 << 20
	dev, err := d.Alloc(n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, d.Free(dev)) }()
	src, err := d.HostAlloc(n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, d.FreeHost(src)) }()
	dst, err := d.HostAlloc(n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, d.FreeHost(dst)) }()
	for i := range src {
		src[i] = byte(i * 7)
	}

	never, err := st.Query(gpu.Event{})
	assert.ErrorIs(t, err, gpu.ErrNotRecorded)
	assert.NotEqual(t, gpu.Complete, never)

	require.NoError(t, st.CopyHtoD(dev, src))
	require.NoError(t, st.CopyDtoH(dst, dev))
	ev, err := st.Record()
	require.NoError(t, err)
	waitComplete(t, st, ev)
	assert.True(t, bytes.Equal(src, dst), "the round trip through the device preserves the bytes")

	var c gpu.Completions[int]
	const events = 10000
	handed := 0
	for i := range events {
		require.NoError(t, st.CopyHtoD(dev+gpu.DevicePtr(i%16*4096), src[:4096]))
		ev, err := st.Record()
		require.NoError(t, err)
		require.NoError(t, c.Push(ev, i))
		_, err = c.Poll(st, func(tok int, s gpu.Status) {
			assert.Equal(t, handed, tok, "in order")
			assert.Equal(t, gpu.Complete, s)
			handed++
		})
		require.NoError(t, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for c.Len() > 0 && time.Now().Before(deadline) {
		_, err := c.Poll(st, func(tok int, s gpu.Status) {
			assert.Equal(t, handed, tok)
			assert.Equal(t, gpu.Complete, s)
			handed++
		})
		require.NoError(t, err)
	}
	assert.Equal(t, events, handed)
	assert.Less(t, len(st.spare)+st.n, 5000, "driver events were recycled, not created per record")
}

func waitComplete(t *testing.T, st *Stream, ev gpu.Event) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		s, err := st.Query(ev)
		require.NoError(t, err)
		if s == gpu.Complete {
			return
		}
		require.NotEqual(t, gpu.Failed, s)
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatal("event did not complete within 30s")
}

// TestDeviceStreamWait runs on a real GPU: a copy stream put behind another
// stream's event (cuStreamWaitEvent), as a layerwise publish's copies follow
// the manager's compute, reads what that stream wrote before its event,
// and an External event (a raw CUevent) is waited for by its handle.
func TestDeviceStreamWait(t *testing.T) {
	d, err := Open(0)
	require.NoError(t, err, "the device check needs a CUDA driver and GPU 0")
	defer func() { assert.NoError(t, d.Close()) }()
	var st [2]*Stream
	for i := range st {
		s, err := d.NewStream()
		require.NoError(t, err)
		st[i] = s.(*Stream)
		defer func() { assert.NoError(t, st[i].Close()) }()
	}
	compute, copies := st[0], st[1]
	const n = 64 << 20 // large enough that the write is still running when the wait is queued
	dev, err := d.Alloc(n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, d.Free(dev)) }()
	src, err := d.HostAlloc(n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, d.FreeHost(src)) }()
	dst, err := d.HostAlloc(n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, d.FreeHost(dst)) }()
	for i := range src {
		src[i] = byte(i*13 + 1)
	}
	require.NoError(t, compute.CopyHtoD(dev, src))
	computed, err := compute.Record()
	require.NoError(t, err)
	require.NoError(t, copies.Wait(computed))
	require.NoError(t, copies.CopyDtoH(dst, dev))
	ev, err := copies.Record()
	require.NoError(t, err)
	waitComplete(t, copies, ev)
	assert.True(t, bytes.Equal(src, dst), "the copy behind the wait read what the other stream wrote")

	// The same through the raw handle of a driver event kvready did not record
	// for this stream's queue.
	raw, err := d.newEvent()
	require.NoError(t, err)
	require.NoError(t, compute.CopyHtoD(dev, src[:4096]))
	h := compute.Handle()
	set, r := d.drv.recordInCtx(d.ctx, raw, h)
	require.Equal(t, cudaSuccess, set)
	require.Equal(t, cudaSuccess, r)
	require.NoError(t, copies.Wait(External(raw)))
	require.NoError(t, copies.CopyDtoH(dst[:4096], dev))
	ev, err = copies.Record()
	require.NoError(t, err)
	waitComplete(t, copies, ev)
	assert.True(t, bytes.Equal(src[:4096], dst[:4096]))
}
