package cuda

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/cuda/fakecuda"
)

// These tests run the binding through real dlopen'ed C entry points: the
// fake CUDA driver (gpu/cuda/fakedriver), built with gcc by the test.

// fakeLib builds (once) and loads the fake driver, and resets it before and
// after the test: the library is loaded once per process and its faults are
// global.
func fakeLib(t *testing.T) (string, *fakecuda.Control) {
	t.Helper()
	path, ctl, err := fakecuda.Load()
	require.NoError(t, err, "the CUDA tests run against the fake driver, built with gcc")
	t.Cleanup(ctl.Reset)
	return path, ctl
}

// fakeRig is a device on the fake driver with a stream, 4 KiB of device
// memory and 4 KiB of pinned host memory.
type fakeRig struct {
	ctl  *fakecuda.Control
	dev  *Device
	st   *Stream
	mem  gpu.DevicePtr
	host []byte
}

const rigBytes = 4096

func newFakeRig(t *testing.T, ordinal int) *fakeRig {
	t.Helper()
	path, ctl := fakeLib(t)
	return openRig(t, path, ctl, ordinal)
}

func openRig(t *testing.T, path string, ctl *fakecuda.Control, ordinal int) *fakeRig {
	t.Helper()
	d, err := Open(ordinal, WithLibrary(path))
	require.NoError(t, err)
	return rigOn(t, d, ctl)
}

// eachCallPath runs test once for each way the hot calls (copies, event
// record and query, the context switch) can be made: through cgo, the
// default where cgo is built, and through purego, the only way without it.
// newRig opens a rig on the fake driver that makes them that way.
func eachCallPath(t *testing.T, test func(t *testing.T, newRig func(t *testing.T) *fakeRig)) {
	for _, cgoCalls := range []bool{true, false} {
		name := map[bool]string{true: "cgo", false: "purego"}[cgoCalls]
		t.Run(name, func(t *testing.T) {
			test(t, func(t *testing.T) *fakeRig {
				t.Helper()
				path, ctl := fakeLib(t)
				if cgoCalls {
					return openRig(t, path, ctl, 0)
				}
				drv, err := loadLibraryWith(path, false)
				require.NoError(t, err)
				require.Equal(t, "purego", drv.calls)
				d, err := open(drv, 0)
				require.NoError(t, err)
				return rigOn(t, d, ctl)
			})
		})
	}
}

// rigOn gives the device a stream and memory, released when the test ends.
func rigOn(t *testing.T, d *Device, ctl *fakecuda.Control) *fakeRig {
	t.Helper()
	var err error
	s, err := d.NewStream()
	require.NoError(t, err)
	mem, err := d.Alloc(rigBytes)
	require.NoError(t, err)
	host, err := d.HostAlloc(rigBytes)
	require.NoError(t, err)
	r := &fakeRig{ctl: ctl, dev: d, st: s.(*Stream), mem: mem, host: host}
	// Cleanups run last-registered first: undo injected faults, then
	// release (errors ignored: a faulted context refuses some of it).
	t.Cleanup(func() {
		ctl.Reset()
		_ = r.st.Close()
		_ = d.FreeHost(host)
		_ = d.Free(mem)
		_ = d.Close()
	})
	return r
}

// settle polls ev until it is no longer pending, for at most 10 s.
func settle(t *testing.T, st gpu.Stream, ev gpu.Event) gpu.Status {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := st.Query(ev)
		require.NoError(t, err)
		if s != gpu.Pending || time.Now().After(deadline) {
			return s
		}
		time.Sleep(50 * time.Microsecond)
	}
}

func TestFakeLibraryChoice(t *testing.T) {
	path, _ := fakeLib(t)
	t.Setenv(LibraryEnv, "")
	assert.Equal(t, DefaultLibrary, Library())
	assert.Equal(t, path, Library(WithLibrary(path)))
	assert.Equal(t, DefaultLibrary, Library(WithLibrary("")), "an empty path is no option")
	t.Setenv(LibraryEnv, path)
	assert.Equal(t, path, Library())
	assert.Equal(t, "/x/libcuda.so", Library(WithLibrary("/x/libcuda.so")), "the option wins over the environment")

	d, err := Open(0) // through KVREADY_CUDA_LIBRARY
	require.NoError(t, err)
	assert.Equal(t, path, d.Library())
	require.NoError(t, d.Close())
}

func TestOpenBadLibrary(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "libcuda.so.1")
	require.NoError(t, os.WriteFile(notELF, []byte("not a library\n"), 0o644))
	partial := filepath.Join(dir, "libpartial.so")
	src := filepath.Join(dir, "partial.c")
	// A library with the first entry point only: the next one is missing.
	require.NoError(t, os.WriteFile(src, []byte("int cuInit(unsigned f) { (void)f; return 0; }\n"), 0o644))
	out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", partial, src).CombinedOutput()
	require.NoError(t, err, "gcc (install: apt-get install -y gcc libc6-dev): %s", out)

	tests := []struct {
		name, path string
		want       []string
	}{
		{"missing", filepath.Join(dir, "nonexistent.so"), []string{filepath.Join(dir, "nonexistent.so")}},
		{"not a library", notELF, []string{notELF}},
		{"not the CUDA driver", "libc.so.6", []string{"libc.so.6", "no symbol cuInit"}},
		{"missing an entry point", partial, []string{partial, "no symbol cuDeviceGetCount"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Open(0, WithLibrary(tt.path))
			require.Error(t, err)
			assert.Nil(t, d)
			assert.ErrorIs(t, err, gpu.ErrNoDriver)
			for _, w := range tt.want {
				assert.ErrorContains(t, err, w)
			}
		})
	}
}

func TestFakeOpenErrors(t *testing.T) {
	path, ctl := fakeLib(t)
	_, err := Open(1, WithLibrary(path))
	assert.ErrorContains(t, err, "device ordinal 1 out of range: the driver ("+path+") sees 1 device(s), ordinals 0..0")
	_, err = Open(-1, WithLibrary(path))
	assert.ErrorContains(t, err, "want >= 0")

	ctl.InitResult(fakecuda.ErrorNoDevice)
	_, err = Open(0, WithLibrary(path))
	assert.ErrorIs(t, err, gpu.ErrNoDriver)
	assert.ErrorContains(t, err, "CUDA_ERROR_NO_DEVICE")
	ctl.InitResult(0)

	require.NoError(t, ctl.SetDevices(2))
	d, err := Open(1, WithLibrary(path))
	require.NoError(t, err)
	assert.Equal(t, 1, d.ID())
	require.NoError(t, d.Close())
}

func TestFakeRoundTrip(t *testing.T) { eachCallPath(t, testFakeRoundTrip) }

func testFakeRoundTrip(t *testing.T, newRig func(*testing.T) *fakeRig) {
	r := newRig(t)
	require.NoError(t, r.ctl.SetDelay(2*time.Millisecond))
	for i := range r.host {
		r.host[i] = byte(i * 7)
	}
	back := r.host[rigBytes/2:]
	src := bytes.Clone(r.host[:rigBytes/2])
	clear(back)
	require.NoError(t, r.st.CopyHtoD(r.mem, r.host[:rigBytes/2]))
	require.NoError(t, r.st.CopyDtoH(back, r.mem))
	ev, err := r.st.Record()
	require.NoError(t, err)
	assert.Equal(t, gpu.Complete, settle(t, r.st, ev))
	assert.Equal(t, src, back, "the bytes went to the device and back")
	assert.EqualValues(t, 2, r.ctl.Counter(fakecuda.CopiesRun))

	// Synchronous copies.
	require.NoError(t, r.dev.Write(r.mem+8, []byte("kvready")))
	got := make([]byte, 7)
	require.NoError(t, r.dev.Read(got, r.mem+8))
	assert.Equal(t, "kvready", string(got))
}

// In hold mode nothing runs until the test steps the stream: copies happen
// when they run, and events complete in stream order.
func TestFakeStreamOrder(t *testing.T) { eachCallPath(t, testFakeStreamOrder) }

func testFakeStreamOrder(t *testing.T, newRig func(*testing.T) *fakeRig) {
	r := newRig(t)
	r.ctl.Hold(true)
	var evs []gpu.Event
	for i := range 5 {
		r.host[i] = byte(i + 1)
		require.NoError(t, r.st.CopyHtoD(r.mem+gpu.DevicePtr(i), r.host[i:i+1]))
		ev, err := r.st.Record()
		require.NoError(t, err)
		evs = append(evs, ev)
	}
	got := make([]byte, 5)
	require.NoError(t, r.dev.Read(got, r.mem))
	assert.Equal(t, []byte{0, 0, 0, 0, 0}, got, "nothing ran while held")
	for _, ev := range evs {
		s, err := r.st.Query(ev)
		require.NoError(t, err)
		assert.Equal(t, gpu.Pending, s)
	}
	n, err := r.ctl.Step(r.st.Handle(), 2, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	want := []gpu.Status{gpu.Complete, gpu.Complete, gpu.Pending, gpu.Pending, gpu.Pending}
	for i, ev := range evs {
		s, err := r.st.Query(ev)
		require.NoError(t, err)
		assert.Equal(t, want[i], s, "event %d", i+1)
	}
	require.NoError(t, r.dev.Read(got, r.mem))
	assert.Equal(t, []byte{1, 2, 0, 0, 0}, got)

	// A stepped failure fails the next event and poisons its copy, without
	// breaking the stream.
	_, err = r.ctl.Step(r.st.Handle(), 1, fakecuda.ErrorUnknown, 0xAB)
	require.NoError(t, err)
	r.ctl.Hold(false)
	assert.Equal(t, gpu.Failed, settle(t, r.st, evs[2]))
	assert.Equal(t, gpu.Complete, settle(t, r.st, evs[4]))
	require.NoError(t, r.dev.Read(got, r.mem))
	assert.Equal(t, []byte{1, 2, 0xAB, 4, 5}, got)

	// Completions hands events out in order over the real binding, in
	// batches stepped by the test; completed driver events are recorded
	// again rather than created anew.
	var c gpu.Completions[int]
	r.ctl.Hold(true)
	next, created := 0, int64(0)
	for batch := range 10 {
		for i := range 10 {
			require.NoError(t, r.st.CopyHtoD(r.mem, r.host[:8]))
			ev, err := r.st.Record()
			require.NoError(t, err)
			require.NoError(t, c.Push(ev, batch*10+i))
		}
		if batch == 1 {
			created = r.ctl.Counter(fakecuda.EventsCreated)
		}
		_, err := r.ctl.Step(r.st.Handle(), 10, 0, 0)
		require.NoError(t, err)
		_, err = c.Poll(r.st, func(tok int, s gpu.Status) {
			assert.Equal(t, next, tok)
			assert.Equal(t, gpu.Complete, s)
			next++
		})
		require.NoError(t, err)
		assert.Equal(t, (batch+1)*10, next)
	}
	assert.Equal(t, created, r.ctl.Counter(fakecuda.EventsCreated), "driver events are recycled")
}

func TestFakeNeverRecorded(t *testing.T) {
	r := newFakeRig(t, 0)
	// The driver answers success for a created, never-recorded event...
	var h uintptr
	require.NoError(t, r.dev.enter())
	assert.Equal(t, cudaSuccess, r.dev.drv.eventCreate(&h, eventDisableTiming))
	assert.Equal(t, cudaSuccess, r.dev.drv.eventQuery(h), "the fake answers like the real driver")
	assert.Equal(t, cudaSuccess, r.dev.drv.eventDestroy(h))
	unlockThread()
	assert.EqualValues(t, 1, r.ctl.Counter(fakecuda.UnrecordedQueries))

	// ...so the binding never asks it about one.
	s, err := r.st.Query(gpu.Event{})
	assert.ErrorIs(t, err, gpu.ErrNotRecorded)
	assert.NotEqual(t, gpu.Complete, s)
	for range 50 {
		ev, err := r.st.Record()
		require.NoError(t, err)
		assert.Equal(t, gpu.Complete, settle(t, r.st, ev))
	}
	assert.EqualValues(t, 1, r.ctl.Counter(fakecuda.UnrecordedQueries), "every event the binding queried had been recorded")
}

func TestFakePinnedAndRanges(t *testing.T) {
	r := newFakeRig(t, 0)
	heap := make([]byte, 64)
	err := r.st.CopyHtoD(r.mem, heap)
	assert.ErrorIs(t, err, ErrNotPinned)
	assert.ErrorIs(t, err, gpu.ErrCopyRefused)
	assert.ErrorIs(t, r.st.CopyDtoH(heap, r.mem), ErrNotPinned)
	assert.Zero(t, r.ctl.Counter(fakecuda.CopiesRefused), "refused by the binding before any driver call")

	// The driver refuses unpinned host memory too, and a device range past
	// its allocation; the binding maps both to ErrCopyRefused.
	call := func(f func() result) error {
		require.NoError(t, r.dev.enter())
		defer unlockThread()
		return r.dev.drv.check("cuMemcpyHtoDAsync", f())
	}
	err = call(func() result {
		return r.dev.drv.memcpyHtoDAsync(uint64(r.mem), unsafe.Pointer(&heap[0]), 64, r.st.h)
	})
	assert.ErrorIs(t, err, gpu.ErrCopyRefused)
	assert.ErrorContains(t, err, "CUDA_ERROR_INVALID_VALUE")
	err = r.st.CopyHtoD(r.mem+rigBytes-8, r.host[:16])
	assert.ErrorIs(t, err, gpu.ErrCopyRefused, "a copy length past its allocation")
	assert.EqualValues(t, 2, r.ctl.Counter(fakecuda.CopiesRefused))

	require.NoError(t, r.st.Addressable(r.mem, rigBytes))
	assert.ErrorContains(t, r.st.Addressable(r.mem+8, rigBytes), "runs past its allocation")
	assert.ErrorContains(t, r.st.Addressable(0x10, 8), "CUDA_ERROR_NOT_FOUND")
	ev, err := r.st.Record()
	require.NoError(t, err)
	assert.Equal(t, gpu.Complete, settle(t, r.st, ev), "refused copies broke nothing")
}

func TestFakeForeignContext(t *testing.T) {
	path, ctl := fakeLib(t)
	require.NoError(t, ctl.SetDevices(2))
	r0 := openRig(t, path, ctl, 0)
	r1 := openRig(t, path, ctl, 1)

	// Device 1's stream cannot reach device 0's memory.
	assert.ErrorContains(t, r1.st.Addressable(r0.mem, 8), "CUDA_ERROR_NOT_FOUND")
	err := r1.st.CopyHtoD(r0.mem, r1.host[:8])
	assert.ErrorIs(t, err, gpu.ErrCopyRefused)

	// A stream used while another context is current is refused.
	require.NoError(t, r0.dev.enter())
	res := r0.dev.drv.memcpyHtoDAsync(uint64(r0.mem), unsafe.Pointer(&r0.host[0]), 8, r1.st.h)
	unlockThread()
	err = r0.dev.drv.check("cuMemcpyHtoDAsync", res)
	assert.ErrorIs(t, err, gpu.ErrCopyRefused)
	assert.ErrorContains(t, err, "CUDA_ERROR_INVALID_HANDLE")

	b0, err := r0.dev.PCIBusID()
	require.NoError(t, err)
	b1, err := r1.dev.PCIBusID()
	require.NoError(t, err)
	assert.Equal(t, "00000000:17:00.0", b0)
	assert.Equal(t, "00000000:18:00.0", b1)
	require.NoError(t, ctl.SetBus(1, 0xC1))
	b1, err = r1.dev.PCIBusID()
	require.NoError(t, err)
	assert.Equal(t, "00000000:C1:00.0", b1)
}

// Every injected fault reads as a failed event, never as complete, and the
// sticky ones wrap gpu.ErrDeviceLost from then on.
func TestFakeInjectedErrors(t *testing.T) {
	tests := []struct {
		name   string
		inject func(r *fakeRig) error
		lost   bool // later calls wrap gpu.ErrDeviceLost
		want   string
	}{
		{"illegal address from a copy", func(r *fakeRig) error { return r.ctl.FailCopy(1, 0) }, true, "CUDA_ERROR_ILLEGAL_ADDRESS"},
		{"sticky launch failure", func(r *fakeRig) error { return r.ctl.Sticky(0, fakecuda.ErrorLaunchFailed) }, true, "CUDA_ERROR_LAUNCH_FAILED"},
		{"device lost (unknown error)", func(r *fakeRig) error { return r.ctl.Lose(0, fakecuda.ErrorUnknown) }, false, "CUDA_ERROR_UNKNOWN"},
		{"device lost (sticky)", func(r *fakeRig) error { return r.ctl.Lose(0, fakecuda.ErrorIllegalAddress) }, true, "CUDA_ERROR_ILLEGAL_ADDRESS"},
	}
	eachCallPath(t, func(t *testing.T, newRig func(*testing.T) *fakeRig) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := newRig(t)
				ok, err := r.st.Record()
				require.NoError(t, err)
				require.Equal(t, gpu.Complete, settle(t, r.st, ok))
				r.ctl.Hold(true)
				copy(r.host, "fresh")
				require.NoError(t, tt.inject(r))
				// The copy is queued, or refused when the fault came first.
				copyErr := r.st.CopyHtoD(r.mem, r.host[:5])
				ev, recErr := r.st.Record()
				r.ctl.Hold(false)
				if recErr == nil {
					assert.Equal(t, gpu.Failed, settle(t, r.st, ev), "no evidence of completion")
				} else {
					assert.ErrorContains(t, recErr, tt.want)
				}
				if copyErr != nil {
					assert.ErrorContains(t, copyErr, tt.want)
				}
				s, err := r.st.Query(ok)
				require.NoError(t, err)
				assert.Equal(t, gpu.Complete, s, "an event resolved before the fault stays complete")

				err = r.st.CopyHtoD(r.mem, r.host[:5])
				require.Error(t, err, "the context stays broken")
				assert.ErrorContains(t, err, tt.want)
				assert.Equal(t, tt.lost, errorIsLost(err), "%v", err)
				_, err = r.st.Record()
				assert.Error(t, err)
				got := make([]byte, 5)
				if r.dev.Read(got, r.mem) == nil {
					assert.NotEqual(t, "fresh", string(got), "the faulted copy did not land")
				}
			})
		}
	})
}

func errorIsLost(err error) bool { return errors.Is(err, gpu.ErrDeviceLost) }

// unlockThread ends a test's enter.
func unlockThread() { runtime.UnlockOSThread() }

func TestFakeStreamWait(t *testing.T) { eachCallPath(t, testFakeStreamWait) }

// testFakeStreamWait puts a copy stream behind a compute stream's event
// (cuStreamWaitEvent), as a layerwise publish's copies follow the manager's
// compute: stepping the copy stream runs nothing past the wait until the
// other stream's event completed, and the bytes the copy moves are those
// the other stream wrote before its event.
func testFakeStreamWait(t *testing.T, newRig func(*testing.T) *fakeRig) {
	r := newRig(t)
	other, err := r.dev.NewStream()
	require.NoError(t, err)
	compute := other.(*Stream)
	t.Cleanup(func() { _ = compute.Close() })
	r.ctl.Hold(true)
	// The "compute": the other stream writes 7 into device byte 0.
	r.host[100] = 7
	require.NoError(t, compute.CopyHtoD(r.mem, r.host[100:101]))
	computed, err := compute.Record()
	require.NoError(t, err)
	// The copy stream waits for it, then reads device byte 0 back.
	require.NoError(t, r.st.Wait(computed))
	require.NoError(t, r.st.CopyDtoH(r.host[200:201], r.mem))
	copied, err := r.st.Record()
	require.NoError(t, err)

	n, err := r.ctl.Step(r.st.Handle(), 1, 0, 0)
	require.NoError(t, err)
	assert.Zero(t, n, "nothing past the wait runs before the compute's event")
	s, err := r.st.Query(copied)
	require.NoError(t, err)
	assert.Equal(t, gpu.Pending, s)

	n, err = r.ctl.Step(compute.Handle(), 1, 0, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = r.ctl.Step(r.st.Handle(), 1, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, gpu.Complete, settle(t, r.st, copied))
	assert.Equal(t, byte(7), r.host[200], "the copy read what the compute wrote before its event")

	// A completed event queues nothing; an external CUevent is waited for by
	// its handle; bad events are refused and queue nothing.
	require.NoError(t, r.st.Wait(computed))
	r.ctl.Hold(false)
	assert.Zero(t, r.ctl.Pending(r.st.Handle()))
	for _, tt := range []struct {
		name string
		ev   gpu.Event
		want string
	}{
		{"never recorded", gpu.Event{}, "never recorded"},
		{"its own stream's", copied, "on the stream that recorded it"},
		{"of no open stream", gpu.MakeEvent(1<<60, 1), "another stream"},
		{"a null external event", External(0), "never recorded"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.ErrorContains(t, r.st.Wait(tt.ev), tt.want)
		})
	}
}

func TestWaitExternalEvent(t *testing.T) {
	f, _, st, _ := openFake(t)
	require.NoError(t, st.Wait(External(0xE7)))
	assert.Equal(t, [][2]uintptr{{st.Handle(), 0xE7}}, f.waits, "the foreign CUevent goes to cuStreamWaitEvent as it is")
}
