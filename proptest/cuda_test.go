package proptest

import (
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/cuda"
	"github.com/kvready/kvready/gpu/cuda/fakecuda"
	"github.com/kvready/kvready/gpu/sim"
)

// modelDevice is what the model needs of a device: memory, streams, health,
// and completing, failing or losing work on command. sim.Device is one; the
// fake CUDA driver in hold mode, through the real binding, is another.
type modelDevice interface {
	gpu.Device
	gpu.Health
	// CompleteNext completes the stream's next n events and the copies
	// before them; FailNext fails them, poisoning the copies' destinations
	// with sim.Poison.
	CompleteNext(s gpu.Stream, n int) (int, error)
	FailNext(s gpu.Stream, n int) (int, error)
	// Lose loses the device: nothing queued completes any more.
	Lose(reason string)
}

var _ modelDevice = (*sim.Device)(nil)

// cudaDevice is a gpu/cuda device on the fake driver, held: nothing runs
// until the model steps the stream, as on the simulated device. Copies
// happen when they run.
type cudaDevice struct {
	*cuda.Device
	ctl *fakecuda.Control

	mu     sync.Mutex
	reason string // non-empty once lost
}

func (d *cudaDevice) handle(s gpu.Stream) uintptr { return s.(*cuda.Stream).Handle() }

func (d *cudaDevice) CompleteNext(s gpu.Stream, n int) (int, error) {
	return d.ctl.Step(d.handle(s), n, 0, 0)
}

func (d *cudaDevice) FailNext(s gpu.Stream, n int) (int, error) {
	return d.ctl.Step(d.handle(s), n, fakecuda.ErrorUnknown, sim.Poison)
}

func (d *cudaDevice) Lose(reason string) {
	d.mu.Lock()
	d.reason = reason
	d.mu.Unlock()
	if err := d.ctl.Lose(d.ID(), fakecuda.ErrorUnknown); err != nil {
		panic(err)
	}
}

func (d *cudaDevice) Lost(device int) (bool, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return device == d.ID() && d.reason != "", d.reason
}

// newCUDAModel is the model on gpu/cuda over the fake driver, staging pinned
// by cuMemHostAlloc. The library is global: one sequence at a time resets
// and holds it (rapid runs them one after the other).
func newCUDAModel(t *rapid.T, core bool) *model {
	lib, ctl, err := fakecuda.Load()
	if err != nil {
		t.Fatalf("the CUDA configuration runs against the fake driver, built with gcc: %v", err)
	}
	ctl.Hold(true)
	d, err := cuda.Open(0, cuda.WithLibrary(lib))
	must(t, err)
	dev := &cudaDevice{Device: d, ctl: ctl}
	var slabs [][]byte
	host := func(n int) ([]byte, error) {
		b, err := d.HostAlloc(n)
		if err == nil {
			slabs = append(slabs, b)
		}
		return b, err
	}
	m := newModelOn(t, core, dev, host)
	t.Cleanup(func() {
		// A backend call still out at the case's end (a Quiesce whose gate
		// the case opened last, its lease in doubt) may return later on an
		// engine goroutine; the slabs freed below go back to the fake driver,
		// whose next allocation (the next case's staging) may reuse them at
		// once. Such a late write once landed in the next case's free slot,
		// under load (docs/testing.md).
		m.be.retire()
		ctl.Reset() // undo a loss, so that the frees below go through
		_ = m.spy.Stream.(*cuda.Stream).Close()
		for _, b := range slabs {
			_ = d.FreeHost(b)
		}
		_ = d.Close()
	})
	return m
}

// TestModelRunnerCUDA is the model-based suite against the runner on the
// CUDA binding: the real purego calls into the fake driver's C entry points,
// pinned staging, driver events.
func TestModelRunnerCUDA(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { newCUDAModel(t, false).run(t) })
}
