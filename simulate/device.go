package simulate

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/cuda"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/staging"
)

// The devices a run can use (Config.Device).
const (
	// SimDevice is the simulated device (gpu/sim) on the run's clock.
	SimDevice = "sim"
	// CUDADevice is GPU 0 through the CUDA driver API (gpu/cuda): staging
	// pinned by cuMemHostAlloc, copies on a CUDA stream, readiness from its
	// events. Config.CUDALibrary chooses the driver library.
	CUDADevice = "cuda"
)

// settleLimit bounds how long a round on the virtual clock waits for the
// CUDA copies queued so far: only a device that stopped could hold it up.
const settleLimit = 10 * time.Second

// device is the run's GPU: the simulated one, or a CUDA device. On CUDA the
// device memory the requests may hold at once is bounded as the simulated
// device's is, and the staging slabs come from its pinned allocator.
type device struct {
	gpu.Device
	sim    *sim.Device  // nil on CUDA
	cuda   *cuda.Device // nil on the simulated device
	stream *lastEvent

	mu    sync.Mutex
	limit int                   // CUDA: device bytes the requests may hold
	used  int                   // CUDA: bytes they hold
	sizes map[gpu.DevicePtr]int // CUDA: allocation sizes
	slabs [][]byte              // CUDA: pinned staging, freed at close
}

// openDevice opens the run's device with memBytes of device memory for the
// requests in flight, and its stream.
func openDevice(cfg Config, clk clock, memBytes int) (*device, error) {
	v := &device{}
	switch cfg.Device {
	case CUDADevice:
		d, err := cuda.Open(0, cuda.WithLibrary(cfg.CUDALibrary))
		if err != nil {
			return nil, fmt.Errorf("simulate: --device cuda: %w", err)
		}
		v.Device, v.cuda, v.limit, v.sizes = d, d, memBytes, map[gpu.DevicePtr]int{}
	default:
		timing := sim.WithLatency(clk, cfg.GPULatency)
		if cfg.Layerwise {
			// A copy engine whose copies take their bytes' time, one after
			// another: the layers of a fetch land one by one.
			timing = sim.WithBandwidth(clk, cfg.CopyBandwidth)
		}
		d, err := sim.New(0, memBytes, timing)
		if err != nil {
			return nil, err
		}
		v.Device, v.sim = d, d
	}
	inner, err := v.Device.NewStream()
	if err != nil {
		_ = v.close()
		return nil, err
	}
	v.stream = &lastEvent{Stream: inner}
	return v, nil
}

// errNoRoom is a CUDA allocation beyond the run's device memory bound.
var errNoRoom = errors.New("simulate: the requests in flight hold all the device memory the run allows")

// Alloc reserves device memory; on CUDA within the run's bound.
func (v *device) Alloc(n int) (gpu.DevicePtr, error) {
	if v.cuda == nil {
		return v.Device.Alloc(n)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.used+n > v.limit {
		return 0, errNoRoom
	}
	p, err := v.Device.Alloc(n)
	if err == nil {
		v.used += n
		v.sizes[p] = n
	}
	return p, err
}

// Free releases memory from Alloc.
func (v *device) Free(p gpu.DevicePtr) error {
	if v.cuda != nil {
		v.mu.Lock()
		v.used -= v.sizes[p]
		delete(v.sizes, p)
		v.mu.Unlock()
	}
	return v.Device.Free(p)
}

// hostAlloc is the staging allocator: pinned memory on CUDA (which refuses
// anything else for asynchronous copies), the Go heap on the simulated device.
func (v *device) hostAlloc(n int) ([]byte, error) {
	if v.cuda == nil {
		return staging.GoHeap(n)
	}
	b, err := v.cuda.HostAlloc(n)
	if err == nil {
		v.mu.Lock()
		v.slabs = append(v.slabs, b)
		v.mu.Unlock()
	}
	return b, err
}

// health is what the engine asks about device loss: the simulated device
// answers; on CUDA the engine learns of a fault from its events.
func (v *device) health() gpu.Health {
	if v.sim == nil {
		return nil
	}
	return v.sim
}

// lose loses the simulated device; a CUDA device is not lost on command
// (Validate refuses DeviceLossAt with it).
func (v *device) lose(reason string) {
	if v.sim != nil {
		v.sim.Lose(reason)
	}
}

// settle waits until every copy queued on the CUDA stream so far has
// completed or failed: on the virtual clock a CUDA copy takes one round,
// however long it takes in real time. The simulated device completes on the
// virtual clock itself.
func (v *device) settle() error {
	if v.cuda == nil {
		return nil
	}
	ev := v.stream.last()
	if ev.IsZero() {
		return nil
	}
	deadline := time.Now().Add(settleLimit)
	for {
		st, err := v.stream.Query(ev)
		if err != nil || st != gpu.Pending {
			return nil // a failure is the engine's to see
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("simulate: the CUDA device did not complete its copies within %v", settleLimit)
		}
		time.Sleep(10 * time.Microsecond)
	}
}

// close releases the stream, the pinned staging and the device (CUDA).
func (v *device) close() error {
	if v.cuda == nil {
		return nil
	}
	var errs []error
	if v.stream != nil {
		errs = append(errs, v.stream.Stream.(*cuda.Stream).Close())
	}
	for _, b := range v.slabs {
		errs = append(errs, v.cuda.FreeHost(b))
	}
	errs = append(errs, v.cuda.Close())
	return errors.Join(errs...)
}

// lastEvent is the device's stream, remembering its latest event.
type lastEvent struct {
	gpu.Stream
	mu sync.Mutex
	ev gpu.Event
}

func (s *lastEvent) Record() (gpu.Event, error) {
	ev, err := s.Stream.Record()
	if err == nil {
		s.mu.Lock()
		s.ev = ev
		s.mu.Unlock()
	}
	return ev, err
}

// Wait puts the stream behind another stream's event, where the device can
// (a layerwise publish's copies follow the manager's compute).
func (s *lastEvent) Wait(ev gpu.Event) error {
	w, ok := s.Stream.(gpu.Waiter)
	if !ok {
		return fmt.Errorf("simulate: the device's stream (%T) cannot wait for %v", s.Stream, ev)
	}
	return w.Wait(ev)
}

func (s *lastEvent) last() gpu.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ev
}

// deviceErrors reports what is wrong with the device fields.
func (c Config) deviceErrors() []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	switch c.Device {
	case "", SimDevice:
		if c.CUDALibrary != "" {
			bad("cuda-library", "%q with the simulated device; want --device cuda", c.CUDALibrary)
		}
	case CUDADevice:
		if c.DeviceLossAt > 0 {
			bad("device-loss-at", "%v: a CUDA device is not lost on command; want 0 with --device cuda", c.DeviceLossAt)
		}
		if c.Naive {
			bad("naive", "the naive manager runs on the simulated device only: on a CUDA device its early frees would be real data races with the driver's copies")
		}
	default:
		bad("device", "%q; want %s or %s", c.Device, SimDevice, CUDADevice)
	}
	return errs
}
