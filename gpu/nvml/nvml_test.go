package nvml_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kvready/kvready/gpu/nvml"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeNVML is a mock NVML with two devices whose event wait delivers what the
// test sends (or times out quickly).
type fakeNVML struct {
	*mock.Interface
	devs   []*mock.Device
	events chan waitResult
	mu     sync.Mutex
	freed  bool
	shut   bool
}

type waitResult struct {
	data gonvml.EventData
	ret  gonvml.Return
}

func newFake(registerRet ...gonvml.Return) *fakeNVML {
	f := &fakeNVML{events: make(chan waitResult, 4), devs: []*mock.Device{{}, {}}}
	set := &mock.EventSet{}
	f.Interface = &mock.Interface{
		InitFunc:           func() gonvml.Return { return gonvml.SUCCESS },
		EventSetCreateFunc: func() (gonvml.EventSet, gonvml.Return) { return set, gonvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (gonvml.Device, gonvml.Return) {
			if i >= len(f.devs) {
				return nil, gonvml.ERROR_INVALID_ARGUMENT
			}
			return f.devs[i], gonvml.SUCCESS
		},
		DeviceRegisterEventsFunc: func(d gonvml.Device, types uint64, _ gonvml.EventSet) gonvml.Return {
			if types != gonvml.EventTypeXidCriticalError {
				return gonvml.ERROR_INVALID_ARGUMENT
			}
			for i, md := range f.devs {
				if d == md && i < len(registerRet) {
					return registerRet[i]
				}
			}
			return gonvml.SUCCESS
		},
		EventSetWaitFunc: func(_ gonvml.EventSet, ms uint32) (gonvml.EventData, gonvml.Return) {
			select {
			case r := <-f.events:
				return r.data, r.ret
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
			}
		},
		EventSetFreeFunc: func(gonvml.EventSet) gonvml.Return {
			f.mu.Lock()
			f.freed = true
			f.mu.Unlock()
			return gonvml.SUCCESS
		},
		ShutdownFunc: func() gonvml.Return {
			f.mu.Lock()
			f.shut = true
			f.mu.Unlock()
			return gonvml.SUCCESS
		},
	}
	return f
}

var quick = nvml.Config{WaitTimeout: 5 * time.Millisecond}

func eventually(t *testing.T, w *nvml.Watcher, dev int, want nvml.State) string {
	t.Helper()
	var reason string
	require.Eventually(t, func() bool {
		var s nvml.State
		s, reason = w.State(dev)
		return s == want
	}, 2*time.Second, time.Millisecond)
	return reason
}

func TestInitFailureCallsNothingElse(t *testing.T) {
	// Only Init is mocked: any other call panics, as the real library would
	// kill the process.
	lib := &mock.Interface{InitFunc: func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }}
	var w *nvml.Watcher
	require.NotPanics(t, func() {
		w = nvml.StartWith(lib, quick, 0, 1)
		w.Stop()
		w.Stop()
	})
	assert.Len(t, lib.InitCalls(), 1)
	for _, d := range []int{0, 1} {
		s, reason := w.State(d)
		assert.Equal(t, nvml.Unknown, s)
		assert.Contains(t, reason, "ERROR_LIBRARY_NOT_FOUND")
		lost, _ := w.Lost(d)
		assert.False(t, lost, "unknown is not lost: the engine carries on")
	}
}

func TestXidMarksDeviceLost(t *testing.T) {
	f := newFake()
	w := nvml.StartWith(f, quick, 0, 1)
	defer w.Stop()
	s, _ := w.State(0)
	assert.Equal(t, nvml.Healthy, s)

	f.events <- waitResult{data: gonvml.EventData{Device: f.devs[1], EventType: gonvml.EventTypeXidCriticalError, EventData: 79}, ret: gonvml.SUCCESS}
	reason := eventually(t, w, 1, nvml.Lost)
	assert.Contains(t, reason, "Xid 79")
	lost, why := w.Lost(1)
	assert.True(t, lost)
	assert.Equal(t, reason, why)
	s, _ = w.State(0)
	assert.Equal(t, nvml.Healthy, s, "the other device is untouched")
}

func TestIgnoredXid(t *testing.T) {
	f := newFake()
	w := nvml.StartWith(f, nvml.Config{WaitTimeout: 5 * time.Millisecond, IgnoreXids: []uint64{13}}, 0)
	f.events <- waitResult{data: gonvml.EventData{Device: f.devs[0], EventType: gonvml.EventTypeXidCriticalError, EventData: 13}, ret: gonvml.SUCCESS}
	f.events <- waitResult{data: gonvml.EventData{Device: f.devs[0], EventType: gonvml.EventTypeXidCriticalError, EventData: 48}, ret: gonvml.SUCCESS}
	reason := eventually(t, w, 0, nvml.Lost)
	assert.Contains(t, reason, "Xid 48", "13 was ignored, 48 was not")
	w.Stop()
}

func TestGPULost(t *testing.T) {
	f := newFake()
	w := nvml.StartWith(f, quick, 0, 1)
	defer w.Stop()
	f.events <- waitResult{ret: gonvml.ERROR_GPU_IS_LOST}
	for _, d := range []int{0, 1} {
		assert.Contains(t, eventually(t, w, d, nvml.Lost), "GPU is lost")
	}
}

func TestRegistrationResults(t *testing.T) {
	f := newFake(gonvml.ERROR_GPU_IS_LOST, gonvml.ERROR_NOT_SUPPORTED)
	w := nvml.StartWith(f, quick, 0, 1, 5)
	defer w.Stop()
	tests := []struct {
		dev  int
		want nvml.State
		msg  string
	}{
		{0, nvml.Lost, "GPU is lost"},
		{1, nvml.Unknown, "ERROR_NOT_SUPPORTED"},
		{5, nvml.Unknown, "NVML return"},
		{9, nvml.Unknown, "not watched"},
	}
	for _, tt := range tests {
		s, reason := w.State(tt.dev)
		assert.Equal(t, tt.want, s, "device %d", tt.dev)
		assert.Contains(t, reason, tt.msg, "device %d", tt.dev)
	}
}

func TestWaitErrorStopsWatchingAsUnknown(t *testing.T) {
	f := newFake()
	w := nvml.StartWith(f, quick, 0)
	f.events <- waitResult{ret: gonvml.ERROR_UNKNOWN}
	assert.Contains(t, eventually(t, w, 0, nvml.Unknown), "ERROR_UNKNOWN")
	w.Stop()
}

func TestStopEndsGoroutineAndShutsDown(t *testing.T) {
	f := newFake()
	w := nvml.StartWith(f, nvml.Config{WaitTimeout: 20 * time.Millisecond}, 0, 1)
	w.Stop()
	w.Stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.True(t, f.freed, "the event set is freed")
	assert.True(t, f.shut, "NVML is shut down")
	assert.Len(t, f.ShutdownCalls(), 1, "once")
	// goleak in TestMain fails the package if the watching goroutine survived.
}

func TestStateString(t *testing.T) {
	assert.Equal(t, "unknown", nvml.Unknown.String())
	assert.Equal(t, "healthy", nvml.Healthy.String())
	assert.Equal(t, "lost", nvml.Lost.String())
	assert.Equal(t, "state(7)", nvml.State(7).String())
}

func Example() {
	// A machine without NVML: Init fails, health is Unknown, nothing else runs.
	lib := &mock.Interface{InitFunc: func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }}
	w := nvml.Start(lib, 0)
	defer w.Stop()
	lost, _ := w.Lost(0)
	state, reason := w.State(0)
	fmt.Println(lost, state, reason)
	// Output: false unknown NVML Init failed: ERROR_LIBRARY_NOT_FOUND
}
