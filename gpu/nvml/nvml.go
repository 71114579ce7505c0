// Package nvml watches device health through NVML and answers gpu.Health.
//
// A device is marked lost on an Xid critical error event or when NVML reports
// ERROR_GPU_IS_LOST: its in-flight copies can then never be proven finished,
// and the engine quarantines their memory. NVML is an optional source of
// evidence. When Init fails (no driver, no library, a container without GPU
// access), every device's health is Unknown, nothing else of NVML is ever
// called — calling anything before a successful Init kills the process — and
// the engine carries on with the evidence its streams give.
package nvml

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/kvready/kvready/gpu"
)

// State is what the watcher knows about one device.
type State uint8

const (
	// Unknown: NVML could not be used for this device (Init failed, the
	// device or its events are not supported, or watching stopped on an error).
	Unknown State = iota
	// Healthy: watched, and no fatal event seen.
	Healthy
	// Lost: an Xid critical error or ERROR_GPU_IS_LOST was seen. Lost is final.
	Lost
)

// String names the state.
func (s State) String() string {
	switch s {
	case Unknown:
		return "unknown"
	case Healthy:
		return "healthy"
	case Lost:
		return "lost"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Config tunes a Watcher. The zero Config is the default.
type Config struct {
	// WaitTimeout bounds each EventSetWait, and so how long Stop can take
	// (default 500ms).
	WaitTimeout time.Duration
	// IgnoreXids lists Xid codes that do not mark a device lost. By default
	// every Xid critical error does: a false "lost" only retires memory,
	// a missed one could recycle memory a copy still touches.
	IgnoreXids []uint64
	// BusIDs maps the device numbers given to Start — CUDA ordinals, as the
	// engine's Config.Device is — to their PCI bus ids
	// (cuda.Device.PCIBusID). A device listed here is found in NVML by its
	// bus id (DeviceGetHandleByPciBusId), never by assuming its CUDA ordinal
	// is its NVML index: the two differ under CUDA_VISIBLE_DEVICES, with
	// CUDA_DEVICE_ORDER=FASTEST_FIRST (the default), and with MIG. A device
	// not listed is taken as an NVML index.
	BusIDs map[int]string
}

// Watcher is a running NVML health watch. Lost and State never block: they
// read atomics the watching goroutine writes.
type Watcher struct {
	lib     gonvml.Interface
	cfg     Config
	index   map[int]int // device ordinal -> position
	devices []int
	handles []gonvml.Device
	health  []atomic.Pointer[health]

	inited bool
	set    gonvml.EventSet
	stop   chan struct{}
	done   chan struct{} // nil when no goroutine runs
	once   sync.Once
}

type health struct {
	state  State
	reason string
}

var _ gpu.Health = (*Watcher)(nil)

// Start initialises NVML and watches the devices (NVML indexes, or CUDA
// ordinals mapped by Config.BusIDs) for Xid critical errors and loss. It never fails: what it could not establish
// reads as Unknown. Call Stop to end the watch.
func Start(lib gonvml.Interface, devices ...int) *Watcher {
	return StartWith(lib, Config{}, devices...)
}

// StartWith is Start with a Config.
func StartWith(lib gonvml.Interface, cfg Config, devices ...int) *Watcher {
	if cfg.WaitTimeout <= 0 {
		cfg.WaitTimeout = 500 * time.Millisecond
	}
	w := &Watcher{lib: lib, cfg: cfg, index: map[int]int{}, stop: make(chan struct{})}
	for _, d := range devices {
		if _, dup := w.index[d]; !dup {
			w.index[d] = len(w.devices)
			w.devices = append(w.devices, d)
		}
	}
	w.handles = make([]gonvml.Device, len(w.devices))
	w.health = make([]atomic.Pointer[health], len(w.devices))
	if lib == nil {
		w.setAll(Unknown, "no NVML library given")
		return w
	}
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		w.setAll(Unknown, "NVML Init failed: "+retName(ret))
		return w // and NVML is never called again
	}
	w.inited = true
	set, ret := lib.EventSetCreate()
	if ret != gonvml.SUCCESS {
		w.setAll(Unknown, "NVML EventSetCreate failed: "+retName(ret))
		return w
	}
	w.set = set
	watching := false
	for i, d := range w.devices {
		h, ret := w.handle(d)
		if ret == gonvml.SUCCESS {
			w.handles[i] = h
			ret = lib.DeviceRegisterEvents(h, gonvml.EventTypeXidCriticalError, set)
		}
		switch ret {
		case gonvml.SUCCESS:
			w.health[i].Store(&health{state: Healthy})
			watching = true
		case gonvml.ERROR_GPU_IS_LOST:
			w.health[i].Store(&health{state: Lost, reason: "NVML: GPU is lost"})
		default:
			w.health[i].Store(&health{state: Unknown, reason: "NVML cannot watch the device: " + retName(ret)})
		}
	}
	if watching {
		w.done = make(chan struct{})
		go w.watch()
	}
	return w
}

// handle finds device d in NVML: by its PCI bus id when Config.BusIDs has
// it, else as an NVML index.
func (w *Watcher) handle(d int) (gonvml.Device, gonvml.Return) {
	if bus, ok := w.cfg.BusIDs[d]; ok {
		return w.lib.DeviceGetHandleByPciBusId(bus)
	}
	return w.lib.DeviceGetHandleByIndex(d)
}

func (w *Watcher) setAll(s State, reason string) {
	for i := range w.health {
		w.health[i].Store(&health{state: s, reason: reason})
	}
}

// mark sets device i's state unless it is already lost (lost is final).
func (w *Watcher) mark(i int, s State, reason string) {
	if cur := w.health[i].Load(); cur != nil && cur.state == Lost {
		return
	}
	w.health[i].Store(&health{state: s, reason: reason})
}

func (w *Watcher) watch() {
	defer close(w.done)
	ms := uint32(min(w.cfg.WaitTimeout.Milliseconds(), 1<<31))
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		data, ret := w.lib.EventSetWait(w.set, max(ms, 1))
		switch ret {
		case gonvml.SUCCESS:
			w.event(data)
		case gonvml.ERROR_TIMEOUT:
		case gonvml.ERROR_GPU_IS_LOST:
			// The set does not say which device: every watched one is suspect.
			for i := range w.devices {
				w.mark(i, Lost, "NVML: GPU is lost")
			}
		default:
			for i := range w.devices {
				w.mark(i, Unknown, "NVML event wait failed: "+retName(ret))
			}
			return
		}
	}
}

func (w *Watcher) event(data gonvml.EventData) {
	if data.EventType&gonvml.EventTypeXidCriticalError == 0 {
		return
	}
	for _, x := range w.cfg.IgnoreXids {
		if x == data.EventData {
			return
		}
	}
	reason := fmt.Sprintf("NVML: Xid %d critical error", data.EventData)
	matched := false
	for i, h := range w.handles {
		if h != nil && sameDevice(h, data.Device) {
			w.mark(i, Lost, reason)
			matched = true
		}
	}
	if !matched { // an event for no known device (or all devices)
		for i := range w.devices {
			w.mark(i, Lost, reason+" (device not identified)")
		}
	}
}

// sameDevice compares two handles without panicking on an uncomparable
// dynamic type.
func sameDevice(a, b gonvml.Device) bool {
	if a == nil || b == nil || reflect.TypeOf(a) != reflect.TypeOf(b) || !reflect.TypeOf(a).Comparable() {
		return false
	}
	return a == b
}

// Lost implements gpu.Health. A device the watcher was not asked about is
// not known lost.
func (w *Watcher) Lost(device int) (bool, string) {
	s, reason := w.State(device)
	return s == Lost, reason
}

// State reports what the watcher knows about the device, and why.
func (w *Watcher) State(device int) (State, string) {
	i, ok := w.index[device]
	if !ok {
		return Unknown, fmt.Sprintf("device %d is not watched", device)
	}
	h := w.health[i].Load()
	if h == nil {
		return Unknown, ""
	}
	return h.state, h.reason
}

// Stop ends the watch: it waits for the watching goroutine (at most about one
// WaitTimeout), frees the event set and shuts NVML down. After a failed Init
// it calls nothing. Stop is idempotent; states keep their last values.
func (w *Watcher) Stop() {
	w.once.Do(func() {
		close(w.stop)
		if w.done != nil {
			<-w.done
		}
		if !w.inited {
			return
		}
		if w.set != nil {
			w.lib.EventSetFree(w.set)
		}
		w.lib.Shutdown()
	})
}

// retName names an NVML return code without asking NVML (which may not be
// initialised).
func retName(r gonvml.Return) string {
	switch r {
	case gonvml.ERROR_UNINITIALIZED:
		return "ERROR_UNINITIALIZED"
	case gonvml.ERROR_NOT_SUPPORTED:
		return "ERROR_NOT_SUPPORTED"
	case gonvml.ERROR_TIMEOUT:
		return "ERROR_TIMEOUT"
	case gonvml.ERROR_DRIVER_NOT_LOADED:
		return "ERROR_DRIVER_NOT_LOADED"
	case gonvml.ERROR_GPU_IS_LOST:
		return "ERROR_GPU_IS_LOST"
	case gonvml.ERROR_LIBRARY_NOT_FOUND:
		return "ERROR_LIBRARY_NOT_FOUND"
	case gonvml.ERROR_NO_PERMISSION:
		return "ERROR_NO_PERMISSION"
	case gonvml.ERROR_UNKNOWN:
		return "ERROR_UNKNOWN"
	case gonvml.ERROR_NOT_FOUND:
		return "ERROR_NOT_FOUND"
	}
	return fmt.Sprintf("NVML return %d", int32(r))
}
