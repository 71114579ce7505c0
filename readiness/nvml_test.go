package readiness

import (
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/gpu/nvml"
)

// mockNVML is one healthy device whose event wait delivers what the test sends.
func mockNVML(events chan gonvml.EventData) (*mock.Interface, *mock.Device) {
	dev := &mock.Device{}
	set := &mock.EventSet{}
	return &mock.Interface{
		InitFunc:                   func() gonvml.Return { return gonvml.SUCCESS },
		ShutdownFunc:               func() gonvml.Return { return gonvml.SUCCESS },
		EventSetCreateFunc:         func() (gonvml.EventSet, gonvml.Return) { return set, gonvml.SUCCESS },
		EventSetFreeFunc:           func(gonvml.EventSet) gonvml.Return { return gonvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(int) (gonvml.Device, gonvml.Return) { return dev, gonvml.SUCCESS },
		DeviceRegisterEventsFunc:   func(gonvml.Device, uint64, gonvml.EventSet) gonvml.Return { return gonvml.SUCCESS },
		EventSetWaitFunc: func(_ gonvml.EventSet, ms uint32) (gonvml.EventData, gonvml.Return) {
			select {
			case d := <-events:
				return d, gonvml.SUCCESS
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
			}
		},
	}, dev
}

// An Xid critical error reported through NVML makes the device's in-flight
// copies unproven — contained at their deadline — and refuses new leases; a
// lease with no copy in flight is untouched.
func TestNVMLXidMakesInFlightCopiesUnproven(t *testing.T) {
	events := make(chan gonvml.EventData, 1)
	lib, dev := mockNVML(events)
	watcher := nvml.StartWith(lib, nvml.Config{WaitTimeout: 5 * time.Millisecond}, 0)
	defer watcher.Stop()
	r := newRig(t, 4, func(c *Config) { c.Health = watcher })

	done, _, a := r.fetch(1, 1)
	r.deliver(a, 1, 0)
	r.sync()
	r.dev.CompleteAll()
	r.sync()
	require.Equal(t, State(StateLogicallyComplete), r.state(done))

	inFlight, _, b := r.fetch(2, 1)
	r.deliver(b, 2, 0)
	r.sync()
	require.Equal(t, State(StateAccessFenced), r.state(inFlight), "its copy to the device is queued, not landed")

	events <- gonvml.EventData{Device: dev, EventType: gonvml.EventTypeXidCriticalError, EventData: 79}
	deadline := time.Now().Add(10 * time.Second)
	for r.state(inFlight) != State(StateCopyUnproven) && time.Now().Before(deadline) {
		r.sync()
		time.Sleep(time.Millisecond) // the NVML watcher's goroutine delivers the event
	}
	require.Equal(t, State(StateCopyUnproven), r.state(inFlight))
	assert.Contains(t, r.info(inFlight).Reason, "Xid 79")
	assert.Equal(t, State(StateLogicallyComplete), r.state(done), "a lease with no copy in flight is untouched")
	_, err := r.eng.Lend(Request{Kind: Fetch, Rows: r.rows(3, 1)})
	assert.ErrorIs(t, err, ErrDeviceLost)
	r.clk.Advance(5 * time.Second)
	r.sync()
	assert.Equal(t, State(StateQuarantined), r.state(inFlight))
}
