// Package fakecuda builds and steers the fake CUDA driver
// (gpu/cuda/fakedriver/fakecuda.c): a small C library exporting the driver
// entry points gpu/cuda loads, so that the binding, the engine on it and
// `kvready simulate --device cuda` run through real dlopen'ed C code on a
// machine without a GPU.
//
// Library compiles the C source with gcc (once per source version, into the
// system's temporary directory) and returns the library's path, to pass to
// cuda.WithLibrary. Open returns a Control over the loaded library: delays,
// hold mode and stepping, injected faults, counters. The library is loaded
// once per process, so tests that steer it call Reset first.
//
// It is a test and demo aid: it is not imported by the packages users embed.
package fakecuda

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/ebitengine/purego"
)

// SourcePath is the C source's path relative to the module root.
const SourcePath = "gpu/cuda/fakedriver/fakecuda.c"

// Source returns the absolute path of the C source: next to this package in
// the module it was built from, else found walking up from the working
// directory to the module root.
func Source() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok {
		p := filepath.Join(filepath.Dir(file), "..", "fakedriver", "fakecuda.c")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("fakecuda: finding %s: %w", SourcePath, err)
	}
	for {
		p := filepath.Join(dir, SourcePath)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("fakecuda: %s not found above the working directory; run from the kvready module", SourcePath)
		}
		dir = parent
	}
}

// ErrNoCompiler is returned when gcc is not installed.
var ErrNoCompiler = errors.New("fakecuda: gcc not found: the fake CUDA driver is compiled from C; install it (Debian/Ubuntu: apt-get install -y gcc libc6-dev) or set CC")

// Build compiles the fake driver into out (a shared library), with $CC or gcc.
func Build(out string) error {
	src, err := Source()
	if err != nil {
		return err
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return fmt.Errorf("%w (%v)", ErrNoCompiler, err)
	}
	cmd := exec.Command(cc, "-O2", "-Wall", "-Wextra", "-shared", "-fPIC", "-pthread", "-o", out, src)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("fakecuda: %s failed building %s: %v\n%s", cc, src, err, msg)
	}
	return nil
}

var (
	libOnce sync.Once
	libPath string
	libErr  error
)

// Library builds the fake driver once per process, reusing a build of the
// same source from an earlier run, and returns its path.
func Library() (string, error) {
	libOnce.Do(func() { libPath, libErr = library() })
	return libPath, libErr
}

func library() (string, error) {
	src, err := Source()
	if err != nil {
		return "", err
	}
	text, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("fakecuda: %w", err)
	}
	sum := sha256.Sum256(text)
	dir := filepath.Join(os.TempDir(), "kvready-fakecuda-"+hex.EncodeToString(sum[:8]))
	out := filepath.Join(dir, "libfakecuda.so")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("fakecuda: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "build-*.so")
	if err != nil {
		return "", fmt.Errorf("fakecuda: %w", err)
	}
	_ = tmp.Close()
	defer os.Remove(tmp.Name())
	if err := Build(tmp.Name()); err != nil {
		return "", err
	}
	// Concurrent test processes may race here: rename is atomic, and each
	// build is of the same source.
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", fmt.Errorf("fakecuda: %w", err)
	}
	return out, nil
}

// Load builds the fake driver (Library), loads it, resets it (Reset) and
// returns its path and control: what a test that steers it starts with.
func Load() (string, *Control, error) {
	lib, err := Library()
	if err != nil {
		return "", nil, err
	}
	ctl, err := Open(lib)
	if err != nil {
		return "", nil, err
	}
	ctl.Reset()
	return lib, ctl, nil
}

// The operations of fakecuda_ctl (fakecuda.c keeps the same numbers).
const (
	opReset      = 0
	opSetDelayNs = 1
	opHold       = 2
	opStep       = 3
	opFailCopy   = 4
	opSticky     = 5
	opLose       = 6
	opInitResult = 7
	opSetDevices = 8
	opSetBus     = 9
	opCounter    = 10
	opPending    = 11
	opWaitIdle   = 12
)

// Counter names one of the fake driver's counters.
type Counter int

// The counters.
const (
	EventsCreated     Counter = iota // cuEventCreate successes
	EventsDestroyed                  // cuEventDestroy_v2 successes
	CopiesRun                        // asynchronous copies performed
	CopiesRefused                    // asynchronous copies refused (unpinned host, bad device range)
	Queries                          // cuEventQuery calls on valid events
	UnrecordedQueries                // of which on never-recorded events (answered success)
	StreamsLive                      // streams created and not destroyed
)

// CUresult values for injected faults.
const (
	ErrorIllegalAddress = 700 // CUDA_ERROR_ILLEGAL_ADDRESS
	ErrorLaunchFailed   = 719 // CUDA_ERROR_LAUNCH_FAILED
	ErrorUnknown        = 999 // CUDA_ERROR_UNKNOWN
	ErrorNoDevice       = 100 // CUDA_ERROR_NO_DEVICE
)

// Control steers a loaded fake driver. Its methods are safe for concurrent
// use (the driver takes its own lock).
type Control struct {
	ctl uintptr
}

// Open loads the fake driver at path (once per process, as gpu/cuda does)
// and returns its control. A library without fakecuda_ctl is not the fake.
func Open(path string) (*Control, error) {
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("fakecuda: loading %s: %v", path, err)
	}
	sym, err := purego.Dlsym(lib, "fakecuda_ctl")
	if err != nil || sym == 0 {
		return nil, fmt.Errorf("fakecuda: %s has no symbol fakecuda_ctl: not the fake driver", path)
	}
	return &Control{ctl: sym}, nil
}

func (c *Control) call(op int, args ...int64) int64 {
	a := make([]int64, 4)
	copy(a, args)
	v, _, _ := purego.SyscallN(c.ctl, uintptr(op), uintptr(a[0]), uintptr(a[1]), uintptr(a[2]), uintptr(a[3]))
	return int64(v)
}

func (c *Control) must(op int, what string, args ...int64) error {
	if c.call(op, args...) < 0 {
		return fmt.Errorf("fakecuda: %s%v refused by the fake driver", what, args)
	}
	return nil
}

// Reset clears every fault, hold mode, the delay, the cuInit answer, bus
// numbers and counters. Allocations, streams and events stay.
func (c *Control) Reset() { c.call(opReset) }

// SetDelay makes every operation queued from now on run no earlier than d
// after it was queued (by its stream's worker thread, in stream order).
func (c *Control) SetDelay(d time.Duration) error {
	return c.must(opSetDelayNs, "SetDelay", int64(max(d, 0)))
}

// Hold stops (true) or restarts (false) the workers: while held, nothing
// queued runs until Step.
func (c *Control) Hold(on bool) {
	v := int64(0)
	if on {
		v = 1
	}
	c.call(opHold, v)
}

// Step runs stream's queue (a CUstream handle, cuda.Stream.Handle) up to and
// including its next events event records, inline. With fail = 0 they
// complete; otherwise the copies among them write poison into their
// destinations and the events answer fail (not sticky). It returns the
// events stepped (fewer when the queue ran out).
func (c *Control) Step(stream uintptr, events int, fail int, poison byte) (int, error) {
	n := c.call(opStep, int64(stream), int64(events), int64(fail), int64(poison))
	if n < 0 {
		return 0, fmt.Errorf("fakecuda: Step(%#x, %d): not a live stream, or a negative count", stream, events)
	}
	return int(n), nil
}

// FailCopy makes the nth asynchronous copy queued from now on (1: the next)
// fault with code when it runs: the copy does nothing and code becomes its
// context's sticky error, as CUDA_ERROR_ILLEGAL_ADDRESS does on a GPU
// (code 0: ErrorIllegalAddress).
func (c *Control) FailCopy(nth int, code int) error {
	return c.must(opFailCopy, "FailCopy", int64(nth), int64(code))
}

// Sticky makes every later call on device's context answer code (for
// example ErrorLaunchFailed), events in flight included.
func (c *Control) Sticky(device, code int) error {
	return c.must(opSticky, "Sticky", int64(device), int64(code))
}

// Lose makes the device lost: nothing on it runs any more, and every later
// call on it answers code.
func (c *Control) Lose(device, code int) error {
	return c.must(opLose, "Lose", int64(device), int64(code))
}

// InitResult sets what cuInit answers (0: success).
func (c *Control) InitResult(code int) { c.call(opInitResult, int64(code)) }

// SetDevices sets how many devices the driver reports (1..16).
func (c *Control) SetDevices(n int) error { return c.must(opSetDevices, "SetDevices", int64(n)) }

// SetBus sets the PCI bus number of a device (its bus id is
// "00000000:BB:00.0"); by default device i is on bus 0x17+i.
func (c *Control) SetBus(device, bus int) error {
	return c.must(opSetBus, "SetBus", int64(device), int64(bus))
}

// Counter reads a counter.
func (c *Control) Counter(k Counter) int64 { return c.call(opCounter, int64(k)) }

// Pending returns the operations queued on stream and not yet run.
func (c *Control) Pending(stream uintptr) int { return int(c.call(opPending, int64(stream))) }

// WaitIdle waits, at most timeout, until stream's queue is empty (or can no
// longer run: held, faulted, lost). It reports whether the queue is empty.
func (c *Control) WaitIdle(stream uintptr, timeout time.Duration) bool {
	return c.call(opWaitIdle, int64(stream), int64(timeout)) == 0
}
