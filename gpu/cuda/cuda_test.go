package cuda

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/gpu"
)

// fakeDriver models the CUDA driver closely enough to test this package's own
// logic (event ordering and recycling, pinned-memory checks, errors) without a
// GPU. Events on a stream complete when the test raises that stream's
// completed count.
type fakeDriver struct {
	initResult result
	next       uintptr
	ctxSet     int
	events     map[uintptr]*fakeEvent
	created    int
	destroyed  int
	completed  map[uintptr]int // per stream: records that have completed
	recorded   map[uintptr]int
	failFrom   map[uintptr]int // per stream: records numbered >= this fail (0: none)
	host       map[uintptr][]byte
	waits      [][2]uintptr // cuStreamWaitEvent calls: stream, event
}

type fakeEvent struct {
	stream uintptr
	nth    int // the stream's nth record of any event; 0: never recorded
}

func newFake() *fakeDriver {
	return &fakeDriver{next: 0x100, events: map[uintptr]*fakeEvent{}, completed: map[uintptr]int{},
		recorded: map[uintptr]int{}, failFrom: map[uintptr]int{}, host: map[uintptr][]byte{}}
}

func (f *fakeDriver) driver() *driver {
	return &driver{
		init:              func(uint32) result { return f.initResult },
		deviceGetCount:    func(n *int32) result { *n = 1; return cudaSuccess },
		deviceGet:         func(dev *int32, ord int32) result { *dev = ord; return cudaSuccess },
		primaryCtxRetain:  func(ctx *uintptr, _ int32) result { *ctx = 0xC7; return cudaSuccess },
		primaryCtxRelease: func(int32) result { return cudaSuccess },
		ctxSetCurrent: func(ctx uintptr) result {
			if ctx != 0xC7 {
				return errInvalidDevice
			}
			f.ctxSet++
			return cudaSuccess
		},
		streamCreate:  func(s *uintptr, _ uint32) result { f.next++; *s = f.next; return cudaSuccess },
		streamDestroy: func(uintptr) result { return cudaSuccess },
		streamWaitEvent: func(s, e uintptr, _ uint32) result {
			f.waits = append(f.waits, [2]uintptr{s, e})
			return cudaSuccess
		},
		eventCreate: func(e *uintptr, _ uint32) result {
			f.next++
			*e = f.next
			f.events[f.next] = &fakeEvent{}
			f.created++
			return cudaSuccess
		},
		eventRecord: func(e, s uintptr) result {
			f.recorded[s]++
			*f.events[e] = fakeEvent{stream: s, nth: f.recorded[s]}
			return cudaSuccess
		},
		eventQuery: func(e uintptr) result {
			ev := f.events[e]
			switch {
			case ev.nth == 0:
				return cudaSuccess // the real driver's answer for a never-recorded event
			case f.failFrom[ev.stream] != 0 && ev.nth >= f.failFrom[ev.stream]:
				return errIllegalAddress
			case ev.nth <= f.completed[ev.stream]:
				return cudaSuccess
			}
			return errNotReady
		},
		eventDestroy:    func(e uintptr) result { delete(f.events, e); f.destroyed++; return cudaSuccess },
		memcpyHtoDAsync: func(uint64, unsafe.Pointer, uintptr, uintptr) result { return cudaSuccess },
		memcpyDtoHAsync: func(unsafe.Pointer, uint64, uintptr, uintptr) result { return cudaSuccess },
		memcpyHtoD:      func(uint64, unsafe.Pointer, uintptr) result { return cudaSuccess },
		memcpyDtoH:      func(unsafe.Pointer, uint64, uintptr) result { return cudaSuccess },
		memAlloc:        func(p *uint64, _ uintptr) result { *p = 0x7000; return cudaSuccess },
		memFree:         func(uint64) result { return cudaSuccess },
		memHostAlloc: func(p *unsafe.Pointer, n uintptr, _ uint32) result {
			b := make([]byte, n+64) // stands in for pinned memory (with slack for overrun tests); kept alive by the map
			*p = unsafe.Pointer(&b[0])
			f.host[uintptr(*p)] = b
			return cudaSuccess
		},
		memFreeHost: func(p unsafe.Pointer) result { delete(f.host, uintptr(p)); return cudaSuccess },
		errorName: func(r result) string {
			if r == errIllegalAddress {
				return "CUDA_ERROR_ILLEGAL_ADDRESS"
			}
			return ""
		},
	}
}

func openFake(t *testing.T) (*fakeDriver, *Device, *Stream, []byte) {
	t.Helper()
	f := newFake()
	d, err := open(f.driver(), 0)
	require.NoError(t, err)
	st, err := d.NewStream()
	require.NoError(t, err)
	host, err := d.HostAlloc(64)
	require.NoError(t, err)
	return f, d, st.(*Stream), host
}

func TestOpenWithoutDriver(t *testing.T) {
	_, err := loadLibrary("/nonexistent/libcuda.so.1")
	assert.ErrorIs(t, err, gpu.ErrNoDriver)

	_, err = loadLibrary("libc.so.6") // a real library that is not the driver
	assert.ErrorIs(t, err, gpu.ErrNoDriver)
	assert.ErrorContains(t, err, "no symbol cuInit")

	// Open either finds a working driver or reports ErrNoDriver; on the
	// project's CI machines (no GPU) it is the latter.
	d, err := Open(0)
	if err == nil {
		require.NoError(t, d.Close())
	} else {
		assert.ErrorIs(t, err, gpu.ErrNoDriver)
	}
}

func TestOpenInitResults(t *testing.T) {
	tests := []struct {
		init     result
		noDriver bool
	}{
		{errNoDevice, true},
		{errInsufficientDriver, true},
		{errNotInitialized, false},
	}
	for _, tt := range tests {
		f := newFake()
		f.initResult = tt.init
		_, err := open(f.driver(), 0)
		require.Error(t, err)
		assert.Equal(t, tt.noDriver, errors.Is(err, gpu.ErrNoDriver), "%v", err)
	}
	_, err := open(newFake().driver(), -1)
	assert.ErrorContains(t, err, "want >= 0")
}

func TestEventsInOrderAndRecycled(t *testing.T) {
	f, _, st, host := openFake(t)
	var evs []gpu.Event
	for range 4 {
		require.NoError(t, st.CopyHtoD(0x7000, host[:8]))
		ev, err := st.Record()
		require.NoError(t, err)
		evs = append(evs, ev)
	}
	assert.Equal(t, 4, f.created)

	for _, ev := range evs {
		s, err := st.Query(ev)
		require.NoError(t, err)
		assert.Equal(t, gpu.Pending, s)
	}
	f.completed[st.h] = 2
	want := []gpu.Status{gpu.Complete, gpu.Complete, gpu.Pending, gpu.Pending}
	for i, ev := range evs {
		s, err := st.Query(ev)
		require.NoError(t, err)
		assert.Equal(t, want[i], s, "event %d", i)
	}
	// Completed driver events are recorded again rather than created anew.
	_, err := st.Record()
	require.NoError(t, err)
	assert.Equal(t, 4, f.created)
	assert.Positive(t, f.ctxSet, "the context is made current for driver calls")
}

func TestNeverRecordedIsNotComplete(t *testing.T) {
	_, _, st, _ := openFake(t)
	s, err := st.Query(gpu.Event{})
	assert.ErrorIs(t, err, gpu.ErrNotRecorded)
	assert.NotEqual(t, gpu.Complete, s)
	_, err = st.Query(gpu.MakeEvent(st.ID(), 1))
	assert.ErrorIs(t, err, gpu.ErrUnknownEvent, "the stream has recorded nothing")
	_, err = st.Query(gpu.MakeEvent(st.ID()+100, 1))
	assert.ErrorIs(t, err, gpu.ErrForeignEvent)
}

func TestDriverErrorFailsEvent(t *testing.T) {
	f, _, st, _ := openFake(t)
	e1, _ := st.Record()
	e2, _ := st.Record()
	f.failFrom[st.h] = 2
	f.completed[st.h] = 1
	s, err := st.Query(e2)
	require.NoError(t, err)
	assert.Equal(t, gpu.Failed, s)
	s, _ = st.Query(e1)
	assert.Equal(t, gpu.Complete, s)
	assert.Equal(t, 1, f.destroyed, "a failed handle is destroyed, never reused")
	assert.ErrorIs(t, f.driver().check("x", errIllegalAddress), gpu.ErrDeviceLost)
	assert.ErrorContains(t, f.driver().check("x", errIllegalAddress), "CUDA_ERROR_ILLEGAL_ADDRESS")
	assert.ErrorContains(t, f.driver().check("x", 42), "CUresult 42")
}

func TestPinnedMemoryRequired(t *testing.T) {
	_, d, st, host := openFake(t)
	tests := []struct {
		name string
		buf  []byte
		ok   bool
	}{
		{"whole pinned", host, true},
		{"inside pinned", host[10:20], true},
		{"Go heap", make([]byte, 8), false},
		{"past the end", unsafe.Slice(&host[60], 8), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := st.CopyHtoD(0x7000, tt.buf)
			err2 := st.CopyDtoH(tt.buf, 0x7000)
			if tt.ok {
				assert.NoError(t, err)
				assert.NoError(t, err2)
			} else {
				assert.ErrorIs(t, err, ErrNotPinned)
				assert.ErrorIs(t, err2, ErrNotPinned)
			}
		})
	}
	assert.Error(t, d.FreeHost(host[1:]), "not a whole allocation")
	require.NoError(t, d.FreeHost(host))
	assert.ErrorIs(t, st.CopyHtoD(0x7000, host), ErrNotPinned, "freed memory is no longer pinned")
	_, err := d.HostAlloc(0)
	assert.Error(t, err)
	_, err = d.Alloc(0)
	assert.Error(t, err)
}

func TestStreamClose(t *testing.T) {
	_, d, st, host := openFake(t)
	ev, _ := st.Record()
	require.NoError(t, st.Close())
	require.NoError(t, st.Close(), "idempotent")
	s, err := st.Query(ev)
	require.NoError(t, err)
	assert.Equal(t, gpu.Failed, s, "an event destroyed in flight is no evidence")
	_, err = st.Record()
	assert.ErrorIs(t, err, errStreamClosed)
	assert.ErrorIs(t, st.CopyHtoD(0x7000, host), errStreamClosed)
	require.NoError(t, d.Close())
	require.NoError(t, d.Close())
}

func TestCompletionsOverFakeDriver(t *testing.T) {
	f, _, st, host := openFake(t)
	var c gpu.Completions[int]
	for i := range 1000 {
		require.NoError(t, st.CopyHtoD(0x7000, host[:8]))
		ev, err := st.Record()
		require.NoError(t, err)
		require.NoError(t, c.Push(ev, i))
		if i%10 == 9 {
			f.completed[st.h] = i + 1
			next := i - 9
			_, err := c.Poll(st, func(tok int, s gpu.Status) {
				assert.Equal(t, next, tok)
				assert.Equal(t, gpu.Complete, s)
				next++
			})
			require.NoError(t, err)
			assert.Equal(t, i+1, next)
		}
	}
	assert.LessOrEqual(t, f.created, 10, "driver events are recycled")
}
