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
