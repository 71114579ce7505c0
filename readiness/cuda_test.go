package readiness_test

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/cuda"
	"github.com/kvready/kvready/gpu/cuda/fakecuda"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// The engine on the CUDA binding, end to end: staging pinned by
// cuMemHostAlloc (staging.NewMemory(dev.HostAlloc, ...)), copies on a CUDA
// stream, readiness from its events. It runs against the fake driver (built
// with gcc), or against the library $KVREADY_CUDA_LIBRARY names: `make
// device-check` runs it on a GPU with libcuda.so.1.

// cudaRig is an engine over a CUDA device and an in-process store.
type cudaRig struct {
	dev   *cuda.Device
	ctl   *fakecuda.Control // nil on a real driver
	st    *cuda.Stream
	eng   *readiness.Engine
	store *mem.Backend
	mem   *staging.Memory
}

const (
	cudaSlotBytes = 4096
	cudaTPB       = 16
)

// cudaLibrary returns the driver library to test, and the fake's control
// when it is the fake. fake insists on the fake driver.
func cudaLibrary(t *testing.T, fake bool) (string, *fakecuda.Control) {
	t.Helper()
	if lib := os.Getenv(cuda.LibraryEnv); lib != "" && !fake {
		if ctl, err := fakecuda.Open(lib); err == nil {
			ctl.Reset()
			return lib, ctl
		}
		return lib, nil // a real driver
	}
	lib, ctl, err := fakecuda.Load()
	require.NoError(t, err, "the CUDA engine test runs against the fake driver, built with gcc")
	return lib, ctl
}

func newCUDARig(t *testing.T, slots int, fake bool) *cudaRig {
	t.Helper()
	lib, ctl := cudaLibrary(t, fake)
	if ctl != nil {
		t.Cleanup(ctl.Reset)
		require.NoError(t, ctl.SetDelay(200*time.Microsecond)) // copies complete on their own, later
	}
	dev, err := cuda.Open(0, cuda.WithLibrary(lib))
	require.NoError(t, err)
	s, err := dev.NewStream()
	require.NoError(t, err)
	var slabs [][]byte
	var mu sync.Mutex
	pinned := func(n int) ([]byte, error) {
		b, err := dev.HostAlloc(n)
		if err == nil {
			mu.Lock()
			slabs = append(slabs, b)
			mu.Unlock()
		}
		return b, err
	}
	m, err := staging.NewMemory(pinned, staging.Group{Slots: slots, SlotBytes: cudaSlotBytes})
	require.NoError(t, err)
	store, err := mem.New(m)
	require.NoError(t, err)
	r := &cudaRig{dev: dev, ctl: ctl, st: s.(*cuda.Stream), store: store, mem: m}
	r.eng, err = readiness.New(readiness.Config{
		Memory:         m,
		TokensPerBlock: cudaTPB,
		RequestTimeout: 5 * time.Second,
		DrainGrace:     200 * time.Millisecond,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		Fetcher:        store,
		Publisher:      store,
		Stream:         s,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		r.drain(t)
		store.Close()
		if ctl != nil {
			ctl.Reset() // a faulted context refuses the frees below
		}
		assert.NoError(t, r.st.Close())
		for _, b := range slabs {
			assert.NoError(t, dev.FreeHost(b))
		}
		assert.NoError(t, dev.Close())
	})
	return r
}

// drain closes the engine and runs it until it has drained (bounded).
func (r *cudaRig) drain(t *testing.T) {
	deadline := time.Now().Add(10 * time.Second)
	for !r.eng.Close().Drained {
		if time.Now().After(deadline) {
			t.Error("the engine on CUDA did not drain within 10s")
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// until runs the engine until every lease is in a state that pred accepts
// (bounded by 10 s), and fails naming the states otherwise.
func (r *cudaRig) until(t *testing.T, hs []readiness.Handle, pred func(readiness.State) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.eng.Progress()
		all := true
		var states []readiness.State
		for _, h := range hs {
			info, err := r.eng.Lease(h)
			require.NoError(t, err)
			states = append(states, info.State)
			all = all && pred(info.State)
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("leases still in %v after 10s", states)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func cudaName(req, block int) contract.Name {
	var n contract.Name
	n[0], n[1], n[2] = byte(req), byte(req>>8), byte(block)
	return n
}

func cudaRow(req, block int) []byte {
	return bytes.Repeat([]byte{byte(req*31 + block*7 + 1)}, cudaSlotBytes)
}

// TestEngineOnCUDA publishes blocks from device memory into the store, then
// fetches them (and blocks the store never held) back into other device
// memory, every copy on the CUDA stream and every slot recycled on its event.
func TestEngineOnCUDA(t *testing.T) {
	const requests, blocks = 12, 4
	r := newCUDARig(t, 16, false)
	alloc := func() gpu.DevicePtr {
		p, err := r.dev.Alloc(cudaSlotBytes)
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.dev.Free(p) })
		return p
	}

	// Publish: device blocks -> staging (a DtoH copy and its event) -> store.
	var pubs []readiness.Handle
	for q := range requests {
		req := readiness.Request{Kind: readiness.Publish}
		for b := range blocks {
			p := alloc()
			require.NoError(t, r.dev.Write(p, cudaRow(q, b)))
			req.Rows = append(req.Rows, staging.Row{Name: cudaName(q, b), Block: b, Device: p})
		}
		h, err := r.eng.Lend(req)
		require.NoError(t, err)
		pubs = append(pubs, h)
		r.until(t, pubs[len(pubs)-1:], func(s readiness.State) bool { return s == readiness.StateLogicallyComplete })
		require.NoError(t, r.eng.Release(h))
	}
	for q := range requests {
		for b := range blocks {
			got, ok := r.store.Get(staging.ExtentName, cudaName(q, b))
			require.True(t, ok, "request %d block %d stored", q, b)
			assert.Equal(t, cudaRow(q, b), got)
		}
	}

	// Fetch: store -> staging -> device (an HtoD copy and its event); the
	// last block of every other request was never published.
	var fetches []readiness.Handle
	var rows [][]staging.Row
	for q := range requests {
		req := readiness.Request{Kind: readiness.Fetch}
		for b := range blocks + q%2 {
			req.Rows = append(req.Rows, staging.Row{Name: cudaName(q, b), Block: b, Device: alloc()})
		}
		h, err := r.eng.Lend(req)
		require.NoError(t, err)
		fetches, rows = append(fetches, h), append(rows, req.Rows)
		if len(fetches) == 3 || q == requests-1 { // a few in flight at once
			r.until(t, fetches, func(s readiness.State) bool { return s == readiness.StateLogicallyComplete })
			for i, h := range fetches {
				iv, err := r.eng.Readiness(h)
				require.NoError(t, err)
				assert.Equal(t, blocks*cudaTPB, iv.UsableUntil, "fetch %d is ready up to the blocks stored", i)
				require.NoError(t, r.eng.Release(h))
			}
			for i, rs := range rows {
				qq := q - len(rows) + 1 + i
				for b := range blocks {
					got := make([]byte, cudaSlotBytes)
					require.NoError(t, r.dev.Read(got, rs[b].Device))
					assert.Equal(t, cudaRow(qq, b), got, "request %d block %d landed on the device", qq, b)
				}
			}
			fetches, rows = nil, nil
		}
	}
	st := r.eng.Stats()
	assert.EqualValues(t, 2*requests, st.Released)
	assert.Zero(t, st.SlotsQuarantined)
	assert.Equal(t, 16, st.SlotsFree)
	if r.ctl != nil {
		assert.Positive(t, r.ctl.Counter(fakecuda.CopiesRun))
		assert.Zero(t, r.ctl.Counter(fakecuda.UnrecordedQueries), "the engine never asked about a never-recorded event")
	}
}

// TestEngineOnCUDAFaults: a copy the driver faults on (sticky
// CUDA_ERROR_ILLEGAL_ADDRESS) proves nothing: the lease's slots are
// contained, never recycled; a copy refused before it was queued (a device
// range past its allocation) is refused at the door and quarantines nothing.
func TestEngineOnCUDAFaults(t *testing.T) {
	r := newCUDARig(t, 4, true) // faults are injected into the fake driver
	small, err := r.dev.Alloc(cudaSlotBytes / 2)
	require.NoError(t, err)
	_, err = r.eng.Lend(readiness.Request{Kind: readiness.Publish,
		Rows: []staging.Row{{Name: cudaName(1, 0), Device: small}}})
	assert.ErrorIs(t, err, readiness.ErrInvalidRequest, "a row the stream cannot address is refused at the door")
	assert.Zero(t, r.eng.Stats().SlotsQuarantined)

	p, err := r.dev.Alloc(cudaSlotBytes)
	require.NoError(t, err)
	require.NoError(t, r.ctl.FailCopy(1, fakecuda.ErrorIllegalAddress))
	h, err := r.eng.Lend(readiness.Request{Kind: readiness.Publish,
		Rows: []staging.Row{{Name: cudaName(2, 0), Device: p}}})
	require.NoError(t, err)
	r.until(t, []readiness.Handle{h}, func(s readiness.State) bool { return s == readiness.StateQuarantined })
	st := r.eng.Stats()
	assert.Equal(t, 1, st.SlotsQuarantined, "the faulted copy's slot is contained, never recycled")
	_, stored := r.store.Get(staging.ExtentName, cudaName(2, 0))
	assert.False(t, stored, "nothing unproven reached the store")
}
